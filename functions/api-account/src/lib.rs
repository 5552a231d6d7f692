//! `api-account`: the caller's own account — API keys, login history,
//! notification settings and activity (their audit events).

use axum::{
    Extension, Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use shared::{
    accounts::{self, ApiKey, Login, SessionInfo, auth},
    app::{authority, credentials},
    audit::{self, AuditEvent, AuditRecord},
    billing::{
        self,
        entitlements::{Amounts, Entitlement},
    },
    error::ApiError,
    extract::{AppJson, AppPath, AppQuery},
    http::{AppState, Caller, InOrganization, idempotency::IssuesSecret},
    notifications::{self, NotificationSettings},
    organizations::Action,
};
use utoipa::{IntoParams, OpenApi, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

mod device;

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(list_keys, create_key))
        .routes(routes!(revoke_key))
        .routes(routes!(list_sessions, end_other_sessions))
        .routes(routes!(end_session))
        .routes(routes!(logins))
        .routes(routes!(notifications, save_notifications))
        .routes(routes!(activity))
        .routes(routes!(entitlements))
        .routes(routes!(device::inspect))
        .routes(routes!(device::approve))
        .routes(routes!(device::deny))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(
    tags((name = "account", description = "The caller's own account"))
)]
struct ApiDoc;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// 1–100 characters, not only spaces, to tell keys apart.
    #[schema(min_length = 1, max_length = 100, pattern = "\\S")]
    pub name: String,
    /// `read` (GET only) or `write`.
    pub scope: accounts::KeyScope,
    /// 1–365, default 90.
    #[schema(minimum = 1, maximum = 365)]
    pub expires_in_days: Option<i64>,
    /// The account's password, asked again before a key is made. An account
    /// without one (signed up with GitHub or Google) makes keys within 10
    /// minutes of signing in instead.
    pub password: Option<String>,
}

/// A new API key: the only response that carries it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedKey {
    pub api_key: ApiKey,
    /// Send it as `Authorization: Bearer <key>`; it is not shown again.
    pub key: String,
}

fn record<'a>(caller: Caller, action: &'a str, key: &ApiKey) -> AuditEvent<'a> {
    AuditEvent {
        actor_user_id: Some(caller.user_id),
        actor_kind: "user",
        action,
        target_kind: "api_key",
        target_id: key.id.to_string(),
        cluster_id: None,
        metadata: serde_json::json!({ "name": key.name, "prefix": key.prefix }),
    }
}

/// Create an API key
///
/// From a signed-in session only, with the password asked again. The key
/// has a scope (`read`: GET only; `write`: every console route but the
/// account's credentials) and expires (1–365 days, default 90); a password
/// change or reset revokes every key.
#[utoipa::path(post, path = "/api/console/account/api-keys", tag = "account", request_body = CreateKey,
    responses((status = 201, body = CreatedKey),
              (status = 401, description = "Not signed in, or the session was ended while the key was made (`unauthenticated`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "Not from a session, or a passwordless account's sign-in is older than 10 minutes", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 429, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn create_key(
    State(state): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<CreateKey>,
) -> Result<Response, ApiError> {
    let session_id = caller.require_session()?;
    let (name, lifetime) = accounts::key_terms(&body.name, body.expires_in_days)?;
    accounts::reauthenticate(&state.pool, caller.user_id, session_id, body.password).await?;
    let (key, prefix) = auth::new_api_key();
    let mut tx = state.pool.begin().await?;
    authority::hold(&mut tx, caller.authority(), authority::Scope::Account).await?;
    let api_key = accounts::insert_api_key(
        &mut *tx,
        &accounts::NewApiKey {
            user_id: caller.user_id,
            organization: None,
            name,
            prefix: &prefix,
            token_hash: &auth::hash_secret(&key),
            scope: body.scope,
            lifetime,
        },
    )
    .await?;
    audit::record(&mut *tx, record(caller, "api_key.create", &api_key)).await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Extension(IssuesSecret),
        AppJson(CreatedKey { api_key, key }),
    )
        .into_response())
}

