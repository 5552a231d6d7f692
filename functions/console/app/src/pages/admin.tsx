// The back office: users, the cluster job queue, the audit stream, system
// settings (secrets write-only), plans with billing's settings, orders, and
// the PostgreSQL instances of tenant databases. Loaded on demand: only
// administrators download it.
import { useState, type FormEvent } from "react";
import { useInfiniteQuery, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Schemas } from "../api/client";
import { money, number } from "../format";
import type { PageProps } from "../page";
import type { KeysUnder } from "../i18n";
import { Link } from "../router";
import { Confirm, CopyId, Empty, ErrorNote, Field, Loading, More, Page, Status, Table, Time, formNumber, formValue } from "../ui";
import { AuditTable, JobTable, OrderTable } from "../components/records";
import { Health, NodeCount } from "../components/health";
import { ClusterPicker, UserPicker } from "../components/pickers";
import { keys } from "../queryKeys";
import { DatabaseInstances } from "../sections/databases";

/** Users read at a time. */
const USERS_PAGE = 100;

const SECTIONS = ["users", "clusters", "jobs", "audit", "settings", "plans", "orders", "databases"] as const;

export function Admin({ path }: PageProps) {
  const { t } = useTranslation();
  const section = path.split("/")[2] ?? "users";
  return (
    <Page title={t("admin.title")}>
      <nav className="tabs" aria-label={t("admin.title")}>
        {SECTIONS.map((s) => (
          <Link key={s} href={`/admin/${s}`} aria-current={s === section ? "page" : undefined}>
            {t(`admin.${s}`)}
          </Link>
        ))}
      </nav>
      {section === "users" && <Users />}
      {section === "clusters" && <Clusters />}
      {section === "jobs" && <Jobs />}
      {section === "audit" && <Audit />}
      {section === "settings" && <Settings />}
      {section === "plans" && (
        <>
          <BillingSettings />
          <Plans />
        </>
      )}
      {section === "orders" && <Orders />}
      {section === "databases" && <DatabaseInstances />}
    </Page>
  );
}

function Users() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const [filter, setFilter] = useState<{ q?: string; status?: Schemas["UserStatus"]; role?: Schemas["UserRole"] }>({});
  // 100 at a time, newest first; "more" reads the users created before the
  // last one shown (an installation may have tens of thousands).
  const users = useInfiniteQuery({
    queryKey: keys.admin.users(filter),
    queryFn: ({ pageParam }) =>
      ok(api.GET("/api/console/admin/users", { params: { query: { ...filter, limit: USERS_PAGE, ...pageParam } } })),
    initialPageParam: {} as { before?: string; before_id?: string },
    getNextPageParam: (page) => {
      const last = page[page.length - 1];
      return page.length === USERS_PAGE ? { before: last.created_at, before_id: last.id } : undefined;
    },
    select: (data) => data.pages.flat(),
  });
  const change = useMutation({
    mutationFn: ({ user_id, body }: { user_id: string; body: Schemas["UserChange"] }) =>
      ok(api.PATCH("/api/console/admin/users/{user_id}", { params: { path: { user_id } }, body })),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.admin.users() }),
  });
  const remove = useMutation({
    mutationFn: (user_id: string) => ok(api.DELETE("/api/console/admin/users/{user_id}", { params: { path: { user_id } } })),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.admin.users() }),
  });
  const search = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    setFilter({
      q: formValue(form, "q") || undefined,
      status: (formValue(form, "status") || undefined) as Schemas["UserStatus"] | undefined,
      role: (formValue(form, "role") || undefined) as Schemas["UserRole"] | undefined,
    });
  };
  return (
    <>
      <form className="card inline" role="search" onSubmit={search}>
        <Field label={t("admin.search")}>
          <input name="q" type="search" />
        </Field>
        <Field label={t("clusters.status")}>
          <select name="status" defaultValue="">
            <option value="">{t("common.any")}</option>
            <option value="active">{t("status.active")}</option>
            <option value="disabled">{t("status.disabled")}</option>
          </select>
        </Field>
        <Field label={t("account.role")}>
          <select name="role" defaultValue="">
            <option value="">{t("common.any")}</option>
            <option value="user">{t("role.user")}</option>
            <option value="admin">{t("role.admin")}</option>
          </select>
        </Field>
        <button type="submit">{t("admin.search")}</button>
      </form>
      <ErrorNote error={users.error ?? change.error ?? remove.error} />
      {users.isPending ? (
        <Loading />
      ) : users.data?.length === 0 ? (
        <Empty>{t("admin.no_users")}</Empty>
      ) : (
        <Table columns={[t("auth.email"), t("auth.display_name"), t("account.role"), t("clusters.status"), t("common.created")]} actions>
            {users.data?.map((u) => (
              <tr key={u.id} data-email={u.email}>
                <td>{u.email}</td>
                <td>{u.display_name}</td>
                <td>
                  <select
                    aria-label={t("admin.role_of", { email: u.email })}
                    value={u.role}
                    onChange={(e) =>
                      change.mutate({ user_id: u.id, body: { role: e.target.value as Schemas["UserRole"] } })
                    }
                  >
                    <option value="user">{t("role.user")}</option>
                    <option value="admin">{t("role.admin")}</option>
                  </select>
                </td>
                <td>
                  <Status value={u.status} />
                </td>
                <td>
                  <Time value={u.created_at} />
                </td>
                <td className="actions">
                  <button
                    type="button"
                    onClick={() =>
                      change.mutate({ user_id: u.id, body: { status: u.status === "active" ? "disabled" : "active" } })
                    }
                  >
                    {u.status === "active" ? t("admin.disable") : t("admin.enable")}
                  </button>
                  <Confirm
                    label={t("common.delete")}
                    question={t("admin.delete_user", { email: u.email })}
                    busy={remove.isPending}
                    onConfirm={() => remove.mutate(u.id)}
                  />
                </td>
              </tr>
            ))}
        </Table>
      )}
      <More query={users} />
    </>
  );
}

