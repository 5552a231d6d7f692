#!/usr/bin/env bash
# Burn-down probe: JOBS no-op jobs prefilled through the real enqueue path,
# then two workers started; prints jobs/s from the first handler start to the
# last completion, CPU per job of PostgreSQL, the two workers and RabbitMQ
# (from /proc), and committed transactions per job (pg_stat_database).
# Usage: tests/bench/probe/burn.sh JOBS PREFETCH (BIN= another build).
source "$(dirname "$0")/common.sh"
JOBS=$1 PREFETCH=$2
rm -f "$OUT"/burn-*.log
fresh_db "$JOBS"
DATABASE_MAX_CONNECTIONS=32 "$BIN" enqueue --jobs "$JOBS" >/dev/null
psql -q "$DATABASE_URL" -c 'VACUUM ANALYZE' -c CHECKPOINT
sleep 3
ticks() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0; done | awk '{ s += $1 } END { print s + 0 }'; }
commits() { psql -Atq "$DATABASE_URL" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
x0=$(commits); pg0=$(ticks $(pgrep -x postgres)); mq0=$(ticks $(pgrep beam.smp))
start_workers burn "$PREFETCH"
until [ "$(cat "$OUT"/burn-*.log 2>/dev/null | wc -l)" -ge "$JOBS" ] \
    && [ "$(psql -Atq "$DATABASE_URL" -c "SELECT count(*) FROM cluster_jobs WHERE status IN ('pending', 'running')")" = 0 ]; do
    sleep 0.2
done
pg1=$(ticks $(pgrep -x postgres)); mq1=$(ticks $(pgrep beam.smp)); w=$(ticks "${WORKERS[@]}"); x1=$(commits)
stop_workers
last=$(psql -Atq "$DATABASE_URL" -c "SELECT extract(epoch FROM max(finished_at)) * 1e6 FROM cluster_jobs")
first=$(cat "$OUT"/burn-*.log | awk 'NR == 1 || $2 < m { m = $2 } END { print m }')
python3 - "$JOBS" "$PREFETCH" "$first" "$last" $((pg1 - pg0)) "$w" $((mq1 - mq0)) $((x1 - x0)) "$(getconf CLK_TCK)" <<'PY'
import json, sys
jobs, prefetch, first, last, pg, w, mq, xacts, hz = (float(a) for a in sys.argv[1:])
us = lambda ticks: round(ticks / hz * 1e6 / jobs)
print(json.dumps({"jobs": int(jobs), "prefetch": int(prefetch),
                  "jobs_per_s": round(jobs / ((last - first) / 1e6)),
                  "cpu_us_per_job": {"postgres": us(pg), "workers": us(w), "rabbitmq": us(mq)},
                  "transactions_per_job": round(xacts / jobs, 3)}))
PY
