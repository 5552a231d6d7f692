//! `api-auth`: `/api/auth/*`. Registration with an emailed code, login and
//! logout (session cookie + CSRF cookie), password reset by emailed code,
//! password change, `me`, and login with GitHub or Google. Rate limited per
//! address and per account.

use axum::{Router, routing::get};
use shared::{
    domain::EmailAddress,
    error::{ApiError, FieldError},
    http::AppState,
};
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

mod captcha;
mod codes;
mod device;
mod oauth;
mod password;
mod provider;
mod register;
mod session;

/// The platform's OpenAPI document as committed (`docs/openapi.json`, which a
/// test keeps equal to what the handlers generate), served by this public
/// function so deployed clients and the console can fetch it.
const OPENAPI_DOCUMENT: &str = include_str!("../../../docs/openapi.json");

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(shared::openapi::answering(ApiDoc::openapi(), PROBLEM_CODES))
        // The document itself is not an operation of it.
        .route(
            "/api/openapi.json",
            get(|| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    OPENAPI_DOCUMENT,
                )
            }),
        )
        .routes(routes!(register::register))
        .routes(routes!(register::verify_email))
        .routes(routes!(register::resend_code))
        .routes(routes!(session::login))
        .routes(routes!(session::logout))
        .routes(routes!(password::request_reset))
        .routes(routes!(password::confirm_reset))
        .routes(routes!(password::change_password))
        .routes(routes!(session::me))
        .routes(routes!(session::session))
        .routes(routes!(oauth::options))
        .routes(routes!(oauth::start))
        .routes(routes!(oauth::callback))
        .routes(routes!(device::code))
        .routes(routes!(device::token))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(
    tags((name = "auth", description = "Registration, login, sessions and passwords"))
)]
struct ApiDoc;

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
            .map(|(field, message)| FieldError::new(field, message))
            .collect(),
    ))
}

/// The problem codes of this function's own refusals (the platform's and
/// its capabilities' come with `shared::http::problem_codes`).
const PROBLEM_CODES: &[&str] = &[
    "captcha_failed",
    "captcha_not_configured",
    "captcha_unreachable",
    "invalid_code",
    "mail_not_configured",
    "invalid_credentials",
    "oauth_not_configured",
    "oauth_unreachable",
    "oauth_state_mismatch",
    "oauth_refused",
    "oauth_email_unverified",
    "invalid_client",
    "invalid_request",
];
