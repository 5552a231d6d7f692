// The clusters list and the create form.
import { useEffect, useState, type FormEvent } from "react";
import { useInfiniteQuery, useMutation, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Schemas } from "../api/client";
import { number } from "../format";
import { Link, navigate } from "../router";
import { Empty, ErrorNote, Field, Loading, More, Page, Status, Table, Time, formNumber, formValue } from "../ui";
import { keys } from "../queryKeys";

const BUSY = ["pending", "provisioning", "updating", "deleting"];

export function ClusterList() {
  const { t } = useTranslation();
  // Names containing this; the whole list when empty.
  const [q, setQ] = useState("");
  const clusters = useInfiniteQuery({
    queryKey: keys.clusterList(q),
    queryFn: ({ pageParam }) =>
      ok(
        api.GET("/api/console/clusters", {
          params: { query: { limit: 50, cursor: pageParam ?? undefined, q: q || undefined } },
        }),
      ),
    initialPageParam: null as string | null,
    getNextPageParam: (page) => page.next_cursor ?? undefined,
    refetchInterval: (query) =>
      query.state.data?.pages.some((p) => p.items.some((c) => BUSY.includes(c.status))) ? 2000 : 15000,
  });
  const items = clusters.data?.pages.flatMap((p) => p.items) ?? [];
  const shown = clusters.isSuccess;
  useEffect(() => {
    // The moment the list is on screen, for the benchmark (docs/benchmarks.md).
    if (shown && performance.getEntriesByName("kubebyon:clusters").length === 0) performance.mark("kubebyon:clusters");
  }, [shown]);
  return (
    <Page
      title={t("clusters.title")}
      actions={
        <Link className="button primary" href="/clusters/new">
          {t("clusters.create")}
        </Link>
      }
    >
      <form
        className="card inline"
        role="search"
        onSubmit={(e: FormEvent<HTMLFormElement>) => {
          e.preventDefault();
          setQ(formValue(e.currentTarget, "q").trim());
        }}
      >
        <Field label={t("clusters.search")}>
          <input name="q" type="search" maxLength={63} pattern="[A-Za-z0-9\-]+" defaultValue={q} />
        </Field>
        <button type="submit">{t("admin.search")}</button>
      </form>
      {clusters.isPending ? (
        <Loading />
      ) : clusters.error ? (
        <ErrorNote error={clusters.error} />
      ) : items.length === 0 && q ? (
        <Empty>{t("clusters.no_match", { q })}</Empty>
      ) : items.length === 0 ? (
        <Empty>
          {t("clusters.empty")} <Link href="/clusters/new">{t("clusters.create_first")}</Link>
        </Empty>
      ) : (
        <Table columns={[t("clusters.name"), t("clusters.status"), t("clusters.connection"), t("clusters.cpu_limit"), t("clusters.memory_limit"), t("clusters.created")]}>
            {items.map((c) => (
              <tr key={c.id}>
                <td>
                  <Link href={`/clusters/${c.id}`}>{c.name}</Link>
                </td>
                <td>
                  <Status value={c.status} />
                </td>
                <td>
                  <Status value={c.connection_status} />
                </td>
                <td>{t("units.millicores", { value: number(c.workload_cpu_limit_milli_cores) })}</td>
                <td>{t("units.mib", { value: number(c.workload_memory_limit_mib) })}</td>
                <td>
                  <Time value={c.created_at} />
                </td>
              </tr>
            ))}
        </Table>
      )}
      <More query={clusters} />
    </Page>
  );
}

export function CreateCluster() {
  const { t } = useTranslation();
  const client = useQueryClient();
  const create = useMutation({
    mutationFn: (body: Schemas["CreateClusterRequest"]) => ok(api.POST("/api/console/clusters", { body })),
    onSuccess: (accepted) => {
      void client.invalidateQueries({ queryKey: keys.clusters() });
      navigate(`/clusters/${accepted.cluster.id}`);
    },
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    create.mutate({
      name: formValue(form, "name"),
      workload_cpu_limit_milli_cores: formNumber(form, "cpu") ?? 0,
      workload_memory_limit_mib: formNumber(form, "memory") ?? 0,
      kubernetes_version: formValue(form, "version") || null,
      public_access_mode: (formValue(form, "access") || null) as Schemas["PublicAccessMode"] | null,
      managed_workload_ingress_enabled: formValue(form, "ingress") === "on",
    });
  };
  return (
    <Page title={t("clusters.create")}>
      <form className="card" onSubmit={submit} noValidate>
        <Field label={t("clusters.name")} hint={t("clusters.name_hint")}>
          <input name="name" required autoComplete="off" spellCheck={false} />
        </Field>
        <Field label={t("clusters.cpu_limit")} hint={t("clusters.cpu_hint")}>
          <input name="cpu" type="number" inputMode="numeric" defaultValue={2000} />
        </Field>
        <Field label={t("clusters.memory_limit")} hint={t("clusters.memory_hint")}>
          <input name="memory" type="number" inputMode="numeric" defaultValue={4096} />
        </Field>
        <Field label={t("clusters.version")} hint={t("clusters.version_hint")}>
          <input name="version" placeholder="v1.34" spellCheck={false} />
        </Field>
        <Field label={t("clusters.access")}>
          <select name="access" defaultValue="">
            <option value="">{t("clusters.access_default")}</option>
            <option value="loadbalancer">{t("access.loadbalancer")}</option>
            <option value="nodeport">{t("access.nodeport")}</option>
          </select>
        </Field>
        <label className="check">
          <input name="ingress" type="checkbox" /> {t("clusters.ingress")}
        </label>
        <ErrorNote error={create.error} />
        <div className="actions">
          <button type="submit" className="primary" disabled={create.isPending}>
            {t("clusters.create")}
          </button>
          <Link className="button" href="/clusters">
            {t("common.cancel")}
          </Link>
        </div>
      </form>
    </Page>
  );
}
