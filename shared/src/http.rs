//! What every HTTP function shares: its state, the caller identity, request
//! spans, and the health routes.

use std::sync::Arc;

use axum::{
    Router,
    extract::{FromRequestParts, MatchedPath, Request, State},
    http::{StatusCode, request::Parts},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use sqlx::PgPool;
use tracing::Instrument;
use uuid::Uuid;

use crate::{config::Settings, error::ApiError, host::HostCluster, jobs::JobPublisher};

/// Who console requests act as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// Development mode: every request is this user.
    Development(Uuid),
    /// No authentication is configured: console routes answer 401.
    Disabled,
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
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        _parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        match state.identity {
            Identity::Development(user_id) => Ok(Self { user_id }),
            Identity::Disabled => Err(ApiError::Unauthenticated),
        }
    }
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
        match crate::db::users::active_role(&state.pool, caller.user_id)
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

/// Wraps a function's routes with the health routes and one span per request.
pub fn with_common_layers(routes: Router<AppState>, state: AppState) -> Router {
    routes
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readiness))
        .fallback(|| async { ApiError::NotFound { what: "route" } })
        .layer(middleware::from_fn(request_span))
        .with_state(state)
}

async fn readiness(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    crate::db::ping(&state.pool).await.map_err(|err| {
        tracing::warn!(error = %err, "readiness check failed");
        ApiError::Unavailable
    })?;
    Ok("ready")
}

async fn request_span(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let span = tracing::info_span!("request", method = %request.method(), route, status = tracing::field::Empty);
    let started = std::time::Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("status", status.as_u16());
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    span.in_scope(|| {
        if status.is_server_error() {
            tracing::warn!(elapsed_ms, "request finished");
        } else {
            tracing::debug!(elapsed_ms, "request finished");
        }
    });
    response
}

/// 202 Accepted with a JSON body.
pub fn accepted<T: serde::Serialize>(body: T) -> Response {
    (StatusCode::ACCEPTED, axum::Json(body)).into_response()
}