/// Every organization's clusters, newest first, 50 at a time, by a part of
/// the name and by status.
function Clusters() {
  const { t } = useTranslation();
  const [filter, setFilter] = useState<{ q?: string; status?: Schemas["ClusterStatus"] }>({});
  const clusters = useInfiniteQuery({
    queryKey: keys.admin.clusters(filter),
    queryFn: ({ pageParam }) =>
      ok(api.GET("/api/console/admin/clusters", { params: { query: { ...filter, cursor: pageParam } } })),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (page) => page.next_cursor ?? undefined,
    select: (data) => data.pages.flatMap((page) => page.items),
  });
  const search = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    setFilter({
      q: formValue(form, "q") || undefined,
      status: (formValue(form, "status") || undefined) as Schemas["ClusterStatus"] | undefined,
    });
  };
  return (
    <>
      <form className="card inline" role="search" onSubmit={search}>
        <Field label={t("clusters.search")}>
          <input name="q" type="search" pattern="[A-Za-z0-9-]{1,63}" />
        </Field>
        <Field label={t("clusters.status")}>
          <select name="status" defaultValue="">
            <option value="">{t("common.any")}</option>
            {(["pending", "provisioning", "ready", "updating", "deleting", "failed"] as const).map((s) => (
              <option key={s} value={s}>
                {t(`status.${s}`)}
              </option>
            ))}
          </select>
        </Field>
        <button type="submit">{t("admin.search")}</button>
      </form>
      <ErrorNote error={clusters.error} />
      {clusters.isPending ? (
        <Loading />
      ) : clusters.data?.length === 0 ? (
        <Empty>{t("admin.no_clusters")}</Empty>
      ) : (
        <Table columns={[t("clusters.name"), t("admin.owner"), t("clusters.health"), t("clusters.nodes"), t("clusters.version"), t("common.created")]}>
          {clusters.data?.map((c) => (
            <tr key={c.id} data-cluster={c.name}>
              <td>
                {c.name} <CopyId id={c.id} />
              </td>
              <td>{c.owner_email ?? "—"}</td>
              <td>
                <Health cluster={c} />
              </td>
              <td>
                <NodeCount cluster={c} />
              </td>
              <td>{c.kubernetes_version}</td>
              <td>
                <Time value={c.created_at} />
              </td>
            </tr>
          ))}
        </Table>
      )}
      <More query={clusters} />
    </>
  );
}

