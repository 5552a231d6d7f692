// One cluster: its state and live job stages, nodes, joining, metrics,
// hostnames, kubeconfigs, history and settings.
import { lazy, Suspense, useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ApiError, ok, type Cluster, type Schemas } from "../api/client";
import type { PageProps } from "../page";
import { Link, navigate, useLocation } from "../router";
import { Confirm, ConfirmByName, Copy, Empty, ErrorNote, Field, Loading, Page, Rows, Stale, Status, SupportDetails, Table, Tabs, Time, formNumber, formValue } from "../ui";
import { Health, NodeCount, Usage } from "../components/health";
import { AuditTable, FailureCell, JobTable } from "../components/records";
import { Hostnames } from "../sections/hostnames";
import { Join } from "../sections/join";
import { Nodes } from "../sections/nodes";
import { keys } from "../queryKeys";

const Metrics = lazy(() => import("../sections/metrics"));
const Databases = lazy(() => import("../sections/databases").then((page) => ({ default: page.Databases })));

const BUSY = ["pending", "provisioning", "updating", "deleting"];

export function useCluster(id: string) {
  return useQuery({
    queryKey: keys.cluster(id),
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}", { params: { path: { cluster_id: id } } })),
    refetchInterval: (query) => (query.state.data && BUSY.includes(query.state.data.status) ? 1000 : 10000),
  });
}

export function ClusterDetail({ params }: PageProps) {
  const id = params.id;
  const { t } = useTranslation();
  const url = useLocation();
  const cluster = useCluster(id);
  const tab = url.searchParams.get("tab") ?? "overview";
  if (cluster.isPending) return <Loading />;
  if (cluster.error instanceof ApiError && cluster.error.status === 404)
    return (
      <Page title={t("cluster.gone_title")}>
        <Empty>
          {t("cluster.gone")} <Link href="/clusters">{t("nav.clusters")}</Link>
        </Empty>
      </Page>
    );
  if (!cluster.data) return <ErrorNote error={cluster.error} />;
  const c = cluster.data;
  const tabs: [string, string][] = [
    ["overview", t("cluster.overview")],
    ["nodes", t("cluster.nodes")],
    ["join", t("cluster.join")],
    ["metrics", t("cluster.metrics")],
    ["hostnames", t("cluster.hostnames")],
    ["databases", t("databases.tab")],
    ["access", t("cluster.access")],
    ["history", t("cluster.history")],
    ["settings", t("cluster.settings")],
  ];
  return (
    <Page title={c.name} actions={<Health cluster={c} />}>
      <Stale error={cluster.error} retry={cluster.refetch} />
      <Tabs tabs={tabs} current={tab} base={`/clusters/${id}`} />
      {tab === "overview" && <Overview cluster={c} />}
      {tab === "nodes" && <Nodes cluster={c} />}
      {tab === "join" && <Join cluster={c} />}
      {tab === "metrics" && (
        <Suspense fallback={<Loading />}>
          <Metrics clusterId={id} />
        </Suspense>
      )}
      {tab === "hostnames" && <Hostnames cluster={c} />}
      {tab === "databases" && (
        <Suspense fallback={<Loading />}>
          <Databases cluster={c} />
        </Suspense>
      )}
      {tab === "access" && <Kubeconfigs cluster={c} />}
      {tab === "history" && <History clusterId={id} />}
      {tab === "settings" && <Settings cluster={c} />}
    </Page>
  );
}

