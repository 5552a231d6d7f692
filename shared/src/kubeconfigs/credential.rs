//! Kubeconfig credentials inside a cluster: every kubeconfig the platform
//! hands out carries the token of a ServiceAccount of its own, in the
//! cluster's `kube-system`, bound to `cluster-admin`, issued by the
//! TokenRequest API with an expiry. Deleting the ServiceAccount revokes the
//! token at once (bound tokens name the account's uid). The control plane's
//! admin credential never leaves the platform.

use chrono::{DateTime, Utc};
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
    rbac::v1::{ClusterRoleBinding, RoleRef, Subject},
};
use kube::{
    Api, Client,
    api::{DeleteParams, ObjectMeta, PostParams},
};
use secrecy::SecretString;
use uuid::Uuid;

/// Where the credentials' ServiceAccounts live.
pub const NAMESPACE: &str = "kube-system";
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kubebyon");
const CREDENTIAL_LABEL: &str = "kubebyon.io/credential";
const USER_LABEL: &str = "kubebyon.io/user";

/// The shortest lifetime the Kubernetes API issues a token for.
pub const MIN_SECONDS: i64 = 600;

/// The ServiceAccount (and ClusterRoleBinding) name of a credential.
pub fn service_account_name(credential_id: Uuid) -> String {
    format!("kubebyon-user-{}", credential_id.simple())
}

/// A token the cluster issued.
pub struct Issued {
    pub token: SecretString,
    /// When the cluster says it expires.
    pub expires_at: DateTime<Utc>,
}

/// Makes the credential's ServiceAccount and its cluster-admin binding
/// (kept when they exist already, so a retry goes on) and asks the
/// TokenRequest API for a token valid `seconds`.
pub async fn issue(
    client: Client,
    credential_id: Uuid,
    user_id: Uuid,
    seconds: i64,
) -> Result<Issued, kube::Error> {
    let name = service_account_name(credential_id);
    let metadata = ObjectMeta {
        name: Some(name.clone()),
        labels: Some(
            [
                (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
                (CREDENTIAL_LABEL.to_string(), credential_id.to_string()),
                (USER_LABEL.to_string(), user_id.to_string()),
            ]
            .into(),
        ),
        ..Default::default()
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            namespace: Some(NAMESPACE.into()),
            ..metadata.clone()
        },
        ..Default::default()
    };
    ignore_exists(accounts.create(&PostParams::default(), &account).await)?;
    let binding = ClusterRoleBinding {
        metadata,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "cluster-admin".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: name.clone(),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        }]),
    };
    let bindings: Api<ClusterRoleBinding> = Api::all(client);
    ignore_exists(bindings.create(&PostParams::default(), &binding).await)?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(seconds),
            ..Default::default()
        }),
        ..Default::default()
    };
    let issued = accounts
        .create_token_request(&name, &PostParams::default(), &request)
        .await?;
    let status = issued.status.unwrap_or_default();
    let (Some(token), Some(expires_at)) = (
        status.token,
        status
            .expiration_timestamp
            .and_then(|t| DateTime::from_timestamp_micros(t.0.as_microsecond())),
    ) else {
        return Err(kube::Error::Service(
            "the TokenRequest answer has no token or expiry".into(),
        ));
    };
    Ok(Issued {
        token: SecretString::from(token),
        expires_at,
    })
}

/// Deletes a credential's ServiceAccount (which revokes its tokens) and its
/// binding. Already gone counts as done.
pub async fn remove(client: Client, credential_id: Uuid) -> Result<(), kube::Error> {
    let name = service_account_name(credential_id);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    ignore_missing(accounts.delete(&name, &DeleteParams::default()).await)?;
    let bindings: Api<ClusterRoleBinding> = Api::all(client);
    ignore_missing(bindings.delete(&name, &DeleteParams::default()).await)?;
    Ok(())
}

fn ignore_exists<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err),
    }
}

fn ignore_missing<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err),
    }
}

/// What a removal pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RemovalReport {
    /// ServiceAccounts deleted (or found gone) and recorded.
    pub removed: u64,
    /// Left for a later pass: the cluster could not be reached or refused.
    pub pending: u64,
}

/// Stale credentials one pass looks at, at most.
const REMOVAL_BATCH: i64 = 500;
/// How long one cluster's removals may take in one pass.
const CLUSTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Deletes the ServiceAccounts of revoked and expired credentials (only
/// `user_id`'s when given) from their clusters, with the platform's admin
/// client, and records each one gone. A cluster that cannot be reached keeps
/// its own for the next pass.
pub async fn remove_stale(
    pool: &sqlx::PgPool,
    host: &crate::host::HostCluster,
    user_id: Option<Uuid>,
) -> Result<RemovalReport, sqlx::Error> {
    use crate::{clusters, kubeconfigs};
    let stale = kubeconfigs::stale(pool, user_id, REMOVAL_BATCH).await?;
    let mut report = RemovalReport::default();
    for batch in stale.chunk_by(|a, b| a.cluster_id == b.cluster_id) {
        let cluster_id = batch[0].cluster_id;
        let mut removed = 0;
        let pass = async {
            let cluster = clusters::get(pool, cluster_id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("the cluster is gone")?;
            let server = cluster
                .api_endpoint
                .as_deref()
                .ok_or("the cluster has no endpoint")?;
            let client = host
                .vcluster_client(&cluster, server)
                .await
                .map_err(|e| e.to_string())?;
            for account in batch {
                remove(client.clone(), account.id)
                    .await
                    .map_err(|e| e.to_string())?;
                kubeconfigs::mark_removed(pool, account.id)
                    .await
                    .map_err(|e| e.to_string())?;
                removed += 1;
            }
            Ok::<(), String>(())
        };
        let outcome = tokio::time::timeout(CLUSTER_TIMEOUT, pass)
            .await
            .unwrap_or_else(|_| Err("the cluster did not answer in time".into()));
        if let Err(error) = outcome {
            tracing::info!(%cluster_id, error, "kubeconfig credentials not removed yet");
        }
        report.removed += removed;
        report.pending += batch.len() as u64 - removed;
    }
    Ok(report)
}

/// How long a request that revoked credentials spends removing them.
const REMOVE_NOW_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// After a commit that revoked `revoked` credentials of `user_id`: deletes
/// their ServiceAccounts at once where the clusters answer, for at most a few
/// seconds; the cluster sync does the rest. It never fails the request that
/// committed the revocation: what it could not do is logged and left.
pub async fn remove_revoked_now(
    pool: &sqlx::PgPool,
    host: Option<&crate::host::HostCluster>,
    user_id: Uuid,
    revoked: u64,
) {
    let Some(host) = host.filter(|_| revoked > 0) else {
        return;
    };
    match tokio::time::timeout(REMOVE_NOW_TIMEOUT, remove_stale(pool, host, Some(user_id))).await {
        Ok(Ok(report)) if report.pending == 0 => {}
        Ok(Ok(report)) => {
            tracing::warn!(%user_id, pending = report.pending, "some revoked kubeconfig credentials are still being removed");
        }
        Ok(Err(error)) => {
            tracing::warn!(%user_id, %error, "revoked kubeconfig credentials are left to the cluster sync");
        }
        Err(_) => {
            tracing::warn!(%user_id, "removing revoked kubeconfig credentials took too long; the cluster sync goes on");
        }
    }
}
