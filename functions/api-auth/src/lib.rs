//! `api-auth`: `/api/auth/*`. Registration with an emailed code, login and
//! logout (session cookie + CSRF cookie), password reset by emailed code,
//! password change, `me`, and login with GitHub or Google. Rate limited per
//! address and per account.

use axum::{
    Router,
    routing::{get, post},
};
use shared::{
    domain::EmailAddress,
    error::{ApiError, FieldError},
    http::AppState,
};
use utoipa::OpenApi;

mod captcha;
mod codes;
mod oauth;
mod password;
mod provider;
mod register;
mod session;

/// The platform's OpenAPI document as committed (`docs/openapi.json`, which a
/// test keeps equal to what the handlers generate), served by this public
/// function so deployed clients and the console can fetch it.
const OPENAPI_DOCUMENT: &str = include_str!("../../../docs/openapi.json");

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/openapi.json",
            get(|| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    OPENAPI_DOCUMENT,
                )
            }),
        )
        .route("/api/auth/register", post(register::register))
        .route("/api/auth/verify-email", post(register::verify_email))
        .route("/api/auth/resend-code", post(register::resend_code))
        .route("/api/auth/login", post(session::login))
        .route("/api/auth/logout", post(session::logout))
        .route("/api/auth/password-reset", post(password::request_reset))
        .route(
            "/api/auth/password-reset/confirm",
            post(password::confirm_reset),
        )
        .route("/api/auth/change-password", post(password::change_password))
        .route("/api/auth/me", get(session::me))
        .route("/api/auth/providers", get(oauth::options))
        .route("/api/auth/oauth/{provider}/start", get(oauth::start))
        .route("/api/auth/oauth/{provider}/callback", get(oauth::callback))
}

#[derive(OpenApi)]
#[openapi(
    paths(register::register, register::verify_email, register::resend_code, session::login, session::logout, password::request_reset, password::confirm_reset, password::change_password, session::me, oauth::options, oauth::start, oauth::callback),
    tags((name = "auth", description = "Registration, login, sessions and passwords"))
)]
pub struct ApiDoc;

pub(crate) const VERIFY: &str = "verify_email";
pub(crate) const RESET: &str = "reset_password";

pub(crate) fn email(raw: &str) -> Result<EmailAddress, ApiError> {
    EmailAddress::parse(raw).map_err(|m| ApiError::invalid("email", m))
}

pub(crate) fn validation(errors: Vec<(&str, String)>) -> Result<(), ApiError> {
    if errors.is_empty() {
        return Ok(());
    }
    Err(ApiError::Validation(
        errors
            .into_iter()
            .map(|(field, message)| FieldError {
                field: field.into(),
                message,
            })
            .collect(),
    ))
}
