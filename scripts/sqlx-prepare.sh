#!/usr/bin/env bash
# Regenerates the committed query metadata in .sqlx/ from a freshly migrated
# database, so builds need no database. With --check, fails when .sqlx/ is not
# what the code and migrations produce.
set -euo pipefail
cd "$(dirname "$0")/.."

server=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
db="kubebyon_sqlx_prepare_$$"
url="${server%/*}/$db"
psql "$server" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
trap 'psql "$server" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT
for migration in migrations/*.sql; do
    psql "$url" -q -1 -v ON_ERROR_STOP=1 -f "$migration" >/dev/null
done

out=$(mktemp -d)
# A target directory of its own by default: the main one keeps its offline
# build cached. CI, which builds nothing after this, checks in the main one
# (SQLX_PREPARE_TARGET_DIR=target), where clippy has just checked every
# dependency: only the workspace's crates are checked again.
# The workspace's own crates are checked again every time: cargo does not see
# SQLX_OFFLINE_DIR change, and a crate it holds fresh writes no query file.
target_dir=${SQLX_PREPARE_TARGET_DIR:-target/sqlx-prepare}
CARGO_TARGET_DIR=$target_dir cargo clean --workspace --quiet
DATABASE_URL="$url" SQLX_OFFLINE=false SQLX_OFFLINE_DIR="$out" \
    CARGO_TARGET_DIR=$target_dir cargo check --workspace --all-targets --locked --quiet

if [ "${1:-}" = "--check" ]; then
    if ! diff -r -q "$out" .sqlx >/dev/null; then
        diff -r -q "$out" .sqlx || true
        echo "error: .sqlx/ is stale; run scripts/sqlx-prepare.sh and commit the result" >&2
        exit 1
    fi
    echo ".sqlx/ is current"
else
    rm -rf .sqlx && mv "$out" .sqlx
    echo "wrote $(ls .sqlx | wc -l) query files to .sqlx/"
fi
