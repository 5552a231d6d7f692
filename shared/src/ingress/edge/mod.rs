//! The workload edge: the host's side of a cluster's managed ingress. One
//! shared Gateway (Gateway API v1, named by the settings) answers for every
//! cluster's sites; in each cluster's host namespace the platform keeps
//!
//! - a shim `Service` (`kubebyon-edge`, no selector) and its
//!   `EndpointSlice`, whose endpoints are the cluster's ingress controller:
//!   its pods' addresses on port 80 where the host routes the cluster's pod
//!   network (the route plan, [`routes`]), else its nodes' addresses on the
//!   controller's NodePort;
//! - an `HTTPRoute` per hostname (the cluster's own name under the base
//!   domain, and each verified binding) to that Service; with HTTPS, the
//!   route is on the HTTPS listener and an HTTP route redirects to it, and a
//!   self-managed hostname's route rewrites `Host` to the cluster's own
//!   name, the one its in-cluster ingress knows.
//!
//! The cluster's pods and nodes are the tenant's to say anything about: an
//! address in the host's nodes or networks, in another cluster's networks,
//! loopback or link-local is never an endpoint, so the Gateway can never
//! be pointed into the platform.

pub mod https;
pub mod routes;
pub mod store;

use std::net::Ipv4Addr;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    clusters::Cluster,
    host::{
        HostCluster, WorkloadGateway as Gateway,
        objects::{HostObject, Kind},
    },
    networks::Block,
};

/// The shim Service (and its EndpointSlice) in a cluster's host namespace.
pub const SERVICE: &str = "kubebyon-edge";
/// The label every edge object carries, with the cluster's id label.
pub const COMPONENT: (&str, &str) = ("kubebyon.dev/component", "edge");
/// Who manages the shim's EndpointSlice (so no endpoints controller does).
const SLICE_MANAGER: &str = "kubebyon.dev/edge";

pub const SERVICE_KIND: Kind = Kind {
    group: "",
    version: "v1",
    kind: "Service",
    plural: "services",
};
pub const SLICE_KIND: Kind = Kind {
    group: "discovery.k8s.io",
    version: "v1",
    kind: "EndpointSlice",
    plural: "endpointslices",
};
pub const ROUTE_KIND: Kind = Kind {
    group: "gateway.networking.k8s.io",
    version: "v1",
    kind: "HTTPRoute",
    plural: "httproutes",
};

/// The listener a self-managed hostname's binding is served on, with its
/// own certificate (kept by `sync-edge` on the shared Gateway).
pub fn dedicated_listener(binding_id: Uuid) -> String {
    format!("kb-{}", binding_id.simple())
}

/// A hostname a cluster's edge serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// The binding it comes from; `None` for the cluster's own name.
    pub binding_id: Option<Uuid>,
    pub hostname: String,
    /// A name the user points at the platform themselves (outside the base
    /// domain): served on a listener of its own, `Host` rewritten to the
    /// cluster's own name.
    pub self_managed: bool,
}

/// Where the shim Service sends requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The controller's pods, port 80: the host routes to the cluster's pod
    /// network (the route plan, applied by the route agents).
    PodIps(Vec<Ipv4Addr>),
    /// The cluster's nodes, on the controller's NodePort.
    NodePorts { addresses: Vec<Ipv4Addr>, port: u16 },
    /// Nothing can be reached (why): the Gateway answers 503.
    Unavailable(String),
}

impl Backend {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::PodIps(_) => "pod_ips",
            Self::NodePorts { .. } => "node_ports",
            Self::Unavailable(_) => "unavailable",
        }
    }

    /// The endpoints as `ip:port`.
    pub fn endpoints(&self) -> Vec<String> {
        match self {
            Self::PodIps(ips) => ips.iter().map(|ip| format!("{ip}:80")).collect(),
            Self::NodePorts { addresses, port } => {
                addresses.iter().map(|ip| format!("{ip}:{port}")).collect()
            }
            Self::Unavailable(_) => Vec::new(),
        }
    }

    /// Why nothing is reached, when nothing is.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::PodIps(_) | Self::NodePorts { .. } => None,
            Self::Unavailable(why) => Some(why),
        }
    }
}

