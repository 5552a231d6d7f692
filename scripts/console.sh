#!/usr/bin/env bash
# The web console's assets (functions/console/app → functions/console/dist),
# which the `console` crate embeds when it is compiled.
#
#   scripts/console.sh build   npm ci when the packages are missing or changed,
#                              then build when dist/ is missing or older than
#                              the source (what ./infra/local/run.sh runs)
#   scripts/console.sh check   the typed API client matches docs/openapi.json,
#                              ESLint passes (typescript-eslint, React's rules
#                              of hooks, no warning), and the catalogs' and
#                              routes' tests pass (what CI runs)
#   scripts/console.sh api     regenerate the typed API client
set -euo pipefail
cd "$(dirname "$0")/../functions/console/app"

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
log() { printf '==> %s\n' "$*" >&2; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    [ "$(id -u)" = 0 ] || die "Node.js 20 or newer and npm build the console: run 'sudo apt-get install -y nodejs npm' (or see https://nodejs.org) and try again"
    log "installing Node.js and npm from Debian packages"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || die "Node.js $(node --version) is too old to build the console: 20 or newer is needed (https://nodejs.org)"

install() {
    # A copy of the lockfile npm ci installed from tells what is installed.
    if ! cmp -s package-lock.json node_modules/.installed-lock.json 2>/dev/null; then
        log "installing the console's npm packages (npm ci)"
        npm ci --no-audit --no-fund --loglevel=error
        cp package-lock.json node_modules/.installed-lock.json
    fi
}

case "${1:-build}" in
    build)
        install
        if [ ! -f ../dist/index.html ] \
            || [ -n "$(find src public index.html vite.config.ts tsconfig.json package-lock.json scripts -newer ../dist/index.html -print -quit)" ]; then
            log "building the console (functions/console/dist)"
            npm run --silent build >/dev/null
        fi
        ;;
    check)
        install
        generated=$(mktemp)
        trap 'rm -f "$generated"' EXIT
        npx --no-install openapi-typescript ../../../docs/openapi.json -o "$generated" --silent >/dev/null
        cmp -s "$generated" src/api/schema.d.ts \
            || die "functions/console/app/src/api/schema.d.ts is not current with docs/openapi.json: run scripts/console.sh api"
        npx --no-install eslint --max-warnings 0 .
        npm test --silent
        ;;
    api)
        install
        npm run --silent api
        ;;
    *) die "unknown command $1: build, check or api" ;;
esac
