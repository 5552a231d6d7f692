// Organizations: the reader's own (personal first), the one this tab works
// in (its clusters are the ones listed and created), a new shared one; and
// for the organization worked in, its members (roles, removal, leaving)
// and invitations (sent, with their link shown once; revoked).
import { type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Schemas } from "../api/client";
import { useChooseOrganization, useWorkingOrganization, type Membership } from "../organization";
import type { PageProps } from "../page";
import { keys } from "../queryKeys";
import { AuditTable } from "../components/records";
import { Copy, Empty, ErrorNote, Field, Loading, Page, Table, Time, formValue } from "../ui";
import type catalog from "./organizations.en.json";

type OrganizationsCatalog = typeof catalog;
declare module "../i18n" {
  interface PageCatalogs extends OrganizationsCatalog {}
}

type Role = Schemas["Role"];
const ROLES: Role[] = ["owner", "admin", "member", "viewer"];

/// The keys of this page's queries (src/queryKeys.ts has the console's own).
const organizationKeys = {
  /// Everything read of one organization: what a change invalidates.
  one: (id: string) => ["organizations", id] as const,
  members: (id: string) => ["organizations", id, "members"] as const,
  invitations: (id: string) => ["organizations", id, "invitations"] as const,
  activity: (id: string) => ["organizations", id, "activity"] as const,
  keys: (id: string) => ["organizations", id, "api-keys"] as const,
};

export function Organizations({ user }: PageProps) {
  const { t } = useTranslation();
  const { mine, list, here } = useWorkingOrganization();
  const choose = useChooseOrganization();
  const create = useMutation({
    mutationFn: (name: string) => ok(api.POST("/api/console/organizations", { body: { name } })),
    onSuccess: (made) => choose(made),
  });
  const submit = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault();
    create.mutate(formValue(event.currentTarget, "name"));
  };
  if (mine.isPending) return <Loading />;
  if (mine.error) return <ErrorNote error={mine.error} />;
  const working = (o: Membership) => o.id === here?.id;
  return (
    <Page title={t("organizations.title")}>
      <Table columns={[t("organizations.name"), t("organizations.your_role")]} actions>
        {list.map((o) => (
          <tr key={o.id}>
            <td>
              {o.personal ? t("organizations.personal") : o.name}
            </td>
            <td>{t(`organizations.role.${o.role}`)}</td>
            <td>
              {working(o) ? (
                <span className="badge">{t("organizations.working_here")}</span>
              ) : (
                <button type="button" onClick={() => choose(o)}>
                  {t("organizations.work_here", { name: o.personal ? t("organizations.personal") : o.name })}
                </button>
              )}
            </td>
          </tr>
        ))}
      </Table>
      <form className="row" onSubmit={submit}>
        <Field label={t("organizations.new_name")}>
          <input name="name" required maxLength={100} />
        </Field>
        <button type="submit" disabled={create.isPending}>
          {t("organizations.create")}
        </button>
      </form>
      <ErrorNote error={create.error} />
      {here && !here.personal && <Members organization={here} me={user.id} onLeft={() => choose(null)} />}
    </Page>
  );
}

