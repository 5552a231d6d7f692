//! The steps a cluster job runs on the host, each a server-side apply (or a
//! delete) that is safe to run again, and the wait for a control plane.

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use k8s_openapi::{
    api::{
        apps::v1::StatefulSet,
        core::v1::{
            LimitRange, LoadBalancerIngress, Namespace, Pod, ResourceQuota, Secret, Service,
            ServiceStatus,
        },
        networking::v1::NetworkPolicy,
    },
    serde_json::{Value, json},
};
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, ListParams, Patch},
};

use super::{
    HostCluster, HostError, LoadBalancerProvider,
    chart::{
        ApiServerFiles, NETWORK_POLICY, labels, network_policy, public_service_name, sni_host,
        tls_route,
    },
    engine::{self, Advertised, ControlPlaneState, Join},
    error::ignore_not_found,
    haproxy::{Backend, Haproxy},
};
use crate::{
    clusters::Cluster,
    domain::{FailureCode, PublicAccessMode},
    error::Transient,
};

/// The name of the node Service's port for the engine's tunnel server.
const TUNNEL: &str = "konnectivity";

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

/// The host (name or address) of an endpoint URL `https://host:port`
/// (an IPv6 address with or without its brackets); `None` for another
/// scheme or no host.
pub fn endpoint_host(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://")?;
    let host = match rest.strip_prefix('[') {
        // An IPv6 address: `[::1]:6443`.
        Some(v6) => v6.split(']').next()?,
        None => rest.rsplit_once(':').map_or(rest, |(host, _)| host),
    };
    (!host.is_empty()).then_some(host)
}

/// Why waiting for a control plane ended without one.
#[derive(Debug)]
pub enum WaitError {
    /// A check along the way failed.
    Check {
        step: &'static str,
        source: HostError,
    },
    /// The chart install failed: waiting longer will not help.
    Failed {
        action: &'static str,
        message: String,
    },
    /// Not ready within the adapter's `ready_timeout`, and what its pods
    /// say, when they say what stands in the way.
    NotReadyInTime(Duration, Option<String>),
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Check { step, source } => f.write_str(&source.at_step_message(step)),
            Self::Failed { action, message } => write!(f, "{action} failed: {message}"),
            Self::NotReadyInTime(timeout, None) => write!(
                f,
                "the control plane was not ready within {} s",
                timeout.as_secs()
            ),
            Self::NotReadyInTime(timeout, Some(why)) => write!(
                f,
                "the control plane was not ready within {} s: {why}",
                timeout.as_secs()
            ),
        }
    }
}

impl std::error::Error for WaitError {}

impl Transient for WaitError {
    fn is_transient(&self) -> bool {
        match self {
            Self::Check { source, .. } => source.is_transient(),
            Self::Failed { .. } => false,
            Self::NotReadyInTime(..) => true,
        }
    }

    fn failure_code(&self) -> FailureCode {
        match self {
            Self::Check { source, .. } => source.failure_code(),
            Self::Failed { .. } => FailureCode::ChartInstallFailed,
            Self::NotReadyInTime(..) => FailureCode::Timeout,
        }
    }
}

