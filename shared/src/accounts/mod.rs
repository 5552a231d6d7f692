//! Accounts: users, sessions, API keys, email codes and login history.

pub mod auth;
pub mod config;
pub mod device;
pub mod settings;
pub mod users;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{
    domain::{UserRole, UserStatus},
    organizations::Role,
};

/// A user as they see themselves (and admins see them).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct User {
    pub id: Uuid,
    pub email: String,
    pub display_name: String,
    pub role: UserRole,
    pub status: UserStatus,
    pub email_verified: bool,
    pub has_password: bool,
    pub created_at: DateTime<Utc>,
}

pub async fn get_user(db: impl PgExecutor<'_>, user_id: Uuid) -> Result<Option<User>, sqlx::Error> {
    sqlx::query_as!(
        User,
        r#"SELECT id, email::text AS "email!", display_name, role AS "role: UserRole",
                  status AS "status: UserStatus",
                  email_verified_at IS NOT NULL AS "email_verified!",
                  password_hash IS NOT NULL AS "has_password!", created_at
           FROM users WHERE id = $1"#,
        user_id
    )
    .fetch_optional(db)
    .await
}

/// What login needs of an account.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user_id: Uuid,
    /// The address as stored: the only one mail goes to.
    pub email: String,
    pub password_hash: Option<String>,
    pub status: UserStatus,
    pub email_verified: bool,
}

/// The account with this address. `email` is an [`EmailAddress`]'s canonical
/// form, so the case-insensitive match compares ASCII only.
///
/// [`EmailAddress`]: crate::domain::EmailAddress
pub async fn credentials(
    db: impl PgExecutor<'_>,
    email: &str,
) -> Result<Option<Credentials>, sqlx::Error> {
    sqlx::query_as!(
        Credentials,
        r#"SELECT id AS user_id, email::text AS "email!", password_hash,
                  status AS "status: UserStatus",
                  email_verified_at IS NOT NULL AS "email_verified!"
           FROM users WHERE email = $1::text::citext"#,
        email
    )
    .fetch_optional(db)
    .await
}

/// Creates an unverified account, or sets a new password and name on an
/// unverified one of the same address (a second registration before the first
/// was confirmed: only the password of the last registration confirms the
/// address). `None` when a verified account holds the address; otherwise the
/// account and its stored address.
pub async fn register(
    tx: &mut PgConnection,
    email: &str,
    display_name: &str,
    password_hash: &str,
) -> Result<Option<(Uuid, String)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"INSERT INTO users (email, display_name, password_hash)
           VALUES ($1::text::citext, $2, $3)
           ON CONFLICT (email) DO UPDATE
           SET display_name = EXCLUDED.display_name, password_hash = EXCLUDED.password_hash
           WHERE users.email_verified_at IS NULL
           RETURNING id, email::text AS "email!""#,
        email,
        display_name,
        password_hash
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.map(|r| (r.id, r.email)))
}