function Overview({ cluster: c }: { cluster: Cluster }) {
  const { t } = useTranslation();
  return (
    <>
      {c.status === "ready" && c.nodes.total === 0 && <GetStarted cluster={c} />}
      <LiveOperation cluster={c} />
      <dl className="facts">
        <dt>{t("clusters.status")}</dt>
        <dd>
          <Status value={c.status} />
        </dd>
        <dt>{t("clusters.connection")}</dt>
        <dd>
          <Status value={c.connection_status} />
        </dd>
        <dt>{t("clusters.nodes")}</dt>
        <dd>
          <Link href={`/clusters/${c.id}?tab=nodes`}>
            <NodeCount cluster={c} />
          </Link>
          {c.nodes.offline + c.nodes.not_ready > 0 && (
            <>
              {" "}
              <Health cluster={c} />
            </>
          )}
        </dd>
        <dt>{t("cluster.endpoint")}</dt>
        <dd>{c.api_endpoint ? <code>{c.api_endpoint}</code> : "—"}</dd>
        <dt>{t("clusters.version")}</dt>
        <dd>{c.kubernetes_version}</dd>
        <dt>{t("clusters.access")}</dt>
        <dd>{t(`access.${c.public_access_mode}`)}</dd>
        <dt>{t("clusters.cpu_usage")}</dt>
        <dd>
          <Usage used={c.usage?.cpu_requests_milli_cores} limit={c.workload_cpu_limit_milli_cores} unit="units.millicores" />
        </dd>
        <dt>{t("clusters.memory_usage")}</dt>
        <dd>
          <Usage used={c.usage?.memory_requests_mib} limit={c.workload_memory_limit_mib} unit="units.mib" />
        </dd>
        <dt>{t("cluster.ingress")}</dt>
        <dd>
          <Status value={c.managed_workload_ingress_status} />
          {c.managed_workload_ingress_cname_target && (
            <>
              {" "}
              <code>{c.managed_workload_ingress_cname_target}</code>
            </>
          )}
        </dd>
        <dt>{t("cluster.namespace")}</dt>
        <dd>
          <code>{c.namespace}</code>
        </dd>
        <dt>{t("clusters.created")}</dt>
        <dd>
          <Time value={c.created_at} />
        </dd>
        <dt>{t("cluster.observed")}</dt>
        <dd>
          <Time value={c.last_observed_at} />
        </dd>
      </dl>
    </>
  );
}

/// A ready cluster without a node: how to reach it, and how to add one.
function GetStarted({ cluster: c }: { cluster: Cluster }) {
  const { t } = useTranslation();
  return (
    <section className="card get-started" aria-labelledby="get-started">
      <h2 id="get-started">{t("start.title")}</h2>
      <ol>
        <li>
          {t("start.kubeconfig")} <Link href={`/clusters/${c.id}?tab=access`}>{t("start.kubeconfig_link")}</Link>
          <Copy
            text={`export KUBECONFIG="$HOME/Downloads/${c.name}-kubeconfig.yaml"\nkubectl get namespaces`}
            label={t("start.kubeconfig_commands")}
          />
        </li>
        <li>
          {t("start.node")} <Link href={`/clusters/${c.id}?tab=join`}>{t("join.add_node")}</Link>
        </li>
      </ol>
    </section>
  );
}

/// The newest operation and every stage its job recorded, each with when
/// (polled each second while it runs).
function LiveOperation({ cluster }: { cluster: Cluster }) {
  const { t } = useTranslation();
  const running = BUSY.includes(cluster.status);
  const operations = useQuery({
    // A new cluster status fetches at once what the job recorded last.
    queryKey: keys.liveOperations(cluster.id, cluster.status),
    queryFn: () =>
      ok(
        api.GET("/api/console/clusters/{cluster_id}/operations", {
          params: { path: { cluster_id: cluster.id }, query: { limit: 1 } },
        }),
      ),
    refetchInterval: (query) =>
      running || ["pending", "running"].includes(query.state.data?.[0]?.status ?? "") ? 1000 : false,
  });
  const latest = operations.data?.[0];
  // The cluster's last error, when its newest operation does not show it.
  const lastError = cluster.last_error_message && !(latest?.error && latest.error_message === cluster.last_error_message) && (
    <div className="error" role="alert">
      <strong>{t("cluster.last_error")}</strong>
      <p>{cluster.last_error_message}</p>
    </div>
  );
  if (!latest) return lastError || null;
  // Operations from before stages were kept have only the last one.
  const stages = latest.stages.length > 0 ? latest.stages : [{ stage: latest.stage, at: null }];
  const active = latest.status === "running" || latest.status === "pending";
  return (
    <section className="card" aria-labelledby="live-operation">
      <h2 id="live-operation">
        {t(`operation.${latest.type}`, { defaultValue: latest.type })} <Status value={latest.status} />
      </h2>
      <ol className="stages" aria-live="polite">
        {stages.map((s, i) => (
          <li
            key={`${s.stage}-${i}`}
            className={i < stages.length - 1 ? "done" : active ? "current" : latest.status === "failed" ? "failed" : "done"}
          >
            <span className="stage">{t(`stage.${s.stage}`, { defaultValue: s.stage })}</span> <Time value={s.at} />
          </li>
        ))}
      </ol>
      {latest.error && <Failure error={latest.error} message={latest.error_message} />}
      {lastError}
    </section>
  );
}

