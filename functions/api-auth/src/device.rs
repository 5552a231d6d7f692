//! The device's half of the OAuth 2.0 Device Authorization Grant (RFC
//! 8628): `POST /api/auth/device/code` hands out the codes,
//! `POST /api/auth/device/token` exchanges an approved device code, once,
//! for an API key. Both take `application/x-www-form-urlencoded` bodies, as
//! the RFC has them, so any OAuth client library signs in. The approval is
//! the console's (`api-account`).

use axum::{
    Extension,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use shared::{
    accounts::{
        self,
        auth::{self, DEVICE_CODES_PER_IP, DEVICE_POLLS_PER_IP},
        device::{self, Poll},
    },
    app::authority::{self, Authority},
    audit::{self, AuditEvent},
    error::ApiError,
    http::{AppState, Origin, idempotency::IssuesSecret},
};
use utoipa::ToSchema;

use crate::codes::source;

/// The request for a pair of codes (RFC 8628 section 3.1). Parameters not
/// named here (`scope`) are ignored: the key's scope is the approver's
/// choice.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DeviceCodeRequest {
    /// `kubebyon-cli`, the platform's one client (400 `invalid_client`
    /// otherwise).
    #[schema(pattern = "^kubebyon-cli$")]
    pub client_id: String,
    /// What the device calls itself (its host name): 1–64 ASCII letters,
    /// digits, `.`, `-`, `_` or spaces. Shown to the approver and put in the
    /// key's name. `device` when absent.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^ *[A-Za-z0-9._-][A-Za-z0-9._ -]*$"
    )]
    pub device_name: Option<String>,
}

/// The codes (RFC 8628 section 3.2).
#[derive(Debug, Serialize, ToSchema)]
pub struct DeviceCodeResponse {
    /// The device's secret, to poll the token endpoint with.
    pub device_code: String,
    /// What the user types in the console: 8 letters, as `BCDF-GHJK`.
    pub user_code: String,
    /// The console's page that asks for the user code.
    pub verification_uri: String,
    /// The same page with the user code filled in.
    pub verification_uri_complete: String,
    /// Seconds until both codes expire.
    pub expires_in: u64,
    /// Seconds to wait between polls.
    pub interval: i32,
}

/// Ask for a device sign-in
///
/// RFC 8628 section 3.1: answers a device code for the device and a user
/// code for its user to approve at `verification_uri`, signed in to the
/// console. At most 20 an hour from one address (429 `too_many_requests`).
#[utoipa::path(post, path = "/api/auth/device/code", tag = "auth",
    request_body(content = DeviceCodeRequest, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, body = DeviceCodeResponse),
        (status = 400, description = "Not a form of these parameters, or one given twice or holding NUL (`invalid_request`); `client_id` is not `kubebyon-cli` (`invalid_client`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`device_name` breaks its rule (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "20 sign-ins asked for from this address this hour (`rate_limited`)", body = shared::error::Problem, content_type = "application/problem+json"),
    ))]
pub async fn code(
    State(state): State<AppState>,
    origin: Origin,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: DeviceCodeRequest = form(&headers, &body).map_err(|err| match err {
        FormError::MediaType(detail) => ApiError::UnsupportedMediaType(detail),
        FormError::Invalid(detail) => ApiError::BadRequest {
            code: "invalid_request",
            detail,
        },
    })?;
    if request.client_id != device::CLIENT_ID {
        return Err(ApiError::BadRequest {
            code: "invalid_client",
            detail: format!(
                "unknown client; the platform's client is {}",
                device::CLIENT_ID
            ),
        });
    }
    let name = device::device_name(request.device_name.as_deref().unwrap_or("device"))
        .map_err(|message| ApiError::invalid("device_name", message))?;
    if let Some(source) = source(&origin) {
        auth::rate_limit(&state.pool, DEVICE_CODES_PER_IP, &source).await?;
    }
    let started = device::start(
        &state.pool,
        name,
        origin.ip.as_deref(),
        origin.user_agent.as_deref(),
    )
    .await?;
    let page = format!(
        "{}/device",
        state.settings.public_base_url.trim_end_matches('/')
    );
    Ok((
        Extension(IssuesSecret),
        axum::Json(DeviceCodeResponse {
            device_code: started.device_code,
            verification_uri_complete: format!("{page}?code={}", started.user_code),
            user_code: started.user_code,
            verification_uri: page,
            expires_in: started.expires_in.as_secs(),
            interval: started.interval_seconds,
        }),
    )
        .into_response())
}

/// A device's poll (RFC 8628 section 3.4).
#[derive(Debug, Deserialize, ToSchema)]
pub struct DeviceTokenRequest {
    /// `urn:ietf:params:oauth:grant-type:device_code`.
    #[schema(pattern = "^urn:ietf:params:oauth:grant-type:device_code$")]
    pub grant_type: String,
    pub device_code: String,
    /// `kubebyon-cli`.
    #[schema(pattern = "^kubebyon-cli$")]
    pub client_id: String,
}

/// The key (RFC 6749 section 5.1): an API key, listed and revocable with the
/// account's others.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeviceTokenResponse {
    /// The API key: send it as `Authorization: Bearer <key>`. Given once.
    pub access_token: String,
    /// `Bearer`.
    pub token_type: &'static str,
    /// Seconds until the key expires.
    pub expires_in: i64,
    /// `read` or `write`, as approved.
    pub scope: String,
}

/// An OAuth error (RFC 6749 section 5.2, RFC 8628 section 3.5).
#[derive(Debug, Serialize, ToSchema)]
pub struct OAuthError {
    /// `authorization_pending`, `slow_down`, `access_denied`,
    /// `expired_token`, `invalid_grant` (unknown, or exchanged already),
    /// `invalid_request`, `invalid_client` or `unsupported_grant_type`.
    pub error: &'static str,
    pub error_description: String,
}