/// List API keys
#[utoipa::path(get, path = "/api/console/account/api-keys", tag = "account", responses((status = 200, body = Vec<ApiKey>)))]
pub async fn list_keys(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<AppJson<Vec<ApiKey>>, ApiError> {
    Ok(AppJson(
        accounts::list_api_keys(&state.pool, caller.user_id).await?,
    ))
}

/// Revoke an API key
///
/// It stops working at once, and so do the kubectl credentials it renewed
/// (`kubebyon credential`). Revoking a revoked key changes nothing. From a
/// signed-in session, or with the key itself (`kubebyon logout`).
#[utoipa::path(delete, path = "/api/console/account/api-keys/{key_id}", tag = "account", params(("key_id" = Uuid, Path)),
    responses((status = 200, body = ApiKey), (status = 403, description = "Not from a session, nor the key itself: an API key cannot manage the account's other credentials", body = shared::error::Problem, content_type = "application/problem+json"), (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn revoke_key(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(key_id): AppPath<Uuid>,
) -> Result<AppJson<ApiKey>, ApiError> {
    if caller.api_key_id != Some(key_id) {
        caller.require_session()?;
    }
    let mut tx = state.pool.begin().await?;
    let key = accounts::revoke_api_key(&mut *tx, caller.user_id, key_id)
        .await?
        .ok_or(ApiError::NotFound { what: "API key" })?;
    let why = credentials::Why::KeyRevoked { key_id };
    let ended = credentials::end(&mut tx, caller.user_id, caller.user_id, why).await?;
    let mut event = record(caller, "api_key.revoke", &key);
    event.metadata = ended.counted_in(event.metadata);
    audit::record(&mut *tx, event).await?;
    tx.commit().await?;
    ended
        .removed_from_clusters(&state.pool, state.host.as_deref())
        .await;
    Ok(AppJson(key))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct Page {
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// Only entries older than this id (the last id of the previous page).
    pub before_id: Option<i64>,
}

/// Login history
///
/// The caller's logins, successful or not, newest first.
#[utoipa::path(get, path = "/api/console/account/logins", tag = "account", params(Page),
    responses((status = 200, body = Vec<Login>)))]
pub async fn logins(
    State(state): State<AppState>,
    caller: Caller,
    AppQuery(page): AppQuery<Page>,
) -> Result<AppJson<Vec<Login>>, ApiError> {
    Ok(AppJson(
        accounts::list_logins(
            &state.pool,
            caller.user_id,
            shared::extract::page_limit(page.limit)?,
        )
        .await?,
    ))
}

/// Notification settings
#[utoipa::path(get, path = "/api/console/account/notifications", tag = "account", responses((status = 200, body = NotificationSettings)))]
pub async fn notifications(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<AppJson<NotificationSettings>, ApiError> {
    Ok(AppJson(
        notifications::preferences::settings(&state.pool, caller.user_id).await?,
    ))
}

/// Save notification settings
#[utoipa::path(put, path = "/api/console/account/notifications", tag = "account", request_body = NotificationSettings,
    responses((status = 200, body = NotificationSettings)))]
pub async fn save_notifications(
    State(state): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<NotificationSettings>,
) -> Result<AppJson<NotificationSettings>, ApiError> {
    let mut tx = state.pool.begin().await?;
    notifications::preferences::save_settings(&mut *tx, caller.user_id, &body).await?;
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(caller.user_id),
            actor_kind: "user",
            action: "notifications.update",
            target_kind: "user",
            target_id: caller.user_id.to_string(),
            cluster_id: None,
            metadata: serde_json::to_value(&body).map_err(anyhow::Error::from)?,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(AppJson(body))
}

/// Activity
///
/// The caller's own audit events, newest first; page with `before_id`.
#[utoipa::path(get, path = "/api/console/account/activity", tag = "account", params(Page),
    responses((status = 200, body = Vec<AuditRecord>)))]
pub async fn activity(
    State(state): State<AppState>,
    caller: Caller,
    AppQuery(page): AppQuery<Page>,
) -> Result<AppJson<Vec<AuditRecord>>, ApiError> {
    Ok(AppJson(
        audit::list(
            &state.pool,
            Some(caller.user_id),
            page.before_id,
            shared::extract::page_limit(page.limit)?,
        )
        .await?,
    ))
}

/// One of the caller's sessions, and whether it is the one asking.
#[derive(Debug, Serialize, ToSchema)]
pub struct AccountSession {
    #[serde(flatten)]
    pub session: SessionInfo,
    pub current: bool,
}

