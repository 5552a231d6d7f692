// The pieces every page is made of.
import { cloneElement, useEffect, useId, useState, type ReactElement, type ReactNode } from "react";
import { useTranslation } from "react-i18next";
import { ApiError, type Schemas } from "./api/client";
import { dateTime, relative } from "./format";
import i18n, { type Key } from "./i18n";
import { Link } from "./router";

export function Page({ title, actions, children }: { title: string; actions?: ReactNode; children: ReactNode }) {
  useEffect(() => {
    document.title = `${title} · KubeBYON`;
  }, [title]);
  return (
    <section className="page">
      <header className="page-head">
        <h1>{title}</h1>
        {actions && <div className="actions">{actions}</div>}
      </header>
      {children}
    </section>
  );
}

export function Loading() {
  const { t } = useTranslation();
  return (
    <p className="muted" role="status" aria-live="polite">
      {t("common.loading")}
    </p>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}

/// The title an answer without a problem code of the catalogs gets, from
/// its HTTP status.
function statusTitle(status: number): Key {
  return status === 0
    ? "errors.network"
    : status === 401
      ? "errors.unauthorized"
      : status === 403
        ? "errors.forbidden"
        : status === 404
          ? "errors.not_found"
          : status >= 500
            ? "errors.server"
            : "errors.refused";
}

/// The message of each bad field of `error` by the field's API name.
export function fieldErrors(error: unknown): Record<string, string> {
  if (!(error instanceof ApiError)) return {};
  return Object.fromEntries((error.problem?.errors ?? []).map((e) => [e.field, fieldMessage(e)]));
}

/// A refused field's message: in the reader's words where the API gave a
/// code, else the API's English.
function fieldMessage(e: Schemas["FieldError"]): string {
  return e.code ? i18n.t(`field_error.${e.code}`, { ...e.params, defaultValue: e.message }) : e.message;
}

/// An error in words: the title and message of its problem `code` in the
/// reader's language (by its HTTP status for a code the catalogs lack),
/// each bad field under the label the form gives it (`fields`), a link to
/// the plans when a plan limit refused it, and the API's own `detail` and
/// code, folded, for support.
export function ErrorNote({ error, fields }: { error: unknown; fields?: Record<string, string> }) {
  const { t, i18n } = useTranslation();
  if (!error) return null;
  if (error instanceof ApiError) {
    const code = error.code;
    const known = code !== undefined && i18n.exists(`problem.${code}.title`);
    const problem = error.problem as (typeof error.problem & { plan_limit?: unknown }) | undefined;
    return (
      <div className="error" role="alert" data-code={code}>
        <strong>{known ? t(`problem.${code}.title`, { defaultValue: code }) : t(statusTitle(error.status))}</strong>
        {known && <p>{t(`problem.${code}.message`, { defaultValue: "" })}</p>}
        {problem?.plan_limit !== undefined && (
          <p>
            <Link href="/billing">{t("errors.choose_plan")}</Link>
          </p>
        )}
        {error.problem?.errors && error.problem.errors.length > 0 && (
          <ul>
            {error.problem.errors.map((e) => (
              <li key={e.field}>
                {fields?.[e.field] ? <strong>{fields[e.field]}</strong> : <code>{e.field}</code>}: {fieldMessage(e)}
              </li>
            ))}
          </ul>
        )}
        {(error.problem?.detail || code) && (
          <SupportDetails code={code}>{error.problem?.detail && <p>{error.problem.detail}</p>}</SupportDetails>
        )}
      </div>
    );
  }
  return (
    <div className="error" role="alert">
      <strong>{t("errors.unexpected")}</strong>
      <p>{String(error)}</p>
    </div>
  );
}

const TONE: Record<string, string> = {
  ready: "good", succeeded: "good", active: "good", ok: "good", connected: "good", synced: "good",
  resolves: "good", paid: "good", done: "good",
  failed: "bad", error: "bad", conflict: "bad", offline: "bad", unreachable: "bad", refused: "bad", not_ready: "bad",
  disabled: "muted", deleted: "muted", revoked: "muted", expired: "muted", cancelled: "muted", skipped: "muted",
  used: "muted", none: "muted",
  warning: "warn", mismatch: "warn", not_resolving: "warn",
};

/// A status word, translated, with its colour.
export function Status({ value }: { value: string }) {
  const { t } = useTranslation();
  return <span className={`badge ${TONE[value] ?? "busy"}`}>{t(`status.${value}`, { defaultValue: value })}</span>;
}

/// A period of `hours` in words: days when it is whole days.
export function Period({ hours }: { hours: number }) {
  const { t } = useTranslation();
  return <>{hours >= 24 && hours % 24 === 0 ? t("periods.days", { count: hours / 24 }) : t("periods.hours", { count: hours })}</>;
}

/// The API's own words and code, folded under "Details for support".
export function SupportDetails({ code, children }: { code?: string; children?: ReactNode }) {
  const { t } = useTranslation();
  return (
    <details className="detail">
      <summary>{t("errors.details")}</summary>
      {children}
      {code && <p className="muted small">{t("errors.code", { code })}</p>}
    </details>
  );
}

/// What the page last read is kept when a refresh fails: a banner says so,
/// with the error folded and a button that asks again.
export function Stale({ error, retry }: { error: unknown; retry: () => unknown }) {
  const { t } = useTranslation();
  if (!error) return null;
  return (
    <div className="note" role="status" data-testid="stale">
      {t("errors.stale")}{" "}
      <button type="button" onClick={() => retry()}>
        {t("common.retry")}
      </button>
      <SupportDetails>
        {error instanceof ApiError ? `${error.status} ${error.code ?? ""} ${error.problem?.detail ?? ""}` : String(error)}
      </SupportDetails>
    </div>
  );
}

/// When, relative to now ("3 minutes ago", "in 2 days"), the date and time
/// on hover.
export function Time({ value }: { value: string | null | undefined }) {
  return value ? (
    <time dateTime={value} title={dateTime(value)}>
      {relative(value)}
    </time>
  ) : (
    <span className="muted">—</span>
  );
}

export function Tabs({ tabs, current, base }: { tabs: [string, string][]; current: string; base: string }) {
  return (
    <nav className="tabs" aria-label="sections">
      {tabs.map(([key, label]) => (
        <Link key={key} href={`${base}?tab=${key}`} aria-current={key === current ? "page" : undefined}>
          {label}
        </Link>
      ))}
    </nav>
  );
}

/// Copies `text` to the clipboard when called; `copied` says so for 2 s.
function useCopy(text: string): [boolean, () => Promise<void>] {
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setCopied(true);
      setTimeout(() => setCopied(false), 2000);
    } catch {
      setCopied(false);
    }
  };
  return [copied, copy];
}