fn oauth(error: &'static str, description: impl Into<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(OAuthError {
            error,
            error_description: description.into(),
        }),
    )
        .into_response()
}

/// Exchange a device code
///
/// RFC 8628 section 3.4: while the user has not decided, 400
/// `authorization_pending` (`slow_down` to a device that polls sooner than
/// its interval, which grows by 5 s); once they approved, the API key, made
/// now and answered this once; then `invalid_grant`. A denied request
/// answers `access_denied`, an expired one `expired_token`. At most 600 polls
/// an hour from one address (429).
#[utoipa::path(post, path = "/api/auth/device/token", tag = "auth",
    request_body(content = DeviceTokenRequest, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, body = DeviceTokenResponse),
        (status = 400, description = "An OAuth error (RFC 6749 section 5.2): `authorization_pending`, `slow_down`, `access_denied`, `expired_token`, `invalid_grant`, `invalid_request`, `invalid_client`, `unsupported_grant_type`", body = OAuthError),
        (status = 429, description = "600 polls from this address this hour (`rate_limited`)", body = shared::error::Problem, content_type = "application/problem+json"),
    ))]
pub async fn token(
    State(state): State<AppState>,
    origin: Origin,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: DeviceTokenRequest = match form(&headers, &body) {
        Ok(request) => request,
        Err(FormError::MediaType(detail)) => return Err(ApiError::UnsupportedMediaType(detail)),
        Err(FormError::Invalid(detail)) => return Ok(oauth("invalid_request", detail)),
    };
    if request.client_id != device::CLIENT_ID {
        return Ok(oauth("invalid_client", "unknown client"));
    }
    if request.grant_type != device::GRANT_TYPE {
        return Ok(oauth(
            "unsupported_grant_type",
            format!("the grant type is {}", device::GRANT_TYPE),
        ));
    }
    if let Some(source) = source(&origin) {
        auth::rate_limit(&state.pool, DEVICE_POLLS_PER_IP, &source).await?;
    }
    // The key is made under its approver's authority, held again (their
    // account active) before the request's row is read: a password change
    // or a disabling at the same moment ends the approval or the key.
    let approver = device::approver(&state.pool, &request.device_code).await?;
    let mut tx = state.pool.begin().await?;
    if let Some(user_id) = approver {
        let held = Authority {
            user_id,
            session_id: None,
            api_key_id: None,
        };
        match authority::hold(&mut tx, held, authority::Scope::Account).await {
            Ok(()) => {}
            Err(ApiError::Unauthenticated) => {
                return Ok(oauth("access_denied", "the approver's account is disabled"));
            }
            Err(error) => return Err(error),
        }
    }
    let approved = match device::poll(&mut tx, &request.device_code).await? {
        // Approved since it was read: its approver is held at the next poll.
        Poll::Approved(approved) if approver != Some(approved.user_id) => {
            tx.commit().await?;
            return Ok(oauth(
                "authorization_pending",
                "not approved yet; poll again after the interval",
            ));
        }
        Poll::Approved(approved) => approved,
        other => {
            tx.commit().await?;
            return Ok(match other {
                Poll::Pending => oauth(
                    "authorization_pending",
                    "not approved yet; poll again after the interval",
                ),
                Poll::SlowDown => oauth("slow_down", "polled too soon; the interval is 5 s longer"),
                Poll::Denied => oauth("access_denied", "the sign-in was denied"),
                Poll::Expired => oauth("expired_token", "the codes expired; sign in again"),
                _ => oauth(
                    "invalid_grant",
                    "no such device code, or it was exchanged already",
                ),
            });
        }
    };
    let (key, prefix) = auth::new_api_key();
    let name = device::key_name(&approved.device_name);
    let api_key = accounts::insert_api_key(
        &mut *tx,
        &accounts::NewApiKey {
            user_id: approved.user_id,
            organization: None,
            name: &name,
            prefix: &prefix,
            token_hash: &auth::hash_secret(&key),
            scope: approved.scope,
            lifetime: approved.lifetime,
        },
    )
    .await?;
    device::consumed(&mut tx, approved.id, api_key.id).await?;
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(approved.user_id),
            actor_kind: "user",
            action: "api_key.create",
            target_kind: "api_key",
            target_id: api_key.id.to_string(),
            cluster_id: None,
            metadata: serde_json::json!({
                "name": api_key.name,
                "prefix": api_key.prefix,
                "device_authorization_id": approved.id,
            }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok((
        Extension(IssuesSecret),
        [(header::PRAGMA, "no-cache")],
        axum::Json(DeviceTokenResponse {
            access_token: key,
            token_type: "Bearer",
            expires_in: (api_key.expires_at - chrono::Utc::now()).num_seconds(),
            scope: api_key.scope,
        }),
    )
        .into_response())
}

enum FormError {
    MediaType(String),
    Invalid(String),
}

/// A form body as RFC 6749 section 3.2 has requests: urlencoded, each
/// parameter at most once, no NUL.
fn form<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, FormError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        return Err(FormError::MediaType(
            "expected content-type application/x-www-form-urlencoded".into(),
        ));
    }
    let invalid = |detail: String| FormError::Invalid(detail);
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_bytes(body).map_err(|e| invalid(format!("not a form: {e}")))?;
    let mut seen = std::collections::HashSet::new();
    for (name, value) in &pairs {
        if !seen.insert(name.as_str()) {
            return Err(invalid(format!(
                "the parameter {name} is given more than once"
            )));
        }
        if value.contains('\0') {
            return Err(invalid(format!("the parameter {name} holds NUL")));
        }
    }
    serde_urlencoded::from_bytes(body).map_err(|e| invalid(e.to_string()))
}
