//! Kubeconfig credentials: the per-user ServiceAccounts whose tokens the
//! downloaded kubeconfigs carry. The token itself is never stored.

pub mod config;
pub mod credential;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;
use uuid::Uuid;

/// A kubeconfig credential as its owner sees it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Credential {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub user_id: Uuid,
    /// `active`, `expired`, `revoking` (revoked; its ServiceAccount is still
    /// being deleted inside the cluster, so the token may work until then) or
    /// `revoked`.
    pub status: String,
    /// The ServiceAccount in the cluster's `kube-system` the token belongs to.
    pub service_account_name: String,
    pub description: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// `user`, `user_disabled`, `password_changed` or `issue_failed`.
    pub revoke_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The cluster's API address the kubeconfig names (null for those
    /// issued before the platform recorded it).
    pub api_endpoint: Option<String>,
    /// The cluster's API address has changed since (its public access mode
    /// did): the kubeconfig names one that is no longer the cluster's.
    /// Download a new one.
    pub stale: bool,
    /// `download` (a kubeconfig holding a token) or `exec` (the
    /// ServiceAccount `kubebyon credential` renews short-lived tokens for,
    /// bound to the API key that asked; its `expires_at` is that of the
    /// latest token).
    pub kind: String,
}

macro_rules! select_credential {
    ($tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Credential,
            r#"SELECT id, cluster_id, user_id,
                      CASE WHEN revoked_at IS NOT NULL AND removed_at IS NULL THEN 'revoking'
                           WHEN revoked_at IS NOT NULL THEN 'revoked'
                           WHEN expires_at <= now() THEN 'expired'
                           ELSE 'active' END AS "status!",
                      service_account_name, description, expires_at, revoked_at, revoke_reason, created_at,
                      api_endpoint,
                      (api_endpoint IS NOT NULL AND api_endpoint IS DISTINCT FROM
                          (SELECT c.api_endpoint FROM clusters c WHERE c.id = cluster_id)) AS "stale!",
                      kind
               FROM kubeconfig_credentials "# + $tail,
            $($arg),*
        )
    };
}

pub struct NewCredential<'a> {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub user_id: Uuid,
    pub service_account_name: &'a str,
    pub description: Option<&'a str>,
    pub expires_at: DateTime<Utc>,
    pub ip: Option<&'a str>,
    pub user_agent: Option<&'a str>,
    /// The cluster's API address the kubeconfig will name.
    pub api_endpoint: &'a str,
    /// `download` (a kubeconfig holding a token) or `exec`.
    pub kind: Kind,
    /// The API key the credential was asked for with (an `exec`
    /// credential's always): revoking the key revokes it.
    pub api_key_id: Option<Uuid>,
}

/// What a credential is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A kubeconfig holding a token.
    Download,
    /// The ServiceAccount `kubebyon credential` renews short-lived tokens
    /// for.
    Exec,
}

/// Records a credential before its ServiceAccount is made, so a failure half
/// way leaves a row the cluster sync cleans up after. The caller holds the
/// authority it is issued on (`app::authority::hold`) in the same
/// transaction.
pub async fn insert(db: impl PgExecutor<'_>, new: &NewCredential<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO kubeconfig_credentials
             (id, cluster_id, user_id, service_account_name, description, expires_at, ip, user_agent,
              api_endpoint, kind, api_key_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7::text::inet, left($8, 300), $9, $10, $11)",
        new.id,
        new.cluster_id,
        new.user_id,
        new.service_account_name,
        new.description,
        new.expires_at,
        new.ip,
        new.user_agent,
        new.api_endpoint,
        match new.kind {
            Kind::Download => "download",
            Kind::Exec => "exec",
        },
        new.api_key_id,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Sets the expiry the cluster gave the token (it may shorten the one asked for).
pub async fn set_expiry(
    db: impl PgExecutor<'_>,
    id: Uuid,
    expires_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE kubeconfig_credentials SET expires_at = $2 WHERE id = $1",
        id,
        expires_at
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The `exec` credential the API key `api_key_id` renews on the cluster: the
/// newest live one for the cluster's address `server` with more than two
/// minutes left (so no removal pass, which takes expired ones only, is
/// deleting its ServiceAccount while a token is issued for it).
pub async fn live_exec(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    api_key_id: Uuid,
    server: &str,
) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT id FROM kubeconfig_credentials
         WHERE api_key_id = $1 AND cluster_id = $2 AND kind = 'exec'
           AND revoked_at IS NULL AND removed_at IS NULL AND api_endpoint = $3 AND expires_at > now() + interval '2 minutes'
         ORDER BY created_at DESC LIMIT 1",
        api_key_id,
        cluster_id,
        server
    )
    .fetch_optional(db)
    .await
}