/// Why an operation failed, in the reader's words by its code, and what to
/// do; the job's own English message folded, for support.
function Failure({ error, message }: { error: Schemas["FailureDetail"]; message?: string | null }) {
  const { t } = useTranslation();
  return (
    <div className="error" role="alert" data-code={error.code}>
      <strong>{t(`failure.${error.code}.title`)}</strong>
      <p>{t(`failure.${error.code}.hint`)}</p>
      <SupportDetails code={error.code}>{message && <p>{message}</p>}</SupportDetails>
    </div>
  );
}

function Kubeconfigs({ cluster }: { cluster: Cluster }) {
  const { t } = useTranslation();
  const client = useQueryClient();
  const path = { cluster_id: cluster.id };
  const credentials = useQuery({
    queryKey: keys.kubeconfigs(cluster.id),
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}/kubeconfigs", { params: { path } })),
  });
  const issue = useMutation({
    mutationFn: async (body: Schemas["IssueKubeconfig"]) => {
      const answer = await api.POST("/api/console/clusters/{cluster_id}/kubeconfigs", {
        params: { path },
        body,
        parseAs: "text",
      });
      return ok(Promise.resolve(answer as { data?: string; error?: unknown; response: Response }));
    },
    onSuccess: (text) => {
      const link = document.createElement("a");
      link.href = URL.createObjectURL(new Blob([text as string], { type: "application/yaml" }));
      link.download = `${cluster.name}-kubeconfig.yaml`;
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
      void client.invalidateQueries({ queryKey: keys.kubeconfigs(cluster.id) });
    },
  });
  const revoke = useMutation({
    mutationFn: (credential_id: string) =>
      ok(
        api.DELETE("/api/console/clusters/{cluster_id}/kubeconfigs/{credential_id}", {
          params: { path: { ...path, credential_id } },
        }),
      ),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.kubeconfigs(cluster.id) }),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    issue.mutate({
      expiration_seconds: (formNumber(form, "hours") ?? 8) * 3600,
      description: formValue(form, "description") || null,
    });
  };
  return (
    <>
      <form className="card inline" onSubmit={submit}>
        <h2>{t("kubeconfig.title")}</h2>
        <p className="muted">{t("kubeconfig.explain")}</p>
        <Field label={t("kubeconfig.hours")}>
          <input name="hours" type="number" min={1} defaultValue={8} />
        </Field>
        <Field label={t("kubeconfig.description")}>
          <input name="description" />
        </Field>
        <button type="submit" className="primary" disabled={!cluster.kubeconfig_available || issue.isPending}>
          {t("kubeconfig.download")}
        </button>
        {!cluster.kubeconfig_available && <p className="muted">{t("kubeconfig.not_yet")}</p>}
        <ErrorNote error={issue.error} />
      </form>
      <h2>{t("kubeconfig.issued")}</h2>
      <Rows query={credentials} empty={
        <Empty>{t("kubeconfig.none")}</Empty>
      }>
        {(rows) => (
          <Table columns={[t("kubeconfig.description"), t("clusters.status"), t("common.created"), t("common.expires")]} actions>
              {rows.map((k) => (
                <tr key={k.id}>
                  <td>{k.description ?? <code>{k.service_account_name}</code>}</td>
                  <td>
                    <Status value={k.status} />
                    {k.stale && k.status === "active" && (
                      <p className="muted" data-testid="kubeconfig-stale">
                        {t("kubeconfig.stale", { endpoint: k.api_endpoint ?? "" })}
                      </p>
                    )}
                  </td>
                  <td>
                    <Time value={k.created_at} />
                  </td>
                  <td>
                    <Time value={k.expires_at} />
                  </td>
                  <td>
                    {k.status === "active" && (
                      <Confirm
                        label={t("common.revoke")}
                        question={t("kubeconfig.revoke_question")}
                        busy={revoke.isPending}
                        onConfirm={() => revoke.mutate(k.id)}
                      />
                    )}
                  </td>
                </tr>
              ))}
          </Table>
        )}
      </Rows>
      <ErrorNote error={revoke.error} />
    </>
  );
}

