//! Who may act in a cluster's namespace on the host. The platform's own
//! identities hold no cluster-wide right to namespaced objects (docs/
//! decisions/2026-12-05-host-least-privilege.md): the jobs bind the tenant
//! ClusterRole to their own ServiceAccount in each namespace they make, and
//! let the HTTP functions' ServiceAccount read the one Secret they need
//! there, the cluster's kubeconfig.
//!
//! A binding is allowed because the jobs' ServiceAccount may `bind` the
//! tenant ClusterRole; the Role naming the Secret because that
//! ServiceAccount holds what it grants in the namespace (kube-apiserver's
//! escalation check).

use kube::api::{Api, DynamicObject, Patch};
use serde_json::json;

use super::{HostCluster, HostError, chart::labels, settings::ServiceAccount};
use crate::clusters::Cluster;

/// What the cluster namespaces' Roles and RoleBindings are made of; a
/// cluster whose `host_access_revision` is lower gets them again.
pub const ACCESS_REVISION: i32 = 1;

/// The RoleBinding that gives the jobs the tenant ClusterRole.
pub const JOBS_BINDING: &str = "kubebyon-jobs";
/// The Role (and its RoleBinding) that lets the HTTP functions read the
/// cluster's kubeconfig Secret.
pub const CREDENTIALS_ROLE: &str = "kubebyon-credentials";

fn subject(account: &ServiceAccount) -> serde_json::Value {
    json!({"kind": "ServiceAccount", "name": account.name, "namespace": account.namespace})
}

fn rbac(kind: &str) -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: "rbac.authorization.k8s.io".into(),
        version: "v1".into(),
        api_version: "rbac.authorization.k8s.io/v1".into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

impl HostCluster {
    /// Lets the platform's identities act in the cluster's namespace: the
    /// jobs as the tenant ClusterRole says, the HTTP functions only to read
    /// the admin kubeconfig Secret of its engine (`vc-<name>`,
    /// `<name>-admin-kubeconfig`). False when the platform runs with a kubeconfig of its
    /// own (no [`super::TenantAccess`]): there is nothing to grant.
    /// Recorded as the cluster's `host_access_revision`.
    pub async fn ensure_access(
        &self,
        pool: &sqlx::PgPool,
        cluster: &Cluster,
    ) -> Result<bool, HostError> {
        let Some(access) = &self.settings.tenant_access else {
            return Ok(false);
        };
        let ns = &cluster.namespace;
        let bindings: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &rbac("RoleBinding"));
        let roles: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &rbac("Role"));
        let binding = |name: &str, kind: &str, role: &str, account: &ServiceAccount| {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": ns, "labels": labels(cluster)},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                "subjects": [subject(account)]})
        };
        // First the jobs' own rights here: the Role below is allowed because
        // they hold what it grants.
        bindings
            .patch(
                JOBS_BINDING,
                &Self::apply_params(),
                &Patch::Apply(binding(
                    JOBS_BINDING,
                    "ClusterRole",
                    &access.cluster_role,
                    &access.jobs,
                )),
            )
            .await?;
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": CREDENTIALS_ROLE, "namespace": ns, "labels": labels(cluster)},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                       "resourceNames": [super::engine::of(cluster.engine).admin_kubeconfig(cluster).0]}]});
        roles
            .patch(CREDENTIALS_ROLE, &Self::apply_params(), &Patch::Apply(role))
            .await?;
        bindings
            .patch(
                CREDENTIALS_ROLE,
                &Self::apply_params(),
                &Patch::Apply(binding(
                    CREDENTIALS_ROLE,
                    "Role",
                    CREDENTIALS_ROLE,
                    &access.credentials,
                )),
            )
            .await?;
        crate::clusters::record_host_access(pool, cluster.id, ACCESS_REVISION)
            .await
            .map_err(|e| HostError::Transport(format!("recording the host access: {e}")))?;
        Ok(true)
    }
}
