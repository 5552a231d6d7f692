// The control plane's CPU, memory (RSS and virtual) and load over a chosen
// range, from the range API. Loaded on demand with its chart library.
import { useEffect, useRef, useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { api, ok, type Schemas } from "../api/client";
import { bytes, number, range } from "../format";
import { Empty, ErrorNote, Loading, Period } from "../ui";
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
              <Period hours={h} />
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
            steps={BINARY_STEPS}
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

/// Tick steps for sizes in bytes: whole KiB, MiB and GiB (1, 2, 4, … 512
/// of each), never 953.7 MiB.
const BINARY_STEPS = [0, 1, 2, 3].flatMap((power) =>
  [1, 2, 4, 8, 16, 32, 64, 128, 256, 512].map((n) => n * 1024 ** (power + 1)),
);

function Chart({
  title,
  points,
  lines,
  format,
  steps,
}: {
  title: string;
  points: Point[];
  lines: [string, (p: Point) => number | null | undefined][];
  format: (v: number) => string;
  steps?: number[];
}) {
  const { t, i18n } = useTranslation();
  const time = t("metrics.time");
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (!box.current) return;
    const at = points.map((p) => new Date(p.at).getTime() / 1000);
    const span = at.length > 1 ? at[at.length - 1] - at[0] : 0;
    // The time axis: hours and minutes within a day, the date beyond it.
    const tick = new Intl.DateTimeFormat(
      i18n.language,
      span <= 86_400 ? { hour: "2-digit", minute: "2-digit" } : { month: "numeric", day: "numeric" },
    );
    const clock = new Intl.DateTimeFormat(i18n.language, { month: "numeric", day: "numeric", hour: "2-digit", minute: "2-digit" });
    const values = lines.map(([, pick]) => points.map((p) => pick(p) ?? null));
    // The legend shows the latest point until the cursor points at another.
    const latest = values.map((series) => [...series].reverse().find((v) => v !== null) ?? null);
    const data: uPlot.AlignedData = [at, ...values];
    // The second line (the peak) dashed and thinner: where it meets the
    // first (the average), both still show.
    const colours = ["#2457c5", "#c0392b"];
    const plot = new uPlot(
      {
        width: Math.max(240, box.current.clientWidth),
        height: 200,
        series: [
          {
            label: time,
            value: (_u, v) => (v == null ? clock.format(new Date((at[at.length - 1] ?? 0) * 1000)) : clock.format(new Date(v * 1000))),
          },
          ...lines.map(([label], i) => ({
              label,
              stroke: colours[i % colours.length],
              width: i === 0 ? 2 : 1.5,
              dash: i === 0 ? undefined : [6, 4],
              value: (_u: uPlot, v: number | null, _s: number, idx: number | null) =>
                idx == null ? (latest[i] == null ? "—" : format(latest[i])) : v == null ? "—" : format(v),
            })),
        ],
        axes: [
          // At least 80 px between labels: they never touch.
          { space: 80, values: (_u, ticks) => ticks.map((v) => tick.format(new Date(v * 1000))) },
          { values: (_u, ticks) => ticks.map((v) => format(v)), size: 80, ...(steps ? { incrs: steps } : {}) },
        ],
      },
      data,
      box.current,
    );
    // The chart follows its box: a phone's width, a turned screen.
    const resize = new ResizeObserver(() => {
      if (box.current) plot.setSize({ width: Math.max(240, box.current.clientWidth), height: 200 });
    });
    resize.observe(box.current);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [points, lines, format, steps, time, i18n.language]);
  return (
    <figure className="chart">
      <figcaption>{title}</figcaption>
      <div ref={box} role="img" aria-label={title} />
    </figure>
  );
}
