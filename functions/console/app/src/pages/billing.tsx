// The plan of the organization this tab works in, what it allows and what
// its members use, choosing a plan (Stripe Checkout; owners), and its
// orders (owners and admins).
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Schemas } from "../api/client";
import { money, number } from "../format";
import { OrderTable } from "../components/records";
import { useWorkingOrganization } from "../organization";
import { Empty, ErrorNote, Loading, Page, Table } from "../ui";
import { keys } from "../queryKeys";

const RESOURCES = ["clusters", "nodes", "cpu_milli_cores", "memory_mib", "hostnames", "databases"] as const;

export function Billing() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const { here } = useWorkingOrganization();
  const pays = here?.role === "owner";
  const readsOrders = pays || here?.role === "admin";
  const entitlements = useQuery({
    queryKey: keys.entitlements(),
    queryFn: () => ok(api.GET("/api/console/account/entitlements")),
  });
  const plans = useQuery({ queryKey: keys.plans(), queryFn: () => ok(api.GET("/api/console/billing/plans")) });
  const orders = useQuery({
    queryKey: keys.orders(),
    queryFn: () => ok(api.GET("/api/console/billing/orders", { params: { query: { limit: 50 } } })),
    enabled: readsOrders,
  });
  const order = useMutation({
    mutationFn: (plan_id: string) => ok(api.POST("/api/console/billing/orders", { body: { plan_id } })),
    onSuccess: (checkout) => {
      window.location.assign(checkout.checkout_url);
    },
  });
  const cancel = useMutation({
    mutationFn: (order_id: string) =>
      ok(api.POST("/api/console/billing/orders/{order_id}/cancel", { params: { path: { order_id } } })),
    onSuccess: () => client.invalidateQueries({ queryKey: keys.orders() }),
  });
  const e = entitlements.data as (Schemas["EntitlementsView"] & Schemas["Entitlement"]) | undefined;
  return (
    <Page
      title={
        here ? t("billing.for", { name: here.personal ? t("billing.personal") : here.name }) : t("billing.title")
      }
    >
      <section className="card">
        <h2>{t("billing.plan")}</h2>
        {entitlements.isPending ? (
          <Loading />
        ) : entitlements.error ? (
          <ErrorNote error={entitlements.error} />
        ) : e ? (
          <>
            <p>
              {e.plan ? <strong>{e.plan.name}</strong> : t("billing.unlimited")}{" "}
              <span className="muted">{t(`plan_source.${e.source}`)}</span>
            </p>
            <Table columns={[t("billing.resource"), t("billing.used"), t("billing.limit")]}>
                {RESOURCES.map((r) => (
                  <tr key={r} className={e.over_limit.includes(r) ? "over" : undefined}>
                    <th scope="row">{t(`resource.${r}`)}</th>
                    <td>{number(e.usage[r])}</td>
                    <td>{e.limits ? number(e.limits[r]) : "∞"}</td>
                  </tr>
                ))}
            </Table>
          </>
        ) : null}
      </section>
      <h2>{t("billing.plans")}</h2>
      <ErrorNote error={plans.error ?? order.error} />
      {plans.data && plans.data.length === 0 && <Empty>{t("billing.no_plans")}</Empty>}
      {here && !pays && <p className="muted">{t("billing.owners_choose")}</p>}
      <div className="grid">
        {plans.data?.map((p) => (
          <article key={p.id} className="card plan" aria-label={p.name}>
            <h3>{p.name}</h3>
            <p className="big">{money(p.price_minor_units, p.currency)}</p>
            <ul>
              <li>{t("billing.max_clusters", { count: p.max_clusters })}</li>
              <li>{t("billing.max_nodes", { count: p.max_nodes })}</li>
              <li>{t("units.millicores", { value: number(p.max_cpu_milli_cores) })}</li>
              <li>{t("units.mib", { value: number(p.max_memory_mib) })}</li>
              <li>{t("billing.max_hostnames", { count: p.max_hostnames })}</li>
              <li>{t("billing.max_databases", { count: p.max_databases })}</li>
            </ul>
            <button type="button" className="primary" disabled={!pays || order.isPending} onClick={() => order.mutate(p.id)}>
              {t("billing.choose")}
            </button>
          </article>
        ))}
      </div>
      {readsOrders && (
        <>
          <h2>{t("billing.orders")}</h2>
          <ErrorNote error={orders.error ?? cancel.error} />
          {orders.data && <OrderTable orders={orders.data} onCancel={pays ? (id) => cancel.mutate(id) : undefined} />}
        </>
      )}
    </Page>
  );
}

