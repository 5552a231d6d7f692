//! The `ValidatingWebhookConfiguration` each cluster's API server is given,
//! applied inside the cluster (server-side apply, field manager `kubebyon`)
//! by the create and update jobs, and again by `sync-clusters` on every
//! cycle. Its URL holds no secret: the API server presents the cluster's
//! token from its admission configuration ([`super::authorizer`]), a host
//! file the tenant cannot read, where the configuration itself is readable
//! by the tenant's cluster-admin.
//!
//! Four webhooks, one endpoint:
//! - [`WORKLOADS`]: Deployments, StatefulSets, DaemonSets and CronJobs, what
//!   tenants write; `failurePolicy: Fail`, so a deploy made while the
//!   platform cannot answer fails and says so;
//! - [`PODS`]: Pods, ReplicaSets and Jobs, what controllers write too;
//!   `failurePolicy: Ignore`, so a platform outage never stops a cluster
//!   from recreating its pods or running its CronJobs;
//! - [`NODES`]: Node registrations; `failurePolicy: Fail` (a join needs the
//!   platform anyway);
//! - [`BINDINGS`]: RoleBindings and ClusterRoleBindings, which may grant
//!   nothing to the identities the platform relies on (nodes, the control
//!   plane, the bootstrappers, the masters: `authorizer::privileged_subject`);
//!   `failurePolicy: Fail`, in every namespace.
//!
//! The exempt namespaces are left out of the others by `namespaceSelector`
//! (Nodes are not namespaced, so it never skips them).

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use super::{EXEMPT_NAMESPACES, REVIEW_TIMEOUT_SECONDS, store};
use crate::{
    clusters::Cluster,
    host::{FIELD_MANAGER, HostCluster, HostError},
    jobs::{JobContext, JobError},
    settings,
};

pub const CONFIGURATION: &str = "kubebyon-admission";
pub const WORKLOADS: &str = "workloads.admission.kubebyon.dev";
pub const PODS: &str = "pods.admission.kubebyon.dev";
pub const NODES: &str = "nodes.admission.kubebyon.dev";
pub const BINDINGS: &str = "bindings.admission.kubebyon.dev";

/// Where a cluster's API server sends its reviews.
pub fn url(base: &str, cluster_id: Uuid) -> String {
    format!("{}/api/admission/{cluster_id}", base.trim_end_matches('/'))
}

/// The configuration for a webhook at `url`, trusting `ca_pem` when given.
pub fn configuration(url: &str, ca_pem: Option<&str>) -> Value {
    use base64::Engine;
    let mut client = json!({ "url": url });
    if let Some(pem) = ca_pem {
        client["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(pem));
    }
    let outside_exempt = json!({ "matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": EXEMPT_NAMESPACES,
    }]});
    let webhook = |name: &str, policy: &str, rules: Value| {
        json!({
            "name": name,
            "clientConfig": client,
            "rules": rules,
            "failurePolicy": policy,
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": REVIEW_TIMEOUT_SECONDS,
            "namespaceSelector": outside_exempt,
        })
    };
    let rule = |group: &str, resources: &[&str], operations: &[&str]| {
        json!({ "apiGroups": [group], "apiVersions": ["v1"], "resources": resources,
                "operations": operations, "scope": "*" })
    };
    // Bindings are checked in every namespace, kube-system's included.
    let mut bindings = webhook(
        BINDINGS,
        "Fail",
        json!([rule(
            "rbac.authorization.k8s.io",
            &["rolebindings", "clusterrolebindings"],
            &["CREATE", "UPDATE"]
        )]),
    );
    bindings["namespaceSelector"] = json!({});
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": CONFIGURATION, "labels": { "app.kubernetes.io/managed-by": "kubebyon" } },
        "webhooks": [
            webhook(WORKLOADS, "Fail", json!([
                rule("apps", &["deployments", "statefulsets", "daemonsets"], &["CREATE", "UPDATE"]),
                rule("batch", &["cronjobs"], &["CREATE", "UPDATE"]),
            ])),
            webhook(PODS, "Ignore", json!([
                rule("", &["pods"], &["CREATE"]),
                rule("apps", &["replicasets"], &["CREATE", "UPDATE"]),
                rule("batch", &["jobs"], &["CREATE", "UPDATE"]),
            ])),
            webhook(NODES, "Fail", json!([rule("", &["nodes"], &["CREATE"])])),
            bindings,
        ],
    })
}