export function Copy({ text, label }: { text: string; label: string }) {
  const { t } = useTranslation();
  const [copied, copy] = useCopy(text);
  return (
    <div className="copy">
      <pre aria-label={label}>
        <code>{text}</code>
      </pre>
      <button type="button" onClick={copy}>
        {copied ? t("common.copied") : t("common.copy")}
      </button>
    </div>
  );
}

/// An id, its first 8 characters shown (the whole on hover), with a button
/// that copies it whole.
export function CopyId({ id }: { id: string }) {
  const { t } = useTranslation();
  const [copied, copy] = useCopy(id);
  return (
    <span className="copy-id">
      <code title={id} data-id={id}>
        {id.length > 8 ? `${id.slice(0, 8)}…` : id}
      </code>
      <button type="button" className="small" onClick={copy}>
        {copied ? t("common.copied") : t("common.copy")}
        <span className="sr-only"> {id}</span>
      </button>
    </span>
  );
}

/// A destructive action asked twice: the button, then a confirmation.
export function Confirm({
  label,
  question,
  onConfirm,
  busy,
}: {
  label: string;
  question: string;
  onConfirm: () => void;
  busy?: boolean;
}) {
  const { t } = useTranslation();
  const [asking, setAsking] = useState(false);
  if (!asking)
    return (
      <button type="button" className="danger" onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  return (
    <span className="confirm" role="group" aria-label={question}>
      <span>{question}</span>
      <button type="button" className="danger" disabled={busy} onClick={onConfirm}>
        {t("common.confirm")}
      </button>
      <button type="button" onClick={() => setAsking(false)}>
        {t("common.cancel")}
      </button>
    </span>
  );
}

/// A destructive action that names what it destroys: the button, then the
/// name to type, which must match before it runs.
export function ConfirmByName({
  label,
  name,
  onConfirm,
  busy,
}: {
  label: string;
  name: string;
  onConfirm: () => void;
  busy?: boolean;
}) {
  const { t } = useTranslation();
  const [asking, setAsking] = useState(false);
  const [typed, setTyped] = useState("");
  if (!asking)
    return (
      <button type="button" className="danger" disabled={busy} onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  return (
    <div className="confirm" role="group" aria-label={label}>
      <Field label={t("common.type_name", { name })}>
        <input value={typed} onChange={(e) => setTyped(e.target.value)} autoComplete="off" spellCheck={false} />
      </Field>
      <button type="button" className="danger" disabled={busy || typed !== name} onClick={onConfirm}>
        {label}
      </button>
      <button
        type="button"
        onClick={() => {
          setAsking(false);
          setTyped("");
        }}
      >
        {t("common.cancel")}
      </button>
    </div>
  );
}

/// What a list shows: that it is loading, its error in words, `empty` (an
/// `<Empty>` saying so) when it has no rows, else `children` with the rows.
export function Rows<T>({
  query,
  empty,
  children,
}: {
  query: { isPending: boolean; error: unknown; data?: T[] };
  empty: ReactNode;
  children: (rows: T[]) => ReactNode;
}) {
  if (query.isPending) return <Loading />;
  if (query.error) return <ErrorNote error={query.error} />;
  if (!query.data || query.data.length === 0) return <>{empty}</>;
  return <>{children(query.data)}</>;
}

/// "Show more" under a list read a page at a time: reads the next page,
/// shown while there is one.
export function More({
  query,
}: {
  query: { hasNextPage: boolean; isFetchingNextPage: boolean; fetchNextPage: () => unknown };
}) {
  const { t } = useTranslation();
  if (!query.hasNextPage) return null;
  return (
    <button type="button" onClick={() => query.fetchNextPage()} disabled={query.isFetchingNextPage}>
      {t("common.more")}
    </button>
  );
}

/// A table whose header names its columns; `actions` adds a last column,
/// named for screen readers only, for each row's buttons.
export function Table({ columns, actions, children }: { columns: string[]; actions?: boolean; children: ReactNode }) {
  const { t } = useTranslation();
  return (
    // Focusable, so a keyboard can scroll it when it is wider than the screen.
    <div className="table-scroll" tabIndex={0}>
    <table>
      <thead>
        <tr>
          {columns.map((column) => (
            <th scope="col" key={column}>
              {column}
            </th>
          ))}
          {actions && (
            <th scope="col">
              <span className="sr-only">{t("common.actions")}</span>
            </th>
          )}
        </tr>
      </thead>
      <tbody>{children}</tbody>
    </table>
    </div>
  );
}

/// A labelled control: the label names it, the hint describes it, and the
/// API's `error` for it, when it refused it, shows beside it.
export function Field({
  label,
  hint,
  error,
  children,
}: {
  label: string;
  hint?: string;
  error?: string;
  children: ReactElement;
}) {
  const id = useId();
  const described = [error ? `${id}-error` : null, hint ? `${id}-hint` : null].filter(Boolean).join(" ");
  const control = cloneElement(
    children as ReactElement<{ id?: string; "aria-describedby"?: string; "aria-invalid"?: boolean }>,
    {
      id,
      "aria-describedby": described || undefined,
      "aria-invalid": error ? true : undefined,
    },
  );
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {control}
      {error && (
        <small id={`${id}-error`} className="error-text">
          {error}
        </small>
      )}
      {hint && (
        <small id={`${id}-hint`} className="muted">
          {hint}
        </small>
      )}
    </div>
  );
}

/// The value of a form field by name.
export function formValue(form: HTMLFormElement, name: string): string {
  const value = new FormData(form).get(name);
  return typeof value === "string" ? value : "";
}

export function formNumber(form: HTMLFormElement, name: string): number | null {
  const raw = formValue(form, name).trim();
  return raw === "" ? null : Number(raw);
}
