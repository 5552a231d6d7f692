#!/usr/bin/env bash
# Checks the deployment files: the Helm chart lints, renders, and validates
# against the Kubernetes schemas of the oldest supported (1.30) and the
# newest release; it refuses empty or loopback public URLs and a values file
# its schema refuses, and renders no HTTPRoute where the cluster lacks the
# Gateway API (NOTES.txt then says what to install);
# infra/k8s/kubebyon.yaml is what the chart renders with its defaults and
# example public URLs; the AWS template passes cfn-lint (which expands its SAM
# transform); yamllint (.yamllint.yaml) passes every YAML file of infra/ and
# every rendering of the chart. With --write, regenerates infra/k8s/kubebyon.yaml instead of
# checking it. Needs helm (target/tools/bin), kubernetes-validate and
# cfn-lint and yamllint (target/test-venv), all installed by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/target/tools/bin:$PWD/target/test-venv/bin:$PATH"

chart=infra/helm/kubebyon
# A cluster that serves the Gateway API and ValidatingAdmissionPolicy (1.30
# and later), and the public URLs an operator sets.
urls=(--set config.KUBEBYON_PUBLIC_BASE_URL=https://kubebyon.example.com
      --set config.KUBEBYON_JOIN_BASE_URL=https://kubebyon.example.com)
render() {
    helm template kubebyon "$chart" --namespace kubebyon \
        --api-versions gateway.networking.k8s.io/v1/HTTPRoute \
        --api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy "${urls[@]}" "$@"
}
# Fails unless rendering with "$@" (no Gateway API, no URLs) fails saying $1.
refused() {
    local why=$1
    shift
    if out=$(helm template kubebyon "$chart" --namespace kubebyon "$@" 2>&1); then
        echo "error: the chart renders with $*; it must refuse ($why)" >&2
        exit 1
    fi
    if ! grep -q -- "$why" <<<"$out"; then
        printf '%s\n' "$out" >&2
        echo "error: the chart's refusal of $* does not say $why" >&2
        exit 1
    fi
}
refused "config.KUBEBYON_PUBLIC_BASE_URL is \"\": set it to the platform's public URL"
refused 'config.KUBEBYON_JOIN_BASE_URL is "http://127.0.0.1:8080"' "${urls[@]}" \
    --set config.KUBEBYON_JOIN_BASE_URL=http://127.0.0.1:8080
refused 'config.KUBEBYON_PUBLIC_BASE_URL is "http://localhost"' "${urls[@]}" \
    --set config.KUBEBYON_PUBLIC_BASE_URL=http://localhost
refused "replicas" "${urls[@]}" --set-string 'http.api-auth.replicas=abc'
refused "additional properties" "${urls[@]}" --set replica=3
refused "config.KUBEBYON_LOADBALANCER_PROVIDER=haproxy needs config.KUBEBYON_HAPROXY_BASE_DOMAIN" "${urls[@]}" \
    --set config.KUBEBYON_LOADBALANCER_PROVIDER=haproxy
refused "config.KUBEBYON_ROUTE_MODE=local is for a host of one machine" "${urls[@]}" \
    --set config.KUBEBYON_ROUTE_MODE=local
refused "edge.gateway.create needs config.KUBEBYON_EDGE_GATEWAY_NAME" "${urls[@]}" \
    --set edge.gateway.create=true --set edge.gateway.className=example
refused "edge.gateway.create needs edge.gateway.className" "${urls[@]}" \
    --set edge.gateway.create=true --set config.KUBEBYON_EDGE_GATEWAY_NAME=workloads
refused 'config.KUBEBYON_ENGINE is "vcluster" but engines.vcluster is not true' "${urls[@]}" \
    --set config.KUBEBYON_ENGINE=vcluster
refused 'config.KUBEBYON_ENGINE is "kamaji" but engines.kamaji is not true' "${urls[@]}" \
    --set engines.kamaji=false --set engines.vcluster=true
# Empty URLs pass only when asked for, for a trial on one machine.
helm template kubebyon "$chart" --set allowLoopbackPublicUrls=true >/dev/null
# Without the Gateway API: no HTTPRoute, and the notes say what to install.
if helm template kubebyon "$chart" "${urls[@]}" | grep -q "^kind: HTTPRoute"; then
    echo "error: the chart renders an HTTPRoute for a cluster without the Gateway API" >&2
    exit 1
fi
if ! helm install kubebyon "$chart" --dry-run=client "${urls[@]}" 2>/dev/null | grep "NOT ROUTED" >/dev/null; then
    echo "error: without the Gateway API the notes do not say the platform is not routed" >&2
    exit 1
fi

cfn-lint infra/aws/template.yaml
python scripts/check-sam.py --self-test
python scripts/check-sam.py
yamllint --strict infra/
helm lint --strict "$chart" "${urls[@]}" >/dev/null
rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
# Every optional part on: KEDA, the Ingress, the in-cluster host off (a
# kubeconfig Secret), the PodMonitor, the image by digest, the workload
# edge's Gateway and route-agent.
# Every pod convention set: a CA bundle mounted from a Secret with its
# variable, placement, annotations (IRSA on the ServiceAccounts).
conventions='--set-json extraEnv=[{"name":"PGSSLROOTCERT","value":"/etc/kubebyon/db-ca/ca.crt"}]
 --set-json extraVolumes=[{"name":"db-ca","secret":{"secretName":"db-ca"}}]
 --set-json extraVolumeMounts=[{"name":"db-ca","mountPath":"/etc/kubebyon/db-ca","readOnly":true}]
 --set-json nodeSelector={"kubernetes.io/os":"linux"}
 --set-json tolerations=[{"key":"dedicated","operator":"Equal","value":"platform","effect":"NoSchedule"}]
 --set-json topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app.kubernetes.io/part-of":"kubebyon"}}}]
 --set-json podAnnotations={"example.com/team":"platform"}
 --set-json serviceAccount.annotations={"eks.amazonaws.com/role-arn":"arn:aws:iam::123456789012:role/kubebyon"}
 --set-json functionResources={"api-auth":{"limits":{"memory":"512Mi"}}}'
digest=sha256:$(printf '0%.0s' $(seq 64))
optional="--set keda.enabled=true --set ingress.enabled=true --set host.inCluster=false --set host.kubeconfigSecret=host
 --set podMonitor.enabled=true --api-versions monitoring.coreos.com/v1/PodMonitor --set image.digest=$digest
 --set edge.gateway.create=true --set edge.gateway.className=example --set config.KUBEBYON_EDGE_GATEWAY_NAME=workloads
 --set edge.routeAgent.enabled=true
 --set config.KUBEBYON_LOADBALANCER_PROVIDER=haproxy --set config.KUBEBYON_HAPROXY_BASE_DOMAIN=clusters.example.com"
for values in "" "$optional" "$conventions"; do
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
        printf '%s\n' "$out" | grep -v "Couldn't find schema for kind \(HTTPRoute\|Gateway\|ScaledObject\|PodMonitor\)" >&2 || true
    done
done

# The image by digest, and a function's own resources over the shared ones
# (each rendering read whole first: grep -q stopping early would fail the
# pipe under pipefail).
# shellcheck disable=SC2086
render $optional >"$rendered"
grep -q "image: ghcr.io/kubebyon/kubebyon@$digest" "$rendered" \
    || { echo "error: image.digest does not pin the image" >&2; exit 1; }
grep -q "^kind: PodMonitor" "$rendered" \
    || { echo "error: podMonitor.enabled renders no PodMonitor" >&2; exit 1; }
grep -q "^kind: Gateway$" "$rendered" \
    || { echo "error: edge.gateway.create renders no Gateway" >&2; exit 1; }
grep -q "command: \[route-agent\]" "$rendered" \
    || { echo "error: edge.routeAgent.enabled renders no route-agent" >&2; exit 1; }
grep -q "name: kubebyon-haproxy-runtime$" "$rendered" \
    || { echo "error: the haproxy provider renders no HAProxy" >&2; exit 1; }
# shellcheck disable=SC2086
render $conventions >"$rendered"
if [ "$(grep -c 'memory: 512Mi' "$rendered")" != 1 ]; then
    echo "error: functionResources does not give api-auth, and api-auth alone, its own limit" >&2
    exit 1
fi
{
    echo "# Generated from infra/helm/kubebyon with its default values, example public URLs"
    echo "# (set yours) and a cluster that serves the Gateway API and ValidatingAdmissionPolicy:"
    echo "#   helm template kubebyon infra/helm/kubebyon --namespace kubebyon \\"
    echo "#     --api-versions gateway.networking.k8s.io/v1/HTTPRoute \\"
    echo "#     --api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy \\"
    echo "#     --set config.KUBEBYON_PUBLIC_BASE_URL=https://kubebyon.example.com \\"
    echo "#     --set config.KUBEBYON_JOIN_BASE_URL=https://kubebyon.example.com"
    echo "# Regenerate with scripts/check-infra.sh --write; install with Helm to change values."
    render
} >"$rendered"
if [ "${1:-}" = "--write" ]; then
    cp "$rendered" infra/k8s/kubebyon.yaml
elif ! diff -q "$rendered" infra/k8s/kubebyon.yaml >/dev/null; then
    echo "error: infra/k8s/kubebyon.yaml is not what the chart renders; run scripts/check-infra.sh --write" >&2
    exit 1
fi
