// Join tokens, the join command, and the live checklist of join attempts:
// each preflight step appears as the script on the machine reports it.
import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Cluster, type Schemas } from "../api/client";
import { number } from "../format";
import { Copy, Empty, ErrorNote, Field, Rows, Status, Table, Time, formNumber, formValue } from "../ui";
import { keys } from "../queryKeys";

/// `key=value` lines into labels; the API validates the names and values.
function labels(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split(/[\n,]/)) {
    const trimmed = line.trim();
    if (!trimmed) continue;
    const at = trimmed.indexOf("=");
    if (at < 0) out[trimmed] = "";
    else out[trimmed.slice(0, at).trim()] = trimmed.slice(at + 1).trim();
  }
  return out;
}

export function Join({ cluster }: { cluster: Cluster }) {
  const { t } = useTranslation();
  const client = useQueryClient();
  const path = { cluster_id: cluster.id };
  const [created, setCreated] = useState<Schemas["CreatedToken"] | null>(null);
  const tokens = useQuery({
    queryKey: keys.tokens(cluster.id),
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}/tokens", { params: { path, query: { limit: 100 } } })),
    refetchInterval: 5000,
  });
  const create = useMutation({
    mutationFn: (body: Schemas["CreateToken"]) =>
      ok(api.POST("/api/console/clusters/{cluster_id}/tokens", { params: { path }, body })),
    onSuccess: (token) => {
      setCreated(token);
      void client.invalidateQueries({ queryKey: keys.tokens(cluster.id) });
    },
  });
  const revoke = useMutation({
    mutationFn: (token_id: string) =>
      ok(api.DELETE("/api/console/clusters/{cluster_id}/tokens/{token_id}", { params: { path: { ...path, token_id } } })),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.tokens(cluster.id) }),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const hours = formNumber(form, "ttl_hours");
    create.mutate({
      max_uses: formNumber(form, "max_uses"),
      ttl_seconds: hours === null ? null : Math.round(hours * 3600),
      description: formValue(form, "description") || null,
      node_labels: labels(formValue(form, "labels")),
    });
  };
  return (
    <>
      <form className="card" onSubmit={submit} noValidate>
        <h2>{t("join.create")}</h2>
        <div className="row">
          <Field label={t("join.max_uses")}>
            <input name="max_uses" type="number" min={1} defaultValue={1} />
          </Field>
          <Field label={t("join.ttl_hours")}>
            <input name="ttl_hours" type="number" min={1} defaultValue={24} />
          </Field>
        </div>
        <Field label={t("join.description")}>
          <input name="description" />
        </Field>
        <Field label={t("join.labels")} hint={t("join.labels_hint")}>
          <textarea name="labels" rows={2} spellCheck={false} />
        </Field>
        <ErrorNote error={create.error} />
        <button type="submit" className="primary" disabled={create.isPending || cluster.status !== "ready"}>
          {t("join.create")}
        </button>
        {cluster.status !== "ready" && <p className="muted">{t("join.not_ready")}</p>}
      </form>
      {created && (
        <section className="card" aria-labelledby="join-command">
          <h2 id="join-command">{t("join.command")}</h2>
          <p>{t("join.shown_once")}</p>
          <Copy text={created.join_command} label={t("join.command")} />
        </section>
      )}
      <Checklist clusterId={cluster.id} />
      <h2>{t("join.tokens")}</h2>
      <ErrorNote error={revoke.error} />
      <Rows query={tokens} empty={
        <Empty>{t("join.no_tokens")}</Empty>
      }>
        {(rows) => (
          <Table columns={[t("join.prefix"), t("clusters.status"), t("join.remaining"), t("common.expires"), t("join.description")]} actions>
              {rows.map((tok) => (
                <tr key={tok.id}>
                  <td>
                    <code>{tok.display_prefix}</code>
                  </td>
                  <td>
                    <Status value={tok.status} />
                  </td>
                  <td>
                    {number(Math.max(0, tok.max_uses - tok.use_count))} / {number(tok.max_uses)}
                  </td>
                  <td>
                    <Time value={tok.expires_at} />
                  </td>
                  <td>{tok.description ?? ""}</td>
                  <td>
                    {tok.status === "active" && (
                      <button type="button" onClick={() => revoke.mutate(tok.id)}>
                        {t("common.revoke")}
                      </button>
                    )}
                  </td>
                </tr>
              ))}
          </Table>
        )}
      </Rows>
    </>
  );
}

/// One line per step, in the order the script first reported each, with
/// its latest report: `running` becomes `ok` (or `failed`) in place.
function checklist(steps: Schemas["Step"][]): Schemas["Step"][] {
  const latest = new Map<string, Schemas["Step"]>();
  for (const step of steps) {
    latest.set(step.step, step);
  }
  const order = [...new Set(steps.map((s) => s.step))];
  return order.map((name) => latest.get(name)!);
}

const MARK: Record<string, string> = { ok: "✓", warning: "!", failed: "✗", skipped: "–", running: "…" };

function Checklist({ clusterId }: { clusterId: string }) {
  const { t } = useTranslation();
  const attempts = useQuery({
    queryKey: keys.joinAttempts(clusterId),
    queryFn: () =>
      ok(
        api.GET("/api/console/clusters/{cluster_id}/join-attempts", {
          params: { path: { cluster_id: clusterId }, query: { limit: 5 } },
        }),
      ),
    refetchInterval: 1500,
  });
  return (
    <section className="card" aria-labelledby="checklist">
      <h2 id="checklist">{t("join.checklist")}</h2>
      <ErrorNote error={attempts.error} />
      {attempts.data && attempts.data.length === 0 && <Empty>{t("join.no_attempts")}</Empty>}
      {attempts.data?.map((a) => (
        <article key={a.id} className="attempt" aria-label={t("join.attempt", { host: a.hostname ?? a.source_ip ?? a.token_prefix })}>
          <h3>
            {a.hostname ?? a.source_ip ?? a.token_prefix} <Status value={a.outcome} /> <Time value={a.created_at} />
          </h3>
          {a.reason && <p className="error">{a.reason}</p>}
          <ul className="steps">
            {checklist(a.steps).map((s) => (
              <li key={s.step} className={`step ${s.status}`} data-step={s.step} data-status={s.status}>
                <span aria-hidden="true">{MARK[s.status] ?? "·"}</span> {t(`step.${s.step}`, { defaultValue: s.step })}{" "}
                <Status value={s.status} />
                {s.detail && <span className="muted"> — {s.detail}</span>}
              </li>
            ))}
          </ul>
        </article>
      ))}
    </section>
  );
}
