//! Sessions: `POST /api/auth/login` and `/logout`, `GET /api/auth/me` and
//! `/session`, and starting a session (also after a confirmation or an
//! OAuth login).

use crate::codes::{captcha, source};
use crate::email;
use axum::{
    extract::State,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use shared::{
    accounts::{self, LoginEvent, NewSession, User, auth},
    domain::UserStatus,
    error::ApiError,
    extract::AppJson,
    http::{AppState, Caller, Origin},
};
use utoipa::ToSchema;
use uuid::Uuid;

/// The body of a new session; the token itself travels only in its cookie.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionStarted {
    pub user: User,
    /// Echo it in `X-CSRF-Token` on writes (it is also the `__Host-kb_csrf`
    /// cookie; `kb_csrf` on a platform with insecure cookies). It belongs to
    /// this session.
    pub csrf_token: String,
}

pub(crate) async fn start_session(
    state: &AppState,
    user_id: Uuid,
    origin: &Origin,
    method: &str,
    email: &str,
) -> Result<Response, ApiError> {
    let token = auth::new_session_token();
    let csrf = auth::csrf_token_for(&token);
    let mut tx = state.pool.begin().await?;
    accounts::insert_session(
        &mut *tx,
        &NewSession {
            user_id,
            token_hash: &auth::hash_secret(&token),
            lifetime: state
                .settings
                .part::<accounts::config::Config>()?
                .session_lifetime,
            ip: origin.ip.clone(),
            user_agent: origin.user_agent.as_deref(),
        },
    )
    .await?;
    accounts::record_login(
        &mut *tx,
        &LoginEvent {
            user_id: Some(user_id),
            email: Some(email),
            method,
            failure_reason: None,
            ip: origin.ip.clone(),
            user_agent: origin.user_agent.as_deref(),
        },
    )
    .await?;
    tx.commit().await?;
    let user = accounts::get_user(&state.pool, user_id)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
    let mut response = AppJson(SessionStarted {
        user,
        csrf_token: csrf.clone(),
    })
    .into_response();
    for cookie in auth::session_cookies(
        &token,
        !state.settings.insecure_cookies,
        state
            .settings
            .part::<accounts::config::Config>()?
            .session_lifetime,
    ) {
        response.headers_mut().append(
            header::SET_COOKIE,
            HeaderValue::from_str(&cookie).map_err(anyhow::Error::from)?,
        );
    }
    Ok(response)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Login {
    #[schema(schema_with = shared::openapi::email_address)]
    pub email: String,
    pub password: String,
    /// The captcha's answer, when the platform asks for one.
    pub captcha_token: Option<String>,
}

/// Log in
///
/// With email and password: a session starts (cookies `__Host-kb_session`,
/// HttpOnly, and `__Host-kb_csrf`). Every attempt is in the login history; too many from one
/// address or for one account answer 429 with `Retry-After`.
#[utoipa::path(post, path = "/api/auth/login", tag = "auth", request_body = Login,
    responses((status = 200, body = SessionStarted),
              (status = 401, description = "Wrong email or password, or the account cannot log in (`invalid_credentials`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 429, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn login(
    State(state): State<AppState>,
    origin: Origin,
    AppJson(body): AppJson<Login>,
) -> Result<Response, ApiError> {
    let email = email(&body.email)?;
    if let Some(source) = source(&origin) {
        auth::rate_limit(&state.pool, auth::LOGIN_PER_IP, &source).await?;
    }
    let account = accounts::credentials(&state.pool, email.as_str()).await?;
    // Failures are counted per account (its id; the address when there is no
    // such account, so both answer alike) and per account and address: a
    // guesser fills their own bucket, not the owner's.
    let account_key = account
        .as_ref()
        .map_or_else(|| email.to_string(), |a| a.user_id.to_string());
    let pair_key = format!(
        "{account_key}@{}",
        source(&origin).as_deref().unwrap_or("-")
    );
    auth::check_limit(
        &state.pool,
        auth::LOGIN_FAILURES_PER_ACCOUNT_AND_IP,
        &pair_key,
    )
    .await?;
    auth::check_limit(&state.pool, auth::LOGIN_FAILURES_PER_ACCOUNT, &account_key).await?;
    captcha(&state, &origin, body.captcha_token.as_deref()).await?;
    let password_ok = auth::verify_password(
        body.password,
        account.as_ref().and_then(|a| a.password_hash.clone()),
    )
    .await;
    let failure = match &account {
        None => Some("unknown email"),
        Some(_) if !password_ok => Some("wrong password"),
        Some(a) if a.status != UserStatus::Active => Some("account disabled"),
        Some(a) if !a.email_verified => Some("email not verified"),
        Some(_) => None,
    };
    if let Some(reason) = failure {
        auth::count_failure(
            &state.pool,
            auth::LOGIN_FAILURES_PER_ACCOUNT_AND_IP,
            &pair_key,
        )
        .await?;
        auth::count_failure(&state.pool, auth::LOGIN_FAILURES_PER_ACCOUNT, &account_key).await?;
        accounts::record_login(
            &state.pool,
            &LoginEvent {
                user_id: account.as_ref().map(|a| a.user_id),
                email: Some(email.as_str()),
                method: "password",
                failure_reason: Some(reason),
                ip: origin.ip.clone(),
                user_agent: origin.user_agent.as_deref(),
            },
        )
        .await?;
        // One answer for every reason: it must not confirm that a password
        // was right for an address that is not confirmed yet.
        return Err(ApiError::Unauthorized {
            code: "invalid_credentials",
            detail: "the email or the password is wrong, or the account cannot log in (an address not yet confirmed with its emailed code cannot)".into(),
        });
    }
    let account = account.expect("a login without failure has an account");
    start_session(&state, account.user_id, &origin, "password", &account.email).await
}

/// Log out
///
/// Ends the session of the request and clears its cookies.
#[utoipa::path(post, path = "/api/auth/logout", tag = "auth",
    responses((status = 204, description = "Logged out"),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn logout(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    if let Some(session_id) = caller.session_id {
        accounts::delete_session(&state.pool, session_id).await?;
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    for cookie in auth::cleared_cookies(!state.settings.insecure_cookies) {
        response.headers_mut().append(
            header::SET_COOKIE,
            HeaderValue::from_str(&cookie).map_err(anyhow::Error::from)?,
        );
    }
    Ok(response)
}

/// Who is signed in, if anyone: `user` is what `GET /api/auth/me` answers,
/// or null.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionState {
    pub user: Option<User>,
}

/// Who is signed in, if anyone
///
/// `GET /api/auth/me` for a page that may be signed out: a request without
/// a valid credential (none, an expired or revoked session, an unknown
/// key) answers `user: null`, not 401, so a signed-out page asks without an
/// error.
#[utoipa::path(get, path = "/api/auth/session", tag = "auth",
    responses((status = 200, body = SessionState)))]
pub async fn session(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
) -> Result<AppJson<SessionState>, ApiError> {
    let user = match caller {
        Ok(caller) => accounts::get_user(&state.pool, caller.user_id).await?,
        Err(ApiError::Unauthenticated) => None,
        Err(other) => return Err(other),
    };
    Ok(AppJson(SessionState { user }))
}

/// Who am I
#[utoipa::path(get, path = "/api/auth/me", tag = "auth",
    responses((status = 200, body = User), (status = 401, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn me(State(state): State<AppState>, caller: Caller) -> Result<AppJson<User>, ApiError> {
    accounts::get_user(&state.pool, caller.user_id)
        .await?
        .map(AppJson)
        .ok_or(ApiError::Unauthenticated)
}