function Members({ organization, me, onLeft }: { organization: Membership; me: string; onLeft: () => void }) {
  const { t } = useTranslation();
  const queries = useQueryClient();
  const id = organization.id;
  const manages = organization.role === "owner" || organization.role === "admin";
  const members = useQuery({
    queryKey: organizationKeys.members(id),
    queryFn: () => ok(api.GET("/api/console/organizations/{organization_id}/members", { params: { path: { organization_id: id } } })),
  });
  const refresh = () => queries.invalidateQueries({ queryKey: keys.organizations() });
  const setRole = useMutation({
    mutationFn: ({ user, role }: { user: string; role: Role }) =>
      ok(
        api.PATCH("/api/console/organizations/{organization_id}/members/{user_id}", {
          params: { path: { organization_id: id, user_id: user } },
          body: { role },
        }),
      ),
    onSettled: refresh,
  });
  const remove = useMutation({
    mutationFn: (user: string) =>
      ok(
        api.DELETE("/api/console/organizations/{organization_id}/members/{user_id}", {
          params: { path: { organization_id: id, user_id: user } },
        }),
      ),
    onSuccess: (_done, user) => (user === me ? onLeft() : undefined),
    onSettled: refresh,
  });
  return (
    <section>
      <h2>{t("organizations.members_of", { name: organization.name })}</h2>
      {members.isPending ? (
        <Loading />
      ) : members.error ? (
        <ErrorNote error={members.error} />
      ) : (
        <Table columns={[t("organizations.member"), t("organizations.role_column"), t("organizations.joined")]} actions>
          {members.data.map((m) => (
            <tr key={m.user_id} data-email={m.email}>
              <td>
                {m.display_name} <span className="muted">{m.email}</span>
              </td>
              <td>
                {manages && m.user_id !== me ? (
                  <select
                    aria-label={t("organizations.role_of", { email: m.email })}
                    value={m.role}
                    onChange={(e) => setRole.mutate({ user: m.user_id, role: e.target.value as Role })}
                  >
                    {ROLES.map((r) => (
                      <option key={r} value={r}>
                        {t(`organizations.role.${r}`)}
                      </option>
                    ))}
                  </select>
                ) : (
                  t(`organizations.role.${m.role}`)
                )}
              </td>
              <td>
                <Time value={m.created_at} />
              </td>
              <td>
                {m.user_id === me ? (
                  <button type="button" onClick={() => remove.mutate(m.user_id)}>
                    {t("organizations.leave")}
                  </button>
                ) : (
                  manages && (
                    <button type="button" className="danger" onClick={() => remove.mutate(m.user_id)}>
                      {t("organizations.remove", { email: m.email })}
                    </button>
                  )
                )}
              </td>
            </tr>
          ))}
        </Table>
      )}
      <ErrorNote error={setRole.error ?? remove.error} />
      {manages && <Invitations organization={id} />}
      {manages && <Keys organization={id} />}
      {manages && <Activity organization={id} />}
    </section>
  );
}

function Invitations({ organization }: { organization: string }) {
  const { t } = useTranslation();
  const queries = useQueryClient();
  const path = { organization_id: organization };
  const open = useQuery({
    queryKey: organizationKeys.invitations(organization),
    queryFn: () => ok(api.GET("/api/console/organizations/{organization_id}/invitations", { params: { path } })),
  });
  // An invitation sent or revoked shows in the activity too.
  const refresh = () => queries.invalidateQueries({ queryKey: organizationKeys.one(organization) });
  const invite = useMutation({
    mutationFn: (body: { email: string; role: Role }) =>
      ok(api.POST("/api/console/organizations/{organization_id}/invitations", { params: { path }, body })),
    onSuccess: refresh,
  });
  const revoke = useMutation({
    mutationFn: (invitation: string) =>
      ok(
        api.DELETE("/api/console/organizations/{organization_id}/invitations/{invitation_id}", {
          params: { path: { ...path, invitation_id: invitation } },
        }),
      ),
    onSuccess: refresh,
  });
  const submit = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault();
    const form = event.currentTarget;
    invite.mutate({ email: formValue(form, "email"), role: formValue(form, "role") as Role });
  };
  return (
    <>
      <h3>{t("organizations.invitations")}</h3>
      <form className="row" onSubmit={submit}>
        <Field label={t("organizations.invite_email")}>
          <input name="email" type="email" required />
        </Field>
        <Field label={t("organizations.invite_role")}>
          <select name="role" defaultValue="member">
            {ROLES.map((r) => (
              <option key={r} value={r}>
                {t(`organizations.role.${r}`)}
              </option>
            ))}
          </select>
        </Field>
        <button type="submit" className="primary" disabled={invite.isPending}>
          {t("organizations.invite")}
        </button>
      </form>
      <ErrorNote error={invite.error} />
      {invite.data && (
        <div role="status">
          <p>{t("organizations.invited", { email: invite.data.invitation.email })}</p>
          <Copy text={invite.data.invitation_url} label={t("organizations.invitation_link")} />
        </div>
      )}
      {open.isPending ? (
        <Loading />
      ) : open.error ? (
        <ErrorNote error={open.error} />
      ) : open.data.length === 0 ? (
        <Empty>{t("organizations.no_invitations")}</Empty>
      ) : (
        <Table columns={[t("organizations.invite_email"), t("organizations.invite_role"), t("organizations.expires")]} actions>
          {open.data.map((i) => (
            <tr key={i.id}>
              <td>{i.email}</td>
              <td>{t(`organizations.role.${i.role}`)}</td>
              <td>
                <Time value={i.expires_at} />
              </td>
              <td>
                <button type="button" onClick={() => revoke.mutate(i.id)}>
                  {t("common.revoke")}
                </button>
              </td>
            </tr>
          ))}
        </Table>
      )}
      <ErrorNote error={revoke.error} />
    </>
  );
}

