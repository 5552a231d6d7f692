// The account: profile, password, API keys, notifications, sessions,
// sign-in history and activity.
import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Schemas } from "../api/client";
import type { PageProps } from "../page";
import type { User } from "../session";
import { AuditTable } from "../components/records";
import { KeyTerms, keyTermsOf } from "../components/keyTerms";
import { useLocation } from "../router";
import { Copy, Empty, ErrorNote, Field, Loading, Page, Status, Table, Tabs, Time, formValue } from "../ui";
import { keys } from "../queryKeys";

export function Account({ user }: PageProps) {
  const { t } = useTranslation();
  const url = useLocation();
  const tab = url.searchParams.get("tab") ?? "profile";
  const tabs: [string, string][] = [
    ["profile", t("account.profile")],
    ["keys", t("account.keys")],
    ["notifications", t("account.notifications")],
    ["sessions", t("account.sessions")],
    ["logins", t("account.logins")],
    ["activity", t("account.activity")],
  ];
  return (
    <Page title={t("account.title")}>
      <Tabs tabs={tabs} current={tab} base="/account" />
      {tab === "profile" && <Profile user={user} />}
      {tab === "keys" && <ApiKeys user={user} />}
      {tab === "notifications" && <Notifications />}
      {tab === "sessions" && <Sessions />}
      {tab === "logins" && <Logins />}
      {tab === "activity" && <Activity />}
    </Page>
  );
}

function Profile({ user }: { user: User }) {
  const { t } = useTranslation();
  const [changed, setChanged] = useState(false);
  const change = useMutation({
    mutationFn: (body: Schemas["ChangePassword"]) => ok(api.POST("/api/auth/change-password", { body })),
    onSuccess: () => setChanged(true),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    change.mutate(
      { current_password: formValue(form, "current"), new_password: formValue(form, "new") },
      { onSuccess: () => form.reset() },
    );
  };
  return (
    <>
      <dl className="facts">
        <dt>{t("auth.display_name")}</dt>
        <dd>{user.display_name}</dd>
        <dt>{t("auth.email")}</dt>
        <dd>
          {user.email} {user.email_verified && <Status value="ok" />}
        </dd>
        <dt>{t("account.role")}</dt>
        <dd>{t(`role.${user.role}`)}</dd>
        <dt>{t("common.created")}</dt>
        <dd>
          <Time value={user.created_at} />
        </dd>
      </dl>
      {user.has_password && (
        <form className="card narrow" onSubmit={submit}>
          <h2>{t("account.change_password")}</h2>
          <Field label={t("account.current_password")}>
            <input name="current" type="password" autoComplete="current-password" required />
          </Field>
          <Field label={t("auth.new_password")} hint={t("account.password_effects")}>
            <input name="new" type="password" autoComplete="new-password" required />
          </Field>
          <ErrorNote error={change.error} />
          {changed && <p role="status">{t("account.password_changed")}</p>}
          <button type="submit" className="primary" disabled={change.isPending}>
            {t("account.change_password")}
          </button>
        </form>
      )}
    </>
  );
}

function ApiKeys({ user }: { user: User }) {
  const { t } = useTranslation();
  const client = useQueryClient();
  const [shown, setShown] = useState<string | null>(null);
  const apiKeys = useQuery({ queryKey: keys.apiKeys(), queryFn: () => ok(api.GET("/api/console/account/api-keys")) });
  const create = useMutation({
    mutationFn: (body: Schemas["CreateKey"]) => ok(api.POST("/api/console/account/api-keys", { body })),
    onSuccess: (created) => {
      setShown(created.key);
      void client.invalidateQueries({ queryKey: keys.apiKeys() });
    },
  });
  const revoke = useMutation({
    mutationFn: (key_id: string) => ok(api.DELETE("/api/console/account/api-keys/{key_id}", { params: { path: { key_id } } })),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.apiKeys() }),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    create.mutate(
      { name: formValue(form, "name"), ...keyTermsOf(form, user) },
      { onSuccess: () => form.reset() },
    );
  };
  return (
    <>
      <form className="card" onSubmit={submit}>
        <h2>{t("keys.create")}</h2>
        <KeyTerms user={user} scope="read">
          <Field label={t("keys.name")}>
            <input name="name" required />
          </Field>
        </KeyTerms>
        <ErrorNote error={create.error} />
        <button type="submit" className="primary" disabled={create.isPending}>
          {t("keys.create")}
        </button>
      </form>
      {shown && (
        <section className="card">
          <h2>{t("keys.new_key")}</h2>
          <p>{t("keys.shown_once")}</p>
          <Copy text={shown} label={t("keys.new_key")} />
        </section>
      )}
      <ErrorNote error={apiKeys.error ?? revoke.error} />
      {apiKeys.data && apiKeys.data.length === 0 && <Empty>{t("keys.empty")}</Empty>}
      {apiKeys.data && apiKeys.data.length > 0 && (
        <Table columns={[t("keys.name"), t("keys.prefix"), t("keys.scope"), t("keys.last_used"), t("common.expires")]} actions>
            {apiKeys.data.map((k) => (
              <tr key={k.id}>
                <td>{k.name}</td>
                <td>
                  <code>{k.prefix}</code>
                </td>
                <td>{t(`keys.${k.scope}`, { defaultValue: k.scope })}</td>
                <td>
                  <Time value={k.last_used_at} />
                </td>
                <td>
                  <Time value={k.expires_at} />
                </td>
                <td>
                  {k.revoked_at ? (
                    <Status value="revoked" />
                  ) : (
                    <button type="button" onClick={() => revoke.mutate(k.id)}>
                      {t("common.revoke")}
                    </button>
                  )}
                </td>
              </tr>
            ))}
        </Table>
      )}
    </>
  );
}

