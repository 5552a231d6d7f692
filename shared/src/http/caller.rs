//! The state every route is served with and who a console request acts as.

use std::sync::Arc;

use axum::{
    extract::FromRequestParts,
    http::{Method, request::Parts},
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{config::Settings, error::ApiError, host::HostCluster, jobs::JobPublisher};

/// Who console requests act as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// Development mode: every request is this user.
    Development(Uuid),
    /// Accounts: a session cookie (with its CSRF token on writes) or an API key.
    Accounts,
}

/// State shared by every route of every HTTP function.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub publisher: Arc<dyn JobPublisher>,
    pub settings: Arc<Settings>,
    pub identity: Identity,
    /// The host cluster, for reads that need it (kubeconfig); `None` when not configured.
    pub host: Option<Arc<HostCluster>>,
}

/// The authenticated caller of a console route.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub user_id: Uuid,
    /// The session the request came with, when it came with one.
    pub session_id: Option<Uuid>,
    /// The API key the request came with, when it came with one.
    pub api_key_id: Option<Uuid>,
}

impl Caller {
    /// Refuses a caller that is not a signed-in browser: an account's
    /// credentials (keys, password, sessions) are managed from a session.
    pub fn require_session(&self) -> Result<Uuid, ApiError> {
        self.session_id.ok_or_else(|| {
            ApiError::Forbidden(
                "an API key cannot manage the account's credentials; sign in".into(),
            )
        })
    }
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(*caller);
        }
        let caller = match state.identity {
            Identity::Development(user_id) => Self {
                user_id,
                session_id: None,
                api_key_id: None,
            },
            Identity::Accounts => authenticate(parts, state).await?,
        };
        parts.extensions.insert(caller);
        Ok(caller)
    }
}

/// An API key in `Authorization: Bearer`, else the session cookie; a cookie
/// write must echo the CSRF cookie in `X-CSRF-Token` (double submit).
async fn authenticate(parts: &Parts, state: &AppState) -> Result<Caller, ApiError> {
    use crate::accounts::{self, auth};
    let bearer = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(key) = bearer {
        return match accounts::api_key_user(&state.pool, &auth::hash_secret(key)).await? {
            Some((_, _, accounts::KeyScope::Read)) if !is_safe(&parts.method) => Err(
                ApiError::Forbidden("this API key may only read (its scope is read)".into()),
            ),
            Some((key_id, user_id, _)) => Ok(Caller {
                user_id,
                session_id: None,
                api_key_id: Some(key_id),
            }),
            None => Err(ApiError::Unauthenticated),
        };
    }
    let (session_cookie, csrf_cookie) = auth::cookie_names(!state.settings.insecure_cookies);
    let token = auth::cookie(&parts.headers, session_cookie).ok_or(ApiError::Unauthenticated)?;
    let (session_id, user_id) = accounts::session_user(
        &state.pool,
        &auth::hash_secret(token),
        state
            .settings
            .part::<accounts::config::Config>()?
            .session_idle,
    )
    .await?
    .ok_or(ApiError::Unauthenticated)?;
    if !is_safe(&parts.method) {
        // The header must carry this session's own token: a value planted in
        // both the cookie and the header by someone else does not pass.
        let header = parts
            .headers
            .get(auth::CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let expected = auth::csrf_token_for(token);
        if !auth::constant_time_eq(expected.as_bytes(), header.as_bytes()) {
            return Err(ApiError::Forbidden(format!(
                "a write with a session cookie must carry the {csrf_cookie} cookie's value in X-CSRF-Token"
            )));
        }
    }
    Ok(Caller {
        user_id,
        session_id: Some(session_id),
        api_key_id: None,
    })
}

/// An authenticated caller whose role is `admin`; anyone else gets 403.
#[derive(Debug, Clone, Copy)]
pub struct AdminCaller {
    pub user_id: Uuid,
}

impl FromRequestParts<AppState> for AdminCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        match crate::accounts::users::active_role(&state.pool, caller.user_id)
            .await?
            .as_deref()
        {
            Some("admin") => Ok(Self {
                user_id: caller.user_id,
            }),
            Some(_) => Err(ApiError::Forbidden(
                "this route is for administrators".into(),
            )),
            None => Err(ApiError::Unauthenticated),
        }
    }
}
