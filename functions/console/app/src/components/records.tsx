// Tables of records more than one page shows: a cluster's or every job, an
// account's or the platform's audit trail, a buyer's or every order.
import { useTranslation } from "react-i18next";
import type { Schemas } from "../api/client";
import { money, number } from "../format";
import { CopyId, Empty, Status, SupportDetails, Table, Time } from "../ui";

export function JobTable({
  jobs,
  actions,
  showCluster,
}: {
  jobs: Schemas["JobRecord"][];
  actions?: (job: Schemas["JobRecord"]) => React.ReactNode;
  showCluster?: boolean;
}) {
  const { t } = useTranslation();
  if (jobs.length === 0) return <Empty>{t("history.no_jobs")}</Empty>;
  return (
    <Table
      columns={[
        t("history.type"),
        ...(showCluster ? [t("admin.cluster")] : []),
        t("clusters.status"),
        t("history.attempts"),
        t("common.created"),
        t("history.finished"),
        t("history.error"),
      ]}
      actions={Boolean(actions)}
    >
        {jobs.map((j) => (
          <tr key={j.id}>
            <td>{t(`operation.${j.type}`, { defaultValue: j.type })}</td>
            {showCluster && (
              <td>
                <CopyId id={j.cluster_id} />
              </td>
            )}
            <td>
              <Status value={j.status} />
            </td>
            <td>
              {number(j.attempt_count)} / {number(j.max_attempts)}
            </td>
            <td>
              <Time value={j.created_at} />
            </td>
            <td>
              <Time value={j.finished_at} />
            </td>
            <td>{j.error ? <FailureCell code={j.error.code} message={j.last_error} /> : j.last_error}</td>
            {actions && <td>{actions(j)}</td>}
          </tr>
        ))}
    </Table>
  );
}

/// Audit events; each actor by their email where the API gives it, else by
/// their kind (`system`, `node`, an administrator another organization's
/// activity does not name).
export function AuditTable({ records }: { records: Schemas["AuditRecord"][] }) {
  const { t } = useTranslation();
  if (records.length === 0) return <Empty>{t("activity.empty")}</Empty>;
  return (
    <Table columns={[t("logins.when"), t("activity.action"), t("activity.target"), t("activity.actor"), t("sessions.ip")]}>
        {records.map((r) => (
          <tr key={r.id}>
            <td>
              <Time value={r.created_at} />
            </td>
            <td>
              <code>{r.action}</code>
            </td>
            <td>
              {r.target_kind ?? ""} {r.target_id ? <CopyId id={r.target_id} /> : null}
            </td>
            <td>{r.actor_email ?? r.actor_kind}</td>
            <td>{r.ip ?? "—"}</td>
          </tr>
        ))}
    </Table>
  );
}

export function OrderTable({ orders, onCancel }: { orders: Schemas["Order"][]; onCancel?: (id: string) => void }) {
  const { t } = useTranslation();
  if (orders.length === 0) return <Empty>{t("billing.no_orders")}</Empty>;
  return (
    <Table columns={[t("billing.plan"), t("clusters.status"), t("billing.amount"), t("common.created"), t("billing.paid")]} actions>
        {orders.map((o) => (
          <tr key={o.id}>
            <td>{o.plan_name}</td>
            <td>
              <Status value={o.status} />
            </td>
            <td>{money(o.amount, o.currency)}</td>
            <td>
              <Time value={o.created_at} />
            </td>
            <td>
              <Time value={o.paid_at} />
            </td>
            <td>
              {o.status === "pending" && o.checkout_url && (
                <a className="button" href={o.checkout_url}>
                  {t("billing.pay")}
                </a>
              )}{" "}
              {o.status === "pending" && onCancel && (
                <button type="button" onClick={() => onCancel(o.id)}>
                  {t("common.cancel")}
                </button>
              )}
            </td>
          </tr>
        ))}
    </Table>
  );
}

/// A failure in a table's cell: its title by its code in the reader's
/// words; what to do, the job's own English words and the code folded.
export function FailureCell({ code, message }: { code: Schemas["FailureCode"]; message?: string | null }) {
  const { t } = useTranslation();
  return (
    <>
      {t(`failure.${code}.title`)}
      <SupportDetails code={code}>
        <p>{t(`failure.${code}.hint`)}</p>
        {message && <p>{message}</p>}
      </SupportDetails>
    </>
  );
}
