// The pieces every page is made of.
import { cloneElement, useEffect, useId, useState, type ReactElement, type ReactNode } from "react";
import { useTranslation } from "react-i18next";
import { ApiError } from "./api/client";
import { dateTime } from "./format";
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

/// An error in words: the API's own explanation (problem+json `detail`),
/// its stable code, and what each bad field was refused for.
export function ErrorNote({ error }: { error: unknown }) {
  const { t } = useTranslation();
  if (!error) return null;
  if (error instanceof ApiError) {
    const title =
      error.status === 0
        ? t("errors.network")
        : error.status === 401
          ? t("errors.unauthorized")
          : error.status === 403
            ? t("errors.forbidden")
            : error.status === 404
              ? t("errors.not_found")
              : error.status >= 500
                ? t("errors.server")
                : t("errors.refused");
    return (
      <div className="error" role="alert">
        <strong>{title}</strong>
        {error.problem?.detail && <p>{error.problem.detail}</p>}
        {error.problem?.errors && error.problem.errors.length > 0 && (
          <ul>
            {error.problem.errors.map((e) => (
              <li key={e.field}>
                <code>{e.field}</code>: {e.message}
              </li>
            ))}
          </ul>
        )}
        {error.code && <p className="muted small">{t("errors.code", { code: error.code })}</p>}
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

export function Time({ value }: { value: string | null | undefined }) {
  return value ? <time dateTime={value}>{dateTime(value)}</time> : <span className="muted">—</span>;
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

export function Copy({ text, label }: { text: string; label: string }) {
  const { t } = useTranslation();
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
  );
}

/// A labelled control: the label names it, the hint describes it.
export function Field({ label, hint, children }: { label: string; hint?: string; children: ReactElement }) {
  const id = useId();
  const control = cloneElement(children as ReactElement<{ id?: string; "aria-describedby"?: string }>, {
    id,
    "aria-describedby": hint ? `${id}-hint` : undefined,
  });
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {control}
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
