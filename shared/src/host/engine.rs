//! The control-plane engines: what a cluster's control plane is on the
//! host, behind one seam ([`ControlPlaneEngine`]). Two implementations:
//! [`Kamaji`] (a `TenantControlPlane` of clastix/kamaji, open source, the
//! default) and [`Vcluster`] (a vCluster with private nodes through k3s's
//! helm controller, an Enterprise feature: only with the operator's
//! licence). The engine is recorded per cluster ([`Engine`]) and never
//! changes; a new cluster gets the platform's ([`Config::default`]).

use k8s_openapi::serde_json::{Value, json};
use kube::core::{ApiResource, GroupVersionKind};

pub use super::engine_settings::{Config, Licence};
use super::{
    chart::{ApiServerFiles, LICENCE_SECRET, labels, vcluster_values},
    settings::HostSettings,
};
use crate::{clusters::Cluster, domain::Engine};

/// Where a cluster's control plane is in its installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlPlaneState {
    Installing,
    Failed(String),
    Ready,
}

/// The message of a chart's `Failed` condition, when its install failed.
fn chart_failure(chart: &Value) -> Option<String> {
    let condition = chart
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == "Failed" && c["status"] == "True")?;
    Some(
        condition["message"]
            .as_str()
            .unwrap_or("the chart install job failed")
            .to_string(),
    )
}

/// What an engine makes of a cluster on the host. Everything the platform
/// does with a control plane goes through here; the engine's controller
/// (Kamaji's, or k3s's helm controller with vCluster's chart) does the rest.
pub trait ControlPlaneEngine: Sync {
    /// The kind of the object its controller turns into a control plane.
    fn kind(&self) -> ApiResource;
    /// That object for `cluster`, its API server started with `files`, its
    /// certificate naming `public_hosts`, and, for a [`Join::Kubeadm`]
    /// engine, listening on and advertising to nodes `advertised`.
    fn object(
        &self,
        cluster: &Cluster,
        settings: &HostSettings,
        files: Option<&ApiServerFiles>,
        public_hosts: &[String],
        advertised: Option<&Advertised>,
    ) -> Value;
    /// How nodes join its clusters.
    fn join(&self) -> Join;
    /// Where the object stands, by its status alone.
    fn state(&self, object: &Value) -> ControlPlaneState;
    /// A StatefulSet that must have a ready replica too, when the object's
    /// status does not say the control plane is running.
    fn workload(&self, cluster: &Cluster) -> Option<String>;
    /// The host Secret holding the admin kubeconfig (a `system:masters`
    /// identity), and its key.
    fn admin_kubeconfig(&self, cluster: &Cluster) -> (String, &'static str);
    /// The labels of the control plane's pods.
    fn api_pods(&self, cluster: &Cluster) -> Value;
    /// Those labels as a label selector (`key=value,…`).
    fn api_pod_selector(&self, cluster: &Cluster) -> String {
        self.api_pods(cluster)
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(",")
    }
    /// The port the API server listens on in those pods.
    fn api_port(&self) -> i32;
    /// The port of the tunnel server nodes' agents dial besides the API
    /// server (Konnectivity's), when the engine runs one.
    fn tunnel_port(&self) -> Option<i32>;
    /// The container of those pods whose `/proc` shows the control plane,
    /// with a shell to read it by; `None` when the engine's images have no
    /// shell.
    fn shell_container(&self) -> Option<&'static str>;
    /// The name of a control-plane pod, when it is known without asking.
    fn first_pod(&self, cluster: &Cluster) -> Option<String>;
    /// The engine's own Service in front of the API server, and its port.
    fn service(&self, cluster: &Cluster) -> (String, i32);
    /// What the control plane may request and use from the host at most,
    /// while it is replaced too.
    fn quota(&self, cluster: &Cluster) -> Quota;
    /// Secrets the object names that the platform writes first.
    fn secrets(&self, settings: &HostSettings) -> Vec<(&'static str, Vec<(&'static str, String)>)>;
}