const KEY_ROLES: Role[] = ["admin", "member", "viewer"];

/// The organization's API keys, for its automation: made from this session
/// with the password asked again (the key shown once), listed with who made
/// each, revoked. For its owners and admins.
function Keys({ organization }: { organization: string }) {
  const { t } = useTranslation();
  const queries = useQueryClient();
  const path = { organization_id: organization };
  const keys = useQuery({
    queryKey: organizationKeys.keys(organization),
    queryFn: () => ok(api.GET("/api/console/organizations/{organization_id}/api-keys", { params: { path } })),
  });
  const refresh = () => queries.invalidateQueries({ queryKey: organizationKeys.one(organization) });
  const make = useMutation({
    mutationFn: (body: { name: string; role: Role; password: string }) =>
      ok(api.POST("/api/console/organizations/{organization_id}/api-keys", { params: { path }, body })),
    onSuccess: refresh,
  });
  const revoke = useMutation({
    mutationFn: (key: string) =>
      ok(
        api.DELETE("/api/console/organizations/{organization_id}/api-keys/{key_id}", {
          params: { path: { ...path, key_id: key } },
        }),
      ),
    onSuccess: refresh,
  });
  const submit = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault();
    const form = event.currentTarget;
    make.mutate({
      name: formValue(form, "name"),
      role: formValue(form, "role") as Role,
      password: formValue(form, "password"),
    });
    form.reset();
  };
  return (
    <>
      <h3>{t("organizations.keys")}</h3>
      <p className="muted">{t("organizations.keys_hint")}</p>
      <form className="row" onSubmit={submit}>
        <Field label={t("organizations.key_name")}>
          <input name="name" required maxLength={100} />
        </Field>
        <Field label={t("organizations.invite_role")}>
          <select name="role" defaultValue="member">
            {KEY_ROLES.map((r) => (
              <option key={r} value={r}>
                {t(`organizations.role.${r}`)}
              </option>
            ))}
          </select>
        </Field>
        <Field label={t("organizations.key_password")}>
          <input name="password" type="password" autoComplete="current-password" />
        </Field>
        <button type="submit" className="primary" disabled={make.isPending}>
          {t("organizations.make_key")}
        </button>
      </form>
      <ErrorNote error={make.error} />
      {make.data && (
        <div role="status">
          <p>{t("organizations.key_made", { name: make.data.api_key.name })}</p>
          <Copy text={make.data.key} label={t("organizations.key")} />
        </div>
      )}
      {keys.isPending ? (
        <Loading />
      ) : keys.error ? (
        <ErrorNote error={keys.error} />
      ) : keys.data.length === 0 ? (
        <Empty>{t("organizations.no_keys")}</Empty>
      ) : (
        <Table
          columns={[
            t("organizations.key_name"),
            t("organizations.invite_role"),
            t("organizations.key_made_by"),
            t("organizations.expires"),
          ]}
          actions
        >
          {keys.data.map((k) => (
            <tr key={k.id} data-key={k.name}>
              <td>
                {k.name} <code>{k.prefix}</code>
              </td>
              <td>{t(`organizations.role.${k.role}`)}</td>
              <td>{k.created_by_email}</td>
              <td>
                <Time value={k.expires_at} />
              </td>
              <td>
                {k.revoked_at ? (
                  <span className="muted">{t("organizations.key_revoked")}</span>
                ) : (
                  <button type="button" onClick={() => revoke.mutate(k.id)}>
                    {t("organizations.revoke_key", { name: k.name })}
                  </button>
                )}
              </td>
            </tr>
          ))}
        </Table>
      )}
      <ErrorNote error={revoke.error} />
    </>
  );
}

/// What happened in the organization and its clusters, newest first: for its
/// owners and admins.
function Activity({ organization }: { organization: string }) {
  const { t } = useTranslation();
  const activity = useQuery({
    queryKey: organizationKeys.activity(organization),
    queryFn: () =>
      ok(
        api.GET("/api/console/organizations/{organization_id}/activity", {
          params: { path: { organization_id: organization }, query: { limit: 100 } },
        }),
      ),
  });
  return (
    <section>
      <h2>{t("organizations.activity")}</h2>
      {activity.isPending ? (
        <Loading />
      ) : activity.error ? (
        <ErrorNote error={activity.error} />
      ) : (
        <AuditTable records={activity.data} />
      )}
    </section>
  );
}
