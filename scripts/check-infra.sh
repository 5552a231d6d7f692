#!/usr/bin/env bash
# Checks the deployment files: the Helm chart lints, renders, and validates
# against the Kubernetes schemas of the oldest supported (1.30) and the
# newest release; infra/k8s/kubebyon.yaml is what the chart renders with its
# defaults; the AWS template passes cfn-lint (which expands its SAM
# transform); yamllint (.yamllint.yaml) passes every YAML file of infra/ and
# every rendering of the chart. With --write, regenerates infra/k8s/kubebyon.yaml instead of
# checking it. Needs helm (target/tools/bin), kubernetes-validate and
# cfn-lint and yamllint (target/test-venv), all installed by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/target/tools/bin:$PWD/target/test-venv/bin:$PATH"

chart=infra/helm/kubebyon
render() { helm template kubebyon "$chart" --namespace kubebyon "$@"; }

cfn-lint infra/aws/template.yaml
yamllint --strict infra/
helm lint --strict "$chart" >/dev/null
rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
# Every optional part on: KEDA, the Ingress, the in-cluster host off (a
# kubeconfig Secret).
for values in "" "--set keda.enabled=true --set ingress.enabled=true --set host.inCluster=false --set host.kubeconfigSecret=host"; do
    # shellcheck disable=SC2086
    render $values >"$rendered"
    yamllint --strict - <"$rendered"
    for version in 1.30.0 1.37.0; do
        # The CRD kinds (Gateway API, KEDA) have no schema there: warned, not failed.
        if ! out=$(kubernetes-validate --strict --quiet -k "$version" "$rendered" 2>&1); then
            printf '%s\n' "$out" >&2
            echo "error: the chart (${values:-defaults}) does not validate against Kubernetes $version" >&2
            exit 1
        fi
        printf '%s\n' "$out" | grep -v "Couldn't find schema for kind \(HTTPRoute\|ScaledObject\)" >&2 || true
    done
done

{
    echo "# Generated from infra/helm/kubebyon with its default values:"
    echo "#   helm template kubebyon infra/helm/kubebyon --namespace kubebyon"
    echo "# Regenerate with scripts/check-infra.sh --write; install with Helm to change values."
    render
} >"$rendered"
if [ "${1:-}" = "--write" ]; then
    cp "$rendered" infra/k8s/kubebyon.yaml
elif ! diff -q "$rendered" infra/k8s/kubebyon.yaml >/dev/null; then
    echo "error: infra/k8s/kubebyon.yaml is not what the chart renders; run scripts/check-infra.sh --write" >&2
    exit 1
fi