/// How nodes join a cluster's control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// vCluster's join endpoint (`/node/join`) hands out its own script,
    /// which runs `kubeadm join`.
    VclusterEndpoint,
    /// The platform's script runs `kubeadm join` with token discovery: the
    /// node reads `cluster-info` and then dials the server it names, the
    /// endpoint the control plane advertises ([`Advertised`]).
    Kubeadm,
}

impl Join {
    /// The group the platform's bootstrap tokens put a joining kubelet in.
    /// vCluster's private-node RBAC grants kubeadm's default node group,
    /// whose auto-approval the platform deletes. Kamaji makes that
    /// approval again whenever `cluster-info` changes (every new token
    /// changes it), so there the tokens carry a group of the platform's,
    /// granted what `kubeadm join` reads and never auto-approval.
    pub fn bootstrap_group(self) -> &'static str {
        match self {
            Self::VclusterEndpoint => "system:bootstrappers:kubeadm:default-node-token",
            Self::Kubeadm => "system:bootstrappers:kubebyon:join",
        }
    }
}

/// Where a control plane's API server listens and what it tells nodes to
/// dial: the host node's address (an IP, as `--advertise-address` needs)
/// and the cluster's node port, the same number, so that what the API
/// server advertises (`cluster-info`, the tenant's `kubernetes` Service) is
/// what nodes reach; and likewise the node port of its tunnel server
/// (Konnectivity), once it has one, on which the nodes' agents dial it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advertised {
    pub address: std::net::IpAddr,
    pub port: i32,
    pub tunnel_port: Option<i32>,
}

/// A control plane's bounds on the host: CPU in millicores, memory in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub requests_cpu: i32,
    pub requests_memory: i32,
    pub limits_cpu: i32,
    pub limits_memory: i32,
}

/// The engine of a cluster.
pub fn of(engine: Engine) -> &'static dyn ControlPlaneEngine {
    match engine {
        Engine::Kamaji => &Kamaji,
        Engine::Vcluster => &Vcluster,
    }
}

/// A Kamaji `TenantControlPlane` (clastix/kamaji, `api/v1alpha1`).
pub struct Kamaji;

/// The Kamaji release the platform is written against, and the newest
/// Kubernetes minor it runs (`internal/upgrade/kubeadm_version.go`).
pub const KAMAJI_RELEASE: &str = "26.8.2-edge";

fn tenant_control_plane() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kamaji.clastix.io", "v1alpha1", "TenantControlPlane"),
        "tenantcontrolplanes",
    )
}

/// The containers beside the API server in a Kamaji pod (controller
/// manager, scheduler, Konnectivity server, and kine with a SQL DataStore),
/// each given these bounds: set, so the namespace's LimitRange defaults
/// (a CPU limit below the API server's request) never apply.
const KAMAJI_SIDECARS: i32 = 4;
const SIDECAR_REQUESTS: (i32, i32) = (50, 64);
const SIDECAR_LIMITS: (i32, i32) = (250, 256);

fn resources(requests: (i32, i32), limits: (i32, i32)) -> Value {
    json!({"requests": {"cpu": format!("{}m", requests.0), "memory": format!("{}Mi", requests.1)},
           "limits": {"cpu": format!("{}m", limits.0), "memory": format!("{}Mi", limits.1)}})
}

impl ControlPlaneEngine for Kamaji {
    fn kind(&self) -> ApiResource {
        tenant_control_plane()
    }

