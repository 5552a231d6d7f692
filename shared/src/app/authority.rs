//! The one rule between issuing a credential and ending what it rests on
//! (docs/decisions/2026-12-07-one-rule-for-issuing-and-revoking.md).
//!
//! A credential the platform issues — a kubeconfig or an `exec` credential,
//! an API key (an account's, an organisation's, a device's), a join token —
//! rests on an [`Authority`]: the user it acts as, the session or API key
//! the request came with, and for an organisation's cluster the role that
//! allows it there. A revocation ends such an authority: a member removed
//! or given another role, a password changed or reset, an account
//! disabled, an API key revoked.
//!
//! Both meet on one row, the user's. A revocation locks it exclusively
//! ([`revoking`]) before it ends any credential; an issue locks it shared
//! ([`hold`]), then reads its authority again under the lock and records
//! the credential before it commits. Whichever comes second waits for the
//! first to commit and sees it: a revocation that came first refuses the
//! issue; an issue that came first has its credential ended by the
//! revocation. Issues do not wait for each other (the lock is shared).
//!
//! Locks are taken in one order: an organisation's row, then a user's, then
//! the rows the credential lives in.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    error::ApiError,
    organizations::{self, Action, Role},
};

/// What a request that issues a credential was granted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authority {
    /// The user the credential acts as (for an organisation's key, its
    /// maker).
    pub user_id: Uuid,
    /// The session the request came with.
    pub session_id: Option<Uuid>,
    /// The API key the request came with.
    pub api_key_id: Option<Uuid>,
}

/// What the credential is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The account itself (an API key, a device's key).
    Account,
    /// `action` in an organisation (a cluster's kubeconfig or join token,
    /// an organisation's key).
    Organization { id: Uuid, action: Action },
}

/// For an issue, in its transaction and before it records the credential:
/// locks the user's row shared and checks again, under the lock, that the
/// account is active (401 otherwise), that the session and the API key the
/// request came with are live (401), and that the role — the member's, or
/// an organisation key's own — still allows the action in the organisation
/// (403, for one no longer a member too: they were one when the request
/// came).
pub async fn hold(
    tx: &mut PgConnection,
    authority: Authority,
    scope: Scope,
) -> Result<(), ApiError> {
    // The lock first, in a statement of its own: under READ COMMITTED each
    // statement after it reads what a revocation it waited for committed.
    let active = sqlx::query_scalar!(
        r#"SELECT status = 'active' AND deleted_at IS NULL AS "active!"
           FROM users WHERE id = $1 FOR SHARE"#,
        authority.user_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    if active != Some(true) {
        return Err(ApiError::Unauthenticated);
    }
    if let Some(session_id) = authority.session_id {
        let live = sqlx::query_scalar!(
            r#"SELECT EXISTS (SELECT 1 FROM sessions
                              WHERE id = $1 AND user_id = $2 AND expires_at > now()) AS "live!""#,
            session_id,
            authority.user_id
        )
        .fetch_one(&mut *tx)
        .await?;
        if !live {
            return Err(ApiError::Unauthenticated);
        }
    }
    let mut key_organization = None;
    if let Some(key_id) = authority.api_key_id {
        let key = sqlx::query!(
            r#"SELECT organization_id, organization_role AS "organization_role: Role"
               FROM api_keys
               WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL AND expires_at > now()"#,
            key_id,
            authority.user_id
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
        key_organization = key.organization_id.zip(key.organization_role);
    }
    let Scope::Organization { id, action } = scope else {
        return Ok(());
    };
    let role = match key_organization {
        Some((organization, role)) => (organization == id).then_some(role),
        None => organizations::role_of(&mut *tx, id, authority.user_id).await?,
    };
    role.ok_or_else(|| {
        ApiError::Forbidden("you are no longer a member of this organization".into())
    })?
    .require(action)
}

/// For a revocation, in its transaction and before it ends any credential:
/// locks the user's row exclusively, so an issue under way commits first
/// (and its credential is ended with the others) or reads the revocation.
pub async fn revoking(tx: &mut PgConnection, user_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "SELECT id FROM users WHERE id = $1 FOR NO KEY UPDATE",
        user_id
    )
    .fetch_optional(tx)
    .await?;
    Ok(())
}
