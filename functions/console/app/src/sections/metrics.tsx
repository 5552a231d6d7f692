// The control plane's CPU, memory (RSS and virtual) and load over a chosen
// range, from the range API. Loaded on demand with its chart library.
import { useEffect, useRef, useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { api, ok, type Schemas } from "../api/client";
import { bytes, number, range } from "../format";
import { Empty, ErrorNote, Loading } from "../ui";
import { keys } from "../queryKeys";

const RANGES = [1, 6, 24, 24 * 7];

export default function Metrics({ clusterId }: { clusterId: string }) {
  const { t } = useTranslation();
  const [hours, setHours] = useState(6);
  const series = useQuery({
    queryKey: keys.metrics(clusterId, hours),
    queryFn: () =>
      ok(
        api.GET("/api/console/clusters/{cluster_id}/metrics", {
          params: { path: { cluster_id: clusterId }, query: { ...range(hours), points: 120 } },
        }),
      ),
    refetchInterval: 30000,
  });
  const points = series.data?.points.filter((p) => p.samples > 0) ?? [];
  return (
    <>
      <label className="field inline">
        <span>{t("common.period")}</span>
        <select value={hours} onChange={(e) => setHours(Number(e.target.value))}>
          {RANGES.map((h) => (
            <option key={h} value={h}>
              {t("periods.hours", { count: h })}
            </option>
          ))}
        </select>
      </label>
      {series.isPending ? (
        <Loading />
      ) : series.error ? (
        <ErrorNote error={series.error} />
      ) : points.length === 0 ? (
        <Empty>{t("metrics.empty")}</Empty>
      ) : (
        <div className="charts">
          <Chart
            title={t("metrics.cpu")}
            points={points}
            lines={[[t("metrics.average"), (p) => p.cpu_percent_avg], [t("metrics.peak"), (p) => p.cpu_percent_max]]}
            format={(v) => `${number(v, 1)} %`}
          />
          <Chart
            title={t("metrics.memory")}
            points={points}
            lines={[[t("metrics.rss"), (p) => p.memory_bytes_avg], [t("metrics.virtual"), (p) => p.memory_virtual_bytes_avg]]}
            format={bytes}
          />
          <Chart
            title={t("metrics.load")}
            points={points}
            lines={[[t("metrics.average"), (p) => p.load_average_1_avg], [t("metrics.peak"), (p) => p.load_average_1_max]]}
            format={(v) => number(v, 2)}
          />
        </div>
      )}
    </>
  );
}

type Point = Schemas["MetricsPoint"];

function Chart({
  title,
  points,
  lines,
  format,
}: {
  title: string;
  points: Point[];
  lines: [string, (p: Point) => number | null | undefined][];
  format: (v: number) => string;
}) {
  const { t, i18n } = useTranslation();
  const time = t("metrics.time");
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const clock = new Intl.DateTimeFormat(i18n.language, { month: "numeric", day: "numeric", hour: "2-digit", minute: "2-digit" });
    if (!box.current) return;
    const data: uPlot.AlignedData = [
      points.map((p) => new Date(p.at).getTime() / 1000),
      ...lines.map(([, pick]) => points.map((p) => pick(p) ?? null)),
    ];
    const colours = ["#2457c5", "#c0392b"];
    const plot = new uPlot(
      {
        width: Math.max(280, box.current.clientWidth),
        height: 200,
        series: [
          { label: time, value: (_u, v) => (v == null ? "—" : clock.format(new Date(v * 1000))) },
          ...lines.map(([label], i) => ({
            label,
            stroke: colours[i % colours.length],
            width: 2,
            value: (_u: uPlot, v: number | null) => (v == null ? "—" : format(v)),
          })),
        ],
        axes: [
          { values: (_u, values) => values.map((v) => clock.format(new Date(v * 1000))) },
          { values: (_u, values) => values.map((v) => format(v)), size: 80 },
        ],
      },
      data,
      box.current,
    );
    return () => plot.destroy();
  }, [points, lines, format, time, i18n.language]);
  return (
    <figure className="chart">
      <figcaption>{title}</figcaption>
      <div ref={box} role="img" aria-label={title} />
    </figure>
  );
}