    fn object(
        &self,
        cluster: &Cluster,
        settings: &HostSettings,
        files: Option<&ApiServerFiles>,
        public_hosts: &[String],
        advertised: Option<&Advertised>,
    ) -> Value {
        let sans = super::chart::certificate_names(public_hosts);
        let (pod_cidr, service_cidr) = super::chart::networks(cluster);
        let requests = (
            cluster.control_plane_cpu_request_milli_cores,
            cluster.control_plane_memory_request_mib,
        );
        let sidecar = resources(SIDECAR_REQUESTS, SIDECAR_LIMITS);
        let mut deployment = json!({
            // One replica, replaced blue/green (Kamaji's default strategy,
            // maxSurge 100%): the quota leaves room for two.
            "replicas": 1,
            "resources": {
                "apiServer": resources(requests, (2 * requests.0, 2 * requests.1)),
                "controllerManager": sidecar,
                "scheduler": sidecar,
                "kine": sidecar,
            },
        });
        if let Some(files) = files {
            // Kamaji drops its own `--authorization-mode=Node,RBAC` when
            // these carry `--authorization-config`, as kubeadm does.
            deployment["extraArgs"] = json!({"apiServer": files.args});
            deployment["additionalVolumes"] =
                json!([{"name": files.secret, "secret": {"secretName": files.secret}}]);
            deployment["additionalVolumeMounts"] = json!({"apiServer": [
                {"name": files.secret, "mountPath": files.mount_path, "readOnly": true}]});
        }
        let mut spec = json!({
            "controlPlane": {
                "deployment": deployment,
                "service": {"serviceType": "ClusterIP"},
            },
            "kubernetes": {
                "version": super::chart::kubernetes_image_tag(&cluster.kubernetes_version),
                "kubelet": {"cgroupfs": "systemd"},
            },
            "networkProfile": {
                "port": advertised.map_or(KAMAJI_PORT, |a| a.port),
                "certSANs": sans,
                "podCidr": pod_cidr,
                "serviceCidr": service_cidr,
            },
            "addons": {
                "coreDNS": {},
                "kubeProxy": {},
                // Nodes dial the control plane; logs and exec come back
                // over the agent's connection.
                "konnectivity": {"server": {
                    "port": advertised.and_then(|a| a.tunnel_port).unwrap_or(KONNECTIVITY_PORT),
                    "resources": sidecar,
                }},
            },
        });
        if let Some(advertised) = advertised {
            // Kamaji's `status.controlPlaneEndpoint`, and so kubeadm's
            // `cluster-info` (internal/resources/k8s_service_resource.go).
            spec["networkProfile"]["address"] = json!(advertised.address.to_string());
        }
        if let Some(datastore) = &settings.engines.kamaji_datastore {
            spec["dataStore"] = json!(datastore);
        }
        json!({"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
            "metadata": {"name": cluster.vcluster_name, "namespace": cluster.namespace, "labels": labels(cluster)},
            "spec": spec})
    }

    fn join(&self) -> Join {
        Join::Kubeadm
    }

    fn state(&self, object: &Value) -> ControlPlaneState {
        // `status.kubernetesResources.version.status`: Provisioning,
        // Upgrading, Ready, NotReady, … (tenantcontrolplane_status.go).
        match object
            .pointer("/status/kubernetesResources/version/status")
            .and_then(Value::as_str)
        {
            Some("Ready") => ControlPlaneState::Ready,
            _ => ControlPlaneState::Installing,
        }
    }

    fn workload(&self, _cluster: &Cluster) -> Option<String> {
        None
    }

    fn admin_kubeconfig(&self, cluster: &Cluster) -> (String, &'static str) {
        // `<name>-admin-kubeconfig`; `super-admin.conf` is `system:masters`,
        // which no RBAC binding the tenant deletes locks out
        // (internal/resources/kubeconfig.go, internal/utilities/tenant_client.go).
        (
            format!("{}-admin-kubeconfig", cluster.vcluster_name),
            "super-admin.conf",
        )
    }

    fn api_pods(&self, cluster: &Cluster) -> Value {
        json!({"kamaji.clastix.io/name": cluster.vcluster_name})
    }

    fn api_port(&self) -> i32 {
        KAMAJI_PORT
    }

    fn tunnel_port(&self) -> Option<i32> {
        Some(KONNECTIVITY_PORT)
    }

