//! What a cluster's control plane is made of on the host: its NetworkPolicy,
//! its vCluster chart values, the names and labels of its objects.

use k8s_openapi::serde_json::{Value, json};
use kube::core::{ApiResource, GroupVersionKind};

use super::settings::HostSettings;
use crate::{clusters::Cluster, domain::PublicAccessMode};

/// The NetworkPolicy that fences a control plane's namespace: its pods talk
/// to each other; from outside, only the API server's port (`api_port`,
/// behind the public endpoint; for Kamaji, the node port range too, where
/// an advertising API server listens) is open; out of it go DNS to `kube-system`,
/// Kamaji's namespace (its DataStore) and anything outside the host's pod
/// networks (the host API, the internet), never another tenant's pods.
pub fn network_policy(cluster: &Cluster, settings: &HostSettings, api_port: i32) -> Value {
    let mut spec = isolation(&settings.pod_cidrs);
    spec["ingress"][1]["ports"][0]["port"] = json!(api_port);
    if cluster.engine == crate::domain::Engine::Kamaji {
        // Its API server listens on the cluster's node port when it
        // advertises one (the host's default node port range).
        spec["ingress"][1]["ports"]
            .as_array_mut()
            .expect("ports")
            .push(json!({"protocol": "TCP", "port": 30000, "endPort": 32767}));
        spec["egress"]
            .as_array_mut()
            .expect("rules")
            .push(json!({"to": [{"namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": settings.engines.kamaji_namespace}}}]}));
    }
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": NETWORK_POLICY, "namespace": cluster.namespace, "labels": labels(cluster)},
        "spec": spec})
}

/// Link-local addresses, where the cloud providers' instance metadata
/// answers (`169.254.169.254`), and AWS's IPv6 metadata address, which is
/// unique-local and so listed on its own: never a control plane's business.
pub(super) const METADATA_BLOCKS: [&str; 3] = ["169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"];

/// The policy's rules, keeping the host's pod networks (`pod_cidrs`) and the
/// link-local and metadata addresses out of the egress blocks of their
/// address family.
pub(super) fn isolation(pod_cidrs: &[String]) -> Value {
    let except = |v6: bool| -> Vec<&str> {
        pod_cidrs
            .iter()
            .map(String::as_str)
            .chain(METADATA_BLOCKS)
            .filter(|c| c.contains(':') == v6)
            .collect()
    };
    json!({
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [
            {"from": [{"podSelector": {}}]},
            {"ports": [{"protocol": "TCP", "port": 8443}]},
        ],
        "egress": [
            {"to": [{"podSelector": {}}]},
            {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
             "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": except(false)}},
                    {"ipBlock": {"cidr": "::/0", "except": except(true)}}]},
        ],
    })
}

/// The Secret in each vCluster's namespace that carries the licence.
pub const LICENCE_SECRET: &str = "kubebyon-vcluster-licence";

/// The name of every control-plane namespace's NetworkPolicy.
pub const NETWORK_POLICY: &str = "kubebyon-isolation";

pub(crate) fn helm_chart() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("helm.cattle.io", "v1", "HelmChart"),
        "helmcharts",
    )
}

/// The Kubernetes patch release each supported minor runs.
pub fn kubernetes_image_tag(minor: &str) -> String {
    let patch = match minor {
        "1.31" => "13",
        "1.32" => "9",
        "1.33" => "5",
        _ => "1",
    };
    format!("v{minor}.{patch}")
}

/// The TLSRoute kind at `version`: `v1` (Gateway API v1.5 and later; the
/// only one the standard channel serves), or `v1alpha2` (served by every
/// release's experimental channel, deprecated since v1.5).
pub(super) fn tls_route(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", version, "TLSRoute"),
        "tlsroutes",
    )
}

/// The SNI host name of a cluster behind the shared Gateway.
pub fn sni_host(cluster: &Cluster, base_domain: &str) -> String {
    format!(
        "{}-{}.{base_domain}",
        cluster.vcluster_name,
        &cluster.id.simple().to_string()[..8]
    )
}

/// The Service a public access mode reaches the control plane through:
/// `<release>-public` for `nodeport`, `<release>-public-lb` for
/// `loadbalancer` (a LoadBalancer Service, or the shared HAProxy's
/// backend). A name each, so an endpoint switch keeps the old Service
/// serving while the new one is made and verified.
pub fn public_service_name(cluster: &Cluster, mode: PublicAccessMode) -> String {
    match mode {
        PublicAccessMode::Nodeport => format!("{}-public", cluster.vcluster_name),
        PublicAccessMode::Loadbalancer => format!("{}-public-lb", cluster.vcluster_name),
    }
}

/// Labels every object of a cluster carries.
pub(super) fn labels(cluster: &Cluster) -> Value {
    json!({
        "app.kubernetes.io/managed-by": "kubebyon",
        "kubebyon.dev/cluster-id": cluster.id.to_string(),
        "kubebyon.dev/owner": cluster.owner_user_id.to_string(),
    })
}

/// Files the cluster's API server is started with: a host Secret in the
/// cluster's namespace mounted read-only into the control plane, and the
/// arguments that name them. The tenant cannot reach either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiServerFiles {
    pub secret: &'static str,
    pub mount_path: &'static str,
    pub args: Vec<String>,
}

/// The networks every cluster made before networks were allocated runs
/// with (a control plane's networks cannot change once it is made).
const FORMER_POD_CIDR: &str = "10.64.0.0/16";
const FORMER_SERVICE_CIDR: &str = "10.128.0.0/16";

/// The names a control plane's certificate must carry for the addresses
/// its clients reach it on, each once, in order.
pub(super) fn certificate_names(public_hosts: &[String]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for host in public_hosts {
        if !names.contains(&host.as_str()) {
            names.push(host);
        }
    }
    names
}