function Jobs() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const [status, setStatus] = useState<Schemas["JobStatus"] | "">("");
  const [clusterId, setClusterId] = useState("");
  const jobs = useQuery({
    queryKey: keys.admin.jobs(status, clusterId),
    queryFn: () =>
      ok(
        api.GET("/api/console/admin/cluster-jobs", {
          params: { query: { status: status || undefined, cluster_id: clusterId || undefined, limit: 100 } },
        }),
      ),
    refetchInterval: 3000,
  });
  const act = useMutation({
    mutationFn: ({ job_id, action }: { job_id: string; action: "retry" | "cancel" }) =>
      action === "retry"
        ? ok(api.POST("/api/console/admin/cluster-jobs/{job_id}/retry", { params: { path: { job_id } } }))
        : ok(api.POST("/api/console/admin/cluster-jobs/{job_id}/cancel", { params: { path: { job_id } } })),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.admin.jobs() }),
  });
  return (
    <>
      <div className="card inline">
        <Field label={t("clusters.status")}>
          <select value={status} onChange={(e) => setStatus(e.target.value as Schemas["JobStatus"] | "")}>
            <option value="">{t("common.any")}</option>
            {(["pending", "running", "succeeded", "failed", "cancelled"] as const).map((s) => (
              <option key={s} value={s}>
                {t(`status.${s}`)}
              </option>
            ))}
          </select>
        </Field>
        <ClusterPicker label={t("admin.cluster")} onPick={setClusterId} />
      </div>
      <ErrorNote error={jobs.error ?? act.error} />
      {jobs.isPending ? (
        <Loading />
      ) : (
        jobs.data && (
          <JobTable
            jobs={jobs.data}
            showCluster
            actions={(j) => (
              <>
                {j.status === "failed" || j.status === "cancelled" ? (
                  <button type="button" onClick={() => act.mutate({ job_id: j.id, action: "retry" })}>
                    {t("common.retry")}
                  </button>
                ) : null}
                {j.status === "pending" || j.status === "running" ? (
                  <button type="button" onClick={() => act.mutate({ job_id: j.id, action: "cancel" })}>
                    {t("common.cancel")}
                  </button>
                ) : null}
              </>
            )}
          />
        )
      )}
    </>
  );
}

function Audit() {
  const [actor, setActor] = useState("");
  const { t } = useTranslation();
  const events = useQuery({
    queryKey: keys.admin.audit(actor),
    queryFn: () =>
      ok(
        api.GET("/api/console/admin/audit-events", {
          params: { query: { actor_user_id: actor || undefined, limit: 200 } },
        }),
      ),
    refetchInterval: 5000,
  });
  return (
    <>
      <div className="card inline">
        <UserPicker label={t("admin.actor")} onPick={setActor} />
      </div>
      <ErrorNote error={events.error} />
      {events.isPending ? <Loading /> : events.data && <AuditTable records={events.data} />}
    </>
  );
}

const TEXT_FIELDS = [
  "public_base_url",
  "join_base_url",
  "managed_workload_ingress_base_domain",
  "managed_workload_ingress_edge_target",
  "managed_workload_ingress_dns_provider",
  "managed_workload_ingress_dns_zone_id",
  "managed_workload_ingress_dns_endpoint",
  "managed_workload_ingress_dns_access_key_id",
  "github_oauth_client_id",
  "google_oauth_client_id",
  "captcha_site_key",
  "captcha_verify_url",
  "smtp_host",
  "smtp_username",
  "smtp_from",
  "outbound_webhook_url",
] as const;

const SECRETS = [
  "github_oauth_client_secret",
  "google_oauth_client_secret",
  "captcha_secret",
  "smtp_password",
  "managed_workload_ingress_dns_secret",
  "outbound_webhook_secret",
] as const;

/// The secrets a form changes: `null` clears one ticked to clear, a typed
/// value sets it, an empty field keeps it.
function secretChanges<N extends string>(form: HTMLFormElement, names: readonly N[]): Partial<Record<N, string | null>> {
  const changes: Partial<Record<N, string | null>> = {};
  for (const name of names) {
    const value = formValue(form, `secret_${name}`);
    if (formValue(form, `clear_${name}`) === "on") changes[name] = null;
    else if (value) changes[name] = value;
  }
  return changes;
}