function History({ clusterId }: { clusterId: string }) {
  const { t } = useTranslation();
  const client = useQueryClient();
  const path = { cluster_id: clusterId };
  const operations = useQuery({
    queryKey: keys.operationHistory(clusterId),
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}/operations", { params: { path, query: { limit: 50 } } })),
    refetchInterval: 5000,
  });
  const jobs = useQuery({
    queryKey: keys.jobs(clusterId),
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}/jobs", { params: { path, query: { limit: 50 } } })),
    refetchInterval: 5000,
  });
  const activity = useQuery({
    queryKey: keys.clusterActivity(clusterId),
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}/activity", { params: { path, query: { limit: 50 } } })),
    refetchInterval: 10000,
  });
  const retry = useMutation({
    mutationFn: (operation_id: string) =>
      ok(
        api.POST("/api/console/clusters/{cluster_id}/operations/{operation_id}/retry", {
          params: { path: { ...path, operation_id } },
        }),
      ),
    onSuccess: () => client.invalidateQueries(),
  });
  return (
    <>
      <h2>{t("history.operations")}</h2>
      <ErrorNote error={operations.error ?? retry.error} />
      {operations.data && operations.data.length === 0 && <Empty>{t("history.no_operations")}</Empty>}
      {operations.data && operations.data.length > 0 && (
        <Table columns={[t("history.type"), t("clusters.status"), t("history.stage"), t("common.created"), t("history.error")]} actions>
            {operations.data.map((o) => (
              <tr key={o.id}>
                <td>{t(`operation.${o.type}`, { defaultValue: o.type })}</td>
                <td>
                  <Status value={o.status} />
                </td>
                <td>{t(`stage.${o.stage}`, { defaultValue: o.stage })}</td>
                <td>
                  <Time value={o.created_at} />
                </td>
                <td>
                  {o.error ? (
                    <FailureCell code={o.error.code} message={o.error_message} />
                  ) : (
                    o.error_message ?? ""
                  )}
                </td>
                <td>
                  {o.status === "failed" && o.error?.retryable && (
                    <button type="button" onClick={() => retry.mutate(o.id)}>
                      {t("common.retry")}
                    </button>
                  )}
                </td>
              </tr>
            ))}
        </Table>
      )}
      <h2>{t("history.activity")}</h2>
      <ErrorNote error={activity.error} />
      {activity.data && <AuditTable records={activity.data} />}
      <h2>{t("history.jobs")}</h2>
      <ErrorNote error={jobs.error} />
      {jobs.data && <JobTable jobs={jobs.data} />}
    </>
  );
}

/// The cluster's public endpoint: its mode and address, the address it had
/// while that one is still served, the switch in progress with its stages,
/// and how many kubeconfigs name an old address.
function Endpoint({ cluster: c }: { cluster: Cluster }) {
  const { t } = useTranslation();
  const credentials = useQuery({
    queryKey: keys.kubeconfigs(c.id),
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}/kubeconfigs", { params: { path: { cluster_id: c.id } } })),
  });
  const stale = (credentials.data ?? []).filter((k) => k.stale && k.status === "active").length;
  return (
    <section className="card" aria-labelledby="endpoint-title" data-testid="endpoint">
      <h2 id="endpoint-title">{t("settings.endpoint_title")}</h2>
      <dl className="facts">
        <dt>{t("clusters.access")}</dt>
        <dd>{t(`access.${c.public_access_mode}`)}</dd>
        <dt>{t("cluster.endpoint")}</dt>
        <dd>{c.api_endpoint ? <code>{c.api_endpoint}</code> : "—"}</dd>
        {c.previous_api_endpoint && (
          <>
            <dt>{t("settings.previous_endpoint")}</dt>
            <dd data-testid="previous-endpoint">
              <code>{c.previous_api_endpoint}</code>
              {c.previous_public_access_mode && <> ({t(`access.${c.previous_public_access_mode}`)})</>}
              {" — "}
              {t("settings.previous_until")} <Time value={c.previous_endpoint_until} />
            </dd>
          </>
        )}
      </dl>
      {c.previous_api_endpoint && <p className="muted">{t("settings.nodes_move")}</p>}
      {stale > 0 && (
        <p className="note" data-testid="stale-count">
          {t("settings.stale_count", { count: stale })}{" "}
          <Link href={`/clusters/${c.id}?tab=access`}>{t("settings.stale_link")}</Link>
        </p>
      )}
      {c.status === "updating" && (
        <>
          <h3>{t("settings.switch_progress")}</h3>
          <LiveOperation cluster={c} />
        </>
      )}
    </section>
  );
}

