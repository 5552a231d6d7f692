//! `POST /api/auth/password-reset`, `/password-reset/confirm` and `/change-
//! password`.

use crate::codes::{Guesses, invalid_code, request_code, source};
use crate::register::user_event;
use crate::{RESET, email};
use axum::{extract::State, http::StatusCode, response::Response};
use serde::Deserialize;
use shared::{
    accounts::{
        self, CodeCheck,
        auth::{self, CODE_MAX_ATTEMPTS},
    },
    app::credentials::{self, Why},
    audit::{self},
    domain::UserStatus,
    error::ApiError,
    extract::AppJson,
    http::{AppState, Caller, Origin},
};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestReset {
    #[schema(schema_with = shared::openapi::email_address)]
    pub email: String,
    /// The captcha's answer, when the platform asks for one.
    pub captcha_token: Option<String>,
}

/// Ask for a password reset code
#[utoipa::path(post, path = "/api/auth/password-reset", tag = "auth", request_body = RequestReset,
    responses((status = 202, description = "A code was sent if an account has the address"),
              (status = 429, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "No mail can be sent (`mail_not_configured`), whatever the address", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn request_reset(
    State(state): State<AppState>,
    origin: Origin,
    AppJson(body): AppJson<RequestReset>,
) -> Result<Response, ApiError> {
    request_code(
        &state,
        &origin,
        &body.email,
        body.captcha_token.as_deref(),
        RESET,
        |c| c.status == UserStatus::Active,
    )
    .await
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmReset {
    #[schema(schema_with = shared::openapi::email_address)]
    pub email: String,
    /// The 6 digits the email holds.
    #[schema(pattern = "^[0-9]{6}$")]
    pub code: String,
    /// 10–200 characters, hard to guess.
    #[schema(min_length = 10, max_length = 200)]
    pub new_password: String,
}

/// Reset the password with the emailed code
///
/// Every session of the account ends and every API key and kubeconfig
/// credential is revoked.
#[utoipa::path(post, path = "/api/auth/password-reset/confirm", tag = "auth", request_body = ConfirmReset,
    responses((status = 204, description = "The password was changed"),
              (status = 400, description = "`invalid_code`", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn confirm_reset(
    State(state): State<AppState>,
    origin: Origin,
    AppJson(body): AppJson<ConfirmReset>,
) -> Result<StatusCode, ApiError> {
    let email = email(&body.email)?;
    auth::check_password_policy(&body.new_password, email.as_str())
        .map_err(|m| ApiError::invalid("new_password", m))?;
    if let Some(source) = source(&origin) {
        auth::rate_limit(&state.pool, auth::VERIFY_PER_IP, &source).await?;
    }
    let hash = auth::hash_password(body.new_password).await?;
    let Some(account) = accounts::credentials(&state.pool, email.as_str()).await? else {
        return Err(invalid_code(CodeCheck::Dead));
    };
    let guesses = Guesses::of(&origin, RESET, account.user_id);
    guesses.check(&state).await?;
    let mut tx = state.pool.begin().await?;
    match accounts::check_code(
        &mut tx,
        account.user_id,
        RESET,
        Some(&auth::hash_secret(body.code.trim())),
        CODE_MAX_ATTEMPTS,
    )
    .await?
    {
        CodeCheck::Accepted => {}
        outcome => {
            tx.commit().await?;
            guesses.count(&state).await?;
            return Err(invalid_code(outcome));
        }
    }
    accounts::set_password(&mut tx, account.user_id, &hash).await?;
    // The code proved the mailbox: the address is confirmed too.
    accounts::mark_email_verified(&mut tx, account.user_id).await?;
    let ended = credentials::end(
        &mut tx,
        account.user_id,
        account.user_id,
        Why::PasswordChanged { keep: None },
    )
    .await?;
    audit::record(
        &mut *tx,
        user_event(account.user_id, "user.password_reset", ended.audit()),
    )
    .await?;
    tx.commit().await?;
    ended
        .removed_from_clusters(&state.pool, state.host.as_deref())
        .await;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangePassword {
    pub current_password: String,
    /// 10–200 characters, hard to guess.
    #[schema(min_length = 10, max_length = 200)]
    pub new_password: String,
}

/// Change the password
///
/// From a signed-in session, with the current password; the account's other
/// sessions end and every API key and kubeconfig credential is revoked.
#[utoipa::path(post, path = "/api/auth/change-password", tag = "auth", request_body = ChangePassword,
    responses((status = 204, description = "The password was changed"),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "Not from a session: an API key cannot manage the account's credentials", body = shared::error::Problem, content_type = "application/problem+json"), 
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn change_password(
    State(state): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<ChangePassword>,
) -> Result<StatusCode, ApiError> {
    caller.require_session()?;
    let user = accounts::get_user(&state.pool, caller.user_id)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
    auth::check_password_policy(&body.new_password, &user.email)
        .map_err(|m| ApiError::invalid("new_password", m))?;
    auth::rate_limit(
        &state.pool,
        auth::PASSWORD_CHECKS_PER_ACCOUNT,
        &user.id.to_string(),
    )
    .await?;
    let stored = accounts::credentials(&state.pool, &user.email)
        .await?
        .and_then(|c| c.password_hash);
    if !auth::verify_password(body.current_password, stored).await {
        return Err(ApiError::invalid(
            "current_password",
            "is not the current password",
        ));
    }
    let hash = auth::hash_password(body.new_password).await?;
    let mut tx = state.pool.begin().await?;
    accounts::set_password(&mut tx, user.id, &hash).await?;
    let keep = caller.session_id;
    let ended = credentials::end(&mut tx, user.id, user.id, Why::PasswordChanged { keep }).await?;
    audit::record(
        &mut *tx,
        user_event(user.id, "user.password_change", ended.audit()),
    )
    .await?;
    tx.commit().await?;
    ended
        .removed_from_clusters(&state.pool, state.host.as_deref())
        .await;
    Ok(StatusCode::NO_CONTENT)
}
