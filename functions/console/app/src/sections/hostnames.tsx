// Hostname bindings: DNS and TLS status, what to point where, and where
// the platform's workload edge serves each one.
import type { FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Cluster } from "../api/client";
import type { components } from "../api/schema";
import { Confirm, Empty, ErrorNote, Field, Rows, Status, Time, formValue } from "../ui";
import { keys } from "../queryKeys";

export function Hostnames({ cluster }: { cluster: Cluster }) {
  const { t } = useTranslation();
  const client = useQueryClient();
  const path = { cluster_id: cluster.id };
  const key = keys.hostnames(cluster.id);
  const bindings = useQuery({
    queryKey: key,
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}/hostnames", { params: { path } })),
    refetchInterval: 10000,
  });
  const edge = useQuery({
    queryKey: keys.edge(cluster.id),
    queryFn: () => ok(api.GET("/api/console/clusters/{cluster_id}/edge", { params: { path } })),
    refetchInterval: 10000,
  });
  const add = useMutation({
    mutationFn: (hostname: string) =>
      ok(api.POST("/api/console/clusters/{cluster_id}/hostnames", { params: { path }, body: { hostname } })),
    onSuccess: () => client.invalidateQueries({ queryKey: key }),
  });
  const verify = useMutation({
    mutationFn: (binding_id: string) =>
      ok(
        api.POST("/api/console/clusters/{cluster_id}/hostnames/{binding_id}/verify", {
          params: { path: { ...path, binding_id } },
        }),
      ),
    onSuccess: () => client.invalidateQueries({ queryKey: key }),
  });
  const remove = useMutation({
    mutationFn: (binding_id: string) =>
      ok(
        api.DELETE("/api/console/clusters/{cluster_id}/hostnames/{binding_id}", {
          params: { path: { ...path, binding_id } },
        }),
      ),
    onSuccess: () => client.invalidateQueries({ queryKey: key }),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    add.mutate(formValue(form, "hostname").trim(), { onSuccess: () => form.reset() });
  };
  return (
    <>
      {!cluster.managed_workload_ingress_enabled && <p className="note">{t("hostnames.ingress_off")}</p>}
      <form className="card inline" onSubmit={submit} noValidate>
        <Field label={t("hostnames.hostname")} hint={t("hostnames.hint")}>
          <input name="hostname" placeholder="shop.example.com" spellCheck={false} autoComplete="off" />
        </Field>
        <button type="submit" className="primary" disabled={add.isPending}>
          {t("hostnames.add")}
        </button>
        <ErrorNote error={add.error} />
      </form>
      <ErrorNote error={verify.error ?? remove.error} />
      {edge.data?.edge && <Edge edge={edge.data.edge} />}
      <Rows query={bindings} empty={
        <Empty>{t("hostnames.empty")}</Empty>
      }>
        {(rows) => (
          rows.map((b) => (
            <article key={b.id} className="card binding" aria-label={b.hostname}>
              <h3>
                <code>{b.hostname}</code>
              </h3>
              <dl className="facts">
                <dt>{t("hostnames.dns")}</dt>
                <dd>
                  <Status value={b.dns_management_status} /> {t(`dns_scope.${b.dns_management_scope}`)}
                  {b.dns_management_message && <span className="muted"> — {b.dns_management_message}</span>}
                </dd>
                {b.managed_dns_target && (
                  <>
                    <dt>{t("hostnames.point")}</dt>
                    <dd>
                      {b.dns_management_scope === "platform_managed"
                        ? t("hostnames.managed_record", { name: b.managed_dns_record_name ?? b.hostname, target: b.managed_dns_target })
                        : t("hostnames.cname", { name: b.hostname, target: b.managed_dns_target })}
                    </dd>
                  </>
                )}
                {b.verification_record_name && (
                  <>
                    <dt>{t("hostnames.verification")}</dt>
                    <dd>
                      {t("hostnames.txt", { name: b.verification_record_name, value: b.verification_record_value ?? "" })}{" "}
                      {b.verified ? <Status value="ok" /> : <Status value="pending" />}
                      {b.verification_message && <span className="muted"> — {b.verification_message}</span>}
                    </dd>
                  </>
                )}
                <dt>{t("hostnames.tls")}</dt>
                <dd>
                  <Status value={b.tls_status} /> {t(`tls_mode.${b.tls_mode}`)}
                  {b.tls_last_error && <span className="muted"> — {b.tls_last_error}</span>}
                </dd>
                {b.dns_management_last_error && (
                  <>
                    <dt>{t("hostnames.dns_error")}</dt>
                    <dd className="error-text">{b.dns_management_last_error}</dd>
                  </>
                )}
                <dt>{t("hostnames.edge")}</dt>
                <dd>
                  {b.edge_route && b.edge_listener ? (
                    <>
                      <code>{t("hostnames.edge_route", { route: b.edge_route, listener: b.edge_listener })}</code>
                      {b.edge_certificate && (
                        <span className="muted"> — {t("hostnames.edge_certificate", { name: b.edge_certificate })}</span>
                      )}
                    </>
                  ) : (
                    <span className="muted">{t("hostnames.edge_none")}</span>
                  )}
                </dd>
                <dt>{t("hostnames.synced")}</dt>
                <dd>
                  <Time value={b.dns_management_last_synced_at} />
                </dd>
              </dl>
              <div className="actions">
                {!b.verified && (
                  <button type="button" onClick={() => verify.mutate(b.id)} disabled={verify.isPending}>
                    {t("hostnames.verify")}
                  </button>
                )}
                <Confirm
                  label={t("common.remove")}
                  question={t("hostnames.remove_question", { hostname: b.hostname })}
                  busy={remove.isPending}
                  onConfirm={() => remove.mutate(b.id)}
                />
              </div>
            </article>
          ))
        )}
      </Rows>
    </>
  );
}

type WorkloadEdge = NonNullable<components["schemas"]["EdgeState"]["edge"]>;

/// Where the platform's shared Gateway sends the cluster's sites.
function Edge({ edge }: { edge: WorkloadEdge }) {
  const { t } = useTranslation();
  const reachable = edge.backend !== "unavailable";
  const how = edge.backend === "pod_ips" ? "edge.pod_ips" : reachable ? "edge.node_ports" : "edge.unavailable";
  return (
    <section className="card" aria-label={t("edge.title")}>
      <h3>{t("edge.title")}</h3>
      <dl className="facts">
        <dt>{t(how)}</dt>
        <dd>
          <Status value={reachable ? "ok" : "warning"} />
          {edge.backend_reason && <span className="muted"> — {edge.backend_reason}</span>}
        </dd>
        {edge.endpoints.length > 0 && (
          <>
            <dt>{t("edge.endpoints")}</dt>
            <dd>
              <code>{edge.endpoints.join(", ")}</code>
            </dd>
          </>
        )}
        <dt>{t("edge.hostnames")}</dt>
        <dd>{edge.hostnames.length}</dd>
        <dt>{t("edge.converged")}</dt>
        <dd>
          <Time value={edge.converged_at} />
        </dd>
        {edge.last_error && (
          <>
            <dt>{t("edge.error")}</dt>
            <dd className="error-text">{edge.last_error}</dd>
          </>
        )}
      </dl>
    </section>
  );
}
