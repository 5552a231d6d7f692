//! The managed workload ingress: an ingress-nginx controller installed inside
//! a cluster (the vCluster, through its own API) with server-side apply, in
//! its own namespace, serving one IngressClass (`managed_workload_ingress_class`,
//! default `kubebyon`) under a controller name of its own
//! (`kubebyon.dev/ingress-nginx`), so it never picks up Ingresses meant for an
//! ingress controller the user installed. Its pods run on the user's nodes; its
//! Service is a NodePort.

pub mod config;
pub mod dns;
pub mod dnsproof;
pub mod edge;
pub mod records;
pub mod settings;
pub mod tls;

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Service, ServiceAccount},
    networking::v1::IngressClass,
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams},
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    clusters::Cluster,
    domain::{IngressStatus, JobKind, JobPayload},
    host::HostError,
};

pub const NAMESPACE: &str = "kubebyon-ingress";
pub const CONTROLLER: &str = "kubebyon.dev/ingress-nginx";
const NAME: &str = "kubebyon-ingress";
const IMAGE: &str = "registry.k8s.io/ingress-nginx/controller:v1.12.1";
const MANAGER: &str = "kubebyon";

fn labels() -> Value {
    json!({ "app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": "kubebyon" })
}

fn params() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

async fn apply<K>(api: Api<K>, name: &str, object: Value) -> Result<(), HostError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &params(), &Patch::Apply(object)).await?;
    Ok(())
}

/// Applies every object of the controller; idempotent.
pub async fn install(client: &Client, class: &str) -> Result<(), HostError> {
    let labels = labels();
    apply(
        Api::<Namespace>::all(client.clone()),
        NAMESPACE,
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": NAMESPACE, "labels": labels } }),
    )
    .await?;
    apply(
        Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE),
        NAME,
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": NAME, "namespace": NAMESPACE, "labels": labels } }),
    )
    .await?;
    apply(
        Api::<ClusterRole>::all(client.clone()),
        NAME,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": NAME, "labels": labels },
            "rules": [
                { "apiGroups": [""], "resources": ["configmaps", "endpoints", "nodes", "pods", "secrets", "namespaces"], "verbs": ["list", "watch"] },
                { "apiGroups": [""], "resources": ["nodes"], "verbs": ["get"] },
                { "apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"] },
                { "apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "ingressclasses"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": ["networking.k8s.io"], "resources": ["ingresses/status"], "verbs": ["update"] },
                { "apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch", "get"] },
            ] }),
    )
    .await?;
    apply(
        Api::<ClusterRoleBinding>::all(client.clone()),
        NAME,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": NAME, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME },
            "subjects": [{ "kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE }] }),
    )
    .await?;
    apply(
        Api::<Role>::namespaced(client.clone(), NAMESPACE),
        NAME,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": NAME, "namespace": NAMESPACE, "labels": labels },
            "rules": [
                { "apiGroups": [""], "resources": ["configmaps", "pods", "secrets", "endpoints", "namespaces"], "verbs": ["get"] },
                { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"] },
            ] }),
    )
    .await?;
    apply(
        Api::<RoleBinding>::namespaced(client.clone(), NAMESPACE),
        NAME,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": NAME, "namespace": NAMESPACE, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME },
            "subjects": [{ "kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE }] }),
    )
    .await?;
    apply(
        Api::<Deployment>::namespaced(client.clone(), NAMESPACE),
        NAME,
        json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": NAME, "namespace": NAMESPACE, "labels": labels },
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": { "app.kubernetes.io/name": NAME } },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": {
                        "serviceAccountName": NAME,
                        "containers": [{
                            "name": "controller",
                            "image": IMAGE,
                            "args": [
                                "/nginx-ingress-controller",
                                format!("--ingress-class={class}"),
                                format!("--controller-class={CONTROLLER}"),
                                "--watch-ingress-without-class=false",
                                format!("--election-id={NAME}-leader"),
                                format!("--publish-service={NAMESPACE}/{NAME}"),
                            ],
                            "env": [
                                { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                                { "name": "POD_NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
                            ],
                            "ports": [
                                { "name": "http", "containerPort": 80 },
                                { "name": "https", "containerPort": 443 },
                            ],
                            "readinessProbe": { "httpGet": { "path": "/healthz", "port": 10254 } },
                            "resources": { "requests": { "cpu": "100m", "memory": "90Mi" } },
                            "securityContext": { "allowPrivilegeEscalation": false, "runAsUser": 101,
                                                 "capabilities": { "drop": ["ALL"], "add": ["NET_BIND_SERVICE"] } },
                        }],
                    },
                },
            } }),
    )
    .await?;
    apply(
        Api::<Service>::namespaced(client.clone(), NAMESPACE),
        NAME,
        json!({ "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": NAME, "namespace": NAMESPACE, "labels": labels },
            "spec": {
                "type": "NodePort",
                "selector": { "app.kubernetes.io/name": NAME },
                "ports": [
                    { "name": "http", "port": 80, "targetPort": "http", "protocol": "TCP" },
                    { "name": "https", "port": 443, "targetPort": "https", "protocol": "TCP" },
                ],
            } }),
    )
    .await?;
    apply(
        Api::<IngressClass>::all(client.clone()),
        class,
        json!({ "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": { "name": class, "labels": labels },
            "spec": { "controller": CONTROLLER } }),
    )
    .await
}