function Settings({ cluster: c }: { cluster: Cluster }) {
  const { t } = useTranslation();
  const client = useQueryClient();
  const path = { cluster_id: c.id };
  const update = useMutation({
    mutationFn: (body: Schemas["UpdateClusterRequest"]) =>
      ok(api.PATCH("/api/console/clusters/{cluster_id}", { params: { path }, body })),
    onSuccess: () => {
      void client.invalidateQueries({ queryKey: keys.cluster(c.id) });
      navigate(`/clusters/${c.id}?tab=overview`);
    },
  });
  const remove = useMutation({
    mutationFn: () => ok(api.DELETE("/api/console/clusters/{cluster_id}", { params: { path } })),
    onSuccess: () => {
      void client.invalidateQueries({ queryKey: keys.clusters() });
      void client.invalidateQueries({ queryKey: keys.cluster(c.id) });
      navigate(`/clusters/${c.id}?tab=overview`);
    },
  });
  // What the form changes: Apply sends those fields alone, and only when
  // there is one.
  const [changed, setChanged] = useState(false);
  const changesIn = (form: HTMLFormElement) => {
    const changes: Schemas["UpdateClusterRequest"] = {};
    const cpu = formNumber(form, "cpu");
    const memory = formNumber(form, "memory");
    const access = formValue(form, "access") as Schemas["PublicAccessMode"];
    const ingress = formValue(form, "ingress") === "on";
    if (cpu !== c.workload_cpu_limit_milli_cores) changes.workload_cpu_limit_milli_cores = cpu;
    if (memory !== c.workload_memory_limit_mib) changes.workload_memory_limit_mib = memory;
    if (access !== c.public_access_mode) changes.public_access_mode = access;
    if (ingress !== c.managed_workload_ingress_enabled) changes.managed_workload_ingress_enabled = ingress;
    return changes;
  };
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const changes = changesIn(e.currentTarget);
    if (Object.keys(changes).length > 0) update.mutate(changes);
  };
  const busy = BUSY.includes(c.status) || c.status === "deleted";
  return (
    <>
      <Endpoint cluster={c} />
      <form
        className="card"
        onSubmit={submit}
        onInput={(e) => setChanged(Object.keys(changesIn(e.currentTarget)).length > 0)}
        noValidate
      >
        <h2>{t("settings.limits")}</h2>
        <Field label={t("clusters.cpu_limit")} hint={t("clusters.cpu_hint")}>
          <input name="cpu" type="number" defaultValue={c.workload_cpu_limit_milli_cores} />
        </Field>
        <Field label={t("clusters.memory_limit")} hint={t("clusters.memory_hint")}>
          <input name="memory" type="number" defaultValue={c.workload_memory_limit_mib} />
        </Field>
        <Field label={t("clusters.access")} hint={t("settings.access_hint")}>
          <select name="access" defaultValue={c.public_access_mode}>
            <option value="loadbalancer">{t("access.loadbalancer")}</option>
            <option value="nodeport">{t("access.nodeport")}</option>
          </select>
        </Field>
        <label className="check">
          <input name="ingress" type="checkbox" defaultChecked={c.managed_workload_ingress_enabled} />{" "}
          {t("clusters.ingress")}
        </label>
        <ErrorNote error={update.error} />
        <button type="submit" className="primary" disabled={busy || update.isPending || !changed}>
          {t("settings.save")}
        </button>
        {!changed && <p className="muted small">{t("settings.nothing_changed")}</p>}
      </form>
      <section className="card danger-zone">
        <h2>{t("settings.delete_title")}</h2>
        <p>{t("settings.delete_explain")}</p>
        <ErrorNote error={remove.error} />
        <ConfirmByName
          label={t("settings.delete")}
          name={c.name}
          busy={remove.isPending || c.status === "deleting" || c.status === "deleted"}
          onConfirm={() => remove.mutate()}
        />
      </section>
    </>
  );
}
