#!/usr/bin/env bash
# The sync-nodes benchmark at several fleet sizes: one JSON line each.
# Needs PostgreSQL at DATABASE_URL (default: the local server), as
# scripts/test.sh sets up. Results go into docs/benchmarks.md by hand.
set -euo pipefail
cd "$(dirname "$0")/../.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
cargo build -q --locked --profile perf -p bench --bin bench-sync-nodes
printf '# %s, %s cores, %s\n' "$(uname -sr)" "$(nproc)" "$(date -u +%FT%TZ)"
for size in "250 20" "500 20" "1000 20" "1000 40"; do
    set -- $size
    # Let the previous run's load pass before measuring the next.
    sleep 20
    target/perf/bench-sync-nodes --clusters "$1" --nodes "$2" --cycles 5
done
