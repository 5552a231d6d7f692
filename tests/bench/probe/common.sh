# Shared by the probes: the database, the broker, the exchange, the binary.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BIN=${BIN:-target/perf/bench-jobs}
[ -x "$BIN" ] || { echo "build it first: cargo build --profile perf -p bench --bin bench-jobs" >&2; exit 1; }
SERVER=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
export DATABASE_URL="${SERVER%/*}/kubebyon_probe"
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"
export AMQP_EXCHANGE=kubebyon-probe RUST_LOG=warn LOG_FORMAT=json
OUT=${OUT:-target/bench-results/probe}
mkdir -p "$OUT"

fresh_db() {
    psql -q "$SERVER" -c 'DROP DATABASE IF EXISTS kubebyon_probe WITH (FORCE)' \
        -c 'CREATE DATABASE kubebyon_probe' 2>/dev/null
    "$BIN" prepare --clusters "$1" >/dev/null
}

# Starts two workers (WORKER_ID probe-1 and probe-2) logging to $OUT/$1-N.log.
start_workers() {
    WORKERS=()
    for i in 1 2; do
        WORKER_ID=probe-$i AMQP_PREFETCH=$2 "$BIN" work --log "$OUT/$1-$i.log" 2>>"$OUT/work.err" &
        WORKERS+=($!)
    done
}

stop_workers() {
    kill "${WORKERS[@]}"
    wait "${WORKERS[@]}" 2>/dev/null || true
}
