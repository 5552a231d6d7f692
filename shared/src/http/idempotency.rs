//! `Idempotency-Key` (IETF httpapi draft) on the console's POSTs, so a client
//! that retries after a timeout cannot create a second cluster, token, hostname
//! or key. The first answer to a user's key is kept for 24 hours: a retry of
//! the same request (method, path and body, with the same API key or none)
//! gets it again with the key echoed;
//! the same key with another request is refused (422
//! `idempotency_key_reused`); a retry while the first is still running is
//! refused (409 `idempotency_request_in_flight`). Only settled answers are
//! kept — 2xx, and 4xx but those that say "try again" (408, 409, 425, 429);
//! after any other answer the key is free for the retry to run again. A claim
//! whose process died is taken over once the request timeout has passed.
//!
//! A kept answer holds no secret in clear: with `KUBEBYON_SETTINGS_KEY` set,
//! every kept body is sealed (`secretbox`, bound to this column) and opened
//! for the replay; without it, an answer a route marks [`IssuesSecret`] (an
//! API key, a join token, a kubeconfig: shown once) is kept without its body,
//! and a retry is refused (409 `idempotency_answer_not_kept`) rather than run
//! again.

use std::time::Duration;

use axum::{
    body::{Body, Bytes},
    extract::{FromRequestParts, Request, State},
    http::{HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::{
    error::ApiError,
    extract::MAX_BODY_BYTES,
    http::caller::{AppState, Caller},
};

pub const HEADER: &str = "idempotency-key";
/// The associated data kept bodies are sealed under.
const SEALED_COLUMN: &str = "idempotency_keys.response_body";

/// A response extension: the answer carries a secret shown once (a route
/// adds `Extension(IssuesSecret)` to it).
#[derive(Debug, Clone, Copy)]
pub struct IssuesSecret;
/// How long an answer is kept for its key.
pub const KEPT_FOR: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest answer kept (a larger one is answered and its key freed).
const MAX_KEPT_BYTES: usize = 1024 * 1024;
const MAX_KEY_CHARS: usize = 255;

/// The middleware: a console POST with the header goes through [`handle`],
/// everything else straight to the route.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let applies = request.method() == Method::POST
        && request.uri().path().starts_with("/api/console/")
        && request.headers().contains_key(HEADER);
    if !applies {
        return next.run(request).await;
    }
    handle(&state, request, next)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn handle(state: &AppState, request: Request, next: Next) -> Result<Response, ApiError> {
    let raw = request.headers()[HEADER].clone();
    let key = parse_key(&raw)?;
    let (mut parts, body) = request.into_parts();
    let caller = Caller::from_request_parts(&mut parts, state).await?;
    let body = read(body, MAX_BODY_BYTES)
        .await?
        .ok_or(ApiError::PayloadTooLarge {
            limit_bytes: MAX_BODY_BYTES,
        })?;
    let hash = request_hash(&caller, &parts.method, &parts.uri, &body);
    let pool = &state.pool;
    let in_flight_for = state.settings.request_timeout + Duration::from_secs(5);
    if !claim(pool, caller.user_id, &key, &hash, in_flight_for).await? {
        return match stored(pool, caller.user_id, &key).await? {
            Some(kept) if kept.request_hash != hash => Err(ApiError::Unprocessable {
                code: "idempotency_key_reused",
                detail: "this Idempotency-Key was sent with another request; a new request needs a new key".into(),
            }),
            Some(Kept {
                response_status: Some(status),
                response_content_type,
                response_body: Some(body),
                response_sealed,
                ..
            }) => {
                let body = if response_sealed {
                    state
                        .settings
                        .secret_box()
                        .and_then(|sealer| sealer.open_bytes(SEALED_COLUMN, &body).ok())
                        .ok_or_else(not_kept)?
                } else {
                    body
                };
                Ok(replay(status, response_content_type, body, raw))
            }
            Some(Kept {
                response_status: Some(_),
                response_body: None,
                ..
            }) => Err(not_kept()),
            _ => Err(ApiError::Conflict {
                code: "idempotency_request_in_flight",
                detail: "a request with this Idempotency-Key is still being processed; retry once it has answered".into(),
            }),
        };
    }
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    let status = response.status();
    if !settled(status) {
        release(pool, caller.user_id, &key, &hash).await;
        return Ok(echo(response, raw));
    }
    let (mut response_parts, response_body) = response.into_parts();
    let Some(bytes) = read(response_body, MAX_KEPT_BYTES).await? else {
        release(pool, caller.user_id, &key, &hash).await;
        return Err(ApiError::Internal(anyhow::anyhow!(
            "an answer larger than {MAX_KEPT_BYTES} bytes cannot be kept for its Idempotency-Key"
        )));
    };
    let content_type = response_parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let issues_secret = response_parts.extensions.get::<IssuesSecret>().is_some();
    let (kept, sealed) = match state.settings.secret_box() {
        Some(sealer) => (Some(sealer.seal_bytes(SEALED_COLUMN, &bytes)), true),
        None if issues_secret => (None, false),
        None => (Some(bytes.to_vec()), false),
    };
    let answer = Answer {
        status: status.as_u16() as i16,
        content_type,
        body: kept.as_deref(),
        sealed,
    };
    if let Err(err) = record(pool, caller.user_id, &key, &hash, &answer).await {
        // The work is done: answer it. A retry finds the claim in flight until
        // it lapses, then runs again.
        tracing::error!(error = %err, "could not keep the answer for its Idempotency-Key");
    }
    response_parts.headers.insert(HEADER, raw);
    Ok(Response::from_parts(response_parts, Body::from(bytes)))
}

fn not_kept() -> ApiError {
    ApiError::Conflict {
        code: "idempotency_answer_not_kept",
        detail: "the first answer to this Idempotency-Key issued a secret, which is shown once and not kept; the request is not run again".into(),
    }
}

/// The key as sent: a structured-field string (`"…"`) or its bare contents,
/// at most 255 printable ASCII characters in all, not only spaces.
fn parse_key(raw: &HeaderValue) -> Result<String, ApiError> {
    let invalid = || ApiError::BadRequest {
        code: "invalid_idempotency_key",
        detail: format!(
            "Idempotency-Key must be 1–{MAX_KEY_CHARS} printable ASCII characters (quotes included), not only spaces"
        ),
    };
    let text = raw.to_str().map_err(|_| invalid())?;
    if text.len() > MAX_KEY_CHARS {
        return Err(invalid());
    }
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    let printable = text.bytes().all(|b| (0x20..=0x7e).contains(&b));
    if text.trim().is_empty() || !printable {
        return Err(invalid());
    }
    Ok(text.to_string())
}

/// Reads a body up to `limit` bytes; `None` when it is longer.
async fn read(body: Body, limit: usize) -> Result<Option<Bytes>, ApiError> {
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) => {
            let err = err.into_inner();
            if err.is::<http_body_util::LengthLimitError>() {
                Ok(None)
            } else {
                Err(ApiError::BadRequest {
                    code: "body_unreadable",
                    detail: format!("the request body could not be read: {err}"),
                })
            }
        }
    }
}