    fn shell_container(&self) -> Option<&'static str> {
        // kube-apiserver and its neighbours run the upstream images, built
        // on go-runner (distroless/static): nothing to run a command with.
        None
    }

    fn first_pod(&self, _cluster: &Cluster) -> Option<String> {
        // A Deployment's pods have names of their own.
        None
    }

    fn service(&self, cluster: &Cluster) -> (String, i32) {
        (cluster.vcluster_name.clone(), KAMAJI_PORT)
    }

    fn quota(&self, cluster: &Cluster) -> Quota {
        // Two pods: the running one and its replacement.
        let (cpu, memory) = (
            cluster.control_plane_cpu_request_milli_cores,
            cluster.control_plane_memory_request_mib,
        );
        Quota {
            requests_cpu: 2 * (cpu + KAMAJI_SIDECARS * SIDECAR_REQUESTS.0),
            requests_memory: 2 * (memory + KAMAJI_SIDECARS * SIDECAR_REQUESTS.1),
            limits_cpu: 2 * (2 * cpu + KAMAJI_SIDECARS * SIDECAR_LIMITS.0),
            limits_memory: 2 * (2 * memory + KAMAJI_SIDECARS * SIDECAR_LIMITS.1),
        }
    }

    fn secrets(
        &self,
        _settings: &HostSettings,
    ) -> Vec<(&'static str, Vec<(&'static str, String)>)> {
        Vec::new()
    }
}

/// The API server's port in a Kamaji control plane (Kamaji's default).
pub const KAMAJI_PORT: i32 = 6443;
/// The Konnectivity server's port (Kamaji's default).
pub const KONNECTIVITY_PORT: i32 = 8132;

/// A vCluster with private nodes, installed by k3s's helm controller.
pub struct Vcluster;

impl ControlPlaneEngine for Vcluster {
    fn kind(&self) -> ApiResource {
        super::chart::helm_chart()
    }

    fn object(
        &self,
        cluster: &Cluster,
        settings: &HostSettings,
        files: Option<&ApiServerFiles>,
        public_hosts: &[String],
        _advertised: Option<&Advertised>,
    ) -> Value {
        let values = vcluster_values(cluster, settings, files, public_hosts);
        json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": cluster.vcluster_name, "namespace": cluster.namespace, "labels": labels(cluster)},
        "spec": {
            "repo": settings.chart_repo, "chart": "vcluster", "version": settings.chart_version,
            "targetNamespace": cluster.namespace,
            // JSON is YAML: the helm controller reads it as vcluster.yaml.
            "valuesContent": values.to_string(),
        }})
    }

    fn join(&self) -> Join {
        Join::VclusterEndpoint
    }

    fn state(&self, object: &Value) -> ControlPlaneState {
        match chart_failure(object) {
            Some(message) => ControlPlaneState::Failed(message),
            // Installed or installing: the StatefulSet tells.
            None => ControlPlaneState::Ready,
        }
    }

    fn workload(&self, cluster: &Cluster) -> Option<String> {
        Some(cluster.vcluster_name.clone())
    }

    fn admin_kubeconfig(&self, cluster: &Cluster) -> (String, &'static str) {
        (format!("vc-{}", cluster.vcluster_name), "config")
    }

    fn api_pods(&self, cluster: &Cluster) -> Value {
        json!({"app": "vcluster", "release": cluster.vcluster_name})
    }

    fn api_port(&self) -> i32 {
        8443
    }

    fn tunnel_port(&self) -> Option<i32> {
        None
    }

    fn shell_container(&self) -> Option<&'static str> {
        // vCluster's one container (Alpine) runs the API server beside the
        // syncer.
        Some("syncer")
    }

    fn first_pod(&self, cluster: &Cluster) -> Option<String> {
        Some(format!("{}-0", cluster.vcluster_name))
    }

    fn service(&self, cluster: &Cluster) -> (String, i32) {
        (cluster.vcluster_name.clone(), 443)
    }

    fn quota(&self, cluster: &Cluster) -> Quota {
        let (cpu, memory) = (
            cluster.control_plane_cpu_request_milli_cores * 2,
            cluster.control_plane_memory_request_mib * 2,
        );
        Quota {
            requests_cpu: cpu,
            requests_memory: memory,
            limits_cpu: cpu * 2,
            limits_memory: memory * 2,
        }
    }

    fn secrets(&self, settings: &HostSettings) -> Vec<(&'static str, Vec<(&'static str, String)>)> {
        match &settings.engines.vcluster_licence {
            Some(licence) => vec![(
                LICENCE_SECRET,
                vec![
                    ("accessKey", licence.access_key.clone()),
                    ("host", licence.host.clone()),
                    ("project", "default".into()),
                    ("insecure", "false".into()),
                ],
            )],
            None => Vec::new(),
        }
    }
}