/// Marks the account's address as confirmed.
pub async fn mark_email_verified(tx: &mut PgConnection, user_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE users SET email_verified_at = COALESCE(email_verified_at, now()) WHERE id = $1",
        user_id
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Takes a verified address for an account made by someone who never proved
/// it (an OAuth login with the provider's verified address): the password
/// set without that proof goes, and so do the account's sessions.
pub async fn claim_unverified(tx: &mut PgConnection, user_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE users SET password_hash = NULL, email_verified_at = now()
         WHERE id = $1 AND email_verified_at IS NULL",
        user_id
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!("DELETE FROM sessions WHERE user_id = $1", user_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// What [`upsert_admin`] did to the address's account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminUpsert {
    Created(Uuid),
    /// An existing account, now an active admin with the new password.
    Promoted(Uuid),
    /// The address belongs to a deleted account, which stays deleted.
    Deleted,
}

/// Makes the address's account an active, verified admin with this password
/// hash, creating it when there is none: how an operator gets the first
/// admin without mail (`local create-admin`).
pub async fn upsert_admin(
    tx: &mut PgConnection,
    email: &str,
    display_name: &str,
    password_hash: &str,
) -> Result<AdminUpsert, sqlx::Error> {
    let row = sqlx::query!(
        r#"INSERT INTO users (email, display_name, password_hash, role, email_verified_at)
           VALUES ($1::text::citext, $2, $3, 'admin', now())
           ON CONFLICT (email) DO UPDATE
           SET password_hash = EXCLUDED.password_hash, role = 'admin', status = 'active',
               email_verified_at = COALESCE(users.email_verified_at, now()), updated_at = now()
           WHERE users.deleted_at IS NULL
           RETURNING id, (xmax = 0) AS "created!""#,
        email,
        display_name,
        password_hash
    )
    .fetch_optional(tx)
    .await?;
    Ok(match row {
        Some(r) if r.created => AdminUpsert::Created(r.id),
        Some(r) => AdminUpsert::Promoted(r.id),
        None => AdminUpsert::Deleted,
    })
}

pub async fn set_role(tx: &mut PgConnection, user_id: Uuid, role: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("UPDATE users SET role = $2 WHERE id = $1", user_id, role)
        .execute(tx)
        .await?;
    Ok(())
}

pub async fn set_password(
    tx: &mut PgConnection,
    user_id: Uuid,
    password_hash: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE users SET password_hash = $2 WHERE id = $1",
        user_id,
        password_hash
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Stores a new code for an account and purpose, replacing the live one.
/// `email` is the account's stored address, the one the code is mailed to.
pub async fn replace_code(
    tx: &mut PgConnection,
    user_id: Uuid,
    email: &str,
    purpose: &str,
    code_hash: &[u8],
    lifetime: std::time::Duration,
) -> Result<(), sqlx::Error> {
    // Two codes asked for at once are stored one after the other: the later
    // replaces the earlier instead of meeting it in the unique index.
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1::uuid::text || '/' || $2, 11))",
        user_id,
        purpose
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE email_verification_codes SET consumed_at = now()
         WHERE user_id = $1 AND purpose = $2 AND consumed_at IS NULL",
        user_id,
        purpose
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "INSERT INTO email_verification_codes (user_id, email, purpose, code_hash, expires_at)
         VALUES ($1, $2::text::citext, $3, $4, now() + make_interval(secs => $5))",
        user_id,
        email,
        purpose,
        code_hash,
        lifetime.as_secs_f64()
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The result of presenting a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeCheck {
    Accepted,
    /// Wrong, with guesses left.
    Wrong,
    /// No live code: none sent, expired, used, or dead after too many guesses.
    Dead,
}

/// Checks a code against the account's live one for the purpose: a match
/// consumes it, a miss counts a guess and kills it at `max_attempts`. `None`
/// is a guess already known to be wrong (the code came with a wrong password).
pub async fn check_code(
    tx: &mut PgConnection,
    user_id: Uuid,
    purpose: &str,
    code_hash: Option<&[u8]>,
    max_attempts: i32,
) -> Result<CodeCheck, sqlx::Error> {
    let Some(live) = sqlx::query!(
        "SELECT id, code_hash, attempts FROM email_verification_codes
         WHERE user_id = $1 AND purpose = $2 AND consumed_at IS NULL AND expires_at > now()
         FOR UPDATE",
        user_id,
        purpose
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(CodeCheck::Dead);
    };
    if code_hash.is_some_and(|presented| {
        crate::accounts::auth::constant_time_eq(&live.code_hash, presented)
    }) {
        sqlx::query!(
            "UPDATE email_verification_codes SET consumed_at = now() WHERE id = $1",
            live.id
        )
        .execute(&mut *tx)
        .await?;
        return Ok(CodeCheck::Accepted);
    }
    let attempts = live.attempts + 1;
    sqlx::query!(
        "UPDATE email_verification_codes
         SET attempts = $2::int4, consumed_at = CASE WHEN $2::int4 >= $3::int4 THEN now() END WHERE id = $1",
        live.id,
        attempts,
        max_attempts
    )
    .execute(&mut *tx)
    .await?;
    Ok(if attempts >= max_attempts {
        CodeCheck::Dead
    } else {
        CodeCheck::Wrong
    })
}

pub struct NewSession<'a> {
    pub user_id: Uuid,
    pub token_hash: &'a [u8],
    pub lifetime: std::time::Duration,
    pub ip: Option<String>,
    pub user_agent: Option<&'a str>,
}

pub async fn insert_session(
    db: impl PgExecutor<'_>,
    new: &NewSession<'_>,
) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar!(
        "INSERT INTO sessions (user_id, token_hash, expires_at, ip, user_agent)
         VALUES ($1, $2, now() + make_interval(secs => $3), $4::text::inet, left($5, 300)) RETURNING id",
        new.user_id,
        new.token_hash,
        new.lifetime.as_secs_f64(),
        new.ip,
        new.user_agent
    )
    .fetch_one(db)
    .await
}