/// Records a token issued for an `exec` credential: it is valid as long as
/// its latest token.
pub async fn renewed(
    db: impl PgExecutor<'_>,
    id: Uuid,
    expires_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE kubeconfig_credentials SET expires_at = greatest(expires_at, $2) WHERE id = $1",
        id,
        expires_at
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn get(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    id: Uuid,
) -> Result<Option<Credential>, sqlx::Error> {
    select_credential!("WHERE cluster_id = $1 AND id = $2", cluster_id, id)
        .fetch_optional(db)
        .await
}

/// A cluster's credentials, newest first.
pub async fn list(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    limit: i64,
) -> Result<Vec<Credential>, sqlx::Error> {
    select_credential!(
        "WHERE cluster_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2",
        cluster_id,
        limit
    )
    .fetch_all(db)
    .await
}

/// Revokes one credential that is not revoked yet. Returns whether it was.
pub async fn revoke(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    id: Uuid,
    by: Option<Uuid>,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE kubeconfig_credentials
         SET revoked_at = now(), revoked_by_user_id = $3, revoke_reason = $4
         WHERE cluster_id = $1 AND id = $2 AND revoked_at IS NULL",
        cluster_id,
        id,
        by,
        reason
    )
    .execute(db)
    .await?
    .rows_affected()
        == 1)
}

/// Why every credential of a user is revoked at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeAll {
    /// An administrator disabled the user.
    UserDisabled,
    /// The password was changed or reset: whoever held the account may have
    /// downloaded kubeconfigs.
    PasswordChanged,
}

impl RevokeAll {
    fn reason(self) -> &'static str {
        match self {
            RevokeAll::UserDisabled => "user_disabled",
            RevokeAll::PasswordChanged => "password_changed",
        }
    }
}

/// Revokes every credential a user still holds. Returns how many.
pub async fn revoke_all_of_user(
    tx: &mut PgConnection,
    user_id: Uuid,
    by: Uuid,
    why: RevokeAll,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE kubeconfig_credentials
         SET revoked_at = now(), revoked_by_user_id = $2, revoke_reason = $3
         WHERE user_id = $1 AND revoked_at IS NULL",
        user_id,
        by,
        why.reason()
    )
    .execute(tx)
    .await?
    .rows_affected())
}

/// Revokes every credential an API key asked for (its `exec` credentials
/// and the kubeconfigs downloaded with it): the key was revoked. Returns
/// how many.
pub async fn revoke_all_of_key(
    tx: &mut PgConnection,
    api_key_id: Uuid,
    by: Uuid,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE kubeconfig_credentials
         SET revoked_at = now(), revoked_by_user_id = $2, revoke_reason = 'api_key_revoked'
         WHERE api_key_id = $1 AND revoked_at IS NULL",
        api_key_id,
        by
    )
    .execute(tx)
    .await?
    .rows_affected())
}

/// Why a member's credentials in an organisation's clusters end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeInOrganization {
    /// They left it, or were taken out of it.
    Removed,
    /// Their new role may not hold a kubeconfig (a viewer).
    RoleChanged,
}

