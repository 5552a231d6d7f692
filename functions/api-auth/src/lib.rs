//! `api-auth`: `/api/auth/*`. Registration with an emailed code, login and
//! logout (session cookie + CSRF cookie), password reset by emailed code,
//! password change, `me`, and login with GitHub or Google. Rate limited per
//! address and per account.

use axum::{
    Router,
    extract::State,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::{Deserialize, Serialize};
use shared::{
    accounts::{
        self, CodeCheck, LoginEvent, NewSession, User,
        auth::{self, CODE_LIFETIME, CODE_MAX_ATTEMPTS},
    },
    app::credentials::{self, Why},
    audit::{self, AuditEvent},
    domain::{EmailAddress, UserStatus},
    error::{ApiError, FieldError},
    extract::AppJson,
    http::{AppState, Caller, Origin},
};
use utoipa::{OpenApi, ToSchema};
use uuid::Uuid;

mod captcha;
mod oauth;
mod provider;

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
        .route("/api/auth/register", post(register))
        .route("/api/auth/verify-email", post(verify_email))
        .route("/api/auth/resend-code", post(resend_code))
        .route("/api/auth/login", post(login))
        .route("/api/auth/logout", post(logout))
        .route("/api/auth/password-reset", post(request_reset))
        .route("/api/auth/password-reset/confirm", post(confirm_reset))
        .route("/api/auth/change-password", post(change_password))
        .route("/api/auth/me", get(me))
        .route("/api/auth/providers", get(oauth::options))
        .route("/api/auth/oauth/{provider}/start", get(oauth::start))
        .route("/api/auth/oauth/{provider}/callback", get(oauth::callback))
}

#[derive(OpenApi)]
#[openapi(
    paths(register, verify_email, resend_code, login, logout, request_reset, confirm_reset, change_password, me, oauth::options, oauth::start, oauth::callback),
    tags((name = "auth", description = "Registration, login, sessions and passwords"))
)]
pub struct ApiDoc;

const VERIFY: &str = "verify_email";
const RESET: &str = "reset_password";

fn email(raw: &str) -> Result<EmailAddress, ApiError> {
    EmailAddress::parse(raw).map_err(|m| ApiError::invalid("email", m))
}

