//! Invitations into an organisation, by email: the role the member will
//! have, the link's token kept only as its hash, single use, good for
//! [`LIFETIME`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::Role;

/// How long an invitation can be accepted.
pub const LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

crate::domain::text_enum! {
    /// Where an invitation is.
    InvitationStatus {
        Pending => "pending",
        Accepted => "accepted",
        Declined => "declined",
        Revoked => "revoked",
    }
}

/// An invitation as the organisation's admins see it (never its token).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Invitation {
    pub id: Uuid,
    pub organization_id: Uuid,
    #[schema(format = "email")]
    pub email: String,
    pub role: Role,
    pub status: InvitationStatus,
    pub invited_by_user_id: Uuid,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

macro_rules! select_invitation {
    ($tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Invitation,
            r#"SELECT id, organization_id, email::text AS "email!", role AS "role: Role",
                      status AS "status: InvitationStatus", invited_by_user_id, expires_at, created_at
               FROM organization_invitations "# + $tail,
            $($arg),*
        )
    };
}

/// A new invitation of `email` (an open one for the same address that has
/// expired is revoked first). `None` when the address has an open one.
pub async fn invite(
    tx: &mut PgConnection,
    organization_id: Uuid,
    email: &str,
    role: Role,
    token_hash: &[u8],
    by: Uuid,
) -> Result<Option<Invitation>, sqlx::Error> {
    sqlx::query!(
        "UPDATE organization_invitations SET status = 'revoked'
         WHERE organization_id = $1 AND email = $2 AND status = 'pending' AND expires_at <= now()",
        organization_id,
        email
    )
    .execute(&mut *tx)
    .await?;
    let expires_at = Utc::now() + LIFETIME;
    let id = sqlx::query_scalar!(
        "INSERT INTO organization_invitations
             (organization_id, email, role, token_hash, invited_by_user_id, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (organization_id, email) WHERE status = 'pending' DO NOTHING
         RETURNING id",
        organization_id,
        email,
        role.as_str(),
        token_hash,
        by,
        expires_at
    )
    .fetch_optional(&mut *tx)
    .await?;
    match id {
        Some(id) => Ok(Some(
            select_invitation!("WHERE id = $1", id)
                .fetch_one(&mut *tx)
                .await?,
        )),
        None => Ok(None),
    }
}

/// The organisation's open invitations, newest first.
pub async fn pending(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
) -> Result<Vec<Invitation>, sqlx::Error> {
    select_invitation!(
        "WHERE organization_id = $1 AND status = 'pending' ORDER BY created_at DESC, id DESC",
        organization_id
    )
    .fetch_all(db)
    .await
}

/// Revokes an open invitation. Whether there was one.
pub async fn revoke(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
    id: Uuid,
) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE organization_invitations SET status = 'revoked'
         WHERE organization_id = $1 AND id = $2 AND status = 'pending'",
        organization_id,
        id
    )
    .execute(db)
    .await?
    .rows_affected()
        == 1)
}

/// Revokes the open invitations `by` sent into the organisation: all of
/// them, or with `owners_only` those that would make an owner. How many.
pub async fn revoke_sent_by(
    tx: &mut PgConnection,
    organization_id: Uuid,
    by: Uuid,
    owners_only: bool,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE organization_invitations SET status = 'revoked'
         WHERE organization_id = $1 AND invited_by_user_id = $2 AND status = 'pending'
           AND (NOT $3 OR role = 'owner')",
        organization_id,
        by,
        owners_only
    )
    .execute(tx)
    .await?
    .rows_affected())
}

/// The invitation whose token hashes to `token_hash`, locked for the rest
/// of the transaction (one answer however many arrive at once).
pub async fn take(
    tx: &mut PgConnection,
    token_hash: &[u8],
) -> Result<Option<Invitation>, sqlx::Error> {
    select_invitation!("WHERE token_hash = $1 FOR UPDATE", token_hash)
        .fetch_optional(tx)
        .await
}

/// Records the answer to an open invitation.
pub async fn answer(
    tx: &mut PgConnection,
    id: Uuid,
    status: InvitationStatus,
    by: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE organization_invitations SET status = $2, answered_by_user_id = $3 WHERE id = $1",
        id,
        status.as_str(),
        by
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Adds a member.
pub async fn add_member(
    tx: &mut PgConnection,
    organization_id: Uuid,
    user_id: Uuid,
    role: Role,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO organization_members (organization_id, user_id, role) VALUES ($1, $2, $3)",
        organization_id,
        user_id,
        role.as_str()
    )
    .execute(tx)
    .await?;
    Ok(())
}