/// Applies `configuration` inside the cluster.
pub async fn apply(client: &Client, configuration: Value) -> Result<(), HostError> {
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            CONFIGURATION,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(configuration),
        )
        .await?;
    Ok(())
}

/// The HTTPS base the webhook URL starts with: `KUBEBYON_ADMISSION_URL`,
/// else the settings' public base URL when it is HTTPS. `None` when there is
/// neither: an API server calls webhooks over HTTPS only.
pub async fn base_url(pool: &PgPool, host: &HostCluster) -> Result<Option<String>, sqlx::Error> {
    if let Some(url) = &host.settings().admission_url {
        return Ok(Some(url.clone()));
    }
    let public = settings::load(pool).await?.fields.public_base_url;
    Ok(public.filter(|u| u.starts_with("https://")))
}

/// The configuration the cluster's API server is given, for the webhook at
/// `base`.
pub fn configuration_for(host: &HostCluster, base: &str, cluster_id: Uuid) -> Value {
    configuration(
        &url(base, cluster_id),
        host.settings().admission_ca_pem.as_deref(),
    )
}

// The stages registering the webhook records (a job that calls
// [`register`] names them in its handler's stages).
crate::stages! {
    REGISTERING = "registering the admission webhook";
    NOT_REGISTERED = "admission webhook not registered: the platform has no HTTPS URL";
}

/// Registers the webhook inside `cluster` (its API at `server`), then
/// retires the secrets of the URLs it was registered at before (a cluster
/// registered before its API server had a token): from then on only the
/// token the API server presents is answered.
pub async fn register(
    ctx: &JobContext,
    host: &HostCluster,
    cluster: &Cluster,
    server: &str,
) -> Result<(), JobError> {
    let Some(base) = base_url(&ctx.pool, host).await? else {
        ctx.stage(NOT_REGISTERED).await?;
        tracing::warn!(
            "no KUBEBYON_ADMISSION_URL and no https public base URL: the cluster's workload limits are not enforced inside it"
        );
        return Ok(());
    };
    let object = configuration_for(host, &base, cluster.id);
    ctx.step(REGISTERING, async {
        let client = host.vcluster_client(cluster, server).await?;
        apply(&client, object).await
    })
    .await?;
    store::ensure_reserved(&ctx.pool, cluster.id).await?;
    store::retire_url_secrets(&ctx.pool, cluster.id).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_carries_the_url_the_ca_and_the_policies() {
        let id = Uuid::nil();
        let url = url("https://platform.example/", id);
        assert_eq!(
            url,
            "https://platform.example/api/admission/00000000-0000-0000-0000-000000000000"
        );
        let object = configuration(&url, Some("PEM"));
        let hooks = object["webhooks"].as_array().unwrap();
        assert_eq!(hooks.len(), 4);
        for hook in hooks {
            assert_eq!(hook["clientConfig"]["url"], url);
            assert_eq!(hook["clientConfig"]["caBundle"], "UEVN");
            assert_eq!(hook["sideEffects"], "None");
            assert_eq!(hook["admissionReviewVersions"], json!(["v1"]));
            assert_eq!(hook["timeoutSeconds"], REVIEW_TIMEOUT_SECONDS);
            // Bindings are weighed in every namespace, kube-system's too.
            let selected = if hook["name"] == BINDINGS {
                json!({})
            } else {
                json!({ "matchExpressions": [{ "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn", "values": EXEMPT_NAMESPACES }] })
            };
            assert_eq!(hook["namespaceSelector"], selected, "{}", hook["name"]);
        }
        let policy = |name: &str| {
            hooks.iter().find(|h| h["name"] == name).unwrap()["failurePolicy"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(policy(WORKLOADS), "Fail");
        assert_eq!(policy(PODS), "Ignore");
        assert_eq!(policy(NODES), "Fail");
        assert_eq!(policy(BINDINGS), "Fail");
        assert!(
            configuration(&url, None)["webhooks"][0]["clientConfig"]
                .get("caBundle")
                .is_none()
        );
    }
}
