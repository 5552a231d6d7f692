#!/usr/bin/env bash
# Statement probe: the claim and completion statements of db::jobs (claim_many,
# complete_many) over JOBS prefilled jobs in sets of 128, one session, no
# RabbitMQ and none of our code. Prints the CPU time of that PostgreSQL backend
# and the WAL bytes per job; machine-independent enough to compare schema or
# statement variants one after the other.
# Usage: tests/bench/probe/statements.sh JOBS [CLAIM]
#   CLAIM: locked (the statement of db::jobs, default) or unlocked (the same
#   without FOR UPDATE: one row lookup, no lock order).
#   SETUP_SQL: run after the migrations, before the prefill (say, a fill factor).
set -euo pipefail
cd "$(dirname "$0")/../../.."
JOBS=$1 CLAIM=${2:-locked}
SERVER=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
URL="${SERVER%/*}/kubebyon_probe_statements"
SETS=$(( (JOBS + 127) / 128 ))

psql -q "$SERVER" -c 'DROP DATABASE IF EXISTS kubebyon_probe_statements WITH (FORCE)' \
    -c 'CREATE DATABASE kubebyon_probe_statements' 2>/dev/null
for migration in migrations/*.sql; do
    psql -q -v ON_ERROR_STOP=1 "$URL" -f "$migration" >/dev/null
done
[ -n "${SETUP_SQL:-}" ] && psql -q -v ON_ERROR_STOP=1 "$URL" -c "$SETUP_SQL"
# One job and operation per cluster, each in its own statement (distinct
# created_at, as the enqueue path makes them), stamped published, in sets by
# age as the queue delivers them; then settled.
psql -q -v ON_ERROR_STOP=1 "$URL" <<SQL >/dev/null
INSERT INTO users (email, display_name, email_verified_at) VALUES ('probe@example.com', 'Probe', now());
INSERT INTO clusters (owner_user_id, name, vcluster_name, namespace, kubernetes_version,
    workload_cpu_limit_milli_cores, workload_memory_limit_mib,
    control_plane_cpu_request_milli_cores, control_plane_memory_request_mib, public_access_mode, status)
SELECT (SELECT id FROM users), 'c' || g, 'c' || g, 'kb-c' || g, '1.31', 1000, 1024, 100, 256, 'nodeport', 'ready'
FROM generate_series(1, $JOBS) g;
DO \$\$ DECLARE c uuid; BEGIN
FOR c IN SELECT id FROM clusters LOOP
    WITH operation AS (
        INSERT INTO cluster_operations (cluster_id, type, payload, created_at)
        VALUES (c, 'update', '{}', clock_timestamp()) RETURNING id)
    INSERT INTO cluster_jobs (cluster_id, operation_id, type, payload, max_attempts, created_at)
    SELECT c, operation.id, 'cluster_update', '{}', 3, clock_timestamp() FROM operation;
END LOOP; END \$\$;
UPDATE cluster_jobs SET published_at = now(), updated_at = now();
CREATE TABLE probe_sets AS
    SELECT n, array_agg(id ORDER BY created_at) AS ids
    FROM (SELECT id, created_at, (row_number() OVER (ORDER BY created_at) - 1) / 128 AS n FROM cluster_jobs) s
    GROUP BY n;
CREATE UNIQUE INDEX ON probe_sets (n);
VACUUM ANALYZE;
CHECKPOINT;
SQL

if [ "$CLAIM" = locked ]; then
    claim='locked AS (
        SELECT j.id, j.status FROM cluster_jobs j JOIN wanted w ON w.id = j.id AND w.type = j.type
        ORDER BY j.id FOR UPDATE OF j
    ), claimed AS (
        UPDATE cluster_jobs j SET status = $$running$$, attempt_count = j.attempt_count + 1,
            worker_id = $$probe$$, leased_until = now() + make_interval(secs => 60),
            started_at = coalesce(j.started_at, now()), updated_at = now()
        FROM locked
        WHERE j.id = locked.id AND locked.status = $$pending$$
          AND j.run_after <= now() AND j.attempt_count < j.max_attempts
        RETURNING j.id)'
else
    claim='claimed AS (
        UPDATE cluster_jobs j SET status = $$running$$, attempt_count = j.attempt_count + 1,
            worker_id = $$probe$$, leased_until = now() + make_interval(secs => 60),
            started_at = coalesce(j.started_at, now()), updated_at = now()
        FROM wanted w
        WHERE j.id = w.id AND j.type = w.type AND j.status = $$pending$$
          AND j.run_after <= now() AND j.attempt_count < j.max_attempts
        RETURNING j.id)'
fi
script=$(mktemp)
trap 'rm -f "$script"' EXIT
stat="SELECT pg_read_file('/proc/self/stat');"
{
    echo "$stat"
    for n in $(seq 0 $((SETS - 1))); do
        cat <<SQL
WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true)),
wanted AS (
    SELECT DISTINCT id, type
    FROM relaxed, unnest((SELECT ids FROM probe_sets WHERE n = $n),
                         array_fill('cluster_update'::text, ARRAY[128])) AS w (id, type)
), $claim
SELECT count(*) FROM claimed;
WITH done AS (
    UPDATE cluster_jobs j SET status = 'succeeded', finished_at = now(), leased_until = NULL,
        last_error = NULL, updated_at = now()
    FROM unnest((SELECT ids FROM probe_sets WHERE n = $n), array_fill(1, ARRAY[128])) AS d (id, attempt)
    WHERE j.id = d.id AND j.attempt_count = d.attempt AND j.status = 'running'
    RETURNING j.id, j.operation_id, j.started_at
), operation AS (
    UPDATE cluster_operations o SET status = 'succeeded', stage = 'done', finished_at = now(),
        error_message = NULL, started_at = coalesce(o.started_at, done.started_at), updated_at = now()
    FROM done WHERE o.id = done.operation_id
)
SELECT count(*) FROM done;
SQL
    done
    echo "$stat"
} > "$script"

wal0=$(psql -Atq "$URL" -c 'SELECT pg_current_wal_lsn()')
# The completions commit without waiting for the disk here: CPU is measured, not fsync.
cpu=$(PGOPTIONS='-c synchronous_commit=off' psql -Atq -v ON_ERROR_STOP=1 "$URL" -f "$script" \
    | grep '(postgres)' | awk '{ print $14 + $15 }' | paste -sd ' ')
wal=$(psql -Atq "$URL" -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$wal0')")
done_jobs=$(psql -Atq "$URL" -c "SELECT count(*) FROM cluster_jobs WHERE status = 'succeeded'")
psql -q "$SERVER" -c 'DROP DATABASE kubebyon_probe_statements WITH (FORCE)'
set -- $cpu
python3 - "$JOBS" "$CLAIM" "$1" "$2" "$(getconf CLK_TCK)" "$wal" "$done_jobs" <<'PY'
import json, sys
jobs, claim, t0, t1, hz, wal, done = sys.argv[1:]
jobs = int(jobs)
print(json.dumps({"jobs": jobs, "claim": claim, "succeeded": int(done),
                  "backend_cpu_us_per_job": round((int(t1) - int(t0)) / int(hz) * 1e6 / jobs, 1),
                  "wal_bytes_per_job": round(float(wal) / jobs)}))
PY