/// What the cluster's API says about its ingress controller: the tenant's
/// word, every address to be checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The addresses of the controller's pods that are running and ready
    /// (empty for a ready pod the cluster gives none).
    pub ready_pods: Vec<Option<String>>,
    /// The controller Service's NodePort for HTTP.
    pub node_port: Option<i32>,
    pub nodes: Vec<NodeSeen>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSeen {
    pub name: String,
    pub internal_ip: Option<String>,
    /// Its `spec.podCIDR`.
    pub pod_cidr: Option<String>,
    pub ready: bool,
}

/// Addresses no endpoint may have, whatever the tenant says: the host's
/// own nodes and pod networks, every cluster network pool (other tenants'
/// pods and Services), and the special blocks (this network, loopback,
/// link-local with the clouds' metadata, multicast, reserved).
#[derive(Debug, Clone, Default)]
pub struct Forbidden(pub Vec<Block>);

const SPECIAL: [&str; 5] = [
    "0.0.0.0/8",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// The ports a NodePort may have (kube-apiserver's default
/// `--service-node-port-range`).
const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

impl Forbidden {
    pub fn new(blocks: impl IntoIterator<Item = Block>) -> Self {
        Self(
            SPECIAL
                .iter()
                .map(|b| b.parse().expect("a special block"))
                .chain(blocks)
                .collect(),
        )
    }

    /// The host's nodes and pod networks (`KUBEBYON_HOST_POD_CIDRS`) and
    /// every cluster's networks, with the special blocks.
    pub async fn read(pool: &sqlx::PgPool, host: &HostCluster) -> Result<Self, String> {
        let nodes = host
            .node_addresses()
            .await
            .map_err(|e| format!("listing the host's nodes failed: {e}"))?;
        let networks = crate::networks::all(pool)
            .await
            .map_err(|e| e.to_string())?;
        let host_networks = host
            .settings()
            .pod_cidrs
            .iter()
            .filter_map(|c| c.parse().ok());
        let node_blocks = nodes
            .iter()
            .filter_map(|a| a.parse().ok())
            .filter_map(|ip| Block::new(ip, 32));
        Ok(Self::new(
            networks.into_iter().chain(host_networks).chain(node_blocks),
        ))
    }

    fn allows(&self, ip: Ipv4Addr) -> bool {
        let one = Block::new(ip, 32).expect("a /32");
        !self.0.iter().any(|b| b.contains(one))
    }
}

/// Picks the shim's endpoints. The controller's ready pods on port 80 when
/// each one's address lies in a pod network the host routes (`routed`:
/// the route plan's destinations every route agent reports applied, each
/// inside its cluster's own network); else the ready nodes' internal
/// addresses, each outside `forbidden`, on the controller's NodePort; else
/// nothing, with why.
pub fn choose(observed: &Observed, routed: &[Block], forbidden: &Forbidden) -> Backend {
    if observed.ready_pods.is_empty() {
        return Backend::Unavailable("no ingress controller pod is ready".into());
    }
    let pod_ips: Option<Vec<Ipv4Addr>> = observed
        .ready_pods
        .iter()
        .map(|ip| {
            let ip: Ipv4Addr = ip.as_deref()?.parse().ok()?;
            let one = Block::new(ip, 32)?;
            routed.iter().any(|r| r.contains(one)).then_some(ip)
        })
        .collect();
    if let Some(mut ips) = pod_ips {
        ips.sort_unstable();
        ips.dedup();
        return Backend::PodIps(ips);
    }
    let Some(port) = observed
        .node_port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| NODE_PORTS.contains(p))
    else {
        return Backend::Unavailable(
            "the ingress controller's Service has no HTTP NodePort".into(),
        );
    };
    let mut addresses: Vec<Ipv4Addr> = observed
        .nodes
        .iter()
        .filter(|n| n.ready)
        .filter_map(|n| n.internal_ip.as_deref()?.parse().ok())
        .filter(|ip| forbidden.allows(*ip))
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    if addresses.is_empty() {
        return Backend::Unavailable("no ready node has an address the edge may reach".into());
    }
    Backend::NodePorts { addresses, port }
}

