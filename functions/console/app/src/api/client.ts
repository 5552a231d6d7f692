// The typed client of the platform's API: the types come from
// docs/openapi.json (`npm run api` writes schema.d.ts), so a route or field
// the API does not have is a compile error here.
import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema";

export type Schemas = components["schemas"];
export type Cluster = Schemas["ClusterWithHealth"];
export type Problem = Schemas["Problem"];

/// The CSRF cookie's value (`__Host-kb_csrf` over HTTPS, `kb_csrf` on plain
/// HTTP), which every write echoes in `X-CSRF-Token`.
export function csrfToken(): string | undefined {
  for (const part of document.cookie.split(";")) {
    const [name, ...value] = part.trim().split("=");
    if (name === "__Host-kb_csrf" || name === "kb_csrf") return value.join("=");
  }
  return undefined;
}

const csrf: Middleware = {
  onRequest({ request }) {
    if (request.method !== "GET" && request.method !== "HEAD") {
      const token = csrfToken();
      if (token) request.headers.set("X-CSRF-Token", token);
    }
    return request;
  },
};

const WORKING_IN = "kubebyon:organization";

/// The organization this tab works in (its id), chosen on the
/// organizations page; none: the reader's personal one.
export function workingIn(): string | null {
  return sessionStorage.getItem(WORKING_IN);
}

/// Works in `organization` from now on in this tab (none: the personal one).
export function workIn(organization: string | null) {
  if (organization) sessionStorage.setItem(WORKING_IN, organization);
  else sessionStorage.removeItem(WORKING_IN);
}

/// Lists and creates act in the organization this tab works in: the API
/// reads it from `KubeBYON-Organization` (docs/organizations.md).
const organization: Middleware = {
  onRequest({ request }) {
    const id = workingIn();
    if (id) request.headers.set("KubeBYON-Organization", id);
    return request;
  },
};

export const api = createClient<paths>({ baseUrl: "", credentials: "same-origin" });
api.use(csrf);
api.use(organization);

/// An answer other than 2xx: the API's problem+json when it sent one.
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Partial<Problem> | undefined,
  ) {
    super(problem?.detail ?? problem?.title ?? `HTTP ${status}`);
  }

  get code(): string | undefined {
    return this.problem?.code;
  }
}

/// The data of an openapi-fetch answer, or an ApiError.
export async function ok<T>(
  call: Promise<{ data?: T; error?: unknown; response: Response }>,
): Promise<T> {
  let answer;
  try {
    answer = await call;
  } catch {
    throw new ApiError(0, undefined);
  }
  const { data, error, response } = answer;
  if (!response.ok) {
    const problem =
      error && typeof error === "object" ? (error as Partial<Problem>) : undefined;
    throw new ApiError(response.status, problem);
  }
  return data as T;
}