/// Empties a form's secret fields once saved: their values are never shown again.
function forgetSecrets(form: HTMLFormElement, names: readonly string[]) {
  names.forEach((n) => ((form.elements.namedItem(`secret_${n}`) as HTMLInputElement).value = ""));
}

/// A write-only input per secret, saying whether it is set, with a box to clear a set one.
function SecretInputs<N extends KeysUnder<"setting.">>({ names, set }: { names: readonly N[]; set: Record<N, boolean> }) {
  const { t } = useTranslation();
  return (
    <>
      {names.map((name) => (
        <div key={name} className="secret">
          <Field label={t(`setting.${name}`)} hint={set[name] ? t("admin.secret_set") : t("admin.secret_unset")}>
            <input name={`secret_${name}`} type="password" autoComplete="new-password" />
          </Field>
          {set[name] && (
            <label className="check">
              <input name={`clear_${name}`} type="checkbox" /> {t("admin.clear")}
            </label>
          )}
        </div>
      ))}
    </>
  );
}

function Settings() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const [saved, setSaved] = useState(false);
  const settings = useQuery({ queryKey: keys.admin.settings(), queryFn: () => ok(api.GET("/api/console/admin/settings")) });
  const save = useMutation({
    mutationFn: (body: Schemas["SettingsUpdate"]) => ok(api.PUT("/api/console/admin/settings", { body })),
    onSuccess: (data) => {
      client.setQueryData(["admin-settings"], data);
      setSaved(true);
    },
  });
  if (settings.isPending) return <Loading />;
  if (settings.error) return <ErrorNote error={settings.error} />;
  const s = settings.data;
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const body: Schemas["SettingsUpdate"] = {
      managed_workload_ingress_dns_record_ttl: formNumber(form, "managed_workload_ingress_dns_record_ttl") ?? 60,
      default_cluster_public_access_mode: formValue(form, "default_cluster_public_access_mode") as Schemas["PublicAccessMode"],
      captcha_enabled: formValue(form, "captcha_enabled") === "on",
      smtp_tls: formValue(form, "smtp_tls"),
      smtp_port: formNumber(form, "smtp_port"),
      secrets: secretChanges(form, SECRETS),
    };
    for (const name of TEXT_FIELDS) body[name] = formValue(form, name).trim() || null;
    setSaved(false);
    save.mutate(body, { onSuccess: () => forgetSecrets(form, SECRETS) });
  };
  return (
    <form className="card" onSubmit={submit} noValidate key={s.updated_at}>
      <p className="muted">
        {t("admin.settings_updated")} <Time value={s.updated_at} />
      </p>
      <div className="grid">
        {TEXT_FIELDS.map((name) => (
          <Field key={name} label={t(`setting.${name}`)}>
            <input name={name} defaultValue={s[name] ?? ""} spellCheck={false} />
          </Field>
        ))}
        <Field label={t("setting.managed_workload_ingress_dns_record_ttl")}>
          <input name="managed_workload_ingress_dns_record_ttl" type="number" defaultValue={s.managed_workload_ingress_dns_record_ttl} />
        </Field>
        <Field label={t("setting.smtp_port")}>
          <input name="smtp_port" type="number" defaultValue={s.smtp_port ?? ""} />
        </Field>
        <Field label={t("setting.smtp_tls")}>
          <select name="smtp_tls" defaultValue={s.smtp_tls}>
            <option value="none">none</option>
            <option value="starttls">STARTTLS</option>
            <option value="tls">TLS</option>
          </select>
        </Field>
        <Field label={t("setting.default_cluster_public_access_mode")}>
          <select name="default_cluster_public_access_mode" defaultValue={s.default_cluster_public_access_mode}>
            <option value="loadbalancer">{t("access.loadbalancer")}</option>
            <option value="nodeport">{t("access.nodeport")}</option>
          </select>
        </Field>
        <label className="check">
          <input name="captcha_enabled" type="checkbox" defaultChecked={s.captcha_enabled} /> {t("setting.captcha_enabled")}
        </label>
      </div>
      <fieldset>
        <legend>{t("admin.secrets")}</legend>
        <p className="muted">{t("admin.secrets_explain")}</p>
        <div className="grid">
          <SecretInputs names={SECRETS} set={s.secrets} />
        </div>
      </fieldset>
      <ErrorNote error={save.error} />
      {saved && <p role="status">{t("common.saved")}</p>}
      <button type="submit" className="primary" disabled={save.isPending}>
        {t("common.save")}
      </button>
    </form>
  );
}

