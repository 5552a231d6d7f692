// A cluster's nodes, as its page's Nodes tab lists them.
import { useState } from "react";
import { useInfiniteQuery } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Cluster } from "../api/client";
import { bytes, number } from "../format";
import { Link } from "../router";
import { Empty, More, Rows, Status, Table, Time } from "../ui";
import { keys } from "../queryKeys";

export function Nodes({ cluster }: { cluster: Cluster }) {
  const { t } = useTranslation();
  const [deleted, setDeleted] = useState(false);
  // A page of 100 at a time; "more" reads the next (a cluster may have thousands).
  const nodes = useInfiniteQuery({
    queryKey: keys.nodeList(cluster.id, deleted),
    queryFn: ({ pageParam }) =>
      ok(
        api.GET("/api/console/clusters/{cluster_id}/nodes", {
          params: {
            path: { cluster_id: cluster.id },
            query: { include_deleted: deleted, cursor: pageParam ?? undefined },
          },
        }),
      ),
    initialPageParam: null as string | null,
    getNextPageParam: (page) => page.next_cursor ?? undefined,
    select: (data) => data.pages.flatMap((page) => page.items),
    refetchInterval: 5000,
  });
  return (
    <>
      <label className="check">
        <input type="checkbox" checked={deleted} onChange={(e) => setDeleted(e.target.checked)} />{" "}
        {t("nodes.include_deleted")}
      </label>
      <Rows query={nodes} empty={
        <Empty>
          {t("nodes.empty")} <Link href={`/clusters/${cluster.id}?tab=join`}>{t("nodes.join_one")}</Link>
        </Empty>
      }>
        {(rows) => (
          <Table columns={[t("nodes.name"), t("clusters.status"), t("nodes.ip"), t("nodes.cpu"), t("nodes.memory"), t("nodes.kubelet"), t("nodes.last_seen")]}>
              {rows.map((n) => (
                <tr key={n.id}>
                  <td>
                    <Link href={`/clusters/${cluster.id}/nodes/${n.id}`}>{n.name}</Link>
                  </td>
                  <td>
                    <Status value={n.status} />
                  </td>
                  <td>{n.internal_ip ?? "—"}</td>
                  <td>
                    {n.cpu_allocatable_milli_cores === null || n.cpu_allocatable_milli_cores === undefined
                      ? "—"
                      : t("units.millicores", { value: number(n.cpu_allocatable_milli_cores) })}
                  </td>
                  <td>{bytes(n.memory_allocatable_bytes)}</td>
                  <td>{n.kubelet_version ?? "—"}</td>
                  <td>
                    <Time value={n.last_seen_at} />
                  </td>
                </tr>
              ))}
          </Table>
        )}
      </Rows>
      <More query={nodes} />
    </>
  );
}
