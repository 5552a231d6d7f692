// Tenant PostgreSQL databases (docs/databases.md): a cluster's databases —
// ask for one, its phase with its conditions, where its Secret is, add
// extensions, rotate its credential, retry it, remove it by its policy —
// and the back office's instances, each with what its last connection check
// found. The admin password is write-only.
import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Cluster, type Schemas } from "../api/client";
import { Confirm, Empty, ErrorNote, Field, Loading, Rows, Status, Table, Time, formNumber, formValue } from "../ui";
type Database = Schemas["TenantDatabase"];
type Instance = Schemas["Instance"];

/// The keys of this capability's queries (src/queryKeys.ts has the console's own).
const databaseKeys = {
  list: (clusterId: string) => ["databases", clusterId] as const,
  instances: () => ["admin", "database-instances"] as const,
};

/// The phases the job is still walking: the list is read again until none is.
const WALKING = new Set(["planned", "credential_created", "role_created", "database_created", "secret_projected", "deleting"]);

/// `pgcrypto, citext` (commas or spaces) as a list, in order, each once.
function extensionList(text: string): string[] {
  return [...new Set(text.split(/[\s,]+/).filter(Boolean))];
}

export function Databases({ cluster }: { cluster: Cluster }) {
  const { t } = useTranslation();
  const client = useQueryClient();
  const path = { cluster_id: cluster.id };
  const key = databaseKeys.list(cluster.id);
  const databases = useQuery({
    queryKey: key,
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}/databases", { params: { path } })),
    refetchInterval: (query) => (query.state.data?.some((d) => WALKING.has(d.phase) || d.deleting) ? 2000 : 15000),
  });
  const refresh = () => client.invalidateQueries({ queryKey: key });
  const ask = useMutation({
    mutationFn: (body: Schemas["CreateDatabase"]) =>
      ok(api.POST("/api/console/clusters/{cluster_id}/databases", { params: { path }, body })),
    onSuccess: refresh,
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const extensions = extensionList(formValue(form, "extensions"));
    ask.mutate(
      {
        name: formValue(form, "name").trim(),
        namespace: formValue(form, "namespace").trim() || null,
        secret_name: formValue(form, "secret_name").trim() || null,
        deletion_policy: formValue(form, "deletion_policy") as Schemas["DeletionPolicy"],
        extensions: extensions.length ? extensions : null,
      },
      { onSuccess: () => form.reset() },
    );
  };
  return (
    <>
      <form className="card" onSubmit={submit} noValidate>
        <h2>{t("databases.ask")}</h2>
        <div className="grid">
          <Field label={t("databases.name")} hint={t("databases.name_hint")}>
            <input name="name" placeholder="orders" spellCheck={false} autoComplete="off" required />
          </Field>
          <Field label={t("databases.namespace")}>
            <input name="namespace" placeholder="default" spellCheck={false} autoComplete="off" />
          </Field>
          <Field label={t("databases.secret_name")} hint={t("databases.secret_name_hint")}>
            <input name="secret_name" placeholder="orders-postgres" spellCheck={false} autoComplete="off" />
          </Field>
          <Field label={t("databases.extensions")} hint={t("databases.extensions_hint")}>
            <input name="extensions" placeholder="pgcrypto, citext" spellCheck={false} autoComplete="off" />
          </Field>
          <Field label={t("databases.deletion_policy")} hint={t("databases.deletion_policy_hint")}>
            <select name="deletion_policy" defaultValue="retain">
              <option value="retain">{t("databases.policy_retain")}</option>
              <option value="delete">{t("databases.policy_delete")}</option>
            </select>
          </Field>
        </div>
        <ErrorNote error={ask.error} />
        <button type="submit" className="primary" disabled={ask.isPending}>
          {t("databases.ask_button")}
        </button>
      </form>
      <Rows query={databases} empty={<Empty>{t("databases.empty")}</Empty>}>
        {(rows) => rows.map((d) => <DatabaseCard key={d.id} cluster={cluster} database={d} onChange={refresh} />)}
      </Rows>
    </>
  );
}

