//! Emailed codes: sending them (alike for known and unknown addresses), their
//! limits per address and account, and the captcha.

use crate::{VERIFY, email};
use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use shared::{
    accounts::{
        self, CodeCheck,
        auth::{self, CODE_LIFETIME},
    },
    domain::EmailAddress,
    error::ApiError,
    http::{AppState, Origin},
};
use uuid::Uuid;

/// Sends a fresh code for `purpose` to the account's stored address `email`;
/// the old one dies.
pub(crate) async fn send_code(
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
    shared::mail::deliver(
        state.pool.clone(),
        state.settings.clone(),
        email.to_string(),
        subject.to_string(),
        body,
        "an email code",
    )
    .await;
    Ok(())
}

/// Runs a code request. Under Lambda its mail goes out inside the request,
/// so the answer waits until `KUBEBYON_CODE_ANSWER_MS` after the request
/// began, whatever the address: a real one (mail sent) and an unknown one
/// (nothing sent) answer at the same time while the mail takes less.
pub(crate) async fn answered_alike<T>(
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
pub(crate) async fn mail_ready(state: &AppState) -> Result<(), ApiError> {
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
pub(crate) fn code_sent() -> Response {
    (
        StatusCode::ACCEPTED,
        axum::Json(serde_json::json!({ "status": "code_sent" })),
    )
        .into_response()
}

/// A code request (resend, reset): checked, limited, and answered alike
/// whether or not a code was sent — only an account `eligible` for `purpose` gets one.
pub(crate) async fn request_code(
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

pub(crate) async fn captcha(
    state: &AppState,
    origin: &Origin,
    token: Option<&str>,
) -> Result<(), ApiError> {
    crate::captcha::check(&state.pool, &state.settings, token, origin.ip.as_deref()).await
}

/// Limits code requests, after the captcha (a request that fails it counts
/// nowhere): per source; per account, purpose and source (the asker's own
/// bucket); per account and purpose (a wide cap on the mail one address gets).
/// A stranger asking for a victim's reset fills their own buckets, not the
/// victim's: registering, resending and resetting are counted apart.
pub(crate) async fn limit_codes(
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
pub(crate) struct Guesses {
    account: String,
    pair: String,
}

impl Guesses {
    pub(crate) fn of(origin: &Origin, purpose: &str, user_id: Uuid) -> Self {
        let account = format!("{purpose}:{user_id}");
        let pair = format!("{account}@{}", source(origin).as_deref().unwrap_or("-"));
        Self { account, pair }
    }

    /// 429 once either bucket is full.
    pub(crate) async fn check(&self, state: &AppState) -> Result<(), ApiError> {
        auth::check_limit(
            &state.pool,
            auth::CODE_GUESSES_PER_ACCOUNT_AND_SOURCE,
            &self.pair,
        )
        .await?;
        auth::check_limit(&state.pool, auth::CODE_GUESSES_PER_ACCOUNT, &self.account).await
    }

    /// Counts one wrong code in both.
    pub(crate) async fn count(&self, state: &AppState) -> Result<(), ApiError> {
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
pub(crate) fn source(origin: &Origin) -> Option<String> {
    origin.ip.as_deref().map(auth::source_key)
}

pub(crate) fn invalid_code(outcome: CodeCheck) -> ApiError {
    ApiError::BadRequest {
        code: "invalid_code",
        detail: match outcome {
            CodeCheck::Wrong => "the code is wrong (or, when confirming an address, the password is not the one registered last)".into(),
            _ => "there is no valid code: it expired, was used, or had too many wrong guesses; ask for a new one".into(),
        },
    }
}