fn validation(errors: Vec<(&str, String)>) -> Result<(), ApiError> {
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

/// Sends a fresh code for `purpose` to the account's stored address `email`;
/// the old one dies.
async fn send_code(
    state: &AppState,
    user_id: Uuid,
    email: &str,
    purpose: &str,
) -> Result<(), ApiError> {
    let code = auth::new_email_code();
    let mut tx = state.pool.begin().await?;
    accounts::replace_code(
        &mut tx,
        user_id,
        email,
        purpose,
        &auth::hash_secret(&code),
        CODE_LIFETIME,
    )
    .await?;
    tx.commit().await?;
    let (subject, what) = match purpose {
        VERIFY => (
            "Confirm your KubeBYON account",
            "confirm your email address",
        ),
        _ => ("Reset your KubeBYON password", "reset your password"),
    };
    let body = format!(
        "Your code to {what} is {code}\n\nIt is valid for {} minutes. If you did not ask for it, ignore this message.\n",
        CODE_LIFETIME.as_secs() / 60
    );
    // The answer must not depend on the mail: whether the server takes it or
    // how long it takes would tell a real address from an unknown one. Out of
    // the request where the process outlives it; under Lambda, which freezes
    // the process once it answers, in the request, which then answers at the
    // same time for every address ([`answered_alike`]).
    let (pool, settings, to) = (
        state.pool.clone(),
        state.settings.clone(),
        email.to_string(),
    );
    let delivery = async move {
        if let Err(err) = shared::mail::send(&pool, &settings, &to, subject, body).await {
            tracing::error!(error = %err, "could not send an email code");
        }
    };
    if shared::runtime::under_lambda() {
        delivery.await;
    } else {
        tokio::spawn(delivery);
    }
    Ok(())
}

/// Runs a code request. Under Lambda its mail goes out inside the request,
/// so the answer waits until `KUBEBYON_CODE_ANSWER_MS` after the request
/// began, whatever the address: a real one (mail sent) and an unknown one
/// (nothing sent) answer at the same time while the mail takes less.
async fn answered_alike<T>(
    state: &AppState,
    request: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    if !shared::runtime::under_lambda() {
        return request.await;
    }
    let floor = state
        .settings
        .part::<accounts::config::Config>()?
        .code_answer_floor;
    let answer_at = tokio::time::Instant::now() + floor;
    let answer = request.await;
    if tokio::time::Instant::now() > answer_at {
        tracing::warn!(
            floor_ms = floor.as_millis() as u64,
            "a code request took longer than KUBEBYON_CODE_ANSWER_MS: raise it above the mail server's time"
        );
    }
    tokio::time::sleep_until(answer_at).await;
    answer
}

/// 503 for every address alike when no mail can be sent at all: checked
/// before any account is looked up, so the answer says nothing about one.
async fn mail_ready(state: &AppState) -> Result<(), ApiError> {
    shared::mail::ready(&state.pool, &state.settings)
        .await
        .map_err(|err| {
            tracing::error!(error = %err, "email codes cannot be sent");
            ApiError::NotConfigured {
                code: "mail_not_configured",
                detail: "the platform cannot send email yet; ask its administrator".into(),
            }
        })
}

/// A 202 that says the same whatever the address: nothing to learn about accounts from it.
fn code_sent() -> Response {
    (
        StatusCode::ACCEPTED,
        axum::Json(serde_json::json!({ "status": "code_sent" })),
    )
        .into_response()
}

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

/// A code request (resend, reset): checked, limited, and answered alike
/// whether or not a code was sent — only an account `eligible` for `purpose` gets one.
async fn request_code(
    state: &AppState,
    origin: &Origin,
    raw_email: &str,
    captcha_token: Option<&str>,
    purpose: &'static str,
    eligible: impl FnOnce(&accounts::Credentials) -> bool + Send + 'static,
) -> Result<Response, ApiError> {
    let email = email(raw_email)?;
    answered_alike(state, async {
        captcha(state, origin, captcha_token).await?;
        limit_codes(state, origin, &email, purpose).await?;
        mail_ready(state).await?;
        let issue = {
            let state = state.clone();
            async move {
                if let Some(account) = accounts::credentials(&state.pool, email.as_str())
                    .await?
                    .filter(|c| eligible(c))
                {
                    send_code(&state, account.user_id, &account.email, purpose).await?;
                }
                Ok::<_, ApiError>(())
            }
        };
        if shared::runtime::under_lambda() {
            // Lambda freezes the process once it answers: the work is done
            // inside the request, whose answer waits for the floor.
            issue.await?;
        } else {
            // Looking the address up and storing its code happen after the
            // answer, so its time is the same for a real and an unknown one.
            tokio::spawn(async move {
                if let Err(err) = issue.await {
                    tracing::warn!(error = %err, "a code could not be issued");
                }
            });
        }
        Ok(code_sent())
    })
    .await
}

async fn captcha(state: &AppState, origin: &Origin, token: Option<&str>) -> Result<(), ApiError> {
    captcha::check(&state.pool, &state.settings, token, origin.ip.as_deref()).await
}

/// Limits code requests, after the captcha (a request that fails it counts
/// nowhere): per source; per account, purpose and source (the asker's own
/// bucket); per account and purpose (a wide cap on the mail one address gets).
/// A stranger asking for a victim's reset fills their own buckets, not the
/// victim's: registering, resending and resetting are counted apart.
async fn limit_codes(
    state: &AppState,
    origin: &Origin,
    email: &EmailAddress,
    purpose: &str,
) -> Result<(), ApiError> {
    let account = format!("{purpose}:{}", email.as_str());
    if let Some(source) = source(origin) {
        auth::rate_limit(&state.pool, auth::CODES_PER_IP, &source).await?;
        auth::rate_limit(
            &state.pool,
            auth::CODES_PER_ACCOUNT_AND_SOURCE,
            &format!("{account}@{source}"),
        )
        .await?;
    }
    auth::rate_limit(&state.pool, auth::CODES_PER_ACCOUNT, &account).await
}

/// The buckets of wrong codes presented for one account and purpose: per
/// source (the guesser's own) and per account (however many codes were sent,
/// at most 25 guesses an hour at a 6-digit code).
struct Guesses {
    account: String,
    pair: String,
}

impl Guesses {
    fn of(origin: &Origin, purpose: &str, user_id: Uuid) -> Self {
        let account = format!("{purpose}:{user_id}");
        let pair = format!("{account}@{}", source(origin).as_deref().unwrap_or("-"));
        Self { account, pair }
    }

    /// 429 once either bucket is full.
    async fn check(&self, state: &AppState) -> Result<(), ApiError> {
        auth::check_limit(
            &state.pool,
            auth::CODE_GUESSES_PER_ACCOUNT_AND_SOURCE,
            &self.pair,
        )
        .await?;
        auth::check_limit(&state.pool, auth::CODE_GUESSES_PER_ACCOUNT, &self.account).await
    }

    /// Counts one wrong code in both.
    async fn count(&self, state: &AppState) -> Result<(), ApiError> {
        auth::count_failure(
            &state.pool,
            auth::CODE_GUESSES_PER_ACCOUNT_AND_SOURCE,
            &self.pair,
        )
        .await?;
        auth::count_failure(&state.pool, auth::CODE_GUESSES_PER_ACCOUNT, &self.account).await
    }
}

/// The key the caller's address is limited under (its /64 for IPv6).
fn source(origin: &Origin) -> Option<String> {
    origin.ip.as_deref().map(auth::source_key)
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

fn invalid_code(outcome: CodeCheck) -> ApiError {
    ApiError::BadRequest {
        code: "invalid_code",
        detail: match outcome {
            CodeCheck::Wrong => "the code is wrong (or, when confirming an address, the password is not the one registered last)".into(),
            _ => "there is no valid code: it expired, was used, or had too many wrong guesses; ask for a new one".into(),
        },
    }
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
    let ended = credentials::end_all(
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
    let ended =
        credentials::end_all(&mut tx, user.id, user.id, Why::PasswordChanged { keep }).await?;
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

/// Who am I
#[utoipa::path(get, path = "/api/auth/me", tag = "auth",
    responses((status = 200, body = User), (status = 401, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn me(State(state): State<AppState>, caller: Caller) -> Result<AppJson<User>, ApiError> {
    accounts::get_user(&state.pool, caller.user_id)
        .await?
        .map(AppJson)
        .ok_or(ApiError::Unauthenticated)
}
