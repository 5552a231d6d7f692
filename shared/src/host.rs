//! The host Kubernetes: where each cluster's namespace, quota, network
//! policy, vCluster control plane (a k3s `HelmChart`) and public endpoint live. Every write is a
//! server-side apply with one field manager, so every step is safe to rerun.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::StatefulSet,
        core::v1::{LimitRange, Namespace, Pod, ResourceQuota, Secret, Service},
        networking::v1::NetworkPolicy,
    },
    serde_json::{Value, json},
};
use kube::{
    Api, Client, Config,
    api::{AttachParams, DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
    core::{ApiResource, GroupVersionKind},
};

use crate::{
    config::{ConfigError, Source},
    db::clusters::Cluster,
    domain::PublicAccessMode,
    jobs::StepError as _,
};

/// The field manager of every object the platform applies.
pub const FIELD_MANAGER: &str = "kubebyon";

/// Settings of the host cluster adapter.
#[derive(Debug, Clone)]
pub struct HostSettings {
    /// `KUBEBYON_HOST_KUBECONFIG`: a kubeconfig file for the host cluster.
    pub kubeconfig: Option<PathBuf>,
    /// `KUBEBYON_CONTROL_PLANE_STORAGE_CLASS` (default `longhorn`).
    pub storage_class: String,
    /// `KUBEBYON_VCLUSTER_CHART_REPO` (default `https://charts.loft.sh`).
    pub chart_repo: String,
    /// `KUBEBYON_VCLUSTER_CHART_VERSION` (default `0.29.1`).
    pub chart_version: String,
    /// `KUBEBYON_HOST_NODE_ADDRESS`: the address nodes reach NodePort endpoints on.
    pub node_address: String,
    /// `KUBEBYON_CONTROL_PLANE_READY_TIMEOUT_MS` (default 15 minutes).
    pub ready_timeout: Duration,
    /// `KUBEBYON_HOST_POLL_MS` (default 2000): how often waits look again.
    pub poll_interval: Duration,
    /// How `loadbalancer` clusters are exposed (`KUBEBYON_LOADBALANCER_PROVIDER`).
    pub load_balancer: LoadBalancerProvider,
    /// `KUBEBYON_HOST_POD_CIDRS` (comma-separated, default k3s's
    /// `10.42.0.0/16`): the host's pod networks, which a control plane may
    /// not reach outside its own namespace.
    pub pod_cidrs: Vec<String>,
}

/// How a `loadbalancer` cluster's control plane is exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadBalancerProvider {
    /// A Service of type LoadBalancer per cluster (`service`, the default).
    Service,
    /// A TLS-passthrough `TLSRoute` per cluster on one shared Gateway, routed by
    /// SNI host name `<vcluster>-<id prefix>.<base domain>` (`gatewayapi`).
    GatewayApi {
        gateway_name: String,
        gateway_namespace: String,
        base_domain: String,
    },
}

impl HostSettings {
    pub fn from_source(source: &dyn Source) -> Result<Self, ConfigError> {
        let millis = |name: &'static str, default: u64| -> Result<Duration, ConfigError> {
            match source.get(name) {
                None => Ok(Duration::from_millis(default)),
                Some(raw) => raw
                    .parse::<u64>()
                    .ok()
                    .filter(|v| *v > 0)
                    .map(Duration::from_millis)
                    .ok_or(ConfigError::Invalid {
                        name,
                        reason: "must be a positive number of milliseconds".into(),
                    }),
            }
        };
        Ok(Self {
            kubeconfig: source.get("KUBEBYON_HOST_KUBECONFIG").map(PathBuf::from),
            storage_class: source
                .get("KUBEBYON_CONTROL_PLANE_STORAGE_CLASS")
                .unwrap_or_else(|| "longhorn".into()),
            chart_repo: source
                .get("KUBEBYON_VCLUSTER_CHART_REPO")
                .unwrap_or_else(|| "https://charts.loft.sh".into()),
            chart_version: source
                .get("KUBEBYON_VCLUSTER_CHART_VERSION")
                .unwrap_or_else(|| "0.29.1".into()),
            node_address: source
                .get("KUBEBYON_HOST_NODE_ADDRESS")
                .unwrap_or_else(|| "127.0.0.1".into()),
            ready_timeout: millis("KUBEBYON_CONTROL_PLANE_READY_TIMEOUT_MS", 15 * 60 * 1000)?,
            poll_interval: millis("KUBEBYON_HOST_POLL_MS", 2000)?,
            pod_cidrs: pod_cidrs(
                &source
                    .get("KUBEBYON_HOST_POD_CIDRS")
                    .unwrap_or_else(|| "10.42.0.0/16".into()),
            )?,
            load_balancer: match source.get("KUBEBYON_LOADBALANCER_PROVIDER").as_deref() {
                None | Some("service") => LoadBalancerProvider::Service,
                Some("gatewayapi") => LoadBalancerProvider::GatewayApi {
                    gateway_name: source.get("KUBEBYON_GATEWAY_NAME").ok_or(
                        ConfigError::Missing {
                            name: "KUBEBYON_GATEWAY_NAME",
                        },
                    )?,
                    gateway_namespace: source
                        .get("KUBEBYON_GATEWAY_NAMESPACE")
                        .unwrap_or_else(|| "kubebyon-system".into()),
                    base_domain: source.get("KUBEBYON_GATEWAY_BASE_DOMAIN").ok_or(
                        ConfigError::Missing {
                            name: "KUBEBYON_GATEWAY_BASE_DOMAIN",
                        },
                    )?,
                },
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        name: "KUBEBYON_LOADBALANCER_PROVIDER",
                        reason: format!("expected service or gatewayapi, got {other:?}"),
                    });
                }
            },
        })
    }
}

