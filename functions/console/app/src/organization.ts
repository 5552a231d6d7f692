// The organization this tab works in, as every page sees it: the reader's
// memberships (personal first), the one chosen (api/client.ts keeps its id
// per tab and sends it as `KubeBYON-Organization`), and changing it.
import { useSyncExternalStore } from "react";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, ok, workIn, workingIn, type Schemas } from "./api/client";
import { keys } from "./queryKeys";

export type Membership = Schemas["Membership"];

/// Who re-renders when the choice changes.
const watchers = new Set<() => void>();
function watch(watcher: () => void) {
  watchers.add(watcher);
  return () => {
    watchers.delete(watcher);
  };
}

/// The reader's organizations and the one this tab works in: the chosen
/// one, else (none chosen, or one the reader left or was removed from)
/// the personal one.
export function useWorkingOrganization() {
  const mine = useQuery({
    queryKey: keys.organizations(),
    queryFn: () => ok(api.GET("/api/console/organizations")),
  });
  const chosen = useSyncExternalStore(watch, workingIn);
  const list = mine.data ?? [];
  const here = list.find((o) => o.id === chosen) ?? list.find((o) => o.personal) ?? list[0];
  return { mine, list, here };
}

/// Works in `organization` (none: the personal one) from now on in this
/// tab; every answer read so far was another organization's.
export function useChooseOrganization() {
  const queries = useQueryClient();
  return (organization: Membership | null) => {
    workIn(organization && !organization.personal ? organization.id : null);
    watchers.forEach((watcher) => watcher());
    void queries.invalidateQueries();
  };
}
