// The reader's session: who is signed in, and where to go once they are.
import { useQuery } from "@tanstack/react-query";
import { api, ok, type Schemas } from "./api/client";
import { keys } from "./queryKeys";

export type User = Schemas["User"];

/// The signed-in reader, or null when nobody is (`/api/auth/session`
/// answers null rather than 401: a signed-out page logs no error).
export function useMe() {
  return useQuery({
    queryKey: keys.me(),
    queryFn: async () => (await ok(api.GET("/api/auth/session"))).user ?? null,
    staleTime: 60_000,
  });
}

const KEPT = "kubebyon:return";

/// Keeps the page a signed-out reader opened, fragment and all (an
/// invitation's token), in this tab's storage for an hour: the way back
/// after signing in, or after signing up and confirming, which the
/// `return` parameter does not follow. The fragment never goes into the
/// sign-in page's URL, where a server would see it.
export function keepReturn(url: URL) {
  const kept = { path: url.pathname, rest: url.search + url.hash, at: Date.now() };
  sessionStorage.setItem(KEPT, JSON.stringify(kept));
}

/// The page kept by [`keepReturn`], when it is recent.
function kept(): { path: string; rest: string } | null {
  const raw = sessionStorage.getItem(KEPT);
  if (!raw) return null;
  const page = JSON.parse(raw) as { path: string; rest: string; at: number };
  return Date.now() - page.at < 3_600_000 && isLocal(page.path) ? page : null;
}

/// Forgets the kept page once the reader is on it.
export function arrived(path: string) {
  if (kept()?.path === path) sessionStorage.removeItem(KEPT);
}

const isLocal = (path: string) => path.startsWith("/") && !path.startsWith("//") && !path.startsWith("/\\");

/// Where to go after signing in: the page that asked, on this origin only
/// (the page kept when the reader was sent to sign in, with its fragment,
/// when it is that page or none was named).
export function returnPath(url: URL): string {
  const named = url.searchParams.get("return");
  const back = named && isLocal(named) ? named : null;
  const page = kept();
  if (page && (back === null || back.split("?")[0] === page.path)) return page.path + page.rest;
  return back ?? "/clusters";
}
