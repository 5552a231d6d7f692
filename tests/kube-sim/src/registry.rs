//! The resource types the simulator serves, and the discovery documents built
//! from them.

use serde_json::{Value, json};

#[derive(Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// Empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

macro_rules! resource {
    ($group:expr, $version:expr, $kind:expr, $plural:expr, $namespaced:expr) => {
        ResourceType {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            namespaced: $namespaced,
        }
    };
}

pub static RESOURCES: &[ResourceType] = &[
    resource!("", "v1", "Namespace", "namespaces", false),
    resource!("", "v1", "Node", "nodes", false),
    resource!("", "v1", "Secret", "secrets", true),
    resource!("", "v1", "ConfigMap", "configmaps", true),
    resource!("", "v1", "Service", "services", true),
    resource!("", "v1", "ServiceAccount", "serviceaccounts", true),
    resource!("", "v1", "Pod", "pods", true),
    resource!("", "v1", "ResourceQuota", "resourcequotas", true),
    resource!("", "v1", "LimitRange", "limitranges", true),
    resource!("", "v1", "Event", "events", true),
    resource!("apps", "v1", "StatefulSet", "statefulsets", true),
    resource!("apps", "v1", "Deployment", "deployments", true),
    resource!("apps", "v1", "DaemonSet", "daemonsets", true),
    resource!(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false
    ),
    resource!(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false
    ),
    resource!("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
    resource!(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true
    ),
    resource!(
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false
    ),
    resource!("networking.k8s.io", "v1", "Ingress", "ingresses", true),
    resource!("helm.cattle.io", "v1", "HelmChart", "helmcharts", true),
    resource!(
        "gateway.networking.k8s.io",
        "v1alpha2",
        "TLSRoute",
        "tlsroutes",
        true
    ),
    resource!(
        "gateway.networking.k8s.io",
        "v1",
        "Gateway",
        "gateways",
        true
    ),
    resource!(
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
        "httproutes",
        true
    ),
    resource!("cert-manager.io", "v1", "Certificate", "certificates", true),
    resource!("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", true),
];

pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

pub fn find_kind(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut groups: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) if !versions.contains(&r.version) => versions.push(r.version),
            Some(_) => {}
            None => groups.push((r.group, vec![r.version])),
        }
    }
    groups
}

pub fn api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

pub fn api_group_list() -> Value {
    let groups: Vec<Value> = groups()
        .into_iter()
        .map(|(name, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                .collect();
            json!({"name": name, "versions": versions.clone(), "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `None` when the group/version is not served.
pub fn api_resource_list(group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .flat_map(|r| {
            let verbs = ["create", "delete", "get", "list", "patch", "update", "watch"];
            [
                json!({"name": r.plural, "singularName": r.kind.to_lowercase(), "namespaced": r.namespaced,
                       "kind": r.kind, "verbs": verbs}),
                json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                       "kind": r.kind, "verbs": ["get", "patch", "update"]}),
            ]
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}