/// Who holds a live session (not expired, used within `idle`, user active),
/// refreshing its `last_used_at` at most once a minute.
pub async fn session_user(
    db: impl PgExecutor<'_>,
    token_hash: &[u8],
    idle: std::time::Duration,
) -> Result<Option<(Uuid, Uuid)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH live AS (
               SELECT s.id, s.user_id, s.last_used_at FROM sessions s JOIN users u ON u.id = s.user_id
               WHERE s.token_hash = $1 AND s.expires_at > now()
                 AND s.last_used_at > now() - make_interval(secs => $2) AND u.status = 'active'
           ), touched AS (
               UPDATE sessions s SET last_used_at = now()
               FROM live WHERE s.id = live.id AND live.last_used_at < now() - interval '1 minute'
           )
           SELECT id AS "id!", user_id AS "user_id!" FROM live"#,
        token_hash,
        idle.as_secs_f64()
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.id, r.user_id)))
}

pub async fn delete_session(db: impl PgExecutor<'_>, session_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM sessions WHERE id = $1", session_id)
        .execute(db)
        .await?;
    Ok(())
}

/// Ends every session of a user but `keep`. Returns how many.
pub async fn delete_sessions(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    keep: Option<Uuid>,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM sessions WHERE user_id = $1 AND ($2::uuid IS NULL OR id <> $2)",
        user_id,
        keep
    )
    .execute(db)
    .await?
    .rows_affected())
}

/// A live session as its owner sees it: never its token.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionInfo {
    pub id: Uuid,
    pub created_at: DateTime<Utc>,
    pub last_used_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub ip: Option<String>,
    pub user_agent: Option<String>,
}

/// The user's live sessions, most recently used first.
pub async fn list_sessions(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    idle: std::time::Duration,
) -> Result<Vec<SessionInfo>, sqlx::Error> {
    sqlx::query_as!(
        SessionInfo,
        r#"SELECT id, created_at, last_used_at, expires_at, host(ip) AS ip, user_agent FROM sessions
           WHERE user_id = $1 AND expires_at > now() AND last_used_at > now() - make_interval(secs => $2)
           ORDER BY last_used_at DESC, id"#,
        user_id,
        idle.as_secs_f64()
    )
    .fetch_all(db)
    .await
}

/// Ends one session of the user; `false` when the user has no such session.
pub async fn delete_own_session(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    session_id: Uuid,
) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM sessions WHERE id = $1 AND user_id = $2",
        session_id,
        user_id
    )
    .execute(db)
    .await?
    .rows_affected()
        == 1)
}