/// A cluster's route plan from its nodes, and where its edge reaches its
/// controller: `routed` holds the destinations the host routes, of every
/// cluster; only the cluster's own planned ones lead to its pods.
pub fn reach(
    observed: &Observed,
    pod_network: Option<Block>,
    routed: &[Block],
    forbidden: &Forbidden,
) -> (Vec<routes::Planned>, Backend) {
    let plan = route_plan(&observed.nodes, pod_network, forbidden);
    let own: Vec<Block> = routed
        .iter()
        .copied()
        .filter(|r| plan.iter().any(|p| p.destination == *r))
        .collect();
    let backend = choose(observed, &own, forbidden);
    (plan, backend)
}

/// The route plan of a cluster: for each ready node whose `podCIDR` lies
/// inside the cluster's own pod network (`pod_network`) and whose address
/// the edge may reach, its `podCIDR` via that address. A node whose
/// `podCIDR` overlaps one already planned (by name order) is left out: the
/// tenant says what its nodes hold, and two routes to one address cannot
/// both be right.
pub fn route_plan(
    nodes: &[NodeSeen],
    pod_network: Option<Block>,
    forbidden: &Forbidden,
) -> Vec<routes::Planned> {
    let Some(network) = pod_network else {
        return Vec::new();
    };
    let mut nodes: Vec<&NodeSeen> = nodes.iter().filter(|n| n.ready).collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut plan: Vec<routes::Planned> = Vec::new();
    for node in nodes {
        let (Some(cidr), Some(ip)) = (node.pod_cidr.as_deref(), node.internal_ip.as_deref()) else {
            continue;
        };
        let (Ok(destination), Ok(via)) = (cidr.parse::<Block>(), ip.parse::<Ipv4Addr>()) else {
            continue;
        };
        let clear = network.contains(destination)
            && forbidden.allows(via)
            && !plan.iter().any(|p| p.destination.overlaps(destination));
        if clear {
            plan.push(routes::Planned {
                node: node.name.clone(),
                destination,
                via,
            });
        }
    }
    plan
}

/// A cluster's edge as objects in its host namespace, and each site's
/// route and listener.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub objects: Vec<HostObject>,
    pub sites: Vec<SiteEdge>,
}

/// Where a site is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteEdge {
    pub binding_id: Option<Uuid>,
    pub route: String,
    pub listener: String,
    /// The certificate of its own (a Secret in the Gateway's namespace) a
    /// self-managed hostname is served with over HTTPS.
    pub certificate: Option<String>,
}

/// The labels of a cluster's edge objects.
fn labels(cluster_id: Uuid) -> Value {
    json!({
        "app.kubernetes.io/managed-by": "kubebyon",
        "kubebyon.dev/cluster-id": cluster_id.to_string(),
        COMPONENT.0: COMPONENT.1,
    })
}

/// The label selector that finds a cluster's edge objects.
pub fn selector(cluster: &Cluster) -> String {
    format!(
        "kubebyon.dev/cluster-id={},{}={}",
        cluster.id, COMPONENT.0, COMPONENT.1
    )
}

/// The Secret a self-managed hostname's certificate is kept in.
pub fn dedicated_certificate(binding_id: Uuid) -> String {
    format!("kubebyon-edge-{}", binding_id.simple())
}

fn route_name(site: &Site) -> String {
    match site.binding_id {
        Some(id) => format!("edge-{}", id.simple()),
        None => "edge-cluster".into(),
    }
}

