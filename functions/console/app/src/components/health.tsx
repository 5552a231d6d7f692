// A cluster's health as the API rolls it up (`health` and `nodes` of the
// cluster resource): its own status while an operation runs or after one
// failed; else healthy, degraded, unreachable or without nodes, with what
// its nodes say (e.g. "degraded · 1 of 1 node offline").
import { useTranslation } from "react-i18next";
import type { Cluster } from "../api/client";
import { Status } from "../ui";

const TONE: Record<string, string> = {
  healthy: "good",
  degraded: "warn",
  unreachable: "bad",
  no_nodes: "muted",
};

export function Health({ cluster }: { cluster: Cluster }) {
  const { t } = useTranslation();
  const { health, nodes } = cluster;
  if (!(health in TONE)) return <Status value={cluster.status} />;
  const parts: string[] = [];
  if (nodes.offline > 0) parts.push(t("health.offline", { down: nodes.offline, count: nodes.total }));
  if (nodes.not_ready > 0) parts.push(t("health.not_ready", { down: nodes.not_ready, count: nodes.total }));
  if (health === "healthy") parts.push(t("health.ready", { ready: nodes.ready, count: nodes.total }));
  return (
    <span className={`badge ${TONE[health]}`} data-health={health}>
      {[t(`health.${health}`), ...parts].join(" · ")}
    </span>
  );
}

/// "2 / 3": the cluster's nodes that are ready, of all.
export function NodeCount({ cluster }: { cluster: Cluster }) {
  const { t } = useTranslation();
  return <>{t("health.count", { ready: cluster.nodes.ready, total: cluster.nodes.total })}</>;
}