/// Deletes up to `batch` sign-in records older than `age`, oldest first
/// (`shared::app::retention`). Returns how many.
pub async fn prune_logins(
    db: impl PgExecutor<'_>,
    age: std::time::Duration,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM login_events WHERE id IN (
             SELECT id FROM login_events WHERE created_at < now() - make_interval(secs => $1)
             ORDER BY created_at LIMIT $2)",
        age.as_secs_f64(),
        batch
    )
    .execute(db)
    .await?
    .rows_affected())
}

/// Removes sessions past their absolute lifetime (an idle one is refused at
/// use already, and gone by its lifetime at the latest). Returns how many.
pub async fn prune_sessions(db: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    Ok(
        sqlx::query!("DELETE FROM sessions WHERE expires_at < now()")
            .execute(db)
            .await?
            .rows_affected(),
    )
}

/// What an API key lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KeyScope {
    /// `GET` requests only.
    Read,
    /// Every console route but the account's credentials (keys, password, sessions).
    Write,
}

impl KeyScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// A live API key as a request presents it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHolder {
    pub key_id: Uuid,
    /// Its maker: the user a personal key acts as; the member who made an
    /// organisation's key.
    pub user_id: Uuid,
    pub scope: KeyScope,
    /// An organisation's key: the organisation it acts in alone, and the
    /// role it acts with.
    pub organization: Option<(Uuid, Role)>,
}

/// The key with this hash, when it is live (not revoked, not expired; a
/// personal key's user active), refreshing `last_used_at` at most once a
/// minute. An organisation's key outlives its maker's membership and does
/// not follow their account's status: its organisation's admins revoke it.
pub async fn api_key_user(
    db: impl PgExecutor<'_>,
    token_hash: &[u8],
) -> Result<Option<KeyHolder>, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH live AS (
               SELECT k.id, k.user_id, k.scope, k.last_used_at, k.organization_id, k.organization_role
               FROM api_keys k JOIN users u ON u.id = k.user_id
               WHERE k.token_hash = $1 AND k.revoked_at IS NULL AND k.expires_at > now()
                 AND u.status = 'active'
           ), touched AS (
               UPDATE api_keys k SET last_used_at = now()
               FROM live WHERE k.id = live.id
                 AND (live.last_used_at IS NULL OR live.last_used_at < now() - interval '1 minute')
           )
           SELECT id AS "id!", user_id AS "user_id!", scope AS "scope!", organization_id,
                  organization_role AS "organization_role: Role"
           FROM live"#,
        token_hash
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| KeyHolder {
        key_id: r.id,
        user_id: r.user_id,
        scope: if r.scope == "read" {
            KeyScope::Read
        } else {
            KeyScope::Write
        },
        organization: r.organization_id.zip(r.organization_role),
    }))
}

/// Revokes every live key the user made, the organisations' keys among
/// them (their password changed, their account disabled: the platform
/// cannot tell the keys a thief made from theirs). How many.
pub async fn revoke_all_api_keys(tx: &mut PgConnection, user_id: Uuid) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE api_keys SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL",
        user_id
    )
    .execute(tx)
    .await?
    .rows_affected())
}

/// When the session started.
pub async fn session_started(
    db: impl PgExecutor<'_>,
    session_id: Uuid,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar!("SELECT created_at FROM sessions WHERE id = $1", session_id)
        .fetch_optional(db)
        .await
}

