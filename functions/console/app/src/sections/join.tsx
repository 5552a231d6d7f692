// Join tokens, the join command, and the live checklist of join attempts:
// each preflight step appears as the script on the machine reports it.
import { useSyncExternalStore, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Cluster, type Schemas } from "../api/client";
import { number } from "../format";
import { Link } from "../router";
import { Confirm, Copy, Empty, ErrorNote, Field, Rows, Status, Table, Time, formNumber, formValue } from "../ui";
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

/// The join command made last for each cluster, kept in this tab's memory
/// (never in storage: it holds the token) until dismissed, so that
/// switching tabs does not lose it.
const shown = new Map<string, Schemas["CreatedToken"]>();
const listeners = new Set<() => void>();
function keep(clusterId: string, token: Schemas["CreatedToken"] | null) {
  if (token) shown.set(clusterId, token);
  else shown.delete(clusterId);
  listeners.forEach((listener) => listener());
}
function useShown(clusterId: string): Schemas["CreatedToken"] | null {
  return useSyncExternalStore(
    (listener) => {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    () => shown.get(clusterId) ?? null,
  );
}

/// What "Add a node" makes: a token for several machines, valid a day.
const QUICK: Schemas["CreateToken"] = { max_uses: 5, ttl_seconds: 86_400, description: null, node_labels: {} };

/// The cluster's five latest join attempts, polled every 1.5 s.
function useJoinAttempts(clusterId: string) {
  return useQuery({
    queryKey: keys.joinAttempts(clusterId),
    queryFn: () =>
      ok(
        api.GET("/api/console/clusters/{cluster_id}/join-attempts", {
          params: { path: { cluster_id: clusterId }, query: { limit: 5 } },
        }),
      ),
    refetchInterval: 1500,
  });
}

/// Adding a node in one step: what the machine needs, one button that
/// makes a token and shows its command, then the wait for a machine and a
/// link to the node it became.
function AddNode({ cluster, onCreate, busy }: { cluster: Cluster; onCreate: (body: Schemas["CreateToken"]) => void; busy: boolean }) {
  const { t } = useTranslation();
  const created = useShown(cluster.id);
  if (!created)
    return (
      <section className="card" aria-labelledby="add-node">
        <h2 id="add-node">{t("join.add_node")}</h2>
        <p>{t("join.add_node_explain")}</p>
        <h3>{t("join.prerequisites")}</h3>
        <ul>
          <li>{t("join.needs_linux")}</li>
          <li>{t("join.needs_root")}</li>
          <li>{t("join.needs_ports")}</li>
          <li>{t("join.needs_reach", { endpoint: cluster.api_endpoint ?? "—" })}</li>
        </ul>
        <button
          type="button"
          className="primary"
          disabled={busy || cluster.status !== "ready"}
          onClick={() => onCreate({ ...QUICK, description: t("join.quick_description") })}
        >
          {t("join.add_node")}
        </button>
        {cluster.status !== "ready" && <p className="muted">{t("join.not_ready")}</p>}
      </section>
    );
  return (
    <section className="card" aria-labelledby="join-command">
      <h2 id="join-command">{t("join.command")}</h2>
      <p>{t("join.shown_once")}</p>
      <Copy text={created.join_command} label={t("join.command")} />
      <p className="muted">
        {t("join.token_terms", { count: created.token.max_uses })} <Time value={created.token.expires_at} />
      </p>
      <Arrivals clusterId={cluster.id} tokenId={created.token.id} />
      <button type="button" onClick={() => keep(cluster.id, null)}>
        {t("join.dismiss")}
      </button>
    </section>
  );
}

/// The machines that ran the command of `tokenId`: "waiting" until one
/// does, then each with where its join is and a link to its node.
function Arrivals({ clusterId, tokenId }: { clusterId: string; tokenId: string }) {
  const { t } = useTranslation();
  const attempts = useJoinAttempts(clusterId);
  const mine = (attempts.data ?? []).filter((a) => a.token_id === tokenId);
  if (mine.length === 0)
    return (
      <p role="status" className="waiting" data-testid="waiting-for-machine">
        {t("join.waiting")}
      </p>
    );
  return (
    <ul className="arrivals" aria-live="polite">
      {mine.map((a) => (
        <li key={a.id} data-outcome={a.outcome}>
          {a.hostname ?? a.source_ip ?? a.token_prefix} <Status value={a.outcome} />{" "}
          {a.node_id && a.outcome === "succeeded" && (
            <Link href={`/clusters/${clusterId}/nodes/${a.node_id}`}>{t("join.open_node")}</Link>
          )}
        </li>
      ))}
    </ul>
  );
}

export function Join({ cluster }: { cluster: Cluster }) {
  const { t } = useTranslation();
  const client = useQueryClient();
  const path = { cluster_id: cluster.id };
  const tokens = useQuery({
    queryKey: keys.tokens(cluster.id),
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}/tokens", { params: { path, query: { limit: 100 } } })),
    refetchInterval: 5000,
  });
  const create = useMutation({
    mutationFn: (body: Schemas["CreateToken"]) =>
      ok(api.POST("/api/console/clusters/{cluster_id}/tokens", { params: { path }, body })),
    onSuccess: (token) => {
      keep(cluster.id, token);
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
      <AddNode cluster={cluster} onCreate={(body) => create.mutate(body)} busy={create.isPending} />
      <ErrorNote error={create.error} />
      <details className="card">
        <summary>{t("join.more_options")}</summary>
        <form onSubmit={submit} noValidate>
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
          <button type="submit" className="primary" disabled={create.isPending || cluster.status !== "ready"}>
            {t("join.create")}
          </button>
        </form>
      </details>
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
                      <Confirm
                        label={t("common.revoke")}
                        question={t("join.revoke_question", { prefix: tok.display_prefix })}
                        busy={revoke.isPending}
                        onConfirm={() => revoke.mutate(tok.id)}
                      />
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
  const attempts = useJoinAttempts(clusterId);
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
          <Reason attempt={a} />
          <ul className="steps">
            {checklist(a.steps).map((s) => (
              <li key={s.step} className={`step ${s.status}`} data-step={s.step} data-status={s.status}>
                <span aria-hidden="true">{MARK[s.status] ?? "·"}</span> {t(`step.${s.step}`, { defaultValue: s.step })}{" "}
                <Status value={s.status} />
                <StepDetail step={s} />
              </li>
            ))}
          </ul>
        </article>
      ))}
    </section>
  );
}