const EVENTS = [
  "notify_cluster_ready",
  "notify_cluster_failed",
  "notify_node_joined",
  "notify_node_offline",
  "notify_order_paid",
  "notify_plan_limit_reached",
] as const;

function Notifications() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const [saved, setSaved] = useState(false);
  const current = useQuery({
    queryKey: keys.notifications(),
    queryFn: () => ok(api.GET("/api/console/account/notifications")),
  });
  const save = useMutation({
    mutationFn: (body: Schemas["NotificationSettings"]) => ok(api.PUT("/api/console/account/notifications", { body })),
    onSuccess: (data) => {
      client.setQueryData(["notifications"], data);
      setSaved(true);
    },
  });
  if (current.isPending) return <Loading />;
  if (current.error) return <ErrorNote error={current.error} />;
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const on = (name: string) => formValue(form, name) === "on";
    setSaved(false);
    save.mutate({
      email_enabled: on("email_enabled"),
      webhook_enabled: on("webhook_enabled"),
      notify_cluster_ready: on("notify_cluster_ready"),
      notify_cluster_failed: on("notify_cluster_failed"),
      notify_node_joined: on("notify_node_joined"),
      notify_node_offline: on("notify_node_offline"),
      notify_order_paid: on("notify_order_paid"),
      notify_plan_limit_reached: on("notify_plan_limit_reached"),
    });
  };
  return (
    <form className="card" onSubmit={submit}>
      <fieldset>
        <legend>{t("notifications.channels")}</legend>
        {(["email_enabled", "webhook_enabled"] as const).map((name) => (
          <label key={name} className="check">
            <input name={name} type="checkbox" defaultChecked={current.data[name]} /> {t(`notifications.${name}`)}
          </label>
        ))}
      </fieldset>
      <fieldset>
        <legend>{t("notifications.events")}</legend>
        {EVENTS.map((name) => (
          <label key={name} className="check">
            <input name={name} type="checkbox" defaultChecked={current.data[name] ?? false} /> {t(`notifications.${name}`)}
          </label>
        ))}
      </fieldset>
      <ErrorNote error={save.error} />
      {saved && <p role="status">{t("common.saved")}</p>}
      <button type="submit" className="primary" disabled={save.isPending}>
        {t("common.save")}
      </button>
    </form>
  );
}

function Sessions() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const sessions = useQuery({ queryKey: keys.sessions(), queryFn: () => ok(api.GET("/api/console/account/sessions")) });
  const end = useMutation({
    mutationFn: (session_id: string) =>
      ok(api.DELETE("/api/console/account/sessions/{session_id}", { params: { path: { session_id } } })),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.sessions() }),
  });
  const endOthers = useMutation({
    mutationFn: () => ok(api.DELETE("/api/console/account/sessions")),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.sessions() }),
  });
  if (sessions.isPending) return <Loading />;
  if (sessions.error) return <ErrorNote error={sessions.error} />;
  return (
    <>
      <ErrorNote error={end.error ?? endOthers.error} />
      <button type="button" onClick={() => endOthers.mutate()} disabled={endOthers.isPending}>
        {t("sessions.end_others")}
      </button>
      <Table columns={[t("sessions.client"), t("sessions.ip"), t("sessions.last_used"), t("common.expires")]} actions>
          {sessions.data.map((s) => (
            <tr key={s.id}>
              <td>{s.user_agent ?? "—"}</td>
              <td>{s.ip ?? "—"}</td>
              <td>
                <Time value={s.last_used_at} />
              </td>
              <td>
                <Time value={s.expires_at} />
              </td>
              <td>
                {s.current ? (
                  <span className="badge good">{t("sessions.this_one")}</span>
                ) : (
                  <button type="button" onClick={() => end.mutate(s.id)}>
                    {t("sessions.end")}
                  </button>
                )}
              </td>
            </tr>
          ))}
      </Table>
    </>
  );
}

function Logins() {
  const { t } = useTranslation();
  const logins = useQuery({
    queryKey: keys.logins(),
    queryFn: () => ok(api.GET("/api/console/account/logins", { params: { query: { limit: 100 } } })),
  });
  if (logins.isPending) return <Loading />;
  if (logins.error) return <ErrorNote error={logins.error} />;
  if (logins.data.length === 0) return <Empty>{t("logins.empty")}</Empty>;
  return (
    <Table columns={[t("logins.when"), t("logins.method"), t("logins.result"), t("sessions.ip"), t("sessions.client")]}>
        {logins.data.map((l) => (
          <tr key={l.id}>
            <td>
              <Time value={l.created_at} />
            </td>
            <td>{l.method}</td>
            <td>
              {l.success ? <Status value="ok" /> : <Status value="refused" />} {l.failure_reason ?? ""}
            </td>
            <td>{l.ip ?? "—"}</td>
            <td>{l.user_agent ?? "—"}</td>
          </tr>
        ))}
    </Table>
  );
}

function Activity() {
  const activity = useQuery({
    queryKey: keys.activity(),
    queryFn: () => ok(api.GET("/api/console/account/activity", { params: { query: { limit: 100 } } })),
  });
  if (activity.isPending) return <Loading />;
  if (activity.error) return <ErrorNote error={activity.error} />;
  return <AuditTable records={activity.data} />;
}