/// What a retry must send again: the request, from the same credential. A
/// user's keys are theirs, but an API key (an organisation's among them,
/// whose user is its maker) is a caller of its own: a key's replay of an
/// answer the user's session received (a join token, a kubeconfig) is
/// another request, refused as a reused key.
fn request_hash(caller: &Caller, method: &Method, uri: &axum::http::Uri, body: &[u8]) -> Vec<u8> {
    let mut hash = Sha256::new();
    if let Some(key) = caller.api_key_id {
        hash.update(key.as_bytes());
        hash.update([0]);
    }
    hash.update(method.as_str());
    hash.update([0]);
    hash.update(uri.path_and_query().map_or("", |p| p.as_str()));
    hash.update([0]);
    hash.update(body);
    hash.finalize().to_vec()
}

/// Whether an answer is final for its request: kept and replayed.
fn settled(status: StatusCode) -> bool {
    let retry_later = [
        StatusCode::REQUEST_TIMEOUT,
        StatusCode::CONFLICT,
        StatusCode::TOO_EARLY,
        StatusCode::TOO_MANY_REQUESTS,
    ];
    status.is_success() || (status.is_client_error() && !retry_later.contains(&status))
}

fn replay(status: i16, content_type: Option<String>, body: Vec<u8>, key: HeaderValue) -> Response {
    let status = u16::try_from(status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut response = (status, body).into_response();
    if let Some(value) = content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    echo(response, key)
}

fn echo(mut response: Response, key: HeaderValue) -> Response {
    response.headers_mut().insert(HEADER, key);
    response
}

/// Takes the key for this request: new, expired, or an unanswered claim of
/// the same request that lapsed. `false` when another claim holds it.
async fn claim(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    key: &str,
    hash: &[u8],
    in_flight_for: Duration,
) -> Result<bool, sqlx::Error> {
    let claimed = sqlx::query_scalar!(
        r#"INSERT INTO idempotency_keys (user_id, key, request_hash, in_flight_until, expires_at)
           VALUES ($1, $2, $3, now() + make_interval(secs => $4), now() + make_interval(secs => $5))
           ON CONFLICT (user_id, key) DO UPDATE
           SET request_hash = EXCLUDED.request_hash, in_flight_until = EXCLUDED.in_flight_until,
               response_status = NULL, response_content_type = NULL, response_body = NULL,
               response_sealed = false,
               created_at = now(), expires_at = EXCLUDED.expires_at
           WHERE idempotency_keys.expires_at <= now()
              OR (idempotency_keys.response_status IS NULL
                  AND idempotency_keys.in_flight_until <= now()
                  AND idempotency_keys.request_hash = EXCLUDED.request_hash)
           RETURNING true AS "claimed!""#,
        user_id,
        key,
        hash,
        in_flight_for.as_secs_f64(),
        KEPT_FOR.as_secs_f64(),
    )
    .fetch_optional(db)
    .await?;
    Ok(claimed.is_some())
}

struct Kept {
    request_hash: Vec<u8>,
    response_status: Option<i16>,
    response_content_type: Option<String>,
    response_body: Option<Vec<u8>>,
    response_sealed: bool,
}

async fn stored(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    key: &str,
) -> Result<Option<Kept>, sqlx::Error> {
    sqlx::query_as!(
        Kept,
        "SELECT request_hash, response_status, response_content_type, response_body, response_sealed
         FROM idempotency_keys WHERE user_id = $1 AND key = $2 AND expires_at > now()",
        user_id,
        key
    )
    .fetch_optional(db)
    .await
}

struct Answer<'a> {
    status: i16,
    content_type: Option<&'a str>,
    /// `None`: the answer is settled but its body not kept.
    body: Option<&'a [u8]>,
    sealed: bool,
}