/// What a step found: in the reader's words where the script sent a code,
/// else the script's English text.
function StepDetail({ step }: { step: Schemas["Step"] }) {
  const { t } = useTranslation();
  const text = step.code ? t(`join.detail.${step.code}`, { ...step.params, defaultValue: step.detail ?? step.code }) : step.detail;
  return text ? <span className="muted" data-code={step.code ?? undefined}> — {text}</span> : null;
}

/// Why an attempt was refused or failed: in the reader's words where the
/// API sent a code (a failed step's own words are on its line), else the
/// API's English text.
function Reason({ attempt }: { attempt: Schemas["Attempt"] }) {
  const { t } = useTranslation();
  const code = attempt.reason_code;
  if (!code) return attempt.reason ? <p className="error">{attempt.reason}</p> : null;
  const params = { ...attempt.reason_params };
  // The words of the step or cluster status it names, not the API's.
  if (code === "step_failed" && params.step) params.step = t(`step.${params.step}`, { defaultValue: params.step });
  if (code === "cluster_not_ready" && params.status) params.status = t(`status.${params.status}`, { defaultValue: params.status });
  return (
    <p className="error" data-reason={code}>
      {t(`join.reason.${code}`, { ...params, defaultValue: attempt.reason ?? code })}
      {code === "plan_node_limit" && (
        <>
          {" "}
          <Link href="/billing">{t("errors.choose_plan")}</Link>
        </>
      )}
    </p>
  );
}