function DatabaseCard({ cluster, database: d, onChange }: { cluster: Cluster; database: Database; onChange: () => void }) {
  const { t } = useTranslation();
  const path = { cluster_id: cluster.id, database_id: d.id };
  const act = useMutation({
    mutationFn: (what: "retry" | "rotate" | "delete") =>
      what === "delete"
        ? ok(api.DELETE("/api/console/clusters/{cluster_id}/databases/{database_id}", { params: { path } }))
        : what === "retry"
          ? ok(api.POST("/api/console/clusters/{cluster_id}/databases/{database_id}/retry", { params: { path } }))
          : ok(api.POST("/api/console/clusters/{cluster_id}/databases/{database_id}/rotate", { params: { path } })),
    onSuccess: onChange,
  });
  const extend = useMutation({
    mutationFn: (extensions: string[]) =>
      ok(api.PATCH("/api/console/clusters/{cluster_id}/databases/{database_id}", { params: { path }, body: { extensions } })),
    onSuccess: onChange,
  });
  const addExtensions = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const added = extensionList(formValue(form, "more")).filter((x) => !d.extensions.includes(x));
    extend.mutate([...d.extensions, ...added], { onSuccess: () => form.reset() });
  };
  const stopped = d.phase === "failed" || d.phase === "conflict";
  return (
    <article className="card" aria-label={d.name}>
      <h3>
        <code>{d.name}</code> <Status value={d.deleting ? "deleting" : d.phase} />
      </h3>
      <dl className="facts">
        <dt>{t("databases.secret")}</dt>
        <dd>
          <code>
            {d.namespace}/{d.secret_name}
          </code>
        </dd>
        <dt>{t("databases.server_names")}</dt>
        <dd>
          <code>{d.database_name}</code>
        </dd>
        <dt>{t("databases.extensions")}</dt>
        <dd>{d.extensions.length ? d.extensions.join(", ") : <span className="muted">{t("databases.no_extensions")}</span>}</dd>
        <dt>{t("databases.deletion_policy")}</dt>
        <dd>{d.deletion_policy === "retain" ? t("databases.policy_retain") : t("databases.policy_delete")}</dd>
        {d.conditions.map((c) => (
          <Condition key={c.type} condition={c} />
        ))}
        {d.last_error && (
          <>
            <dt>{t("databases.last_error")}</dt>
            <dd className="error-text">{d.last_error}</dd>
          </>
        )}
        <dt>{t("databases.observed")}</dt>
        <dd>
          <Time value={d.observed_at} />
        </dd>
      </dl>
      <ErrorNote error={act.error ?? extend.error} />
      {!d.deleting && (
        <div className="actions">
          {stopped && (
            <button type="button" onClick={() => act.mutate("retry")} disabled={act.isPending}>
              {t("common.retry")}
            </button>
          )}
          {d.phase === "ready" && (
            <Confirm
              label={t("databases.rotate")}
              question={t("databases.rotate_question", { name: d.name })}
              busy={act.isPending}
              onConfirm={() => act.mutate("rotate")}
            />
          )}
          <Confirm
            label={t("common.delete")}
            question={t(d.deletion_policy === "retain" ? "databases.delete_retain_question" : "databases.delete_drop_question", {
              name: d.name,
            })}
            busy={act.isPending}
            onConfirm={() => act.mutate("delete")}
          />
        </div>
      )}
      {!d.deleting && (
        <form className="inline" onSubmit={addExtensions} noValidate>
          <Field label={t("databases.add_extensions")} hint={t("databases.add_extensions_hint")}>
            <input name="more" placeholder="hstore" spellCheck={false} autoComplete="off" />
          </Field>
          <button type="submit" disabled={extend.isPending}>
            {t("databases.add")}
          </button>
        </form>
      )}
    </article>
  );
}

function Condition({ condition: c }: { condition: Schemas["Condition"] }) {
  const { t } = useTranslation();
  return (
    <>
      <dt>{t("databases.condition", { type: c.type })}</dt>
      <dd>
        <Status value={c.status === "True" ? "ok" : "not_ready"} /> {c.reason}
        <span className="muted">
          {" "}
          — {c.message} (<Time value={c.last_transition_time} />)
        </span>
      </dd>
    </>
  );
}

