#!/usr/bin/env python3
"""Markdown tables (median, min–max) from the JSON lines of tests/bench/backbone.py.

    python3 tests/bench/summarize.py target/bench-results/backbone-*.jsonl
"""

import json
import statistics
import sys


def spread(values, digits=0):
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    fmt = f"{{:,.{digits}f}}"
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def grouped(records, key):
    groups = {}
    for r in records:
        groups.setdefault(key(r), []).append(r)
    return groups


def main(paths):
    records = []
    for path in paths:
        with open(path) as f:
            records += [json.loads(line) for line in f if line.strip()]
    by_bench = grouped(records, lambda r: r["bench"])

    print("### Floors\n\n| floor | clients | result |\n|---|---|---|")
    for r in by_bench.get("floor", []):
        if "ops_per_s" in r:
            result = f'{r["ops_per_s"]:,.0f} ops/s ({r["us_per_op"]:.0f} µs each), {r["method"]}'
        elif "tps" in r:
            result = f'{r["tps"]:,.0f} tps, {r["latency_ms"]:.3f} ms average'
        else:
            result = f'p50 {r["p50_us"]:.0f} µs, p99 {r["p99_us"]:.0f} µs'
        print(f'| {r["floor"]} | {r.get("clients", "")} | {result} |')

    for bench in ("burn-down", "crash"):
        rows = by_bench.get(bench, [])
        if not rows:
            continue
        print(f"\n### {bench}\n")
        header = "| system | variant | jobs | jobs/s | lost | duplicates |"
        if bench == "crash":
            header += " done after the kill (s) |"
        print(header + " runs |")
        print("|---" * (header.count("|") - 1 + 1) + "|")
        for (system, variant, jobs), group in grouped(
            rows, lambda r: (r["system"], r["variant"], r["jobs"])
        ).items():
            line = (f"| {system} | {variant} | {jobs:,} | "
                    f"{spread([r['jobs_per_s'] for r in group])} | "
                    f"{spread([r['lost'] for r in group])} | "
                    f"{spread([r['duplicates'] for r in group])} |")
            if bench == "crash":
                line += f" {spread([r.get('recovered_s_after_kill') for r in group], 1)} |"
            print(line + f" {len(group)} |")

    rows = by_bench.get("latency", [])
    if rows:
        print("\n### Enqueue commit → handler start\n")
        print("| system | variant | rate/s | p50 ms | p99 ms | max ms | first second's max ms | runs |\n"
              "|---|---|---|---|---|---|---|---|")
        for (system, variant, rate), group in grouped(
            rows, lambda r: (r["system"], r["variant"], r["rate_per_s"])
        ).items():
            print(f"| {system} | {variant} | {rate:,} | {spread([r['p50_ms'] for r in group], 2)} | "
                  f"{spread([r['p99_ms'] for r in group], 2)} | {spread([r['max_ms'] for r in group], 1)} | "
                  f"{spread([r.get('warmup_max_ms') for r in group], 1)} | {len(group)} |")

    rows = by_bench.get("http", [])
    if rows:
        print("\n### HTTP (wrk)\n")
        print("| target | connections | requests/s | p50 ms | p99 ms | non-2xx | runs |\n|---|---|---|---|---|---|---|")
        for (target, connections), group in grouped(
            rows, lambda r: (r["target"], r["connections"])
        ).items():
            print(f"| {target} | {connections} | {spread([r['requests_per_s'] for r in group])} | "
                  f"{spread([r['p50_ms'] for r in group], 3)} | {spread([r['p99_ms'] for r in group], 3)} | "
                  f"{sum(r['non_2xx'] for r in group)} | {len(group)} |")

    rows = by_bench.get("cold-start", [])
    if rows:
        print("\n### Cold start (spawn → first answer)\n")
        print("| function | mode | Runtime API | median ms (min–max) | RSS at first answer | stripped size |\n"
              "|---|---|---|---|---|---|")
        for r in rows:
            api = r.get("runtime_api", "loopback") if r["mode"] != "http" else "–"
            print(f"| {r['function']} | {r['mode']} | {api} | {r['first_answer_ms_median']:.1f} "
                  f"({r['first_answer_ms_min']:.1f}–{r['first_answer_ms_max']:.1f}) | "
                  f"{r['rss_kib_median'] / 1024:.1f} MiB | {r['stripped_bytes'] / 1048576:.1f} MiB |")
    for r in by_bench.get("cold-start (hyperfine)", []):
        print(f"\nhyperfine, `{r['command']}` for {r['function']}: median {r['median_ms']} ms "
              f"({r['min_ms']}–{r['max_ms']}).")


if __name__ == "__main__":
    main(sys.argv[1:])
