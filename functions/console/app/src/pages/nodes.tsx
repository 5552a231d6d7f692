// One node's timeline and uptime, removing a node.
import { useState } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok } from "../api/client";
import { bytes, number, percent, range } from "../format";
import type { PageProps } from "../page";
import { Link, navigate } from "../router";
import { Confirm, Empty, ErrorNote, Loading, Page, Period, Status, Time } from "../ui";
import { keys } from "../queryKeys";

const PERIODS = [1, 24, 24 * 7, 24 * 30];

export function NodeDetail({ params }: PageProps) {
  const { id: clusterId, node: nodeId } = params;
  const { t } = useTranslation();
  const client = useQueryClient();
  const [hours, setHours] = useState(24);
  const [force, setForce] = useState(false);
  const [drainSeconds, setDrainSeconds] = useState(300);
  const path = { cluster_id: clusterId, node_id: nodeId };
  const timeline = useQuery({
    queryKey: keys.timeline(nodeId, hours),
    queryFn: () =>
      ok(
        api.GET("/api/console/clusters/{cluster_id}/nodes/{node_id}/timeline", {
          params: { path, query: range(hours) },
        }),
      ),
    refetchInterval: 10000,
  });
  const remove = useMutation({
    mutationFn: () =>
      ok(
        api.DELETE("/api/console/clusters/{cluster_id}/nodes/{node_id}", {
          params: { path, query: { force, drain_timeout_seconds: drainSeconds } },
        }),
      ),
    onSuccess: () => {
      void client.invalidateQueries({ queryKey: keys.nodes(clusterId) });
      navigate(`/clusters/${clusterId}?tab=nodes`);
    },
  });
  const span = (seconds: number) =>
    seconds < 3600
      ? t("units.minutes", { value: number(seconds / 60) })
      : t("units.hours", { value: number(seconds / 3600, 1) });
  if (timeline.isPending) return <Loading />;
  if (timeline.error) return <ErrorNote error={timeline.error} />;
  const { node, events } = timeline.data;
  return (
    <Page title={node.name} actions={<Status value={node.status} />}>
      <p>
        <Link href={`/clusters/${clusterId}?tab=nodes`}>← {t("cluster.nodes")}</Link>
      </p>
      <dl className="facts">
        <dt>{t("nodes.ip")}</dt>
        <dd>{node.internal_ip ?? "—"}</dd>
        <dt>{t("nodes.os")}</dt>
        <dd>{node.os_image ?? "—"}</dd>
        <dt>{t("nodes.kubelet")}</dt>
        <dd>{node.kubelet_version ?? "—"}</dd>
        <dt>{t("nodes.runtime")}</dt>
        <dd>{node.container_runtime_version ?? "—"}</dd>
        <dt>{t("nodes.cpu")}</dt>
        <dd>
          {node.cpu_allocatable_milli_cores == null
            ? "—"
            : t("units.millicores", { value: number(node.cpu_allocatable_milli_cores) })}
        </dd>
        <dt>{t("nodes.memory")}</dt>
        <dd>{bytes(node.memory_allocatable_bytes)}</dd>
        <dt>{t("nodes.storage")}</dt>
        <dd>{bytes(node.ephemeral_storage_allocatable_bytes)}</dd>
        <dt>{t("nodes.last_seen")}</dt>
        <dd>
          <Time value={node.last_seen_at} />
        </dd>
      </dl>
      <section className="card">
        <h2>{t("nodes.uptime")}</h2>
        <label className="field inline">
          <span>{t("common.period")}</span>
          <select value={hours} onChange={(e) => setHours(Number(e.target.value))}>
            {PERIODS.map((h) => (
              <option key={h} value={h}>
                <Period hours={h} />
              </option>
            ))}
          </select>
        </label>
        {timeline.data.observed_seconds < 60 ? (
          // Too new to say: "100 % — ready 0 min of 0 min" would say nothing.
          <p className="muted" data-testid="uptime-too-new">
            {t("nodes.too_new")}
          </p>
        ) : (
          <>
            <p className="big">{percent(timeline.data.uptime_ratio)}</p>
            <p className="muted">
              {t("nodes.ready_of_observed", {
                ready: span(timeline.data.ready_seconds),
                observed: span(timeline.data.observed_seconds),
              })}
            </p>
          </>
        )}
        {timeline.data.events_omitted > 0 && (
          <p className="muted">{t("nodes.events_omitted", { count: timeline.data.events_omitted })}</p>
        )}
        {events.length === 0 ? (
          <Empty>{t("nodes.no_events")}</Empty>
        ) : (
          <ol className="timeline">
            {events.map((e) => (
              <li key={e.id}>
                <Time value={e.observed_at} /> <Status value={e.new_status ?? e.type} />{" "}
                {t(`node_event.${e.type}`, { defaultValue: e.type })}
                {e.message && <span className="muted"> — {e.message}</span>}
              </li>
            ))}
          </ol>
        )}
      </section>
      {node.status !== "deleted" && (
        <section className="card danger-zone">
          <h2>{t("nodes.remove_title")}</h2>
          <p>{t("nodes.remove_explain")}</p>
          <label className="check">
            <input type="checkbox" checked={force} onChange={(e) => setForce(e.target.checked)} /> {t("nodes.force")}
          </label>
          <label className="field inline">
            <span>{t("nodes.drain_timeout")}</span>
            <input
              type="number"
              min={1}
              max={3600}
              value={drainSeconds}
              disabled={force}
              onChange={(e) => setDrainSeconds(Number(e.target.value))}
            />
          </label>
          <ErrorNote error={remove.error} />
          <Confirm
            label={t("nodes.remove")}
            question={t("nodes.remove_question", { name: node.name })}
            busy={remove.isPending}
            onConfirm={() => remove.mutate()}
          />
        </section>
      )}
    </Page>
  );
}