/// Parses a comma-separated list of CIDRs (`10.42.0.0/16`, `fd00:42::/56`).
fn pod_cidrs(raw: &str) -> Result<Vec<String>, ConfigError> {
    raw.split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|cidr| {
            let (ip, prefix) = cidr.split_once('/').unwrap_or((cidr, ""));
            let max = match ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(_)) => 32,
                Ok(std::net::IpAddr::V6(_)) => 128,
                Err(_) => 0,
            };
            match prefix.parse::<u8>() {
                Ok(p) if max > 0 && p <= max => Ok(cidr.to_string()),
                _ => Err(ConfigError::Invalid {
                    name: "KUBEBYON_HOST_POD_CIDRS",
                    reason: format!("{cidr:?} is not a CIDR such as 10.42.0.0/16"),
                }),
            }
        })
        .collect()
}

/// Parses a Kubernetes quantity into base units, scaled by `scale` (1000 for
/// millicores). `None` for anything unparseable.
pub fn quantity(raw: &str, scale: f64) -> Option<i64> {
    quantity_value(raw).map(|v| (v * scale).round() as i64)
}

/// A Kubernetes quantity in base units (`250m` is 0.25, `1Ki` is 1024);
/// `None` for anything unparseable or not finite (`1e400`: a tenant's
/// kubelet reports what it likes).
pub fn quantity_value(raw: &str) -> Option<f64> {
    let raw = raw.trim();
    let split = raw
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(raw.len());
    let (number, suffix) = raw.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * factor).filter(|v| v.is_finite())
}

/// The NetworkPolicy that fences a control plane's namespace: its pods talk
/// to each other; from outside, only the API port (8443, behind the public
/// endpoint) is open; out of it go DNS to `kube-system` and anything outside
/// the host's pod networks (the host API, the internet), never another
/// tenant's pods.
pub fn network_policy(cluster: &Cluster, settings: &HostSettings) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": NETWORK_POLICY, "namespace": cluster.namespace, "labels": labels(cluster)},
        "spec": isolation(&settings.pod_cidrs)})
}

/// Link-local addresses, where the cloud providers' instance metadata
/// answers (`169.254.169.254`), and AWS's IPv6 metadata address, which is
/// unique-local and so listed on its own: never a control plane's business.
const METADATA_BLOCKS: [&str; 3] = ["169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"];

/// The policy's rules, keeping the host's pod networks (`pod_cidrs`) and the
/// link-local and metadata addresses out of the egress blocks of their
/// address family.
fn isolation(pod_cidrs: &[String]) -> Value {
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

/// The name of every control-plane namespace's NetworkPolicy.
pub const NETWORK_POLICY: &str = "kubebyon-isolation";

/// The job error for a failure at `step`, in words for the user: retryable
/// when transient, fatal otherwise.
impl crate::jobs::StepError for HostError {
    fn at_step(self, step: &str) -> crate::jobs::JobError {
        if self.is_transient() {
            crate::jobs::JobError::retryable(format!("{step}: {self}"))
        } else {
            crate::jobs::JobError::fatal(format!("{step} failed: {self}"))
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot read the host kubeconfig: {0}")]
    Kubeconfig(String),
    /// The host API answered with an error.
    #[error("{message} ({code})")]
    Api { code: u16, message: String },
    /// The host API could not be reached or answered garbage.
    #[error("{0}")]
    Transport(String),
    #[error("{0}")]
    Invalid(String),
}

impl HostError {
    /// Worth another attempt: the API is down, busy, or lost a race.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Api { code, .. } => *code >= 500 || *code == 429 || *code == 409,
            Self::Transport(_) => true,
            Self::Kubeconfig(_) | Self::Invalid(_) => false,
        }
    }

    fn is_not_found(&self) -> bool {
        matches!(self, Self::Api { code: 404, .. })
    }
}

impl From<kube::Error> for HostError {
    fn from(err: kube::Error) -> Self {
        match err {
            kube::Error::Api(status) => Self::Api {
                code: status.code,
                message: status.message,
            },
            other => Self::Transport(other.to_string()),
        }
    }
}

/// Where a cluster's control plane is in its installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlPlaneState {
    Installing,
    Failed(String),
    Ready,
}

