// A cluster's health as the API rolls it up (`health` and `nodes` of the
// cluster resource): its own status while an operation runs or after one
// failed; else healthy, degraded, unreachable or without nodes, with what
// its nodes say (e.g. "degraded · 1 of 1 node offline").
import { useTranslation } from "react-i18next";
import type { Cluster } from "../api/client";
import { number } from "../format";
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

/// "1,200m of 4,000m": what the cluster's workloads request of one of its
/// limits, as last observed ("—" before the first observation), with the
/// share as a meter.
export function Usage({ used, limit, unit }: { used: number | undefined; limit: number; unit: "units.millicores" | "units.mib" }) {
  const { t } = useTranslation();
  const label = t("clusters.usage_of", {
    used: used === undefined ? "—" : t(unit, { value: number(used) }),
    limit: t(unit, { value: number(limit) }),
  });
  return (
    <span className="usage">
      {label}
      {used !== undefined && limit > 0 && <meter min={0} max={limit} high={limit * 0.8} value={Math.min(used, limit)} aria-label={label} />}
    </span>
  );
}