const BILLING_SECRETS = ["stripe_secret_key", "stripe_webhook_secret"] as const;

/// Billing's settings: the plan of users without a paid order, and Stripe.
function BillingSettings() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const [saved, setSaved] = useState(false);
  const settings = useQuery({
    queryKey: keys.admin.billingSettings(),
    queryFn: () => ok(api.GET("/api/console/admin/billing-settings")),
  });
  const plans = useQuery({ queryKey: keys.admin.plans(), queryFn: () => ok(api.GET("/api/console/admin/plans")) });
  const save = useMutation({
    mutationFn: (body: Schemas["BillingSettingsUpdate"]) => ok(api.PUT("/api/console/admin/billing-settings", { body })),
    onSuccess: (data) => {
      client.setQueryData(["admin-billing-settings"], data);
      setSaved(true);
    },
  });
  if (settings.isPending) return <Loading />;
  if (settings.error) return <ErrorNote error={settings.error} />;
  const s = settings.data;
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const body: Schemas["BillingSettingsUpdate"] = {
      default_plan_id: formValue(form, "default_plan_id") || null,
      stripe_api_base_url: formValue(form, "stripe_api_base_url").trim() || null,
      secrets: secretChanges(form, BILLING_SECRETS),
    };
    setSaved(false);
    save.mutate(body, { onSuccess: () => forgetSecrets(form, BILLING_SECRETS) });
  };
  return (
    <form className="card" onSubmit={submit} noValidate key={s.updated_at} aria-label={t("admin.billing_settings")}>
      <h2>{t("admin.billing_settings")}</h2>
      <p className="muted">
        {t("admin.settings_updated")} <Time value={s.updated_at} />
      </p>
      <div className="grid">
        <Field label={t("setting.default_plan_id")}>
          <select name="default_plan_id" defaultValue={s.default_plan_id ?? ""}>
            <option value="">{t("admin.no_default_plan")}</option>
            {plans.data?.map((plan) => (
              <option key={plan.id} value={plan.id}>
                {plan.name}
              </option>
            ))}
          </select>
        </Field>
        <Field label={t("setting.stripe_api_base_url")}>
          <input name="stripe_api_base_url" defaultValue={s.stripe_api_base_url ?? ""} spellCheck={false} />
        </Field>
        <SecretInputs names={BILLING_SECRETS} set={s.secrets} />
      </div>
      <ErrorNote error={save.error} />
      {saved && <p role="status">{t("common.saved")}</p>}
      <button type="submit" className="primary" disabled={save.isPending}>
        {t("admin.save_billing_settings")}
      </button>
    </form>
  );
}

