// Labels: the clusters a label selector finds, each with its labels, and
// setting a cluster's labels (one `key=value` a line).
import { useState, type FormEvent } from "react";
import { useInfiniteQuery, useMutation, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Schemas } from "../api/client";
import type { PageProps } from "../page";
import { Link, navigate } from "../router";
import { Empty, ErrorNote, Field, Loading, More, Page, Table, formValue } from "../ui";
import type catalog from "./labels.en.json";

type LabelsCatalog = typeof catalog;
declare module "../i18n" {
  interface PageCatalogs extends LabelsCatalog {}
}

type Labeled = Schemas["LabeledCluster"];

/// The keys of this page's queries (src/queryKeys.ts has the console's own).
const labelKeys = {
  all: () => ["cluster-labels"] as const,
  found: (selector: string) => ["cluster-labels", selector] as const,
};

/// `key=value` lines as labels (a line without `=` is a key with an empty value).
function parseLines(text: string): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const trimmed = line.trim();
    if (!trimmed) continue;
    const at = trimmed.indexOf("=");
    if (at < 0) labels[trimmed] = "";
    else labels[trimmed.slice(0, at).trim()] = trimmed.slice(at + 1).trim();
  }
  return labels;
}

const lines = (labels: Record<string, string>) =>
  Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join("\n");

export function Labels({ path }: PageProps) {
  const { t } = useTranslation();
  const selector = new URL(location.href).searchParams.get("selector") ?? "";
  const found = useInfiniteQuery({
    queryKey: labelKeys.found(selector),
    queryFn: ({ pageParam }) =>
      ok(
        api.GET("/api/console/cluster-labels", {
          params: { query: { selector: selector || undefined, limit: 50, cursor: pageParam ?? undefined } },
        }),
      ),
    initialPageParam: null as string | null,
    getNextPageParam: (page) => page.next_cursor ?? undefined,
  });
  const search = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault();
    const wanted = formValue(event.currentTarget, "selector").trim();
    navigate(wanted ? `${path}?selector=${encodeURIComponent(wanted)}` : path);
  };
  const items = found.data?.pages.flatMap((p) => p.items) ?? [];
  return (
    <Page title={t("labels.title")}>
      <form className="row" onSubmit={search} role="search">
        <Field label={t("labels.selector")} hint={t("labels.selector_hint")}>
          <input name="selector" defaultValue={selector} key={selector} placeholder="env=prod,tier!=db" spellCheck={false} />
        </Field>
        <button type="submit">{t("labels.find")}</button>
      </form>
      {found.isPending ? (
        <Loading />
      ) : found.error ? (
        <ErrorNote error={found.error} />
      ) : items.length === 0 ? (
        <Empty>{selector ? t("labels.none_selected") : t("labels.no_clusters")}</Empty>
      ) : (
        <Table columns={[t("labels.cluster"), t("labels.labels")]} actions>
          {items.map((c) => (
            <Row key={c.cluster_id} cluster={c} />
          ))}
        </Table>
      )}
      <More query={found} />
    </Page>
  );
}

function Row({ cluster }: { cluster: Labeled }) {
  const { t } = useTranslation();
  const client = useQueryClient();
  const [editing, setEditing] = useState(false);
  const save = useMutation({
    mutationFn: (labels: Record<string, string>) =>
      ok(
        api.PUT("/api/console/clusters/{cluster_id}/labels", {
          params: { path: { cluster_id: cluster.cluster_id } },
          body: { labels },
        }),
      ),
    onSuccess: () => {
      setEditing(false);
      void client.invalidateQueries({ queryKey: labelKeys.all() });
    },
  });
  const submit = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault();
    save.mutate(parseLines(formValue(event.currentTarget, "labels")));
  };
  return (
    <tr>
      <td>
        <Link href={`/clusters/${cluster.cluster_id}`}>{cluster.name}</Link>
      </td>
      <td>
        {editing ? (
          <form onSubmit={submit}>
            <Field label={t("labels.edit_label", { name: cluster.name })} hint={t("labels.lines_hint")}>
              <textarea name="labels" rows={4} defaultValue={lines(cluster.labels)} spellCheck={false} />
            </Field>
            <ErrorNote error={save.error} />
            <button type="submit" className="primary" disabled={save.isPending}>
              {t("common.save")}
            </button>{" "}
            <button type="button" onClick={() => setEditing(false)}>
              {t("common.cancel")}
            </button>
          </form>
        ) : Object.keys(cluster.labels).length === 0 ? (
          <span className="muted">{t("labels.unlabeled")}</span>
        ) : (
          Object.entries(cluster.labels).map(([k, v]) => (
            <span key={k}>
              <code>
                {k}={v}
              </code>{" "}
            </span>
          ))
        )}
      </td>
      <td>
        {!editing && (
          <button type="button" onClick={() => setEditing(true)}>
            {t("labels.edit")}
          </button>
        )}
      </td>
    </tr>
  );
}