/// How recent a passwordless account's sign-in must be to make a key.
const RECENT_SIGN_IN: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// Before a key is made: the password asked again (counted against the
/// account's password checks), or for an account without one, a sign-in at
/// most 10 minutes old.
pub async fn reauthenticate(
    pool: &sqlx::PgPool,
    user_id: uuid::Uuid,
    session_id: uuid::Uuid,
    password: Option<String>,
) -> Result<(), crate::error::ApiError> {
    let user = get_user(pool, user_id)
        .await?
        .ok_or(crate::error::ApiError::Unauthenticated)?;
    if user.has_password {
        auth::rate_limit(
            pool,
            auth::PASSWORD_CHECKS_PER_ACCOUNT,
            &user_id.to_string(),
        )
        .await?;
        let stored = credentials(pool, &user.email)
            .await?
            .and_then(|c| c.password_hash);
        if !auth::verify_password(password.unwrap_or_default(), stored).await {
            return Err(crate::error::ApiError::invalid(
                "password",
                "is not the account's password; it is asked again before a key is made",
            ));
        }
        return Ok(());
    }
    let started = session_started(pool, session_id)
        .await?
        .ok_or(crate::error::ApiError::Unauthenticated)?;
    if chrono::Utc::now() - started > RECENT_SIGN_IN {
        return Err(crate::error::ApiError::Forbidden(
            "sign in again (within 10 minutes) before making a key".into(),
        ));
    }
    Ok(())
}

/// A new key's name (spaces at either end dropped, 1–100 characters) and
/// lifetime (1–365 days, default 90), or the field that is wrong.
pub fn key_terms(
    name: &str,
    expires_in_days: Option<i64>,
) -> Result<(&str, chrono::TimeDelta), crate::error::ApiError> {
    use crate::error::ApiError;
    let name = name.trim();
    if !(1..=100).contains(&name.chars().count()) {
        return Err(ApiError::invalid("name", "must be 1 to 100 characters"));
    }
    let days = expires_in_days.unwrap_or(90);
    if !(1..=365).contains(&days) {
        return Err(ApiError::invalid(
            "expires_in_days",
            "must be between 1 and 365",
        ));
    }
    Ok((name, chrono::TimeDelta::days(days)))
}

/// An API key as its owner sees it: never the key itself.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApiKey {
    pub id: Uuid,
    pub name: String,
    /// `kb_` and 8 hex digits: the start of the key, to recognise it by.
    pub prefix: String,
    /// `read` or `write`.
    pub scope: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

pub struct NewApiKey<'a> {
    pub user_id: Uuid,
    /// An organisation's key: the organisation and the role it acts with.
    pub organization: Option<(Uuid, Role)>,
    pub name: &'a str,
    pub prefix: &'a str,
    pub token_hash: &'a [u8],
    pub scope: KeyScope,
    pub lifetime: chrono::TimeDelta,
}

pub async fn insert_api_key(
    db: impl PgExecutor<'_>,
    key: &NewApiKey<'_>,
) -> Result<ApiKey, sqlx::Error> {
    sqlx::query_as!(
        ApiKey,
        "INSERT INTO api_keys (user_id, name, prefix, token_hash, scope, expires_at,
                               organization_id, organization_role)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6), $7, $8)
         RETURNING id, name, prefix, scope, created_at, expires_at, last_used_at, revoked_at",
        key.user_id,
        key.name,
        key.prefix,
        key.token_hash,
        key.scope.as_str(),
        key.lifetime.num_seconds() as f64,
        key.organization.map(|(id, _)| id),
        key.organization.map(|(_, role)| role.as_str())
    )
    .fetch_one(db)
    .await
}

pub async fn list_api_keys(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
) -> Result<Vec<ApiKey>, sqlx::Error> {
    sqlx::query_as!(
        ApiKey,
        "SELECT id, name, prefix, scope, created_at, expires_at, last_used_at, revoked_at FROM api_keys
         WHERE user_id = $1 AND organization_id IS NULL ORDER BY created_at DESC, id DESC",
        user_id
    )
    .fetch_all(db)
    .await
}

/// Revokes a personal key of the user; `None` when there is no such key.
pub async fn revoke_api_key(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    key_id: Uuid,
) -> Result<Option<ApiKey>, sqlx::Error> {
    sqlx::query_as!(
        ApiKey,
        "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now())
         WHERE id = $1 AND user_id = $2 AND organization_id IS NULL
         RETURNING id, name, prefix, scope, created_at, expires_at, last_used_at, revoked_at",
        key_id,
        user_id
    )
    .fetch_optional(db)
    .await
}