fn helm_chart() -> ApiResource {
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

fn tls_route() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1alpha2", "TLSRoute"),
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

/// The public endpoint Service of a cluster.
pub fn public_service_name(cluster: &Cluster) -> String {
    format!("{}-public", cluster.vcluster_name)
}

/// Labels every object of a cluster carries.
fn labels(cluster: &Cluster) -> Value {
    json!({
        "app.kubernetes.io/managed-by": "kubebyon",
        "kubebyon.dev/cluster-id": cluster.id.to_string(),
        "kubebyon.dev/owner": cluster.owner_user_id.to_string(),
    })
}

/// The vCluster chart values (vcluster.yaml) for a cluster.
pub fn vcluster_values(cluster: &Cluster, settings: &HostSettings) -> Value {
    let extra_sans: Vec<String> = match (&settings.load_balancer, cluster.public_access_mode) {
        (LoadBalancerProvider::GatewayApi { base_domain, .. }, PublicAccessMode::Loadbalancer) => {
            vec![sni_host(cluster, base_domain)]
        }
        _ => Vec::new(),
    };
    json!({
        "privateNodes": {"enabled": true, "autoUpgrade": {"enabled": false}},
        "controlPlane": {
            "distro": {"k8s": {"image": {"tag": kubernetes_image_tag(&cluster.kubernetes_version)}}},
            "statefulSet": {
                "persistence": {"volumeClaim": {
                    "enabled": true, "size": "5Gi", "storageClass": settings.storage_class,
                    "accessModes": ["ReadWriteOnce"]}},
                "resources": {"requests": {
                    "cpu": format!("{}m", cluster.control_plane_cpu_request_milli_cores),
                    "memory": format!("{}Mi", cluster.control_plane_memory_request_mib)}},
            },
            "service": {"spec": {"type": "ClusterIP"}},
            "proxy": {"extraSANs": extra_sans},
        },
        "networking": {"podCIDR": "10.64.0.0/16", "serviceCIDR": "10.128.0.0/16"},
        "policies": {"resourceQuota": {"enabled": false}, "limitRange": {"enabled": false}},
    })
}

pub struct HostCluster {
    client: Client,
    settings: HostSettings,
    /// Clients for clusters' own APIs kept between observation cycles, by
    /// cluster, with the endpoint they were built for.
    cluster_clients: std::sync::Mutex<std::collections::HashMap<uuid::Uuid, (String, Config)>>,
}

impl HostCluster {
    /// Connects with the kubeconfig file in the settings.
    pub async fn from_kubeconfig_file(settings: HostSettings) -> Result<Self, HostError> {
        let path = settings
            .kubeconfig
            .clone()
            .ok_or_else(|| HostError::Kubeconfig("KUBEBYON_HOST_KUBECONFIG is not set".into()))?;
        let kubeconfig =
            Kubeconfig::read_from(&path).map_err(|e| HostError::Kubeconfig(e.to_string()))?;
        Self::from_kubeconfig(kubeconfig, settings).await
    }

    /// Connects with a kubeconfig's current context.
    pub async fn from_kubeconfig(
        kubeconfig: Kubeconfig,
        settings: HostSettings,
    ) -> Result<Self, HostError> {
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| HostError::Kubeconfig(e.to_string()))?;
        Self::with_config(config, settings)
    }

    fn with_config(mut config: Config, settings: HostSettings) -> Result<Self, HostError> {
        // The job backbone retries with backoff and keeps the lease meanwhile; the
        // client's own retry layer would hold a job for minutes on a 503.
        config.default_retry = false;
        let client = Client::try_from(config).map_err(|e| HostError::Kubeconfig(e.to_string()))?;
        Ok(Self {
            client,
            settings,
            cluster_clients: Default::default(),
        })
    }

    pub fn settings(&self) -> &HostSettings {
        &self.settings
    }

    fn apply_params() -> PatchParams {
        PatchParams::apply(FIELD_MANAGER).force()
    }

    pub async fn ensure_namespace(&self, cluster: &Cluster) -> Result<(), HostError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let object = json!({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": cluster.namespace, "labels": labels(cluster)}});
        api.patch(
            &cluster.namespace,
            &Self::apply_params(),
            &Patch::Apply(object),
        )
        .await?;
        Ok(())
    }

    /// Bounds what the control plane may take from the host. With private nodes
    /// the tenant's workloads run on the tenant's machines, not here.
    pub async fn ensure_limits(&self, cluster: &Cluster) -> Result<(), HostError> {
        let ns = &cluster.namespace;
        let quotas: Api<ResourceQuota> = Api::namespaced(self.client.clone(), ns);
        let cpu = cluster.control_plane_cpu_request_milli_cores * 2;
        let memory = cluster.control_plane_memory_request_mib * 2;
        let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "kubebyon-control-plane", "namespace": ns, "labels": labels(cluster)},
            "spec": {"hard": {
                "requests.cpu": format!("{cpu}m"), "requests.memory": format!("{memory}Mi"),
                "limits.cpu": format!("{}m", cpu * 2), "limits.memory": format!("{}Mi", memory * 2),
                "pods": "10", "persistentvolumeclaims": "2",
                "services.loadbalancers": "1", "services.nodeports": "2"}}});
        quotas
            .patch(
                "kubebyon-control-plane",
                &Self::apply_params(),
                &Patch::Apply(quota),
            )
            .await?;
        let ranges: Api<LimitRange> = Api::namespaced(self.client.clone(), ns);
        let range = json!({"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "kubebyon-defaults", "namespace": ns, "labels": labels(cluster)},
            "spec": {"limits": [{"type": "Container",
                "defaultRequest": {"cpu": "50m", "memory": "64Mi"},
                "default": {"cpu": "500m", "memory": "512Mi"}}]}});
        ranges
            .patch(
                "kubebyon-defaults",
                &Self::apply_params(),
                &Patch::Apply(range),
            )
            .await?;
        Ok(())
    }

    /// Fences the control plane's namespace off from the host's other pods
    /// ([`network_policy`]).
    pub async fn ensure_isolation(&self, cluster: &Cluster) -> Result<(), HostError> {
        let api: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &cluster.namespace);
        api.patch(
            NETWORK_POLICY,
            &Self::apply_params(),
            &Patch::Apply(network_policy(cluster, &self.settings)),
        )
        .await?;
        Ok(())
    }

    /// The vCluster control plane, as a k3s `HelmChart` in the cluster's namespace.
    pub async fn ensure_control_plane(&self, cluster: &Cluster) -> Result<(), HostError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &cluster.namespace, &helm_chart());
        let values = vcluster_values(cluster, &self.settings);
        let chart = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": cluster.vcluster_name, "namespace": cluster.namespace, "labels": labels(cluster)},
        "spec": {
            "repo": self.settings.chart_repo, "chart": "vcluster", "version": self.settings.chart_version,
            "targetNamespace": cluster.namespace,
            // JSON is YAML: the helm controller reads it as vcluster.yaml.
            "valuesContent": values.to_string(),
        }});
        api.patch(
            &cluster.vcluster_name,
            &Self::apply_params(),
            &Patch::Apply(chart),
        )
        .await?;
        Ok(())
    }

    /// What nodes dial: a NodePort or LoadBalancer Service by the cluster's mode,
    /// or, for `loadbalancer` behind the shared Gateway, a TLS-passthrough
    /// `TLSRoute`. The other kind is removed, so a mode change leaves nothing behind.
    pub async fn ensure_public_endpoint(&self, cluster: &Cluster) -> Result<(), HostError> {
        let services: Api<Service> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let routes: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &cluster.namespace, &tls_route());
        let name = public_service_name(cluster);
        let service_type = match (cluster.public_access_mode, &self.settings.load_balancer) {
            (PublicAccessMode::Nodeport, _) => "NodePort",
            (PublicAccessMode::Loadbalancer, LoadBalancerProvider::Service) => "LoadBalancer",
            (
                PublicAccessMode::Loadbalancer,
                LoadBalancerProvider::GatewayApi {
                    gateway_name,
                    gateway_namespace,
                    base_domain,
                },
            ) => {
                let route = json!({"apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TLSRoute",
                "metadata": {"name": cluster.vcluster_name, "namespace": cluster.namespace, "labels": labels(cluster)},
                "spec": {
                    "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                    "name": gateway_name, "namespace": gateway_namespace}],
                    "hostnames": [sni_host(cluster, base_domain)],
                    "rules": [{"backendRefs": [{"name": cluster.vcluster_name, "port": 443}]}],
                }});
                routes
                    .patch(
                        &cluster.vcluster_name,
                        &Self::apply_params(),
                        &Patch::Apply(route),
                    )
                    .await?;
                return ignore_not_found(
                    services
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map(|_| ()),
                );
            }
        };
        let service = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": cluster.namespace, "labels": labels(cluster)},
            "spec": {"type": service_type,
                     "selector": {"app": "vcluster", "release": cluster.vcluster_name},
                     "ports": [{"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}]}});
        services
            .patch(&name, &Self::apply_params(), &Patch::Apply(service))
            .await?;
        ignore_not_found(
            routes
                .delete(&cluster.vcluster_name, &DeleteParams::default())
                .await
                .map(|_| ()),
        )
    }

    pub async fn control_plane_state(
        &self,
        cluster: &Cluster,
    ) -> Result<ControlPlaneState, HostError> {
        let charts: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &cluster.namespace, &helm_chart());
        let chart = charts.get(&cluster.vcluster_name).await?;
        let failed = chart
            .data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Failed" && c["status"] == "True");
        if let Some(condition) = failed {
            let message = condition["message"]
                .as_str()
                .unwrap_or("the chart install job failed");
            return Ok(ControlPlaneState::Failed(message.to_string()));
        }
        let statefulsets: Api<StatefulSet> =
            Api::namespaced(self.client.clone(), &cluster.namespace);
        let ready = match statefulsets.get_opt(&cluster.vcluster_name).await? {
            Some(set) => set.status.and_then(|s| s.ready_replicas).unwrap_or(0) >= 1,
            None => false,
        };
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let secret = secrets
            .get_opt(&format!("vc-{}", cluster.vcluster_name))
            .await?;
        Ok(if ready && secret.is_some() {
            ControlPlaneState::Ready
        } else {
            ControlPlaneState::Installing
        })
    }

    /// The endpoint nodes and users reach the control plane on, once allocated.
    pub async fn public_endpoint(&self, cluster: &Cluster) -> Result<Option<Endpoint>, HostError> {
        if let (
            PublicAccessMode::Loadbalancer,
            LoadBalancerProvider::GatewayApi { base_domain, .. },
        ) = (cluster.public_access_mode, &self.settings.load_balancer)
        {
            // Ready once the Gateway accepted the route.
            let routes: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &cluster.namespace, &tls_route());
            let accepted = routes
                .get_opt(&cluster.vcluster_name)
                .await?
                .is_some_and(|route| {
                    route
                        .data
                        .pointer("/status/parents")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .flat_map(|parent| {
                            parent["conditions"].as_array().cloned().unwrap_or_default()
                        })
                        .any(|c| c["type"] == "Accepted" && c["status"] == "True")
                });
            return Ok(accepted.then(|| Endpoint {
                host: sni_host(cluster, base_domain),
                port: 443,
            }));
        }
        let api: Api<Service> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let Some(service) = api.get_opt(&public_service_name(cluster)).await? else {
            return Ok(None);
        };
        let spec = service.spec.unwrap_or_default();
        let port = spec.ports.unwrap_or_default().into_iter().next();
        let endpoint = match spec.type_.as_deref() {
            Some("NodePort") => port.and_then(|p| p.node_port).map(|node_port| Endpoint {
                host: self.settings.node_address.clone(),
                port: node_port,
            }),
            Some("LoadBalancer") => service
                .status
                .and_then(|s| s.load_balancer)
                .and_then(|lb| lb.ingress)
                .and_then(|ingress| ingress.into_iter().next())
                .and_then(|ingress| {
                    let host = ingress.hostname.or(ingress.ip)?;
                    let port = ingress
                        .ports
                        .and_then(|ports| ports.first().map(|p| p.port))
                        .or(port.map(|p| p.port))?;
                    Some(Endpoint { host, port })
                }),
            _ => None,
        };
        Ok(endpoint)
    }

    /// Waits, polling, until the control plane is ready and its public endpoint
    /// allocated. A failed chart install is fatal ("`action` failed: …"); running
    /// out of `ready_timeout` is retryable. The caller's lease heartbeats meanwhile.
    pub async fn await_control_plane(
        &self,
        cluster: &Cluster,
        action: &str,
    ) -> Result<Endpoint, crate::jobs::JobError> {
        use crate::jobs::JobError;
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        loop {
            let state = self
                .control_plane_state(cluster)
                .await
                .map_err(|e| e.at_step("checking the control plane"))?;
            match state {
                ControlPlaneState::Failed(message) => {
                    return Err(JobError::fatal(format!("{action} failed: {message}")));
                }
                ControlPlaneState::Ready => {
                    let endpoint = self
                        .public_endpoint(cluster)
                        .await
                        .map_err(|e| e.at_step("reading the public endpoint"))?;
                    if let Some(endpoint) = endpoint {
                        return Ok(endpoint);
                    }
                }
                ControlPlaneState::Installing => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(JobError::retryable(format!(
                    "the control plane was not ready within {} s",
                    self.settings.ready_timeout.as_secs()
                )));
            }
            tokio::time::sleep(self.settings.poll_interval).await;
        }
    }

    /// The admin kubeconfig vCluster wrote into its Secret, parsed.
    async fn stored_kubeconfig(&self, cluster: &Cluster) -> Result<Option<Kubeconfig>, HostError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let Some(secret) = secrets
            .get_opt(&format!("vc-{}", cluster.vcluster_name))
            .await?
        else {
            return Ok(None);
        };
        let data: BTreeMap<_, _> = secret.data.unwrap_or_default();
        let raw = data.get("config").ok_or_else(|| {
            HostError::Invalid("the kubeconfig Secret has no `config` key".into())
        })?;
        let text = std::str::from_utf8(&raw.0)
            .map_err(|e| HostError::Invalid(format!("the kubeconfig is not UTF-8: {e}")))?;
        Kubeconfig::from_yaml(text)
            .map(Some)
            .map_err(|e| HostError::Invalid(format!("the kubeconfig does not parse: {e}")))
    }

    /// The admin kubeconfig vCluster wrote, with its server rewritten to the public
    /// endpoint. Returned as JSON, which every kubeconfig reader accepts as YAML.
    pub async fn kubeconfig(
        &self,
        cluster: &Cluster,
        server: &str,
    ) -> Result<Option<String>, HostError> {
        let Some(mut kubeconfig) = self.stored_kubeconfig(cluster).await? else {
            return Ok(None);
        };
        for named in &mut kubeconfig.clusters {
            if let Some(cluster) = named.cluster.as_mut() {
                cluster.server = Some(server.to_string());
            }
        }
        serde_json::to_string_pretty(&kubeconfig)
            .map(Some)
            .map_err(|e| HostError::Invalid(e.to_string()))
    }

    /// The PEM of the CA the cluster's API certificate is signed by, when its
    /// kubeconfig carries one (what a joining node pins).
    pub async fn certificate_authority(
        &self,
        cluster: &Cluster,
    ) -> Result<Option<String>, HostError> {
        use base64::Engine;
        let Some(kubeconfig) = self.stored_kubeconfig(cluster).await? else {
            return Ok(None);
        };
        let Some(data) = kubeconfig
            .clusters
            .iter()
            .find_map(|c| c.cluster.as_ref()?.certificate_authority_data.clone())
        else {
            return Ok(None);
        };
        let pem = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| {
                HostError::Invalid(format!("certificate-authority-data is not base64: {e}"))
            })?;
        String::from_utf8(pem)
            .map(Some)
            .map_err(|e| HostError::Invalid(format!("the CA is not PEM text: {e}")))
    }

    /// A client for the cluster's own API (the vCluster), through its public
    /// endpoint with the admin credentials. No retries: callers decide.
    pub async fn vcluster_client(
        &self,
        cluster: &Cluster,
        server: &str,
    ) -> Result<Client, HostError> {
        Client::try_from(self.vcluster_config(cluster, server).await?)
            .map_err(|e| HostError::Kubeconfig(e.to_string()))
    }

    /// The client configuration for the cluster's own API, from its kubeconfig Secret.
    async fn vcluster_config(&self, cluster: &Cluster, server: &str) -> Result<Config, HostError> {
        let text = self
            .kubeconfig(cluster, server)
            .await?
            .ok_or_else(|| HostError::Invalid("the kubeconfig Secret does not exist".into()))?;
        let kubeconfig =
            Kubeconfig::from_yaml(&text).map_err(|e| HostError::Invalid(e.to_string()))?;
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| HostError::Kubeconfig(e.to_string()))?;
        config.default_retry = false;
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(Duration::from_secs(10));
        Ok(config)
    }

    /// Calls `call` with every ready cluster and a client for its own API,
    /// `concurrency` clusters at a time, each within `timeout` when given
    /// (building the client included). The shared loop of the observation
    /// schedules; a cluster whose call failed comes back with the reason.
    /// Clients are kept between calls (so a cycle reads no kubeconfig Secret),
    /// and rebuilt after a failure or when the endpoint changed.
    pub async fn across_ready_clusters<T, F, Fut>(
        &self,
        pool: &sqlx::PgPool,
        concurrency: usize,
        timeout: Option<Duration>,
        call: F,
    ) -> Result<Vec<(Cluster, Result<T, String>)>, sqlx::Error>
    where
        F: Fn(Cluster, Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        use futures_util::{StreamExt, stream};
        let clusters = crate::db::clusters::list_observable(pool).await?;
        self.cluster_clients
            .lock()
            .expect("lock")
            .retain(|id, _| clusters.iter().any(|c| c.id == *id));
        let call = &call;
        Ok(stream::iter(clusters)
            .map(|cluster| async move {
                let attempt = async {
                    let server = cluster
                        .api_endpoint
                        .as_deref()
                        .ok_or("the cluster has no endpoint")?;
                    let client = self
                        .cached_cluster_client(&cluster, server)
                        .await
                        .map_err(|e| e.to_string())?;
                    call(cluster.clone(), client).await
                };
                let result = match timeout {
                    Some(limit) => tokio::time::timeout(limit, attempt)
                        .await
                        .unwrap_or_else(|_| Err("the control plane did not answer in time".into())),
                    None => attempt.await,
                };
                if result.is_err() {
                    // Next time, read the kubeconfig again: it may have changed.
                    self.cluster_clients
                        .lock()
                        .expect("lock")
                        .remove(&cluster.id);
                }
                (cluster, result)
            })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await)
    }

    /// The kept client for the cluster's own API, or a new one (kept) when
    /// there is none for this endpoint.
    async fn cached_cluster_client(
        &self,
        cluster: &Cluster,
        server: &str,
    ) -> Result<Client, HostError> {
        let kept = match self.cluster_clients.lock().expect("lock").get(&cluster.id) {
            Some((kept_for, config)) if kept_for == server => Some(config.clone()),
            _ => None,
        };
        let config = match kept {
            Some(config) => config,
            None => {
                let config = self.vcluster_config(cluster, server).await?;
                self.cluster_clients
                    .lock()
                    .expect("lock")
                    .insert(cluster.id, (server.to_string(), config.clone()));
                config
            }
        };
        Client::try_from(config).map_err(|e| HostError::Kubeconfig(e.to_string()))
    }

    /// The metrics API's view (`metrics.k8s.io/v1beta1` PodMetrics, from
    /// metrics-server) of the cluster's control-plane pods: per pod, each
    /// container's CPU (cores) and memory working set (bytes).
    pub async fn control_plane_metrics(
        &self,
        cluster: &Cluster,
    ) -> Result<Vec<PodUsage>, HostError> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics"),
            "pods",
        );
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &cluster.namespace, &resource);
        let selector = format!("app=vcluster,release={}", cluster.vcluster_name);
        let list = api.list(&ListParams::default().labels(&selector)).await?;
        Ok(list
            .items
            .into_iter()
            .map(|pod| PodUsage {
                pod: pod.metadata.name.clone().unwrap_or_default(),
                containers: pod.data["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| ContainerUsage {
                        name: c["name"].as_str().unwrap_or_default().to_string(),
                        cpu_cores: c["usage"]["cpu"]
                            .as_str()
                            .and_then(quantity_value)
                            .unwrap_or(0.0),
                        memory_bytes: c["usage"]["memory"]
                            .as_str()
                            .and_then(quantity_value)
                            .unwrap_or(0.0) as i64,
                    })
                    .collect(),
            })
            .collect())
    }

    /// Runs `command` in a container of a pod of the cluster's namespace (the
    /// `pods/exec` subresource over a WebSocket) and returns what it wrote to
    /// stdout; more than `limit` bytes, or a non-zero exit (with the status the
    /// kubelet sent), is an error.
    pub async fn exec_output(
        &self,
        cluster: &Cluster,
        pod: &str,
        container: &str,
        command: &[&str],
        limit: u64,
    ) -> Result<String, HostError> {
        use tokio::io::AsyncReadExt;

        let api: Api<Pod> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let params = AttachParams::default()
            .container(container)
            .stdin(false)
            .stdout(true)
            .stderr(false);
        let mut process = api.exec(pod, command.iter().copied(), &params).await?;
        let mut stdout = process
            .stdout()
            .ok_or_else(|| HostError::Transport("the exec stream has no stdout".into()))?;
        let status = process
            .take_status()
            .ok_or_else(|| HostError::Transport("the exec stream has no status".into()))?;
        let mut output = Vec::new();
        (&mut stdout)
            .take(limit)
            .read_to_end(&mut output)
            .await
            .map_err(|e| HostError::Transport(format!("reading the command's output: {e}")))?;
        if output.len() as u64 >= limit {
            process.abort();
            return Err(HostError::Invalid(format!(
                "`{}` in {pod}/{container} wrote more than {limit} bytes",
                command.first().copied().unwrap_or_default()
            )));
        }
        drop(stdout);
        let status = status.await;
        process
            .join()
            .await
            .map_err(|e| HostError::Transport(format!("the exec stream: {e}")))?;
        match status {
            None => Err(HostError::Transport(
                "the exec stream ended without the command's status".into(),
            )),
            Some(status) if status.status.as_deref() != Some("Success") => {
                Err(HostError::Invalid(format!(
                    "`{}` in {pod}/{container} failed: {}",
                    command.first().copied().unwrap_or_default(),
                    status.message.as_deref().unwrap_or("no message")
                )))
            }
            Some(_) => String::from_utf8(output)
                .map_err(|_| HostError::Invalid("the command's output is not UTF-8".into())),
        }
    }

    /// Starts deleting the cluster's namespace; everything in it goes with it.
    pub async fn delete_namespace(&self, cluster: &Cluster) -> Result<(), HostError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        ignore_not_found(
            api.delete(&cluster.namespace, &DeleteParams::foreground())
                .await
                .map(|_| ()),
        )
    }

    pub async fn namespace_exists(&self, cluster: &Cluster) -> Result<bool, HostError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        Ok(api.get_opt(&cluster.namespace).await?.is_some())
    }
}