/// Renders the edge of the cluster `cluster_id`, whose host namespace is
/// `ns`: its shim Service and EndpointSlice, and its sites' routes.
/// `canonical` is the cluster's own name, which self-managed hostnames are
/// rewritten to.
pub fn render(
    cluster_id: Uuid,
    ns: &str,
    gateway: &Gateway,
    canonical: &str,
    sites: &[Site],
    backend: &Backend,
) -> Rendered {
    let labels = labels(cluster_id);
    let (addresses, port) = match backend {
        Backend::PodIps(ips) => (ips.clone(), 80),
        Backend::NodePorts { addresses, port } => (addresses.clone(), *port),
        Backend::Unavailable(_) => (Vec::new(), 80),
    };
    let mut objects = vec![
        HostObject {
            kind: SERVICE_KIND,
            namespace: ns.into(),
            name: SERVICE.into(),
            body: json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": SERVICE, "namespace": ns, "labels": labels},
                "spec": {"type": "ClusterIP",
                         "ports": [{"name": "http", "port": 80, "targetPort": port, "protocol": "TCP"}]}}),
        },
        HostObject {
            kind: SLICE_KIND,
            namespace: ns.into(),
            name: SERVICE.into(),
            body: json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": SERVICE, "namespace": ns, "labels": merged(&labels, json!({
                    "kubernetes.io/service-name": SERVICE,
                    "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER}))},
                "addressType": "IPv4",
                "endpoints": addresses.iter().map(|ip| json!({
                    "addresses": [ip.to_string()], "conditions": {"ready": true}})).collect::<Vec<_>>(),
                "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}),
        },
    ];
    let mut edges = Vec::new();
    for site in sites {
        let name = route_name(site);
        let parent = |section: &str| {
            json!({"group": "gateway.networking.k8s.io", "kind": "Gateway",
                   "name": gateway.name, "namespace": gateway.namespace, "sectionName": section})
        };
        let mut filters = Vec::new();
        // Without a base domain a cluster has no name of its own to rewrite to.
        if site.self_managed && !canonical.is_empty() {
            filters.push(json!({"type": "URLRewrite", "urlRewrite": {"hostname": canonical}}));
        }
        let forward = json!({
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "filters": filters,
            "backendRefs": [{"group": "", "kind": "Service", "name": SERVICE, "port": 80}],
        });
        let route = |route_name: &str, section: &str, rule: &Value| HostObject {
            kind: ROUTE_KIND,
            namespace: ns.into(),
            name: route_name.into(),
            body: json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": route_name, "namespace": ns, "labels": labels},
                "spec": {"parentRefs": [parent(section)], "hostnames": [site.hostname],
                         "rules": [rule]}}),
        };
        match &gateway.https {
            None => {
                objects.push(route(&name, &gateway.http_listener, &forward));
                edges.push(SiteEdge {
                    binding_id: site.binding_id,
                    route: name,
                    listener: gateway.http_listener.clone(),
                    certificate: None,
                });
            }
            Some(https) => {
                // The platform's names share its listener and certificates
                // (which certificate holds a name is `sync-edge`'s to say);
                // a self-managed one has a listener and certificate of its own.
                let (listener, certificate) = match site.binding_id {
                    Some(id) if site.self_managed => {
                        (dedicated_listener(id), Some(dedicated_certificate(id)))
                    }
                    _ => (https.listener.clone(), None),
                };
                objects.push(route(&name, &listener, &forward));
                let plain = match https.redirect {
                    true => json!({
                        "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                        "filters": [{"type": "RequestRedirect",
                                     "requestRedirect": {"scheme": "https", "statusCode": 301}}]}),
                    false => forward.clone(),
                };
                objects.push(route(
                    &format!("{name}-http"),
                    &gateway.http_listener,
                    &plain,
                ));
                edges.push(SiteEdge {
                    binding_id: site.binding_id,
                    route: name,
                    listener,
                    certificate,
                });
            }
        }
    }
    Rendered {
        objects,
        sites: edges,
    }
}

fn merged(a: &Value, b: Value) -> Value {
    let mut out = a.clone();
    if let (Some(out), Value::Object(b)) = (out.as_object_mut(), b) {
        out.extend(b);
    }
    out
}

/// What an observation of a cluster found its edge should be: its
/// endpoints (`ip:port`) and its route plan's destinations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub endpoints: Vec<String>,
    pub routes: Vec<String>,
}