/// An organisation's API key as its admins see it: never the key itself.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OrganizationApiKey {
    pub id: Uuid,
    pub name: String,
    /// `kb_` and 8 hex digits: the start of the key, to recognise it by.
    pub prefix: String,
    /// The role it acts with in the organisation.
    pub role: Role,
    /// The member who made it, and their address.
    pub created_by: Uuid,
    pub created_by_email: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// The organisation's keys, newest first.
pub async fn organization_api_keys(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
) -> Result<Vec<OrganizationApiKey>, sqlx::Error> {
    sqlx::query_as!(
        OrganizationApiKey,
        r#"SELECT k.id, k.name, k.prefix, k.organization_role AS "role!: Role",
                  k.user_id AS created_by, u.email::text AS "created_by_email!", k.created_at,
                  k.expires_at, k.last_used_at, k.revoked_at
           FROM api_keys k JOIN users u ON u.id = k.user_id
           WHERE k.organization_id = $1 ORDER BY k.created_at DESC, k.id DESC"#,
        organization_id
    )
    .fetch_all(db)
    .await
}

/// Revokes a key of the organisation; `None` when it has no such key.
pub async fn revoke_organization_api_key(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
    key_id: Uuid,
) -> Result<Option<OrganizationApiKey>, sqlx::Error> {
    sqlx::query_as!(
        OrganizationApiKey,
        r#"WITH revoked AS (
               UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now())
               WHERE id = $2 AND organization_id = $1
               RETURNING id, name, prefix, organization_role, user_id, created_at, expires_at,
                         last_used_at, revoked_at)
           SELECT k.id, k.name, k.prefix, k.organization_role AS "role!: Role",
                  k.user_id AS created_by, u.email::text AS "created_by_email!", k.created_at,
                  k.expires_at, k.last_used_at, k.revoked_at
           FROM revoked k JOIN users u ON u.id = k.user_id"#,
        organization_id,
        key_id
    )
    .fetch_optional(db)
    .await
}

pub struct LoginEvent<'a> {
    pub user_id: Option<Uuid>,
    pub email: Option<&'a str>,
    /// `password`, `github`, `google` or `api_key`.
    pub method: &'a str,
    /// `None` for a success.
    pub failure_reason: Option<&'a str>,
    pub ip: Option<String>,
    pub user_agent: Option<&'a str>,
}

pub async fn record_login(
    db: impl PgExecutor<'_>,
    event: &LoginEvent<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO login_events (user_id, email, method, success, failure_reason, ip, user_agent)
         VALUES ($1, $2::text::citext, $3, $4, $5, $6::text::inet, left($7, 300))",
        event.user_id,
        event.email,
        event.method,
        event.failure_reason.is_none(),
        event.failure_reason,
        event.ip,
        event.user_agent
    )
    .execute(db)
    .await?;
    Ok(())
}

/// One login, as the user's history shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = LoginEvent)]
pub struct Login {
    pub id: i64,
    pub method: String,
    pub success: bool,
    pub failure_reason: Option<String>,
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    pub created_at: DateTime<Utc>,
}

pub async fn list_logins(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    limit: i64,
) -> Result<Vec<Login>, sqlx::Error> {
    sqlx::query_as!(
        Login,
        "SELECT id, method, success, failure_reason, host(ip) AS ip, user_agent, created_at
         FROM login_events WHERE user_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2",
        user_id,
        limit
    )
    .fetch_all(db)
    .await
}

/// `SELECT` of a live user for the back office, then the statement's own
/// conditions and order.
macro_rules! user_query {
    ($rest:literal, $($arg:expr),* $(,)?) => {
        sqlx::query_as!(
            User,
            r#"SELECT id, email::text AS "email!", display_name, role AS "role: UserRole",
                      status AS "status: UserStatus",
                      email_verified_at IS NOT NULL AS "email_verified!",
                      password_hash IS NOT NULL AS "has_password!", created_at
               FROM users
               WHERE deleted_at IS NULL "# + $rest,
            $($arg),*
        )
    };
}