/// The account's signed-in sessions
///
/// Every live session: where and when it was made and last used.
#[utoipa::path(get, path = "/api/console/account/sessions", tag = "account",
    responses((status = 200, body = Vec<AccountSession>),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn list_sessions(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<AppJson<Vec<AccountSession>>, ApiError> {
    let sessions = accounts::list_sessions(
        &state.pool,
        caller.user_id,
        state
            .settings
            .part::<accounts::config::Config>()?
            .session_idle,
    )
    .await?;
    Ok(AppJson(
        sessions
            .into_iter()
            .map(|session| AccountSession {
                current: Some(session.id) == caller.session_id,
                session,
            })
            .collect(),
    ))
}

fn session_event(caller: Caller, action: &str, metadata: serde_json::Value) -> AuditEvent<'_> {
    AuditEvent {
        actor_user_id: Some(caller.user_id),
        actor_kind: "user",
        action,
        target_kind: "user",
        target_id: caller.user_id.to_string(),
        cluster_id: None,
        metadata,
    }
}

/// Sign out one session
///
/// From a signed-in session; the session ends at once.
#[utoipa::path(delete, path = "/api/console/account/sessions/{session_id}", tag = "account", params(("session_id" = Uuid, Path)),
    responses((status = 204, description = "The session ended"),
              (status = 403, description = "Not from a session", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn end_session(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(session_id): AppPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    caller.require_session()?;
    let mut tx = state.pool.begin().await?;
    if !accounts::delete_own_session(&mut *tx, caller.user_id, session_id).await? {
        return Err(ApiError::NotFound { what: "session" });
    }
    audit::record(
        &mut *tx,
        session_event(
            caller,
            "user.session_end",
            serde_json::json!({ "session_id": session_id }),
        ),
    )
    .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// How many sessions ended.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionsEnded {
    pub ended: u64,
}

/// Sign out everywhere else
///
/// Ends every session of the account but the one asking (sign that one out
/// with `POST /api/auth/logout`).
#[utoipa::path(delete, path = "/api/console/account/sessions", tag = "account",
    responses((status = 200, body = SessionsEnded),
              (status = 403, description = "Not from a session", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn end_other_sessions(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<AppJson<SessionsEnded>, ApiError> {
    let current = caller.require_session()?;
    let mut tx = state.pool.begin().await?;
    let ended = accounts::delete_sessions(&mut *tx, caller.user_id, Some(current)).await?;
    audit::record(
        &mut *tx,
        session_event(
            caller,
            "user.sessions_end",
            serde_json::json!({ "ended": ended }),
        ),
    )
    .await?;
    tx.commit().await?;
    Ok(AppJson(SessionsEnded { ended }))
}

/// What the caller's plan allows and what they use.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntitlementsView {
    #[serde(flatten)]
    pub entitlement: Entitlement,
    /// `limits − usage` per resource; negative where a downgrade left the
    /// account over a limit (nothing is deleted: only growth is refused).
    /// Absent when nothing is limited.
    pub remaining: Option<Amounts>,
    /// The resources whose usage is above the limit.
    pub over_limit: Vec<String>,
    /// Where to choose a bigger plan.
    pub upgrade_url: String,
}

/// The organization's plan and usage
///
/// The plan comes from the organization's latest paid order, else the
/// settings' default plan; without either nothing is limited. Usage counts
/// the organization's live clusters, their nodes (and joins under way), the
/// clusters' workload CPU and memory limits summed, hostname bindings, and
/// tenant databases. Every member can read it.
#[utoipa::path(get, path = "/api/console/account/entitlements", tag = "account",
    params(("KubeBYON-Organization" = Option<Uuid>, Header, nullable = false, description = "The organization (its id); the caller's personal one when absent")),
    responses((status = 200, body = EntitlementsView),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "The caller is not a member of the organization (`not_found`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "The organization header is not an id (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn entitlements(
    State(state): State<AppState>,
    organization: InOrganization,
) -> Result<AppJson<EntitlementsView>, ApiError> {
    organization.require(Action::Read)?;
    let mut conn = state.pool.acquire().await?;
    let entitlement = billing::entitlements::read(&mut conn, organization.id).await?;
    let remaining = entitlement.remaining();
    let over_limit = entitlement
        .over_limit()
        .into_iter()
        .map(String::from)
        .collect();
    Ok(AppJson(EntitlementsView {
        remaining,
        over_limit,
        upgrade_url: billing::entitlements::upgrade_url(&state.settings.public_base_url),
        entitlement,
    }))
}
