// The clusters list and the create form.
import { useEffect, useState, type FormEvent } from "react";
import { useInfiniteQuery, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Schemas } from "../api/client";
import { Health, NodeCount, Usage } from "../components/health";
import { Link, navigate } from "../router";
import { Empty, ErrorNote, Field, Loading, More, Page, Stale, Table, Time, fieldErrors, formNumber, formValue } from "../ui";
import { keys } from "../queryKeys";

const BUSY = ["pending", "provisioning", "updating", "deleting"];
// The health filter's choices, the ones that need a look first.
const HEALTHS: Schemas["Health"][] = ["failed", "unreachable", "degraded", "no_nodes", "in_progress", "healthy"];

export function ClusterList() {
  const { t } = useTranslation();
  // Names containing this; the whole list when empty.
  const [q, setQ] = useState("");
  // One health; every cluster when empty.
  const [health, setHealth] = useState<Schemas["Health"] | "">("");
  // Newest first, or by name.
  const [sort, setSort] = useState<Schemas["ClusterOrder"]>("newest");
  const clusters = useInfiniteQuery({
    queryKey: keys.clusterList(q, health, sort),
    queryFn: ({ pageParam }) =>
      ok(
        api.GET("/api/console/clusters", {
          params: {
            query: { limit: 50, cursor: pageParam ?? undefined, q: q || undefined, health: health || undefined, sort },
          },
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
        className="card filters"
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
        <Field label={t("clusters.health_filter")}>
          <select
            name="health"
            value={health}
            onChange={(e) => setHealth(e.target.value as Schemas["Health"] | "")}
          >
            <option value="">{t("clusters.health_any")}</option>
            {HEALTHS.map((value) => (
              <option key={value} value={value}>
                {t(`health.${value}`)}
              </option>
            ))}
          </select>
        </Field>
        <Field label={t("clusters.sort")}>
          <select name="sort" value={sort} onChange={(e) => setSort(e.target.value as Schemas["ClusterOrder"])}>
            <option value="newest">{t("clusters.sort_newest")}</option>
            <option value="name">{t("clusters.sort_name")}</option>
          </select>
        </Field>
      </form>
      {items.length > 0 && <Stale error={clusters.error} retry={clusters.refetch} />}
      {clusters.isPending ? (
        <Loading />
      ) : clusters.error && items.length === 0 ? (
        <ErrorNote error={clusters.error} />
      ) : items.length === 0 && (q || health) ? (
        <Empty>{q ? t("clusters.no_match", { q }) : t("clusters.no_health", { health: health ? t(`health.${health}`) : "" })}</Empty>
      ) : items.length === 0 ? (
        <Empty>
          {t("clusters.empty")} <Link href="/clusters/new">{t("clusters.create_first")}</Link>
        </Empty>
      ) : (
        <Table
          columns={[
            t("clusters.name"),
            t("clusters.health"),
            t("clusters.nodes"),
            t("clusters.version"),
            t("clusters.cpu_usage"),
            t("clusters.memory_usage"),
            t("clusters.created"),
          ]}
        >
            {items.map((c) => (
              <tr key={c.id}>
                <td>
                  <Link href={`/clusters/${c.id}`}>{c.name}</Link>
                </td>
                <td>
                  <Health cluster={c} />
                </td>
                <td>
                  <NodeCount cluster={c} />
                </td>
                <td>{c.kubernetes_version}</td>
                <td>
                  <Usage used={c.usage?.cpu_requests_milli_cores} limit={c.workload_cpu_limit_milli_cores} unit="units.millicores" />
                </td>
                <td>
                  <Usage used={c.usage?.memory_requests_mib} limit={c.workload_memory_limit_mib} unit="units.mib" />
                </td>
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
  const versions = useQuery({
    queryKey: keys.kubernetesVersions(),
    queryFn: () => ok(api.GET("/api/console/kubernetes-versions")),
    staleTime: Infinity,
  });
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
  const bad = fieldErrors(create.error);
  // The API's names of the form's fields, and the labels they have here.
  const labels = {
    name: t("clusters.name"),
    workload_cpu_limit_milli_cores: t("clusters.cpu_limit"),
    workload_memory_limit_mib: t("clusters.memory_limit"),
    kubernetes_version: t("clusters.version"),
    public_access_mode: t("clusters.access"),
  };
  return (
    <Page title={t("clusters.create")}>
      <form className="card" onSubmit={submit} noValidate>
        <Field label={labels.name} hint={t("clusters.name_hint")} error={bad.name}>
          <input name="name" required autoComplete="off" spellCheck={false} />
        </Field>
        <Field label={labels.workload_cpu_limit_milli_cores} hint={t("clusters.cpu_hint")} error={bad.workload_cpu_limit_milli_cores}>
          <input name="cpu" type="number" inputMode="numeric" defaultValue={2000} />
        </Field>
        <Field label={labels.workload_memory_limit_mib} hint={t("clusters.memory_hint")} error={bad.workload_memory_limit_mib}>
          <input name="memory" type="number" inputMode="numeric" defaultValue={4096} />
        </Field>
        <Field label={labels.kubernetes_version} error={bad.kubernetes_version}>
          {versions.data ? (
            <select key="versions" name="version" defaultValue={versions.data.default}>
              {[...versions.data.versions].reverse().map((v) => (
                <option key={v} value={v}>
                  {v === versions.data.default ? t("clusters.version_default", { version: v }) : v}
                </option>
              ))}
            </select>
          ) : (
            // Until the versions are read (or if they cannot be): the
            // platform's default.
            <select key="reading" name="version" defaultValue="" disabled={versions.isPending}>
              <option value="">{t("clusters.access_default")}</option>
            </select>
          )}
        </Field>
        <Field label={labels.public_access_mode} error={bad.public_access_mode}>
          <select name="access" defaultValue="">
            <option value="">{t("clusters.access_default")}</option>
            <option value="loadbalancer">{t("access.loadbalancer")}</option>
            <option value="nodeport">{t("access.nodeport")}</option>
          </select>
        </Field>
        <label className="check">
          <input name="ingress" type="checkbox" /> {t("clusters.ingress")}
        </label>
        <ErrorNote error={create.error} fields={labels} />
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