/// Users for the back office, newest first, optionally matching `q` in email
/// or name, after the keyset cursor `before` (`created_at` and id; a nil id
/// for "created before that instant"); deleted users are left out. Two
/// kinds of statement, with and without the search. Without, one statement
/// per filter, each an index walk in the list's order that holds the users
/// it keeps (`idx_users_created_at`, `idx_users_role_created_at`,
/// `idx_users_status_created_at`) and stops at a full page. A search
/// takes the status and role filters as arrays of the values kept (every
/// value when a filter is absent) and is planned for its
/// own text at every call (`plan_cache_mode = force_custom_plan` for its
/// transaction; a prepared statement's generic plan cannot know how rare
/// the text is and walks every user by time to fill a page): through the
/// trigram indexes of the email and the name where the database has them, a
/// rare name among 10,000 users reads its matches alone.
pub async fn list_users(
    pool: &sqlx::PgPool,
    q: Option<&str>,
    status: Option<UserStatus>,
    role: Option<UserRole>,
    before: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<User>, sqlx::Error> {
    let statuses: Vec<&str> = match status {
        Some(status) => vec![status.as_str()],
        None => UserStatus::ALL.iter().map(|s| s.as_str()).collect(),
    };
    let roles: Vec<&str> = match role {
        Some(role) => vec![role.as_str()],
        None => UserRole::ALL.iter().map(|r| r.as_str()).collect(),
    };
    let (before_at, before_id) = before.unwrap_or_else(crate::extract::before_everything);
    match q {
        Some(q) => {
            // One round trip more than a plain statement: the BEGIN that
            // sets the plan mode travels with it.
            let mut tx = pool
                .begin_with("BEGIN; SET LOCAL plan_cache_mode = force_custom_plan")
                .await?;
            user_query!(
                "AND (email::text ILIKE '%' || $1 || '%' OR display_name ILIKE '%' || $1 || '%')
                   AND status = ANY($2) AND role = ANY($3) AND (created_at, id) < ($4, $5)
                 ORDER BY created_at DESC, id DESC LIMIT $6",
                q,
                &statuses as &[&str],
                &roles as &[&str],
                before_at,
                before_id,
                limit
            )
            .fetch_all(&mut *tx)
            .await
        }
        // One statement per filter, each walking an index in the list's
        // order that holds only the users it keeps.
        None => {
            match (role, status) {
                (Some(role), _) => {
                    user_query!(
                        "AND role = $1 AND status = ANY($2) AND (created_at, id) < ($3, $4)
                     ORDER BY created_at DESC, id DESC LIMIT $5",
                        role.as_str(),
                        &statuses as &[&str],
                        before_at,
                        before_id,
                        limit
                    )
                    .fetch_all(pool)
                    .await
                }
                (None, Some(status)) => {
                    user_query!(
                        "AND status = $1 AND (created_at, id) < ($2, $3)
                     ORDER BY created_at DESC, id DESC LIMIT $4",
                        status.as_str(),
                        before_at,
                        before_id,
                        limit
                    )
                    .fetch_all(pool)
                    .await
                }
                (None, None) => user_query!(
                    "AND (created_at, id) < ($1, $2) ORDER BY created_at DESC, id DESC LIMIT $3",
                    before_at,
                    before_id,
                    limit
                )
                .fetch_all(pool)
                .await,
            }
        }
    }
}

/// Sets a live user's status and/or role. `None` when there is no such user.
pub async fn update_user(
    tx: &mut PgConnection,
    user_id: Uuid,
    status: Option<&str>,
    role: Option<&str>,
) -> Result<Option<()>, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE users SET status = COALESCE($2, status), role = COALESCE($3, role)
         WHERE id = $1 AND deleted_at IS NULL",
        user_id,
        status,
        role
    )
    .execute(tx)
    .await?
    .rows_affected()
    .eq(&1)
    .then_some(()))
}