fn ignore_not_found(result: Result<(), kube::Error>) -> Result<(), HostError> {
    match result.map_err(HostError::from) {
        Err(err) if err.is_not_found() => Ok(()),
        other => other,
    }
}

/// One pod's usage as the metrics API reports it.
#[derive(Debug, Clone)]
pub struct PodUsage {
    pub pod: String,
    pub containers: Vec<ContainerUsage>,
}

#[derive(Debug, Clone)]
pub struct ContainerUsage {
    pub name: String,
    pub cpu_cores: f64,
    pub memory_bytes: i64,
}

/// A host and port the control plane is reachable on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: i32,
}

impl Endpoint {
    /// The endpoint's URL: Kubernetes APIs speak HTTPS only.
    pub fn url(&self) -> String {
        format!("https://{}:{}", self.host, self.port)
    }
}

/// The host adapter a job acts on, or the honest failure `reason` when none is
/// configured (recorded at the stage "connecting to the host cluster").
pub async fn require<'a>(
    host: &'a Option<std::sync::Arc<HostCluster>>,
    ctx: &crate::jobs::JobContext,
    reason: &str,
) -> Result<&'a HostCluster, crate::jobs::JobError> {
    match host {
        Some(host) => Ok(host),
        None => {
            ctx.stage("connecting to the host cluster").await?;
            Err(crate::jobs::JobError::fatal(reason))
        }
    }
}

