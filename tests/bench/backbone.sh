#!/usr/bin/env bash
# The job backbone, HTTP and cold-start benchmark beside graphile-worker and
# Celery (tests/bench/backbone.py says what it measures). Installs what it
# needs: wrk, hyperfine and pgbench from Debian's packages, graphile-worker
# from npm, Celery and cargo-lambda (its Lambda emulator, for cold starts)
# from PyPI into target/bench-peers; builds the functions
# and the benchmark programs with the `perf` profile (release without LTO).
# Uses PostgreSQL at DATABASE_URL and RabbitMQ at AMQP_URL (the local servers
# by default; scripts/test.sh starts them). Arguments go to backbone.py,
# e.g. `--only burn,latency --reps 3 --jobs 20000`.
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf '==> %s\n' "$*" >&2; }
apt_install() {
    [ "$(id -u)" = 0 ] || { echo "missing $*: run 'sudo apt-get install -y $*'" >&2; exit 1; }
    log "installing $* from Debian packages"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
command -v wrk >/dev/null || apt_install wrk
command -v hyperfine >/dev/null || apt_install hyperfine
command -v pgbench >/dev/null || apt_install postgresql-contrib
command -v strip >/dev/null || apt_install binutils
command -v node >/dev/null || apt_install nodejs npm
command -v python3 >/dev/null || apt_install python3 python3-venv

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"

peers=target/bench-peers
mkdir -p "$peers"
if [ ! -d "$peers/node_modules/graphile-worker" ]; then
    log "installing graphile-worker 0.17.3 from npm"
    (cd "$peers" && echo '{"private":true,"type":"module"}' > package.json \
        && npm install --no-audit --no-fund --silent graphile-worker@0.17.3)
fi
if ! "$peers/venv/bin/python" -c "import celery, psycopg" 2>/dev/null; then
    log "installing Celery 5.5.3 and psycopg 3.2.10 from PyPI"
    rm -rf "$peers/venv"
    python3 -m venv "$peers/venv"
    "$peers/venv/bin/pip" install -q celery==5.5.3 "psycopg[binary]==3.2.10"
fi
if [ ! -x "$peers/venv/bin/cargo-lambda" ]; then
    log "installing cargo-lambda 1.9.2 from PyPI"
    "$peers/venv/bin/pip" install -q cargo-lambda==1.9.2
fi

log "building the functions and benchmark programs (perf profile)"
cargo build -q --locked --profile perf --workspace --bins
exec "$peers/venv/bin/python" tests/bench/backbone.py "$@"
