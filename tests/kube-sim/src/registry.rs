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
    resource!("apps", "v1", "ReplicaSet", "replicasets", true),
    resource!("batch", "v1", "Job", "jobs", true),
    resource!("batch", "v1", "CronJob", "cronjobs", true),
    resource!(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        false
    ),
    resource!(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        false
    ),
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
    resource!(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true
    ),
    resource!("helm.cattle.io", "v1", "HelmChart", "helmcharts", true),
    resource!(
        "kamaji.clastix.io",
        "v1alpha1",
        "TenantControlPlane",
        "tenantcontrolplanes",
        true
    ),
    resource!(
        "kamaji.clastix.io",
        "v1alpha1",
        "DataStore",
        "datastores",
        false
    ),
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
    resource!(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true
    ),
    resource!("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", true),
    resource!(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false
    ),
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

/// The short names kubectl accepts for a resource (`deploy`, `cm`), as a real
/// server lists them in discovery.
fn short_names(plural: &str) -> &'static [&'static str] {
    match plural {
        "namespaces" => &["ns"],
        "nodes" => &["no"],
        "configmaps" => &["cm"],
        "services" => &["svc"],
        "serviceaccounts" => &["sa"],
        "pods" => &["po"],
        "resourcequotas" => &["quota"],
        "limitranges" => &["limits"],
        "events" => &["ev"],
        "statefulsets" => &["sts"],
        "deployments" => &["deploy"],
        "daemonsets" => &["ds"],
        "replicasets" => &["rs"],
        "cronjobs" => &["cj"],
        "ingresses" => &["ing"],
        "networkpolicies" => &["netpol"],
        "certificatesigningrequests" => &["csr"],
        "certificates" => &["cert", "certs"],
        _ => &[],
    }
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
                       "kind": r.kind, "verbs": verbs, "shortNames": short_names(r.plural)}),
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

/// Where each group version's OpenAPI v3 document is, as `GET /openapi/v3`
/// answers it.
pub fn openapi_v3_root() -> Value {
    let mut paths = serde_json::Map::new();
    let mut seen: Vec<String> = Vec::new();
    for r in RESOURCES {
        let path = if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        if !seen.contains(&path) {
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash=kube-sim")}),
            );
            seen.push(path);
        }
    }
    json!({ "paths": paths })
}

/// A group version's OpenAPI v3 document, reduced to what clients read from
/// it before writing: each kind's PATCH operation with its group-version-kind
/// and the `fieldValidation` parameter. kubectl then leaves validation to the
/// server (which here, on purpose, checks no schema) instead of asking for
/// schemas the simulator does not have. `None` when the group version is not served.
pub fn openapi_v3_group_version(group: &str, version: &str) -> Option<Value> {
    let base = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = serde_json::Map::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let item = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{base}/{}/{{name}}", r.plural)
        };
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let parameters = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "force", "in": "query", "schema": {"type": "boolean"}},
        ]);
        paths.insert(
            item,
            json!({"patch": {
                "operationId": format!("patch{}", r.kind),
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": parameters,
                "requestBody": {"content": {
                    "application/apply-patch+yaml": {"schema": {"type": "object"}},
                    "application/merge-patch+json": {"schema": {"type": "object"}},
                }},
                "responses": {"200": {"description": "OK"}},
            }}),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0-kube-sim"},
        "paths": paths,
    }))
}