/// The emails of those of `users` that exist, by id.
pub async fn emails(
    db: impl PgExecutor<'_>,
    users: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, String>, sqlx::Error> {
    Ok(sqlx::query!(
        r#"SELECT id, email::text AS "email!" FROM users WHERE id = ANY($1)"#,
        users
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| (r.id, r.email))
    .collect())
}

/// Clusters of the user that are not deleted.
pub async fn live_clusters(db: impl PgExecutor<'_>, user_id: Uuid) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM clusters WHERE owner_user_id = $1 AND deleted_at IS NULL"#,
        user_id
    )
    .fetch_one(db)
    .await
}

/// Deletes an account: its sessions, keys, identities, codes and settings
/// go; the row stays (history points at it) with nothing personal left.
pub async fn scrub_user(tx: &mut PgConnection, user_id: Uuid) -> Result<Option<()>, sqlx::Error> {
    let Some(email) = sqlx::query_scalar!(
        r#"SELECT email::text AS "email!" FROM users WHERE id = $1 AND deleted_at IS NULL FOR UPDATE"#,
        user_id
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    sqlx::query!("DELETE FROM sessions WHERE user_id = $1", user_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query!("DELETE FROM api_keys WHERE user_id = $1", user_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query!(
        "DELETE FROM external_identities WHERE user_id = $1",
        user_id
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "DELETE FROM notification_settings WHERE user_id = $1",
        user_id
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "DELETE FROM email_verification_codes WHERE email = $1::text::citext",
        email
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE login_events SET email = NULL, ip = NULL, user_agent = NULL WHERE user_id = $1",
        user_id
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE users SET email = 'deleted-' || id || '@deleted.invalid', display_name = 'Deleted user',
                password_hash = NULL, email_verified_at = NULL, status = 'disabled', deleted_at = now()
         WHERE id = $1",
        user_id
    )
    .execute(&mut *tx)
    .await?;
    Ok(Some(()))
}

/// The user an external identity is linked to, and whether it may log in.
pub async fn identity_user(
    db: impl PgExecutor<'_>,
    provider: &str,
    subject: &str,
) -> Result<Option<(Uuid, bool)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT u.id, u.status = 'active' AS "active!" FROM external_identities i JOIN users u ON u.id = i.user_id
           WHERE i.provider = $1 AND i.subject = $2"#,
        provider,
        subject
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.id, r.active)))
}

pub async fn link_identity(
    tx: &mut PgConnection,
    user_id: Uuid,
    provider: &str,
    subject: &str,
    email: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO external_identities (user_id, provider, subject, email) VALUES ($1, $2, $3, $4::text::citext)",
        user_id,
        provider,
        subject,
        email
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// An account made by an OAuth login: its address is verified by the provider
/// and it has no password.
pub async fn create_oauth_user(
    tx: &mut PgConnection,
    email: &str,
    display_name: &str,
) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar!(
        "INSERT INTO users (email, display_name, email_verified_at) VALUES ($1::text::citext, $2, now()) RETURNING id",
        email,
        display_name
    )
    .fetch_one(tx)
    .await
}

/// What accounts brings to the platform: the sign-in settings and the sealed secrets of its identity providers.
pub const CAPABILITY: crate::capability::Capability = crate::capability::Capability {
    settings: &[crate::capability::setting::<config::Config>],
    reseal: Some(|tx, key| Box::pin(settings::reseal(tx, key))),
    histories: &[crate::capability::History {
        name: "login_events",
        variable: "LOGIN_EVENTS_RETENTION_MS",
        default_days: 180,
        prune: |conn, age, batch| Box::pin(prune_logins(conn, age, batch)),
    }],
    ..crate::capability::Capability::named("accounts")
};