impl HostCluster {
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
        let bounds = engine::of(cluster.engine).quota(cluster);
        let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "kubebyon-control-plane", "namespace": ns, "labels": labels(cluster)},
            "spec": {"hard": {
                "requests.cpu": format!("{}m", bounds.requests_cpu),
                "requests.memory": format!("{}Mi", bounds.requests_memory),
                "limits.cpu": format!("{}m", bounds.limits_cpu),
                "limits.memory": format!("{}Mi", bounds.limits_memory),
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
            &Patch::Apply(network_policy(
                cluster,
                &self.settings,
                engine::of(cluster.engine).api_port(),
            )),
        )
        .await?;
        Ok(())
    }

    /// Whether the cluster's control-plane object is there and failed: what
    /// a create run again after its install failed starts by removing.
    pub async fn has_failed_install(&self, cluster: &Cluster) -> Result<bool, HostError> {
        let engine = engine::of(cluster.engine);
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &cluster.namespace, &engine.kind());
        Ok(api
            .get_opt(&cluster.vcluster_name)
            .await?
            .is_some_and(|object| {
                matches!(engine.state(&object.data), ControlPlaneState::Failed(_))
            }))
    }

    /// Removes the control plane's object when its first install failed
    /// (the helm controller uninstalls what it left) and waits until it is
    /// gone, so that applying it again runs a fresh install: the controller
    /// runs no second install of a chart that did not change. For a cluster
    /// being created only: a live control plane's failed upgrade is never
    /// removed.
    pub async fn remove_failed_install(&self, cluster: &Cluster) -> Result<(), HostError> {
        if !self.has_failed_install(cluster).await? {
            return Ok(());
        }
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &cluster.namespace,
            &engine::of(cluster.engine).kind(),
        );
        ignore_not_found(
            api.delete(&cluster.vcluster_name, &DeleteParams::default())
                .await
                .map(|_| ()),
        )?;
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        while api.get_opt(&cluster.vcluster_name).await?.is_some() {
            if tokio::time::Instant::now() >= deadline {
                return Err(HostError::Transport(format!(
                    "the failed control plane was still being removed after {} s",
                    self.settings.ready_timeout.as_secs()
                )));
            }
            tokio::time::sleep(self.settings.poll_interval).await;
        }
        Ok(())
    }

    /// The control plane as the cluster's engine makes it (a Kamaji
    /// `TenantControlPlane`, or vCluster's chart as a k3s `HelmChart`) in
    /// the cluster's namespace, its API server started with `api_server`'s
    /// files and its certificate naming `public_hosts`, the addresses
    /// clients reach it on. The Secrets it names are written first.
    pub async fn ensure_control_plane(
        &self,
        cluster: &Cluster,
        api_server: Option<&ApiServerFiles>,
        public_hosts: &[String],
    ) -> Result<(), HostError> {
        if let Some(refusal) = self.settings.engines.refusal(cluster.engine) {
            return Err(HostError::Invalid(refusal));
        }
        let engine = engine::of(cluster.engine);
        for (name, files) in engine.secrets(&self.settings) {
            let files: Vec<(&str, String)> = files.into_iter().collect();
            self.apply_secret(cluster, name, &files).await?;
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &cluster.namespace, &engine.kind());
        let advertised = self.advertised(cluster).await?;
        let object = engine.object(
            cluster,
            &self.settings,
            api_server,
            public_hosts,
            advertised.as_ref(),
        );
        api.patch(
            &cluster.vcluster_name,
            &Self::apply_params(),
            &Patch::Apply(object),
        )
        .await?;
        Ok(())
    }

    /// What a [`Join::Kubeadm`] control plane advertises to nodes, whatever
    /// the cluster's public access: the host node's address and the node
    /// port of the cluster's node Service (the `nodeport` mode's Service,
    /// kept in every mode); `None` before it has one, and for other engines.
    pub async fn advertised(&self, cluster: &Cluster) -> Result<Option<Advertised>, HostError> {
        if engine::of(cluster.engine).join() != Join::Kubeadm {
            return Ok(None);
        }
        let api: Api<Service> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let name = public_service_name(cluster, PublicAccessMode::Nodeport);
        let ports = api
            .get_opt(&name)
            .await?
            .and_then(|service| service.spec?.ports)
            .unwrap_or_default();
        let Some(port) = ports.first().and_then(|p| p.node_port) else {
            return Ok(None);
        };
        let tunnel_port = ports
            .iter()
            .find(|p| p.name.as_deref() == Some(TUNNEL))
            .and_then(|p| p.node_port);
        let address = self
            .node_ip(u16::try_from(port).unwrap_or_default())
            .await?;
        Ok(Some(Advertised {
            address,
            port,
            tunnel_port,
        }))
    }

    /// The keys of the Secret `name` in the cluster's namespace, `None` when
    /// there is no such Secret.
    pub async fn secret_keys(
        &self,
        cluster: &Cluster,
        name: &str,
    ) -> Result<Option<Vec<String>>, HostError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &cluster.namespace);
        Ok(api
            .get_opt(name)
            .await?
            .map(|secret| secret.data.unwrap_or_default().into_keys().collect()))
    }

    /// Writes the Secret `name` in the cluster's namespace with `files`.
    pub async fn apply_secret(
        &self,
        cluster: &Cluster,
        name: &str,
        files: &[(&str, String)],
    ) -> Result<(), HostError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &cluster.namespace);
        use base64::Engine;
        let data: serde_json::Map<String, Value> = files
            .iter()
            .map(|(file, content)| {
                let encoded = base64::engine::general_purpose::STANDARD.encode(content);
                ((*file).to_string(), json!(encoded))
            })
            .collect();
        let object = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": cluster.namespace, "labels": labels(cluster)},
            "type": "Opaque", "data": data});
        api.patch(name, &Self::apply_params(), &Patch::Apply(object))
            .await?;
        Ok(())
    }

    /// The TLSRoute version the host serves, newest first: `v1` (Gateway
    /// API v1.5 and later, the standard channel's only one), else `v1alpha2`
    /// (the experimental channel of every release); `None` without either.
    pub async fn tls_route(&self) -> Result<Option<kube::core::ApiResource>, kube::Error> {
        for version in ["v1", "v1alpha2"] {
            let resource = tls_route(version);
            if self.serves(&resource.api_version, &resource.plural).await? {
                return Ok(Some(resource));
            }
        }
        Ok(None)
    }

    /// [`Self::tls_route`], or why there is none.
    async fn served_tls_route(&self) -> Result<kube::core::ApiResource, HostError> {
        self.tls_route().await?.ok_or_else(|| {
            HostError::Invalid(
                "the host serves no TLSRoute (gateway.networking.k8s.io v1 or v1alpha2): install the Gateway API".into(),
            )
        })
    }

    /// What clients dial: a NodePort or LoadBalancer Service by the
    /// cluster's mode, or, for `loadbalancer` behind the shared Gateway, a
    /// TLS-passthrough `TLSRoute`, or behind the shared HAProxy, a ClusterIP
    /// or NodePort Service and the cluster's entry in HAProxy's map. A
    /// [`Join::Kubeadm`] cluster has its node Service in every mode: its
    /// nodes dial the node port it advertises, and its API server listens
    /// on that port, which every other entry targets. What another mode
    /// made stays: an endpoint switch keeps it serving until
    /// [`Self::prune_public_entries`] removes it.
    pub async fn ensure_public_endpoint(&self, cluster: &Cluster) -> Result<(), HostError> {
        let mode = cluster.public_access_mode;
        let engine = engine::of(cluster.engine);
        let advertised = match (engine.join(), mode) {
            (Join::Kubeadm, _) | (_, PublicAccessMode::Nodeport) => {
                self.apply_node_service(cluster).await?
            }
            _ => None,
        };
        let service_type = match (mode, &self.settings.load_balancer) {
            (PublicAccessMode::Nodeport, _) => return Ok(()),
            (PublicAccessMode::Loadbalancer, LoadBalancerProvider::Service) => "LoadBalancer",
            (PublicAccessMode::Loadbalancer, LoadBalancerProvider::Haproxy(haproxy)) => {
                match haproxy.backend {
                    Backend::ClusterIp => "ClusterIP",
                    Backend::NodePort => "NodePort",
                }
            }
            (
                PublicAccessMode::Loadbalancer,
                LoadBalancerProvider::GatewayApi {
                    gateway_name,
                    gateway_namespace,
                    base_domain,
                },
            ) => {
                let kind = self.served_tls_route().await?;
                let routes: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), &cluster.namespace, &kind);
                // The engine's own Service, on the port the API server
                // listens on.
                let (backend, port) = engine.service(cluster);
                let port = advertised.map_or(port, |a| a.port);
                let route = json!({"apiVersion": kind.api_version, "kind": "TLSRoute",
                "metadata": {"name": cluster.vcluster_name, "namespace": cluster.namespace, "labels": labels(cluster)},
                "spec": {
                    "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                    "name": gateway_name, "namespace": gateway_namespace}],
                    "hostnames": [sni_host(cluster, base_domain)],
                    "rules": [{"backendRefs": [{"name": backend, "port": port}]}],
                }});
                routes
                    .patch(
                        &cluster.vcluster_name,
                        &Self::apply_params(),
                        &Patch::Apply(route),
                    )
                    .await?;
                return Ok(());
            }
        };
        self.apply_service(cluster, mode, service_type, advertised.as_ref())
            .await?;
        if let LoadBalancerProvider::Haproxy(haproxy) = &self.settings.load_balancer {
            // An address not given yet is written by the wait for the
            // endpoint ([`Self::public_endpoint`]).
            if let Some(target) = self.haproxy_target(cluster, haproxy).await? {
                put_in_map(cluster, haproxy, target).await;
            }
        }
        Ok(())
    }

    /// The `nodeport` mode's Service, which a [`Join::Kubeadm`] engine's
    /// nodes dial: applied, and applied again when it was just given the
    /// node ports its API server (and tunnel) now listen on. What the
    /// control plane advertises from then on.
    async fn apply_node_service(&self, cluster: &Cluster) -> Result<Option<Advertised>, HostError> {
        let mode = PublicAccessMode::Nodeport;
        let before = self.advertised(cluster).await?;
        self.apply_service(cluster, mode, "NodePort", before.as_ref())
            .await?;
        let after = self.advertised(cluster).await?;
        if after != before {
            self.apply_service(cluster, mode, "NodePort", after.as_ref())
                .await?;
        }
        Ok(after)
    }

    /// The Service of `mode` in front of the cluster's API server, on 443,
    /// targeting the port the API server listens on: the advertised one, or
    /// the engine's. The node Service carries the engine's tunnel too.
    async fn apply_service(
        &self,
        cluster: &Cluster,
        mode: PublicAccessMode,
        service_type: &str,
        advertised: Option<&Advertised>,
    ) -> Result<(), HostError> {
        let engine = engine::of(cluster.engine);
        let mut ports = vec![json!({"name": "https", "port": 443, "protocol": "TCP",
            "targetPort": advertised.map_or(engine.api_port(), |a| a.port)})];
        if let (PublicAccessMode::Nodeport, Some(tunnel)) = (mode, engine.tunnel_port()) {
            ports.push(json!({"name": TUNNEL, "port": tunnel, "protocol": "TCP",
                "targetPort": advertised.and_then(|a| a.tunnel_port).unwrap_or(tunnel)}));
        }
        let name = public_service_name(cluster, mode);
        let service = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": cluster.namespace, "labels": labels(cluster)},
            "spec": {"type": service_type, "selector": engine.api_pods(cluster), "ports": ports}});
        let services: Api<Service> = Api::namespaced(self.client.clone(), &cluster.namespace);
        services
            .patch(&name, &Self::apply_params(), &Patch::Apply(service))
            .await?;
        Ok(())
    }

    /// Removes the public entries of every mode but `keep`: the other
    /// mode's Service, a `TLSRoute` or a Service the provider does not use,
    /// and, with the shared HAProxy, the cluster's map entry when `keep`
    /// is not served through it. Each removal is safe to run again.
    pub async fn prune_public_entries(
        &self,
        cluster: &Cluster,
        keep: PublicAccessMode,
    ) -> Result<(), HostError> {
        let services: Api<Service> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let gateway = matches!(
            self.settings.load_balancer,
            LoadBalancerProvider::GatewayApi { .. }
        );
        let mut unused = vec![];
        // A kubeadm engine's node Service is what its nodes dial: it stays.
        if keep != PublicAccessMode::Nodeport && engine::of(cluster.engine).join() != Join::Kubeadm
        {
            unused.push(public_service_name(cluster, PublicAccessMode::Nodeport));
        }
        if keep != PublicAccessMode::Loadbalancer || gateway {
            unused.push(public_service_name(cluster, PublicAccessMode::Loadbalancer));
        }
        for name in unused {
            ignore_not_found(
                services
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ()),
            )?;
        }
        if (keep != PublicAccessMode::Loadbalancer || !gateway)
            && let Some(kind) = self.tls_route().await?
        {
            let routes: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &cluster.namespace, &kind);
            ignore_not_found(
                routes
                    .delete(&cluster.vcluster_name, &DeleteParams::default())
                    .await
                    .map(|_| ()),
            )?;
        }
        if keep != PublicAccessMode::Loadbalancer {
            self.remove_public_entry(cluster).await?;
        }
        Ok(())
    }

    /// Whether the cluster's control plane answers at `server` as itself: a
    /// TLS handshake verified with the cluster's CA (and the name or address
    /// `server` gives) and `GET /version`, from the platform. Tried every
    /// poll interval until it answers or the ready timeout runs out; the
    /// last failure comes back.
    pub async fn verify_endpoint(&self, cluster: &Cluster, server: &str) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        loop {
            let answer = match self.vcluster_client(cluster, server).await {
                Ok(client) => client
                    .apiserver_version()
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Err(err) => Err(err.to_string()),
            };
            match answer {
                Ok(()) => return Ok(()),
                Err(error) if tokio::time::Instant::now() >= deadline => return Err(error),
                Err(_) => tokio::time::sleep(self.settings.poll_interval).await,
            }
        }
    }

    /// Where the shared HAProxy forwards the cluster's connections: its
    /// public Service's cluster IP on 443, or the host node's address on
    /// the Service's NodePort; `None` until the Service has it.
    pub async fn haproxy_target(
        &self,
        cluster: &Cluster,
        haproxy: &Haproxy,
    ) -> Result<Option<SocketAddr>, HostError> {
        let api: Api<Service> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let name = public_service_name(cluster, PublicAccessMode::Loadbalancer);
        let Some(service) = api.get_opt(&name).await? else {
            return Ok(None);
        };
        let spec = service.spec.unwrap_or_default();
        match haproxy.backend {
            Backend::ClusterIp => Ok(spec
                .cluster_ip
                .and_then(|ip| ip.parse::<IpAddr>().ok())
                .map(|ip| SocketAddr::new(ip, 443))),
            Backend::NodePort => {
                let Some(port) = spec
                    .ports
                    .unwrap_or_default()
                    .first()
                    .and_then(|p| p.node_port)
                    .and_then(|p| u16::try_from(p).ok())
                else {
                    return Ok(None);
                };
                Ok(Some(SocketAddr::new(self.node_ip(port).await?, port)))
            }
        }
    }

    /// The host node's address (`KUBEBYON_HOST_NODE_ADDRESS`) as an IP,
    /// looked up when it is a name (IPv4 first).
    pub async fn node_ip(&self, port: u16) -> Result<IpAddr, HostError> {
        let address = &self.settings.node_address;
        if let Ok(ip) = address.parse::<IpAddr>() {
            return Ok(ip);
        }
        tokio::net::lookup_host((address.as_str(), port))
            .await
            .map_err(|e| HostError::Transport(format!("resolving {address}: {e}")))?
            .map(|a| a.ip())
            .min_by_key(IpAddr::is_ipv6)
            .ok_or_else(|| HostError::Transport(format!("{address} resolves to no address")))
    }

    /// Takes the cluster out of the shared HAProxy's map, where the platform
    /// uses one: before its namespace goes, so no connection is forwarded to
    /// an address another Service may be given next. A replica that does not
    /// answer is left to `sync-haproxy`, which removes what no cluster holds:
    /// logged, not failed.
    pub async fn remove_public_entry(&self, cluster: &Cluster) -> Result<(), HostError> {
        if let LoadBalancerProvider::Haproxy(haproxy) = &self.settings.load_balancer {
            let host = sni_host(cluster, &haproxy.base_domain);
            if let Err(error) = haproxy.put_everywhere(&host, None).await {
                tracing::warn!(cluster_id = %cluster.id, %error,
                    "could not remove the cluster from HAProxy's map; sync-haproxy will");
            }
        }
        Ok(())
    }

    /// Where the control plane is: failed, or ready once its engine says it
    /// runs (and its StatefulSet has a ready replica, for vCluster) and its
    /// admin kubeconfig is written.
    pub async fn control_plane_state(
        &self,
        cluster: &Cluster,
    ) -> Result<ControlPlaneState, HostError> {
        let engine = engine::of(cluster.engine);
        let objects: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &cluster.namespace, &engine.kind());
        let object = objects.get(&cluster.vcluster_name).await?;
        match engine.state(&object.data) {
            ControlPlaneState::Ready => {}
            other => return Ok(other),
        }
        if let Some(workload) = engine.workload(cluster) {
            let statefulsets: Api<StatefulSet> =
                Api::namespaced(self.client.clone(), &cluster.namespace);
            let ready = match statefulsets.get_opt(&workload).await? {
                Some(set) => set.status.and_then(|s| s.ready_replicas).unwrap_or(0) >= 1,
                None => false,
            };
            if !ready {
                return Ok(ControlPlaneState::Installing);
            }
        }
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let (secret, _) = engine.admin_kubeconfig(cluster);
        Ok(if secrets.get_opt(&secret).await?.is_some() {
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
            let routes: Api<DynamicObject> = Api::namespaced_with(
                self.client.clone(),
                &cluster.namespace,
                &self.served_tls_route().await?,
            );
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
        if let (PublicAccessMode::Loadbalancer, LoadBalancerProvider::Haproxy(haproxy)) =
            (cluster.public_access_mode, &self.settings.load_balancer)
        {
            // Ready once every replica forwards the name to the Service;
            // written here when one does not (its address was not known
            // yet, or a replica restarted with an empty map).
            let Some(target) = self.haproxy_target(cluster, haproxy).await? else {
                return Ok(None);
            };
            put_in_map(cluster, haproxy, target).await;
            return Ok(Some(Endpoint {
                host: sni_host(cluster, &haproxy.base_domain),
                port: i32::from(haproxy.port),
            }));
        }
        let api: Api<Service> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let name = public_service_name(cluster, cluster.public_access_mode);
        let Some(service) = api.get_opt(&name).await? else {
            return Ok(None);
        };
        let spec = service.spec.unwrap_or_default();
        let port = spec.ports.unwrap_or_default().into_iter().next();
        let endpoint = match spec.type_.as_deref() {
            Some("NodePort") => port.and_then(|p| p.node_port).map(|node_port| Endpoint {
                host: self.settings.node_address.clone(),
                port: node_port,
            }),
            Some("LoadBalancer") => first_ingress(service.status).and_then(|ingress| {
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

    /// The address clients reach the cluster's API server on, once it has
    /// one: the SNI host behind the shared Gateway, the host's node address
    /// for a NodePort, the address a LoadBalancer Service was given.
    pub async fn public_host(&self, cluster: &Cluster) -> Result<Option<String>, HostError> {
        match (cluster.public_access_mode, &self.settings.load_balancer) {
            (
                PublicAccessMode::Loadbalancer,
                LoadBalancerProvider::GatewayApi { base_domain, .. },
            ) => Ok(Some(sni_host(cluster, base_domain))),
            (PublicAccessMode::Loadbalancer, LoadBalancerProvider::Haproxy(haproxy)) => {
                Ok(Some(sni_host(cluster, &haproxy.base_domain)))
            }
            (PublicAccessMode::Nodeport, _) => {
                Ok(Some(self.settings.node_address.clone()).filter(|a| !a.is_empty()))
            }
            (PublicAccessMode::Loadbalancer, LoadBalancerProvider::Service) => {
                let api: Api<Service> = Api::namespaced(self.client.clone(), &cluster.namespace);
                Ok(api
                    .get_opt(&public_service_name(
                        cluster,
                        PublicAccessMode::Loadbalancer,
                    ))
                    .await?
                    .and_then(|service| first_ingress(service.status))
                    .and_then(|ingress| ingress.hostname.or(ingress.ip)))
            }
        }
    }

    /// Whether the recorded endpoint is not what the cluster's mode gives
    /// with the platform's settings as they are now (an operator changed the
    /// provider, its base domain or port, or the node address), as far as
    /// that can be told without asking the host: the SNI name behind the
    /// shared Gateway or HAProxy, the node address of a NodePort, and, for a
    /// load balancer's Service, any address but an SNI name of the cluster.
    /// An update then switches the cluster to it.
    pub fn endpoint_drifted(&self, cluster: &Cluster) -> bool {
        let Some(recorded) = cluster.api_endpoint.as_deref() else {
            return false;
        };
        // An endpoint without a host is not one any mode gives.
        let Some(host) = endpoint_host(recorded) else {
            return true;
        };
        match (cluster.public_access_mode, &self.settings.load_balancer) {
            (PublicAccessMode::Nodeport, _) => host != self.settings.node_address,
            (
                PublicAccessMode::Loadbalancer,
                LoadBalancerProvider::GatewayApi { base_domain, .. },
            ) => recorded != format!("https://{}:443", sni_host(cluster, base_domain)),
            (PublicAccessMode::Loadbalancer, LoadBalancerProvider::Haproxy(haproxy)) => {
                recorded
                    != format!(
                        "https://{}:{}",
                        sni_host(cluster, &haproxy.base_domain),
                        haproxy.port
                    )
            }
            (PublicAccessMode::Loadbalancer, LoadBalancerProvider::Service) => {
                host.starts_with(&sni_host(cluster, ""))
            }
        }
    }

    /// [`HostCluster::public_host`], waiting (polling) for a LoadBalancer
    /// Service's address, which is allocated after the Service is made and
    /// does not wait for the control plane; running out of the ready timeout
    /// is transient.
    pub async fn await_public_host(&self, cluster: &Cluster) -> Result<Option<String>, HostError> {
        let waits = cluster.public_access_mode == PublicAccessMode::Loadbalancer
            && matches!(self.settings.load_balancer, LoadBalancerProvider::Service);
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        loop {
            let host = self.public_host(cluster).await?;
            if host.is_some() || !waits {
                return Ok(host);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(HostError::Transport(format!(
                    "the load balancer had no address after {} s",
                    self.settings.ready_timeout.as_secs()
                )));
            }
            tokio::time::sleep(self.settings.poll_interval).await;
        }
    }

    /// Waits, polling, until the control plane is ready and its public endpoint
    /// allocated. A failed chart install is fatal ("`action` failed: …"); running
    /// out of `ready_timeout` is transient. The caller's lease heartbeats meanwhile.
    pub async fn await_control_plane(
        &self,
        cluster: &Cluster,
        action: &'static str,
    ) -> Result<Endpoint, WaitError> {
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        loop {
            let state =
                self.control_plane_state(cluster)
                    .await
                    .map_err(|source| WaitError::Check {
                        step: "checking the control plane",
                        source,
                    })?;
            match state {
                ControlPlaneState::Failed(message) => {
                    return Err(WaitError::Failed { action, message });
                }
                ControlPlaneState::Ready => {
                    let endpoint =
                        self.public_endpoint(cluster)
                            .await
                            .map_err(|source| WaitError::Check {
                                step: "reading the public endpoint",
                                source,
                            })?;
                    if let Some(endpoint) = endpoint {
                        return Ok(endpoint);
                    }
                }
                ControlPlaneState::Installing => {}
            }
            if tokio::time::Instant::now() >= deadline {
                // Why, when the pods say: best effort, the timeout stands.
                let why = self.control_plane_trouble(cluster).await.unwrap_or(None);
                return Err(WaitError::NotReadyInTime(self.settings.ready_timeout, why));
            }
            tokio::time::sleep(self.settings.poll_interval).await;
        }
    }

    /// What keeps the control plane's pods from running, as their status
    /// says it: a container that keeps exiting or whose image cannot be
    /// pulled, or a pod no host node can take. `None` when nothing does.
    pub async fn control_plane_trouble(
        &self,
        cluster: &Cluster,
    ) -> Result<Option<String>, HostError> {
        let selector = engine::of(cluster.engine).api_pod_selector(cluster);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let ns = &cluster.namespace;
        for pod in pods.list(&ListParams::default().labels(&selector)).await? {
            let name = pod.metadata.name.unwrap_or_default();
            let status = pod.status.unwrap_or_default();
            for container in status.container_statuses.unwrap_or_default() {
                let Some(waiting) = container.state.and_then(|s| s.waiting) else {
                    continue;
                };
                let reason = waiting.reason.unwrap_or_default();
                let exit = container
                    .last_state
                    .and_then(|s| s.terminated)
                    .map(|t| format!(", last exit code {}", t.exit_code))
                    .unwrap_or_default();
                let log = format!(
                    "kubectl -n {ns} logs {name} -c {} --previous",
                    container.name
                );
                match reason.as_str() {
                    "CrashLoopBackOff" => {
                        return Ok(Some(format!(
                            "its {} container keeps exiting ({} restarts{exit}); `{log}` says why",
                            container.name, container.restart_count
                        )));
                    }
                    "ImagePullBackOff" | "ErrImagePull" | "InvalidImageName" => {
                        return Ok(Some(format!(
                            "the image of its {} container cannot be pulled ({reason}): {}",
                            container.name,
                            waiting.message.unwrap_or_default()
                        )));
                    }
                    _ => {}
                }
            }
            if let Some(unschedulable) =
                status.conditions.unwrap_or_default().into_iter().find(|c| {
                    c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable")
                })
            {
                return Ok(Some(format!(
                    "no host node can take pod {name}: {}",
                    unschedulable.message.unwrap_or_default()
                )));
            }
        }
        Ok(None)
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

/// Maps the cluster's SNI host to `target` on every HAProxy replica. A
/// replica that does not answer is logged, not failed: `sync-haproxy`
/// writes what it missed, and what decides a switch is the verification
/// of the new endpoint ([`HostCluster::verify_endpoint`]).
async fn put_in_map(cluster: &Cluster, haproxy: &Haproxy, target: SocketAddr) {
    let host = sni_host(cluster, &haproxy.base_domain);
    if let Err(error) = haproxy.put_everywhere(&host, Some(target)).await {
        tracing::warn!(cluster_id = %cluster.id, %error,
            "could not write the cluster into HAProxy's map; sync-haproxy will");
    }
}

/// The first address a LoadBalancer Service's status gives, when it has one.
fn first_ingress(status: Option<ServiceStatus>) -> Option<LoadBalancerIngress> {
    status?.load_balancer?.ingress?.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::endpoint_host;

    #[test]
    fn an_endpoint_s_host_is_its_name_or_address() {
        assert_eq!(
            endpoint_host("https://a-1234abcd.example.com:443"),
            Some("a-1234abcd.example.com")
        );
        assert_eq!(endpoint_host("https://127.0.0.2:31000"), Some("127.0.0.2"));
        assert_eq!(endpoint_host("https://[fd00::1]:6443"), Some("fd00::1"));
        assert_eq!(endpoint_host("https://::1:30000"), Some("::1"));
        assert_eq!(endpoint_host("http://plain:80"), None);
        assert_eq!(endpoint_host("https://:443"), None);
    }
}
