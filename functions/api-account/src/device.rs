//! The user's half of a sign-in from a terminal (RFC 8628): the console's
//! `/device` page reads the request a user code names, then approves or
//! denies it. Only from a signed-in session; approving asks for the
//! password again, as making a key does. A code that names no pending
//! request counts against the caller's and the address's guesses.

use axum::extract::State;
use serde::Deserialize;
use shared::{
    accounts::{
        self, KeyScope,
        auth::{self, DEVICE_CODE_GUESSES_PER_ACCOUNT, DEVICE_CODE_GUESSES_PER_IP},
        device::{self, Decision, DeviceRequest},
    },
    app::authority,
    audit::{self, AuditEvent},
    error::ApiError,
    extract::AppJson,
    http::{AppState, Caller, Origin},
};
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserCode {
    /// The code the terminal shows (`BCDF-GHJK`; case, hyphens and spaces
    /// do not matter).
    #[schema(max_length = 32)]
    pub user_code: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveDevice {
    #[schema(max_length = 32)]
    pub user_code: String,
    /// What the device's key may do: `write` (the default) or `read`.
    pub scope: Option<KeyScope>,
    /// The key's lifetime: 1–365 days, default 90.
    #[schema(minimum = 1, maximum = 365)]
    pub expires_in_days: Option<i64>,
    /// The account's password, asked again before a key is made (an account
    /// without one approves within 10 minutes of signing in).
    pub password: Option<String>,
}

/// The guess buckets of a caller: theirs and their address's.
struct Guesses {
    account: String,
    /// The caller's address, as it came.
    ip: Option<String>,
}

impl Guesses {
    fn of(caller: &Caller, origin: &Origin) -> Self {
        Self {
            account: caller.user_id.to_string(),
            ip: origin.ip.clone(),
        }
    }

    /// The address's bucket (an IPv6 one's /64).
    fn source(&self) -> Option<String> {
        self.ip.as_deref().map(auth::source_key)
    }

    /// Counts the guess in both buckets before it is judged, 429 once either
    /// is spent: guesses sent at once are each counted as they arrive, so
    /// none gets past the limit while the others are being judged.
    async fn take(&self, pool: &sqlx::PgPool) -> Result<(), ApiError> {
        auth::rate_limit(pool, DEVICE_CODE_GUESSES_PER_ACCOUNT, &self.account).await?;
        if let Some(source) = self.source() {
            auth::rate_limit(pool, DEVICE_CODE_GUESSES_PER_IP, &source).await?;
        }
        Ok(())
    }

    /// A code that named a request: its guess taken back, so only misses
    /// stay counted.
    async fn found(&self, pool: &sqlx::PgPool) -> Result<(), ApiError> {
        auth::uncount(pool, DEVICE_CODE_GUESSES_PER_ACCOUNT, &self.account).await?;
        if let Some(source) = self.source() {
            auth::uncount(pool, DEVICE_CODE_GUESSES_PER_IP, &source).await?;
        }
        Ok(())
    }
}

fn not_found() -> ApiError {
    ApiError::NotFound {
        what: "pending device sign-in with this code (it may have expired or been decided)",
    }
}

/// A typed code as the stored one, its guess counted ([`Guesses::take`]);
/// 404 for one that cannot be a code.
async fn code_of(pool: &sqlx::PgPool, guesses: &Guesses, typed: &str) -> Result<String, ApiError> {
    guesses.take(pool).await?;
    device::normalize_user_code(typed).ok_or_else(not_found)
}

/// Read a device sign-in
///
/// The pending request a user code names: the device's name, the address
/// and program it asked from, and when it expires, for the user to
/// recognise before approving. 404 when the code names none (unknown,
/// expired or decided); such misses are limited to 10 an hour per account
/// and 30 per address (429).
#[utoipa::path(post, path = "/api/console/account/device/inspect", tag = "account", request_body = UserCode,
    responses((status = 200, body = DeviceRequest),
              (status = 403, description = "Not from a session", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 429, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn inspect(
    State(state): State<AppState>,
    caller: Caller,
    origin: Origin,
    AppJson(body): AppJson<UserCode>,
) -> Result<AppJson<DeviceRequest>, ApiError> {
    caller.require_session()?;
    let guesses = Guesses::of(&caller, &origin);
    let code = code_of(&state.pool, &guesses, &body.user_code).await?;
    let request = device::pending(&state.pool, &code)
        .await?
        .ok_or_else(not_found)?;
    guesses.found(&state.pool).await?;
    Ok(AppJson(request.read_from(origin.ip.as_deref())))
}

/// Approve a device sign-in
///
/// The device receives, at its next poll and only then, a personal API key
/// of the chosen scope and lifetime, named after it and listed with the
/// account's keys, where it is revoked. The password is asked again, as
/// for any new key.
#[utoipa::path(post, path = "/api/console/account/device/approve", tag = "account", request_body = ApproveDevice,
    responses((status = 200, body = DeviceRequest),
              (status = 401, description = "Not signed in, or the session was ended meanwhile (`unauthenticated`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "Not from a session, or a passwordless account's sign-in is older than 10 minutes", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 429, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    origin: Origin,
    AppJson(body): AppJson<ApproveDevice>,
) -> Result<AppJson<DeviceRequest>, ApiError> {
    let session_id = caller.require_session()?;
    let (_, lifetime) = accounts::key_terms("device", body.expires_in_days)?;
    // The password first: a mistyped one spends no guess of the code.
    accounts::reauthenticate(&state.pool, caller.user_id, session_id, body.password).await?;
    let guesses = Guesses::of(&caller, &origin);
    let code = code_of(&state.pool, &guesses, &body.user_code).await?;
    let decision = Decision::Approve {
        scope: body.scope.unwrap_or(KeyScope::Write),
        days: lifetime.num_days() as i32,
    };
    decide(&state, caller, &guesses, &code, decision).await
}

/// Deny a device sign-in
///
/// The device's next poll answers `access_denied`.
#[utoipa::path(post, path = "/api/console/account/device/deny", tag = "account", request_body = UserCode,
    responses((status = 200, body = DeviceRequest),
              (status = 401, description = "Not signed in, or the session was ended meanwhile (`unauthenticated`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "Not from a session", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 429, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn deny(
    State(state): State<AppState>,
    caller: Caller,
    origin: Origin,
    AppJson(body): AppJson<UserCode>,
) -> Result<AppJson<DeviceRequest>, ApiError> {
    caller.require_session()?;
    let guesses = Guesses::of(&caller, &origin);
    let code = code_of(&state.pool, &guesses, &body.user_code).await?;
    decide(&state, caller, &guesses, &code, Decision::Deny).await
}

async fn decide(
    state: &AppState,
    caller: Caller,
    guesses: &Guesses,
    code: &str,
    decision: Decision,
) -> Result<AppJson<DeviceRequest>, ApiError> {
    let mut tx = state.pool.begin().await?;
    // An approval is a credential's grant: it holds the session's authority,
    // so a password change at the same moment ends it (or refuses it).
    authority::hold(&mut tx, caller.authority(), authority::Scope::Account).await?;
    let (id, request) = device::decide(&mut *tx, code, caller.user_id, decision)
        .await?
        .ok_or_else(not_found)?;
    audit::record(&mut *tx, event(caller, id, &request, decision)).await?;
    tx.commit().await?;
    guesses.found(&state.pool).await?;
    Ok(AppJson(request.read_from(guesses.ip.as_deref())))
}

fn event(
    caller: Caller,
    id: Uuid,
    request: &DeviceRequest,
    decision: Decision,
) -> AuditEvent<'static> {
    let (action, metadata) = match decision {
        Decision::Approve { scope, days } => (
            "device.approve",
            serde_json::json!({
                "device_name": request.device_name,
                "ip": request.ip,
                "scope": scope.as_str(),
                "expires_in_days": days,
            }),
        ),
        Decision::Deny => (
            "device.deny",
            serde_json::json!({ "device_name": request.device_name, "ip": request.ip }),
        ),
    };
    AuditEvent {
        actor_user_id: Some(caller.user_id),
        actor_kind: "user",
        action,
        target_kind: "device_authorization",
        target_id: id.to_string(),
        cluster_id: None,
        metadata,
    }
}