/// Revokes every credential the user holds in the organisation's clusters.
/// Returns how many.
pub async fn revoke_all_in_organization(
    tx: &mut PgConnection,
    user_id: Uuid,
    organization_id: Uuid,
    by: Uuid,
    why: RevokeInOrganization,
) -> Result<u64, sqlx::Error> {
    let reason = match why {
        RevokeInOrganization::Removed => "removed_from_organization",
        RevokeInOrganization::RoleChanged => "role_changed",
    };
    Ok(sqlx::query!(
        "UPDATE kubeconfig_credentials k
         SET revoked_at = now(), revoked_by_user_id = $3, revoke_reason = $4
         FROM clusters c
         WHERE c.id = k.cluster_id AND c.organization_id = $2
           AND k.user_id = $1 AND k.revoked_at IS NULL",
        user_id,
        organization_id,
        by,
        reason
    )
    .execute(tx)
    .await?
    .rows_affected())
}

/// A ServiceAccount that should no longer exist inside its cluster.
#[derive(Debug, Clone)]
pub struct StaleAccount {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub service_account_name: String,
}

/// ServiceAccounts of revoked or expired credentials not deleted yet, in live
/// clusters, by cluster; only those of `user_id` when given. A statement for
/// each shape: one user's (when their credentials end at once) and
/// everyone's (the sync's batch), so neither is planned for the other.
pub async fn stale(
    db: impl PgExecutor<'_>,
    user_id: Option<Uuid>,
    limit: i64,
) -> Result<Vec<StaleAccount>, sqlx::Error> {
    match user_id {
        Some(user_id) => {
            sqlx::query_as!(
                StaleAccount,
                "SELECT k.id, k.cluster_id, k.service_account_name
                 FROM kubeconfig_credentials k JOIN clusters c ON c.id = k.cluster_id
                 WHERE k.removed_at IS NULL AND c.deleted_at IS NULL
                   AND (k.revoked_at IS NOT NULL OR k.expires_at <= now())
                   AND k.user_id = $1
                 ORDER BY k.cluster_id, k.created_at
                 LIMIT $2",
                user_id,
                limit
            )
            .fetch_all(db)
            .await
        }
        None => {
            sqlx::query_as!(
                StaleAccount,
                "SELECT k.id, k.cluster_id, k.service_account_name
                 FROM kubeconfig_credentials k JOIN clusters c ON c.id = k.cluster_id
                 WHERE k.removed_at IS NULL AND c.deleted_at IS NULL
                   AND (k.revoked_at IS NOT NULL OR k.expires_at <= now())
                 ORDER BY k.cluster_id, k.created_at
                 LIMIT $1",
                limit
            )
            .fetch_all(db)
            .await
        }
    }
}

/// Records that a credential's ServiceAccount is to be deleted again (an
/// issue may have made it anew after a removal): the cluster sync goes on
/// until [`mark_removed`].
pub async fn removal_pending(db: impl PgExecutor<'_>, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE kubeconfig_credentials SET removed_at = NULL WHERE id = $1",
        id
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Records that a credential's ServiceAccount is gone from its cluster.
pub async fn mark_removed(db: impl PgExecutor<'_>, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE kubeconfig_credentials SET removed_at = now() WHERE id = $1 AND removed_at IS NULL",
        id
    )
    .execute(db)
    .await?;
    Ok(())
}

/// What kubeconfigs brings to the platform: the limits of the kubeconfigs it issues.
pub const CAPABILITY: crate::capability::Capability = crate::capability::Capability {
    settings: &[crate::capability::setting::<config::Config>],
    cluster_routes: &[
        crate::capability::ClusterRoute::new(
            "POST",
            "/kubeconfigs",
            crate::organizations::Action::IssueCredential,
        ),
        crate::capability::ClusterRoute::new(
            "POST",
            "/exec-credentials",
            crate::organizations::Action::IssueCredential,
        ),
        crate::capability::ClusterRoute::new(
            "DELETE",
            "/kubeconfigs/{credential_id}",
            crate::organizations::Action::Operate,
        ),
    ],
    ..crate::capability::Capability::named("kubeconfigs")
};
