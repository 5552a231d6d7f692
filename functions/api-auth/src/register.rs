//! `POST /api/auth/register`, `/verify-email` and `/resend-code`.

use crate::codes::{
    Guesses, answered_alike, captcha, code_sent, invalid_code, limit_codes, mail_ready,
    request_code, send_code, source,
};
use crate::session::{SessionStarted, start_session};
use crate::{VERIFY, email, validation};
use axum::{extract::State, response::Response};
use serde::Deserialize;
use shared::{
    accounts::{
        self, CodeCheck,
        auth::{self, CODE_MAX_ATTEMPTS},
    },
    audit::{self, AuditEvent},
    domain::{EmailAddress, UserStatus},
    error::ApiError,
    extract::AppJson,
    http::{AppState, Origin},
};
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Register {
    #[schema(schema_with = shared::openapi::email_address)]
    pub email: String,
    /// 10–200 characters, hard to guess.
    #[schema(min_length = 10, max_length = 200)]
    pub password: String,
    /// 1–200 characters, not only spaces.
    #[schema(min_length = 1, max_length = 200, pattern = "\\S")]
    pub display_name: String,
    /// The captcha's answer, when the platform asks for one.
    pub captcha_token: Option<String>,
}

/// Register
///
/// Creates the account, unverified, and emails a 6-digit code (valid 15
/// minutes, 5 guesses) to confirm the address; the account can log in once it
/// is confirmed. The answer is the same whether or not the address is taken.
#[utoipa::path(post, path = "/api/auth/register", tag = "auth", request_body = Register,
    responses((status = 202, description = "A code was sent if the address can register"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 429, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "No mail can be sent (`mail_not_configured`), whatever the address", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn register(
    State(state): State<AppState>,
    origin: Origin,
    AppJson(body): AppJson<Register>,
) -> Result<Response, ApiError> {
    let mut errors = Vec::new();
    let email = EmailAddress::parse(&body.email)
        .map_err(|m| errors.push(("email", m)))
        .ok();
    if let Some(email) = &email
        && let Err(m) = auth::check_password_policy(&body.password, email.as_str())
    {
        errors.push(("password", m));
    }
    let name = body.display_name.trim();
    if !(1..=200).contains(&name.chars().count()) {
        errors.push(("display_name", "must be 1 to 200 characters".into()));
    }
    validation(errors)?;
    let Some(email) = email else {
        return Err(ApiError::invalid("email", "must be an email address"));
    };
    answered_alike(&state, async {
        captcha(&state, &origin, body.captcha_token.as_deref()).await?;
        limit_codes(&state, &origin, &email, VERIFY).await?;
        mail_ready(&state).await?;
        let hash = auth::hash_password(body.password).await?;
        let mut tx = state.pool.begin().await?;
        let Some((user_id, stored)) =
            accounts::register(&mut tx, email.as_str(), name, &hash).await?
        else {
            // A verified account has this address: say nothing, send nothing.
            return Ok(code_sent());
        };
        audit::record(
            &mut *tx,
            user_event(user_id, "user.register", serde_json::json!({})),
        )
        .await?;
        tx.commit().await?;
        send_code(&state, user_id, &stored, VERIFY).await?;
        Ok(code_sent())
    })
    .await
}

pub(crate) fn user_event(
    user_id: Uuid,
    action: &str,
    metadata: serde_json::Value,
) -> AuditEvent<'_> {
    AuditEvent {
        actor_user_id: Some(user_id),
        actor_kind: "user",
        action,
        target_kind: "user",
        target_id: user_id.to_string(),
        cluster_id: None,
        metadata,
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyEmail {
    #[schema(schema_with = shared::openapi::email_address)]
    pub email: String,
    /// The 6 digits the email holds.
    #[schema(pattern = "^[0-9]{6}$")]
    pub code: String,
    /// The password of the registration the code was sent for: a code
    /// confirms the address only together with it, so a second registration
    /// by someone else cannot ride on the owner's code.
    pub password: String,
}

/// Confirm an email address
///
/// With the emailed code and the password of the last registration: the
/// account is active and a session starts. Five wrong tries (a wrong code, or
/// the right one with another password) kill the code; ask for a new one.
#[utoipa::path(post, path = "/api/auth/verify-email", tag = "auth", request_body = VerifyEmail,
    responses((status = 200, body = SessionStarted),
              (status = 400, description = "Wrong, expired or dead code, or not the registered password (`invalid_code`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 429, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn verify_email(
    State(state): State<AppState>,
    origin: Origin,
    AppJson(body): AppJson<VerifyEmail>,
) -> Result<Response, ApiError> {
    let email = email(&body.email)?;
    if let Some(source) = source(&origin) {
        auth::rate_limit(&state.pool, auth::VERIFY_PER_IP, &source).await?;
    }
    let account = accounts::credentials(&state.pool, email.as_str()).await?;
    let password_ok = auth::verify_password(
        body.password,
        account.as_ref().and_then(|a| a.password_hash.clone()),
    )
    .await;
    let Some(account) = account.filter(|a| a.status == UserStatus::Active && !a.email_verified)
    else {
        return Err(invalid_code(CodeCheck::Dead));
    };
    let guesses = Guesses::of(&origin, VERIFY, account.user_id);
    guesses.check(&state).await?;
    let presented = auth::hash_secret(body.code.trim());
    let mut tx = state.pool.begin().await?;
    match accounts::check_code(
        &mut tx,
        account.user_id,
        VERIFY,
        password_ok.then_some(presented.as_slice()),
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
    accounts::mark_email_verified(&mut tx, account.user_id).await?;
    if state
        .settings
        .part::<accounts::config::Config>()?
        .admin_email
        .as_deref()
        == Some(account.email.as_str())
    {
        accounts::set_role(&mut tx, account.user_id, "admin").await?;
    }
    audit::record(
        &mut *tx,
        user_event(account.user_id, "user.verify_email", serde_json::json!({})),
    )
    .await?;
    tx.commit().await?;
    start_session(&state, account.user_id, &origin, "password", &account.email).await
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResendCode {
    #[schema(schema_with = shared::openapi::email_address)]
    pub email: String,
    /// The captcha's answer, when the platform asks for one.
    pub captcha_token: Option<String>,
}

/// Send a new confirmation code
#[utoipa::path(post, path = "/api/auth/resend-code", tag = "auth", request_body = ResendCode,
    responses((status = 202, description = "A code was sent if an unconfirmed account has the address"),
              (status = 429, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "No mail can be sent (`mail_not_configured`), whatever the address", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn resend_code(
    State(state): State<AppState>,
    origin: Origin,
    AppJson(body): AppJson<ResendCode>,
) -> Result<Response, ApiError> {
    request_code(
        &state,
        &origin,
        &body.email,
        body.captcha_token.as_deref(),
        VERIFY,
        |c| !c.email_verified && c.status == UserStatus::Active,
    )
    .await
}
