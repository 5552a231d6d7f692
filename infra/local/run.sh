#!/usr/bin/env bash
# Starts the whole platform on this machine: `local`, with a private PostgreSQL
# (unless DATABASE_URL is set) and in-process jobs (unless AMQP_URL is set),
# and the web console at / (built first when missing or stale).
# Installs the build tools and PostgreSQL server binaries from Debian's
# packages when run as root and they are missing. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
need() {
    command -v "$1" >/dev/null && return 0
    [ "$(id -u)" = 0 ] || die "missing $1: run 'sudo apt-get install -y $2' and try again"
    if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq; APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

command -v cargo >/dev/null || die "cargo is missing: install Rust with rustup (https://rustup.rs)"
need cc gcc
need mold mold
if [ -z "${DATABASE_URL:-}" ] && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && [ -z "${KUBEBYON_PG_BIN:-}" ]; then
    need pg_ctlcluster postgresql
fi

# The web console, built into `local` (at /): with Node.js 20+ and npm,
# rebuilt when its source changed; without them the API still runs.
./scripts/console.sh build || printf 'warning: the console could not be built (above); the API is served, the console page says how to build it\n' >&2
cargo build --locked -p local
export KUBEBYON_DATA_DIR="${KUBEBYON_DATA_DIR:-$PWD/.kubebyon}"
exec target/debug/local "$@"