/// The host adapter configured by `KUBEBYON_HOST_KUBECONFIG`, or `None` when
/// no host cluster is configured (cluster jobs then fail and say so).
pub async fn from_env() -> anyhow::Result<Option<std::sync::Arc<HostCluster>>> {
    let settings = HostSettings::from_source(&crate::config::ProcessEnv)?;
    if settings.kubeconfig.is_none() {
        return Ok(None);
    }
    Ok(Some(std::sync::Arc::new(
        HostCluster::from_kubeconfig_file(settings).await?,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(cidrs: &str) -> Result<HostSettings, ConfigError> {
        HostSettings::from_source(&std::collections::HashMap::from([(
            "KUBEBYON_HOST_POD_CIDRS",
            cidrs,
        )]))
    }

    #[test]
    fn quantities_in_every_suffix() {
        assert_eq!(quantity("4", 1000.0), Some(4000));
        assert_eq!(quantity("3800m", 1000.0), Some(3800));
        assert_eq!(quantity("16Gi", 1.0), Some(16 * 1024 * 1024 * 1024));
        assert_eq!(quantity("16384Ki", 1.0), Some(16 * 1024 * 1024));
        assert_eq!(quantity("1e3", 1.0), Some(1000));
        assert_eq!(quantity("2G", 1.0), Some(2_000_000_000));
        assert_eq!(quantity("lots", 1.0), None);
        assert_eq!(
            quantity("1e400", 1.0),
            None,
            "a kubelet's infinity is no figure"
        );
        assert_eq!(quantity("250000000n", 1000.0), Some(250));
        assert_eq!(quantity("1500u", 1e6), Some(1500));
    }

    #[test]
    fn pod_networks_are_cidrs_and_each_family_is_kept_out_of_its_own_block() {
        let dual = settings("10.42.0.0/16, fd00:42::/56").unwrap();
        assert_eq!(dual.pod_cidrs, ["10.42.0.0/16", "fd00:42::/56"]);
        let blocks = &isolation(&dual.pod_cidrs)["egress"][2]["to"];
        assert_eq!(
            blocks[0]["ipBlock"]["except"],
            json!(["10.42.0.0/16", "169.254.0.0/16"])
        );
        assert_eq!(
            blocks[1]["ipBlock"]["except"],
            json!(["fd00:42::/56", "fe80::/10", "fd00:ec2::254/128"])
        );
        for bad in [
            "10.42.0.0",
            "10.42.0.0/33",
            "fd00::/129",
            "pods/16",
            "10.42.0.0/x",
        ] {
            assert!(settings(bad).is_err(), "{bad}");
        }
    }
}
