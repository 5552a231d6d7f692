#!/usr/bin/env bash
# Burn-down probe: JOBS no-op jobs prefilled through the real enqueue path,
# then two workers started; prints jobs/s from the first handler start to the
# last completion, CPU per job of PostgreSQL, the two workers and RabbitMQ
# (from /proc), committed transactions per job (pg_stat_database) and WAL
# bytes per job (the server's WAL position before and after).
# Usage: tests/bench/probe/burn.sh JOBS PREFETCH (BIN= another build;
# WAL_RECORDS=1 also prints the WAL records per job by type, from
# pg_walinspect, PostgreSQL 15 or later).
source "$(dirname "$0")/common.sh"
JOBS=$1 PREFETCH=$2
rm -f "$OUT"/burn-*.log
fresh_db "$JOBS"
DATABASE_MAX_CONNECTIONS=32 "$BIN" enqueue --jobs "$JOBS" >/dev/null
# SETTLE=0 starts the workers straight after the enqueue, as the harness does.
if [ "${SETTLE:-1}" != 0 ]; then
    psql -q "$DATABASE_URL" -c 'VACUUM ANALYZE' -c CHECKPOINT
    sleep 3
fi
ticks() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0; done | awk '{ s += $1 } END { print s + 0 }'; }
commits() { psql -Atq "$DATABASE_URL" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
wal() { psql -Atq "$DATABASE_URL" -c 'SELECT pg_current_wal_lsn()'; }
x0=$(commits); l0=$(wal); pg0=$(ticks $(pgrep -x postgres)); mq0=$(ticks $(pgrep beam.smp))
start_workers burn "$PREFETCH"
until [ "$(cat "$OUT"/burn-*.log 2>/dev/null | wc -l)" -ge "$JOBS" ] \
    && [ "$(psql -Atq "$DATABASE_URL" -c "SELECT count(*) FROM cluster_jobs WHERE status IN ('pending', 'running')")" = 0 ]; do
    sleep 0.2
done
pg1=$(ticks $(pgrep -x postgres)); mq1=$(ticks $(pgrep beam.smp)); w=$(ticks "${WORKERS[@]}"); x1=$(commits); l1=$(wal)
wal_bytes=$(psql -Atq "$DATABASE_URL" -c "SELECT pg_wal_lsn_diff('$l1', '$l0')")
if [ -n "${WAL_RECORDS:-}" ]; then
    psql -Atq "$DATABASE_URL" -c 'CREATE EXTENSION IF NOT EXISTS pg_walinspect' -c 'SELECT pg_switch_wal()' >/dev/null
    psql -Atq "$DATABASE_URL" -c "SELECT json_object_agg(\"resource_manager/record_type\", round(count::numeric / $JOBS, 2))
        FROM pg_get_wal_stats('$l0', '$l1', true) WHERE count > 0"
fi
stop_workers
last=$(psql -Atq "$DATABASE_URL" -c "SELECT extract(epoch FROM max(finished_at)) * 1e6 FROM cluster_jobs")
first=$(cat "$OUT"/burn-*.log | awk 'NR == 1 || $2 < m { m = $2 } END { print m }')
python3 - "$JOBS" "$PREFETCH" "$first" "$last" $((pg1 - pg0)) "$w" $((mq1 - mq0)) $((x1 - x0)) "$(getconf CLK_TCK)" "$wal_bytes" <<'PY'
import json, sys
jobs, prefetch, first, last, pg, w, mq, xacts, hz, wal = (float(a) for a in sys.argv[1:])
us = lambda ticks: round(ticks / hz * 1e6 / jobs)
print(json.dumps({"jobs": int(jobs), "prefetch": int(prefetch),
                  "jobs_per_s": round(jobs / ((last - first) / 1e6)),
                  "cpu_us_per_job": {"postgres": us(pg), "workers": us(w), "rabbitmq": us(mq)},
                  "transactions_per_job": round(xacts / jobs, 3),
                  "wal_bytes_per_job": round(wal / jobs)}))
PY