function Plans() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const [editing, setEditing] = useState<Schemas["Plan"] | null>(null);
  const plans = useQuery({ queryKey: keys.admin.plans(), queryFn: () => ok(api.GET("/api/console/admin/plans")) });
  const save = useMutation({
    mutationFn: ({ id, body }: { id?: string; body: Schemas["PlanRequest"] }) =>
      id
        ? ok(api.PUT("/api/console/admin/plans/{plan_id}", { params: { path: { plan_id: id } }, body }))
        : ok(api.POST("/api/console/admin/plans", { body })),
    onSuccess: () => {
      setEditing(null);
      void client.invalidateQueries({ queryKey: keys.admin.plans() });
    },
  });
  const remove = useMutation({
    mutationFn: (plan_id: string) => ok(api.DELETE("/api/console/admin/plans/{plan_id}", { params: { path: { plan_id } } })),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.admin.plans() }),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const n = (name: string) => formNumber(form, name) ?? 0;
    save.mutate({
      id: editing?.id,
      body: {
        name: formValue(form, "name"),
        max_clusters: n("max_clusters"),
        max_nodes: n("max_nodes"),
        max_cpu_milli_cores: n("max_cpu_milli_cores"),
        max_memory_mib: n("max_memory_mib"),
        max_hostnames: n("max_hostnames"),
        max_databases: n("max_databases"),
        price_minor_units: n("price_minor_units"),
        currency: formValue(form, "currency"),
        stripe_price_id: formValue(form, "stripe_price_id") || null,
        active: formValue(form, "active") === "on",
      },
    });
  };
  const p = editing;
  return (
    <>
      <form className="card" onSubmit={submit} key={p?.id ?? "new"} noValidate>
        <h2>{p ? t("plans.edit", { name: p.name }) : t("plans.create")}</h2>
        <div className="grid">
          <Field label={t("plans.name")}>
            <input name="name" defaultValue={p?.name ?? ""} />
          </Field>
          {(["max_clusters", "max_nodes", "max_cpu_milli_cores", "max_memory_mib", "max_hostnames", "max_databases", "price_minor_units"] as const).map(
            (name) => (
              <Field key={name} label={t(`plans.${name}`)}>
                <input name={name} type="number" min={0} defaultValue={p?.[name] ?? 0} />
              </Field>
            ),
          )}
          <Field label={t("plans.currency")}>
            <input name="currency" defaultValue={p?.currency ?? "usd"} maxLength={3} />
          </Field>
          <Field label={t("plans.stripe_price_id")}>
            <input name="stripe_price_id" defaultValue={p?.stripe_price_id ?? ""} spellCheck={false} />
          </Field>
          <label className="check">
            <input name="active" type="checkbox" defaultChecked={p?.active ?? true} /> {t("plans.active")}
          </label>
        </div>
        <ErrorNote error={save.error} />
        <button type="submit" className="primary" disabled={save.isPending}>
          {t("common.save")}
        </button>
        {p && (
          <button type="button" onClick={() => setEditing(null)}>
            {t("common.cancel")}
          </button>
        )}
      </form>
      <ErrorNote error={plans.error ?? remove.error} />
      {plans.isPending ? (
        <Loading />
      ) : plans.data?.length === 0 ? (
        <Empty>{t("billing.no_plans")}</Empty>
      ) : (
        <Table columns={[t("plans.name"), t("plans.price"), t("resource.clusters"), t("resource.nodes"), t("clusters.status")]} actions>
            {plans.data?.map((plan) => (
              <tr key={plan.id}>
                <td>{plan.name}</td>
                <td>{money(plan.price_minor_units, plan.currency)}</td>
                <td>{number(plan.max_clusters)}</td>
                <td>{number(plan.max_nodes)}</td>
                <td>
                  <Status value={plan.active ? "active" : "disabled"} />
                </td>
                <td className="actions">
                  <button type="button" onClick={() => setEditing(plan)}>
                    {t("common.edit")}
                  </button>
                  <Confirm
                    label={t("common.delete")}
                    question={t("plans.delete_question", { name: plan.name })}
                    busy={remove.isPending}
                    onConfirm={() => remove.mutate(plan.id)}
                  />
                </td>
              </tr>
            ))}
        </Table>
      )}
    </>
  );
}

function Orders() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const [status, setStatus] = useState("");
  const orders = useQuery({
    queryKey: keys.admin.orders(status),
    queryFn: () =>
      ok(api.GET("/api/console/admin/orders", { params: { query: { status: status || undefined, limit: 100 } } })),
  });
  const cancel = useMutation({
    mutationFn: (order_id: string) =>
      ok(api.POST("/api/console/admin/orders/{order_id}/cancel", { params: { path: { order_id } } })),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.admin.orders() }),
  });
  return (
    <>
      <div className="card inline">
        <Field label={t("clusters.status")}>
          <select value={status} onChange={(e) => setStatus(e.target.value)}>
            <option value="">{t("common.any")}</option>
            {(["pending", "paid", "cancelled"] satisfies Schemas["OrderStatus"][]).map((s) => (
              <option key={s} value={s}>
                {t(`status.${s}`)}
              </option>
            ))}
          </select>
        </Field>
      </div>
      <ErrorNote error={orders.error ?? cancel.error} />
      {orders.isPending ? <Loading /> : orders.data && <OrderTable orders={orders.data} onCancel={(id) => cancel.mutate(id)} />}
    </>
  );
}