/// Whether a cluster's edge, as last converged (`converged`), is off its
/// target: never converged (or its last convergence failed), serving
/// other hostnames than `wanted`, reaching other endpoints or planning
/// other routes than `seen` (when the cluster was looked at), or converged
/// longer than `resync` ago.
pub fn stale(
    converged: Option<&store::Converged>,
    mut wanted: Vec<String>,
    seen: Option<&Seen>,
    resync: std::time::Duration,
    now: chrono::DateTime<chrono::Utc>,
) -> bool {
    let Some(converged) = converged else {
        return true;
    };
    let sorted = |list: &[String]| {
        let mut list = list.to_vec();
        list.sort_unstable();
        list
    };
    wanted.sort_unstable();
    let age = (now - converged.at).to_std().unwrap_or_default();
    sorted(&converged.hostnames) != wanted
        || seen.is_some_and(|seen| {
            seen.endpoints != converged.endpoints
                || sorted(&seen.routes) != sorted(&converged.routes)
        })
        || age >= resync
}

/// Reads what the cluster's API says about its ingress controller: its
/// pods, its Service's HTTP NodePort, and the nodes.
pub async fn observe(client: &kube::Client) -> Result<Observed, crate::host::HostError> {
    use k8s_openapi::api::core::v1::{Node, Pod, Service};
    use kube::{Api, api::ListParams};

    let selector = format!("app.kubernetes.io/name={}", super::NAME);
    let pods = Api::<Pod>::namespaced(client.clone(), super::NAMESPACE)
        .list(&ListParams::default().labels(&selector))
        .await?;
    let service = Api::<Service>::namespaced(client.clone(), super::NAMESPACE)
        .get_opt(super::NAME)
        .await?;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Ok(Observed {
        ready_pods: pods
            .items
            .into_iter()
            .filter_map(|pod| {
                let status = pod.status.unwrap_or_default();
                let ready = status.phase.as_deref() == Some("Running")
                    && status
                        .conditions
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True");
                ready.then_some(status.pod_ip)
            })
            .collect(),
        node_port: service
            .and_then(|s| s.spec)
            .and_then(|s| s.ports)
            .and_then(|ports| {
                ports
                    .into_iter()
                    .find(|p| p.name.as_deref() == Some("http"))
            })
            .and_then(|p| p.node_port),
        nodes: nodes
            .items
            .into_iter()
            .map(|node| {
                let status = node.status.unwrap_or_default();
                NodeSeen {
                    name: node.metadata.name.unwrap_or_default(),
                    pod_cidr: node.spec.and_then(|s| s.pod_cidr),
                    internal_ip: status
                        .addresses
                        .unwrap_or_default()
                        .into_iter()
                        .find_map(|a| (a.type_ == "InternalIP").then_some(a.address)),
                    ready: status
                        .conditions
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True"),
                }
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::host::{Https, IssuerRef};

    fn gateway(https: bool) -> Gateway {
        let issuer = IssuerRef {
            kind: "ClusterIssuer".into(),
            name: "letsencrypt".into(),
        };
        Gateway {
            name: "workloads".into(),
            namespace: "kubebyon".into(),
            http_listener: "http".into(),
            https: https.then(|| Https {
                listener: "https".into(),
                port: 443,
                issuer: issuer.clone(),
                self_managed_issuer: issuer,
                san_limit: 100,
                redirect: true,
            }),
            resync: Duration::from_secs(300),
        }
    }

    fn sites(binding: Uuid) -> Vec<Site> {
        vec![
            Site {
                binding_id: None,
                hostname: "shop-1234abcd.apps.example.com".into(),
                self_managed: false,
            },
            Site {
                binding_id: Some(binding),
                hostname: "www.shop.test".into(),
                self_managed: true,
            },
        ]
    }

    fn route<'a>(rendered: &'a Rendered, name: &str) -> &'a Value {
        &rendered
            .objects
            .iter()
            .find(|o| o.kind == ROUTE_KIND && o.name == name)
            .unwrap_or_else(|| panic!("no route {name}"))
            .body
    }

    #[test]
    fn with_https_a_site_is_served_on_its_listener_and_plain_http_is_redirected() {
        let binding = Uuid::new_v4();
        let backend = Backend::NodePorts {
            addresses: vec![Ipv4Addr::new(203, 0, 113, 5)],
            port: 31080,
        };
        let rendered = render(
            Uuid::new_v4(),
            "kb-1",
            &gateway(true),
            "shop-1234abcd.apps.example.com",
            &sites(binding),
            &backend,
        );
        let dedicated = format!("edge-{}", binding.simple());
        let served = route(&rendered, &dedicated);
        assert_eq!(
            served["spec"]["parentRefs"][0]["sectionName"],
            format!("kb-{}", binding.simple())
        );
        assert_eq!(
            served["spec"]["rules"][0]["filters"],
            json!([{"type": "URLRewrite", "urlRewrite": {"hostname": "shop-1234abcd.apps.example.com"}}])
        );
        let plain = route(&rendered, &format!("{dedicated}-http"));
        assert_eq!(plain["spec"]["parentRefs"][0]["sectionName"], "http");
        assert_eq!(
            plain["spec"]["rules"][0]["filters"][0]["requestRedirect"],
            json!({"scheme": "https", "statusCode": 301})
        );
        assert!(plain["spec"]["rules"][0].get("backendRefs").is_none());
        let own = route(&rendered, "edge-cluster");
        assert_eq!(own["spec"]["parentRefs"][0]["sectionName"], "https");
        assert_eq!(own["spec"]["rules"][0]["filters"], json!([]));
        assert_eq!(
            rendered.sites[1].certificate.as_deref(),
            Some(format!("kubebyon-edge-{}", binding.simple()).as_str())
        );
        assert_eq!(rendered.sites[0].certificate, None);
        let slice = &rendered
            .objects
            .iter()
            .find(|o| o.kind == SLICE_KIND)
            .unwrap()
            .body;
        assert_eq!(slice["ports"][0]["port"], 31080);
        assert_eq!(slice["endpoints"][0]["addresses"], json!(["203.0.113.5"]));
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"],
            SERVICE
        );
    }

    fn node(name: &str, ip: &str, pod_cidr: Option<&str>, ready: bool) -> NodeSeen {
        NodeSeen {
            name: name.into(),
            internal_ip: Some(ip.into()),
            pod_cidr: pod_cidr.map(Into::into),
            ready,
        }
    }

    #[test]
    fn endpoints_are_ready_nodes_outside_what_is_forbidden_on_a_node_port() {
        let forbidden = Forbidden::new(["10.64.0.0/10".parse().unwrap()]);
        let observed = Observed {
            ready_pods: vec![Some("10.64.0.5".into())],
            node_port: Some(31080),
            nodes: vec![
                node("a", "203.0.113.6", None, true),
                node("b", "203.0.113.5", None, true),
                node("c", "203.0.113.7", None, false),
                node("d", "10.64.3.4", None, true),
                node("e", "169.254.169.254", None, true),
                node("f", "127.0.0.1", None, true),
            ],
        };
        assert_eq!(
            choose(&observed, &[], &forbidden).endpoints(),
            ["203.0.113.5:31080", "203.0.113.6:31080"]
        );
        for port in [None, Some(80), Some(65_536), Some(-1)] {
            let observed = Observed {
                node_port: port,
                ..observed.clone()
            };
            assert!(matches!(
                choose(&observed, &[], &forbidden),
                Backend::Unavailable(_)
            ));
        }
        let idle = Observed {
            ready_pods: Vec::new(),
            ..observed
        };
        assert_eq!(
            choose(&idle, &[], &forbidden).reason(),
            Some("no ingress controller pod is ready")
        );
    }

    #[test]
    fn pods_are_reached_directly_only_when_every_one_is_in_a_routed_network() {
        let forbidden = Forbidden::new([]);
        let routed: Vec<Block> = vec!["10.64.1.0/24".parse().unwrap()];
        let observed = |pods: &[Option<&str>]| Observed {
            ready_pods: pods.iter().map(|p| p.map(Into::into)).collect(),
            node_port: Some(31080),
            nodes: vec![node("a", "203.0.113.6", Some("10.64.1.0/24"), true)],
        };
        assert_eq!(
            choose(
                &observed(&[Some("10.64.1.7"), Some("10.64.1.3")]),
                &routed,
                &forbidden
            ),
            Backend::PodIps(vec![
                "10.64.1.3".parse().unwrap(),
                "10.64.1.7".parse().unwrap()
            ])
        );
        for pods in [
            &[Some("10.64.1.7"), Some("10.64.2.3")][..],
            &[Some("10.64.1.7"), None],
            &[Some("not an address")],
        ] {
            assert_eq!(
                choose(&observed(pods), &routed, &forbidden).kind(),
                "node_ports",
                "{pods:?}"
            );
        }
    }

    #[test]
    fn the_route_plan_holds_only_the_cluster_s_own_networks_once_each() {
        let forbidden = Forbidden::new(["198.51.100.7/32".parse().unwrap()]);
        let nodes = [
            node("b", "203.0.113.6", Some("10.64.1.0/24"), true),
            node("a", "203.0.113.5", Some("10.64.0.0/24"), true),
            // Another cluster's network, the host's node, a taken one, not
            // ready, no podCIDR.
            node("c", "203.0.113.7", Some("10.65.0.0/24"), true),
            node("d", "198.51.100.7", Some("10.64.2.0/24"), true),
            node("e", "203.0.113.8", Some("10.64.1.128/25"), true),
            node("f", "203.0.113.9", Some("10.64.3.0/24"), false),
            node("g", "203.0.113.10", None, true),
        ];
        let plan = route_plan(&nodes, Some("10.64.0.0/19".parse().unwrap()), &forbidden);
        let found: Vec<(String, String, String)> = plan
            .iter()
            .map(|p| (p.node.clone(), p.destination.to_string(), p.via.to_string()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "a".to_string(),
                    "10.64.0.0/24".to_string(),
                    "203.0.113.5".to_string()
                ),
                (
                    "b".to_string(),
                    "10.64.1.0/24".to_string(),
                    "203.0.113.6".to_string()
                ),
            ]
        );
        assert!(route_plan(&nodes, None, &forbidden).is_empty());
    }

    #[test]
    fn an_edge_is_stale_when_its_hostnames_endpoints_routes_or_age_are_off() {
        let now = chrono::Utc::now();
        let converged = store::Converged {
            hostnames: vec!["b.test".into(), "a.test".into()],
            endpoints: vec!["203.0.113.5:31080".into()],
            routes: vec!["10.64.1.0/24".into(), "10.64.0.0/24".into()],
            at: now - chrono::Duration::seconds(10),
        };
        let resync = Duration::from_secs(300);
        let wanted = || vec!["a.test".to_string(), "b.test".to_string()];
        let seen = |endpoints: &[&str], routes: &[&str]| Seen {
            endpoints: endpoints.iter().map(|e| e.to_string()).collect(),
            routes: routes.iter().map(|r| r.to_string()).collect(),
        };
        let same = seen(&["203.0.113.5:31080"], &["10.64.0.0/24", "10.64.1.0/24"]);
        assert!(!stale(Some(&converged), wanted(), Some(&same), resync, now));
        assert!(!stale(Some(&converged), wanted(), None, resync, now));
        assert!(stale(None, wanted(), None, resync, now));
        assert!(stale(
            Some(&converged),
            vec!["a.test".into()],
            None,
            resync,
            now
        ));
        let moved = seen(&[], &["10.64.0.0/24", "10.64.1.0/24"]);
        assert!(stale(Some(&converged), wanted(), Some(&moved), resync, now));
        let replanned = seen(&["203.0.113.5:31080"], &["10.64.0.0/24"]);
        assert!(stale(
            Some(&converged),
            wanted(),
            Some(&replanned),
            resync,
            now
        ));
        let later = now + chrono::Duration::seconds(300);
        assert!(stale(Some(&converged), wanted(), None, resync, later));
    }
}
