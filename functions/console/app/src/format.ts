// Dates, numbers and sizes in the reader's language.
import i18n from "./i18n";

export function dateTime(value: string | null | undefined): string {
  if (!value) return "—";
  return new Intl.DateTimeFormat(i18n.language, { dateStyle: "medium", timeStyle: "medium" }).format(
    new Date(value),
  );
}

const UNITS: [Intl.RelativeTimeFormatUnit, number][] = [
  ["year", 365 * 86_400],
  ["month", 30 * 86_400],
  ["week", 7 * 86_400],
  ["day", 86_400],
  ["hour", 3_600],
  ["minute", 60],
  ["second", 1],
];

/// `value` relative to now in the reader's language: "3 minutes ago",
/// "in 2 days", "now".
export function relative(value: string, now = Date.now()): string {
  const seconds = (new Date(value).getTime() - now) / 1000;
  const format = new Intl.RelativeTimeFormat(i18n.language, { numeric: "auto" });
  for (const [unit, size] of UNITS) {
    if (Math.abs(seconds) >= size || unit === "second") return format.format(Math.round(seconds / size), unit);
  }
  return format.format(0, "second");
}

export function number(value: number | null | undefined, digits = 0): string {
  if (value === null || value === undefined) return "—";
  return new Intl.NumberFormat(i18n.language, { maximumFractionDigits: digits }).format(value);
}

export function percent(ratio: number | null | undefined): string {
  if (ratio === null || ratio === undefined) return "—";
  return new Intl.NumberFormat(i18n.language, { style: "percent", maximumFractionDigits: 2 }).format(ratio);
}

export function bytes(value: number | null | undefined): string {
  if (value === null || value === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value;
  let unit = 0;
  while (v >= 1024 && unit < units.length - 1) {
    v /= 1024;
    unit++;
  }
  return `${number(v, unit === 0 ? 0 : 1)} ${units[unit]}`;
}

export function money(minor: number, currency: string): string {
  return new Intl.NumberFormat(i18n.language, { style: "currency", currency: currency.toUpperCase() }).format(
    minor / 100,
  );
}

/// `from` and `to` for a range of `hours` ending now, as RFC 3339.
export function range(hours: number): { from: string; to: string } {
  const to = new Date();
  return { from: new Date(to.getTime() - hours * 3600_000).toISOString(), to: to.toISOString() };
}