/// Whether the controller has an available replica (it needs a Ready node).
pub async fn available(client: &Client) -> Result<bool, HostError> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get_opt(NAME)
        .await?;
    Ok(deployment
        .and_then(|d| d.status)
        .and_then(|s| s.available_replicas)
        .is_some_and(|n| n > 0))
}

/// Removes the controller: its IngressClass (only if it is ours), its
/// cluster-wide RBAC and its namespace (which takes the rest).
pub async fn remove(client: &Client, class: &str) -> Result<(), HostError> {
    let ours = Api::<IngressClass>::all(client.clone())
        .get_opt(class)
        .await?
        .and_then(|c| c.spec)
        .and_then(|s| s.controller)
        .is_some_and(|c| c == CONTROLLER);
    if ours {
        ignore_missing(
            Api::<IngressClass>::all(client.clone())
                .delete(class, &DeleteParams::default())
                .await,
        )?;
    }
    ignore_missing(
        Api::<ClusterRoleBinding>::all(client.clone())
            .delete(NAME, &DeleteParams::default())
            .await,
    )?;
    ignore_missing(
        Api::<ClusterRole>::all(client.clone())
            .delete(NAME, &DeleteParams::default())
            .await,
    )?;
    ignore_missing(
        Api::<Namespace>::all(client.clone())
            .delete(NAMESPACE, &DeleteParams::default())
            .await,
    )
}

fn ignore_missing<T>(result: Result<T, kube::Error>) -> Result<(), HostError> {
    match result.map_err(HostError::from) {
        Ok(_) | Err(HostError::Api { code: 404, .. }) => Ok(()),
        Err(err) => Err(err),
    }
}

/// What an `ingress_converge` job brings a cluster's managed ingress to: the
/// switch as it stood when the job was enqueued (the job reads the rest of
/// the cluster again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngressConvergence {
    pub managed_workload_ingress_enabled: bool,
}

impl JobPayload for IngressConvergence {
    const KIND: JobKind = JobKind::new("ingress_converge", "ingress_converge");
}

impl IngressConvergence {
    pub fn of(cluster: &Cluster) -> Self {
        Self {
            managed_workload_ingress_enabled: cluster.managed_workload_ingress_enabled,
        }
    }

    pub fn apply_to(&self, cluster: &mut Cluster) {
        cluster.managed_workload_ingress_enabled = self.managed_workload_ingress_enabled;
    }
}

/// Whether the cluster's managed ingress needs work inside the cluster: the
/// last install or removal failed (`error`), the controller is wanted but not
/// installed (`disabled`), or it is installed and no longer wanted. A wanted,
/// installed controller (`provisioning`, `ready`) only has its availability
/// followed, which writes nothing in the cluster.
pub fn needs_convergence(cluster: &Cluster) -> bool {
    let enabled = cluster.managed_workload_ingress_enabled;
    match cluster.managed_workload_ingress_status {
        IngressStatus::Error => true,
        IngressStatus::Disabled => enabled,
        IngressStatus::Provisioning | IngressStatus::Ready => !enabled,
    }
}

/// What ingress brings to the platform: the kind of work that converges a cluster's managed ingress, its settings and its DNS provider's sealed secrets.
pub const CAPABILITY: crate::capability::Capability = crate::capability::Capability {
    job_kinds: &[IngressConvergence::KIND],
    settings: &[crate::capability::setting::<config::Config>],
    reseal: Some(|tx, key| Box::pin(settings::reseal(tx, key))),
    cluster_routes: &[
        crate::capability::ClusterRoute::new(
            "POST",
            "/hostnames",
            crate::organizations::Action::Operate,
        ),
        crate::capability::ClusterRoute::new(
            "DELETE",
            "/hostnames/{binding_id}",
            crate::organizations::Action::Operate,
        ),
        crate::capability::ClusterRoute::new(
            "POST",
            "/hostnames/{binding_id}/verify",
            crate::organizations::Action::Operate,
        ),
    ],
    ..crate::capability::Capability::named("ingress")
};