async fn record(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    key: &str,
    hash: &[u8],
    answer: &Answer<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE idempotency_keys
         SET response_status = $4, response_content_type = $5, response_body = $6, response_sealed = $7
         WHERE user_id = $1 AND key = $2 AND request_hash = $3 AND response_status IS NULL",
        user_id,
        key,
        hash,
        answer.status,
        answer.content_type,
        answer.body,
        answer.sealed,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Frees the key after an answer that is not kept, so the retry runs again.
async fn release(pool: &sqlx::PgPool, user_id: Uuid, key: &str, hash: &[u8]) {
    let released = sqlx::query!(
        "DELETE FROM idempotency_keys
         WHERE user_id = $1 AND key = $2 AND request_hash = $3 AND response_status IS NULL",
        user_id,
        key,
        hash,
    )
    .execute(pool)
    .await;
    if let Err(err) = released {
        tracing::warn!(error = %err, "could not free an Idempotency-Key; it lapses after the request timeout");
    }
}

/// Deletes the keys whose answers are past keeping; how many.
pub async fn prune_expired(db: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    Ok(
        sqlx::query!("DELETE FROM idempotency_keys WHERE expires_at <= now()")
            .execute(db)
            .await?
            .rows_affected(),
    )
}

/// The problem codes this module's refusals answer with (the OpenAPI
/// document's `ProblemCode`, through `http::problem_codes`).
pub const PROBLEM_CODES: &[&str] = &[
    "body_unreadable",
    "idempotency_answer_not_kept",
    "idempotency_key_reused",
    "idempotency_request_in_flight",
    "invalid_idempotency_key",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_printable_ascii_quoted_or_bare() {
        let parse = |s: &str| parse_key(&HeaderValue::from_str(s).unwrap());
        assert_eq!(parse("\"8e03978e-40d5\"").unwrap(), "8e03978e-40d5");
        assert_eq!(parse("abc").unwrap(), "abc");
        assert!(parse(&"k".repeat(MAX_KEY_CHARS)).is_ok());
        for bad in ["", "\"\"", "   ", &"k".repeat(MAX_KEY_CHARS + 1)] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        // A look-alike (Cyrillic `а`) is not ASCII: refused, never folded.
        let lookalike = HeaderValue::from_bytes("k\u{0430}y".as_bytes()).unwrap();
        assert!(parse_key(&lookalike).is_err());
    }

    #[test]
    fn only_final_answers_are_kept() {
        for kept in [200, 201, 202, 400, 404, 422] {
            assert!(settled(StatusCode::from_u16(kept).unwrap()), "{kept}");
        }
        for freed in [301, 408, 409, 425, 429, 500, 502, 503] {
            assert!(!settled(StatusCode::from_u16(freed).unwrap()), "{freed}");
        }
    }
}