/// The back office's instances: register one (checked as it is saved), edit,
/// remove one no database is on.
export function DatabaseInstances() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const [editing, setEditing] = useState<Instance | null>(null);
  const [checked, setChecked] = useState<Instance | null>(null);
  const key = databaseKeys.instances();
  const instances = useQuery({ queryKey: key, queryFn: () => ok(api.GET("/api/console/admin/database-instances")) });
  const save = useMutation({
    mutationFn: ({ id, body }: { id?: string; body: Schemas["InstanceRequest"] }) =>
      id
        ? ok(api.PUT("/api/console/admin/database-instances/{instance_id}", { params: { path: { instance_id: id } }, body }))
        : ok(api.POST("/api/console/admin/database-instances", { body })),
    onSuccess: (saved) => {
      setEditing(null);
      setChecked(saved);
      void client.invalidateQueries({ queryKey: key });
    },
  });
  const remove = useMutation({
    mutationFn: (instance_id: string) =>
      ok(api.DELETE("/api/console/admin/database-instances/{instance_id}", { params: { path: { instance_id } } })),
    onSuccess: () => client.invalidateQueries({ queryKey: key }),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const password = formValue(form, "admin_password");
    save.mutate(
      {
        id: editing?.id,
        body: {
          name: formValue(form, "name").trim(),
          host: formValue(form, "host").trim(),
          hostaddr: formValue(form, "hostaddr").trim() || null,
          port: formNumber(form, "port"),
          admin_database: formValue(form, "admin_database").trim() || null,
          tls_mode: formValue(form, "tls_mode") as Schemas["InstanceTlsMode"],
          ca_bundle: formValue(form, "ca_bundle").trim() || null,
          admin_role: formValue(form, "admin_role").trim(),
          admin_password: password === "" ? null : password,
          enabled: formValue(form, "enabled") === "on",
          default: formValue(form, "default") === "on",
        },
      },
      // The typed password is not left in the page.
      { onSuccess: () => form.reset() },
    );
  };
  const i = editing;
  return (
    <>
      <form className="card" onSubmit={submit} key={i?.id ?? "new"} noValidate>
        <h2>{i ? t("instances.edit", { name: i.name }) : t("instances.create")}</h2>
        <p className="muted">{t("instances.hint")}</p>
        <div className="grid">
          <Field label={t("instances.name")}>
            <input name="name" defaultValue={i?.name ?? ""} spellCheck={false} />
          </Field>
          <Field label={t("instances.host")} hint={t("instances.host_hint")}>
            <input name="host" defaultValue={i?.host ?? ""} spellCheck={false} />
          </Field>
          <Field label={t("instances.hostaddr")} hint={t("instances.hostaddr_hint")}>
            <input name="hostaddr" defaultValue={i?.hostaddr ?? ""} spellCheck={false} />
          </Field>
          <Field label={t("instances.port")}>
            <input name="port" type="number" min={1} max={65535} defaultValue={i?.port ?? 5432} />
          </Field>
          <Field label={t("instances.admin_database")}>
            <input name="admin_database" defaultValue={i?.admin_database ?? "postgres"} spellCheck={false} />
          </Field>
          <Field label={t("instances.tls_mode")}>
            <select name="tls_mode" defaultValue={i?.tls_mode ?? "verify-full"}>
              <option value="verify-full">verify-full</option>
              <option value="require">require</option>
              <option value="disable">disable</option>
            </select>
          </Field>
          <Field label={t("instances.admin_role")}>
            <input name="admin_role" defaultValue={i?.admin_role ?? ""} spellCheck={false} autoComplete="off" />
          </Field>
          <Field label={t("instances.admin_password")} hint={i ? t("instances.password_kept") : undefined}>
            <input name="admin_password" type="password" autoComplete="new-password" />
          </Field>
          <Field label={t("instances.ca_bundle")} hint={t("instances.ca_bundle_hint")}>
            <textarea name="ca_bundle" rows={4} defaultValue={i?.ca_bundle ?? ""} spellCheck={false} />
          </Field>
          <label className="check">
            <input name="enabled" type="checkbox" defaultChecked={i?.enabled ?? true} /> {t("instances.enabled")}
          </label>
          <label className="check">
            <input name="default" type="checkbox" defaultChecked={i?.is_default ?? false} /> {t("instances.default")}
          </label>
        </div>
        <ErrorNote error={save.error} />
        <button type="submit" className="primary" disabled={save.isPending}>
          {save.isPending ? t("instances.checking") : t("instances.save")}
        </button>
        {i && (
          <button type="button" onClick={() => setEditing(null)}>
            {t("common.cancel")}
          </button>
        )}
      </form>
      {checked && (
        <p className="note" role="status">
          {t("instances.checked", { name: checked.name, version: checked.server_version ?? "?" })}{" "}
          {checked.can_create_role && checked.can_create_database ? t("instances.can_create") : t("instances.cannot_create")}
        </p>
      )}
      <ErrorNote error={remove.error} />
      {instances.isPending ? (
        <Loading />
      ) : instances.error ? (
        <ErrorNote error={instances.error} />
      ) : instances.data?.length === 0 ? (
        <Empty>{t("instances.empty")}</Empty>
      ) : (
        <Table
          columns={[t("instances.name"), t("instances.address"), t("instances.tls_mode"), t("instances.check"), t("clusters.status")]}
          actions
        >
          {instances.data?.map((instance) => (
            <tr key={instance.id}>
              <td>
                {instance.name} {instance.is_default && <span className="badge muted">{t("instances.default_badge")}</span>}
              </td>
              <td>
                <code>
                  {instance.host}:{instance.port}
                </code>
                {instance.hostaddr && <span className="muted"> ({instance.hostaddr})</span>}
              </td>
              <td>{instance.tls_mode}</td>
              <td>
                {instance.server_version ?? "—"}{" "}
                <Status value={instance.can_create_role && instance.can_create_database ? "ok" : "warning"} />{" "}
                <Time value={instance.checked_at} />
              </td>
              <td>
                <Status value={instance.enabled ? "active" : "disabled"} />
              </td>
              <td className="actions">
                <button type="button" onClick={() => setEditing(instance)}>
                  {t("common.edit")}
                </button>
                <Confirm
                  label={t("common.delete")}
                  question={t("instances.delete_question", { name: instance.name })}
                  busy={remove.isPending}
                  onConfirm={() => remove.mutate(instance.id)}
                />
              </td>
            </tr>
          ))}
        </Table>
      )}
    </>
  );
}