/// The cluster's pod and Service networks.
pub(super) fn networks(cluster: &Cluster) -> (&str, &str) {
    (
        cluster.pod_cidr.as_deref().unwrap_or(FORMER_POD_CIDR),
        cluster
            .service_cidr
            .as_deref()
            .unwrap_or(FORMER_SERVICE_CIDR),
    )
}

/// vCluster's k8s distro starts kube-apiserver with these flags
/// (loft-sh/vcluster v0.29.1 `pkg/k8s/k8s.go`, embedded kine, private
/// nodes) and merges `extraArgs` over them by flag name, so
/// `--authorization-mode=Node,RBAC` cannot be taken away by `extraArgs`, and
/// kube-apiserver refuses it beside `--authorization-config`. With the
/// platform's files the whole command is given instead
/// (`controlPlane.distro.k8s.apiServer.command`): these, without
/// `--authorization-mode`, and the files' flags.
fn vcluster_api_server_command(service_cidr: &str, files: &ApiServerFiles) -> Vec<String> {
    let pki = "/data/pki";
    let mut command: Vec<String> = [
        "/binaries/kube-apiserver".to_string(),
        format!("--service-cluster-ip-range={service_cidr}"),
        "--bind-address=127.0.0.1".into(),
        "--allow-privileged=true".into(),
        format!("--client-ca-file={pki}/client-ca.crt"),
        "--enable-bootstrap-token-auth=true".into(),
        "--etcd-servers=unix:///data/kine.sock".into(),
        format!("--proxy-client-cert-file={pki}/front-proxy-client.crt"),
        format!("--proxy-client-key-file={pki}/front-proxy-client.key"),
        "--requestheader-allowed-names=front-proxy-client".into(),
        format!("--requestheader-client-ca-file={pki}/front-proxy-ca.crt"),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
        "--requestheader-group-headers=X-Remote-Group".into(),
        "--requestheader-username-headers=X-Remote-User".into(),
        "--secure-port=6443".into(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={pki}/sa.pub"),
        format!("--service-account-signing-key-file={pki}/sa.key"),
        format!("--tls-cert-file={pki}/apiserver.crt"),
        format!("--tls-private-key-file={pki}/apiserver.key"),
        "--profiling=false".into(),
        "--advertise-address=127.0.0.1".into(),
        "--endpoint-reconciler-type=none".into(),
        format!("--kubelet-client-certificate={pki}/apiserver-kubelet-client.crt"),
        format!("--kubelet-client-key={pki}/apiserver-kubelet-client.key"),
        "--enable-admission-plugins=NodeRestriction".into(),
    ]
    .into();
    command.extend(files.args.iter().cloned());
    command
}

/// The vCluster chart values (vcluster.yaml) for a cluster whose clients
/// reach its API server on `public_hosts` (in its certificate:
/// `controlPlane.proxy.extraSANs`; during an endpoint switch, the new
/// address and the old one).
pub fn vcluster_values(
    cluster: &Cluster,
    settings: &HostSettings,
    api_server: Option<&ApiServerFiles>,
    public_hosts: &[String],
) -> Value {
    let extra_sans = certificate_names(public_hosts);
    let (pod_cidr, service_cidr) = networks(cluster);
    let mut values = json!({
        "privateNodes": {"enabled": true, "autoUpgrade": {"enabled": false}},
        "controlPlane": {
            "distro": {"k8s": {"image": {"tag": kubernetes_image_tag(&cluster.kubernetes_version)}}},
            "statefulSet": {
                "persistence": {"volumeClaim": {
                    "enabled": true, "size": "5Gi", "storageClass": settings.storage_class,
                    "accessModes": ["ReadWriteOnce"]}},
                // Limits set, so the namespace's LimitRange defaults (a CPU
                // limit of 500m) never fall below the requests.
                "resources": {"requests": {
                    "cpu": format!("{}m", cluster.control_plane_cpu_request_milli_cores),
                    "memory": format!("{}Mi", cluster.control_plane_memory_request_mib)},
                    "limits": {
                    "cpu": format!("{}m", 2 * cluster.control_plane_cpu_request_milli_cores),
                    "memory": format!("{}Mi", 2 * cluster.control_plane_memory_request_mib)}},
            },
            "service": {"spec": {"type": "ClusterIP"}},
            "proxy": {"extraSANs": extra_sans},
        },
        "networking": {"podCIDR": pod_cidr, "serviceCIDR": service_cidr},
        "policies": {"resourceQuota": {"enabled": false}, "limitRange": {"enabled": false}},
    });
    if settings.engines.vcluster_licence.is_some() {
        // The Enterprise build reads its licence from this Secret.
        values["external"] = json!({"platform": {"apiKey": {"secretName": LICENCE_SECRET}}});
    }
    if let Some(files) = api_server {
        // The full command leaves out the Konnectivity egress selector
        // vCluster's Enterprise code writes at a path of its own: with it,
        // the server is off, and the API server reaches nodes directly.
        values["controlPlane"]["distro"]["k8s"]["apiServer"] =
            json!({"command": vcluster_api_server_command(service_cidr, files)});
        values["controlPlane"]["advanced"] =
            json!({"konnectivity": {"server": {"enabled": false}}});
        let persistence = &mut values["controlPlane"]["statefulSet"]["persistence"];
        persistence["addVolumes"] =
            json!([{"name": files.secret, "secret": {"secretName": files.secret}}]);
        persistence["addVolumeMounts"] =
            json!([{"name": files.secret, "mountPath": files.mount_path, "readOnly": true}]);
    }
    values
}
