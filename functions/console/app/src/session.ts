// The reader's session: who is signed in, and where to go once they are.
import { useQuery } from "@tanstack/react-query";
import { api, ApiError, ok, type Schemas } from "./api/client";
import { keys } from "./queryKeys";

export type User = Schemas["User"];

/// The signed-in reader, or null when nobody is.
export function useMe() {
  return useQuery({
    queryKey: keys.me(),
    queryFn: () =>
      ok(api.GET("/api/auth/me")).catch((error) => {
        if (error instanceof ApiError && error.status === 401) return null;
        throw error;
      }),
    staleTime: 60_000,
  });
}

/// Where to go after signing in: the page that asked, on this origin only.
export function returnPath(url: URL): string {
  const back = url.searchParams.get("return");
  return back && back.startsWith("/") && !back.startsWith("//") && !back.startsWith("/\\") ? back : "/clusters";
}
