//! The route agents' routes: the whole route plan, and what each agent
//! applied (`shared::ingress::edge::routes`). An agent presents the
//! platform's route agent token (`KUBEBYON_ROUTE_AGENT_TOKEN`) as its bearer
//! credential; nothing else is accepted.

use axum::{
    extract::State,
    http::{HeaderMap, StatusCode, header},
};
use shared::{
    error::{ApiError, FieldError},
    extract::AppJson,
    http::AppState,
    ingress::{
        config::{Config, is_node_name},
        edge::routes::{self, Report, RoutePlan},
    },
    networks::Block,
};

/// The most routes a report may name.
const MAX_ROUTES: usize = 10_000;

/// The route plan
///
/// Every route the host's nodes should hold: each cluster's nodes' pod
/// networks and the node address each is reached through, with the
/// protocol number an agent marks its routes with.
#[utoipa::path(get, path = "/api/route-agent/routes", tag = "ingress",
    params(("Authorization" = String, Header, description = "`Bearer <token>`: the route agents' token")),
    responses((status = 200, body = RoutePlan),
              (status = 401, description = "No or another token (`invalid_route_agent_token`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "The platform has no route agent token (`route_agents_not_configured`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn plan(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<AppJson<RoutePlan>, ApiError> {
    authorize(&state, &headers)?;
    Ok(AppJson(routes::plan(&state.pool).await?))
}

/// Report the routes applied
///
/// What the agent on one host node holds now: the destinations it has a
/// route to as planned, and those it could not apply with why. The edge
/// reaches a cluster's pods directly through a route only while every
/// agent reporting reports it applied.
#[utoipa::path(post, path = "/api/route-agent/reports", tag = "ingress",
    params(("Authorization" = String, Header, description = "`Bearer <token>`: the route agents' token")),
    request_body = Report,
    responses((status = 204, description = "Recorded"),
              (status = 400, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 401, description = "No or another token (`invalid_route_agent_token`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "A node name, destination or error that is not one (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "The platform has no route agent token (`route_agents_not_configured`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn report(
    State(state): State<AppState>,
    headers: HeaderMap,
    AppJson(report): AppJson<Report>,
) -> Result<StatusCode, ApiError> {
    authorize(&state, &headers)?;
    validate(&report)?;
    routes::record_report(&state.pool, &report).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A request without the bearer credential is refused (401) before
/// anything else; with one, the platform must have a token to compare it
/// with (503 otherwise), and it must be that token (401).
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let refused = || ApiError::Unauthorized {
        code: "invalid_route_agent_token",
        detail: "present the route agents' token as a bearer credential".into(),
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .filter(|t| !t.is_empty() && t.len() <= 256)
        .ok_or_else(refused)?;
    let config = state.settings.part::<Config>()?;
    if config.route_agent_token.is_none() {
        return Err(ApiError::NotConfigured {
            code: "route_agents_not_configured",
            detail: "the platform has no route agent token (KUBEBYON_ROUTE_AGENT_TOKEN)".into(),
        });
    }
    match config.is_route_agent(presented) {
        true => Ok(()),
        false => Err(refused()),
    }
}

/// A host node's name is a DNS subdomain (Kubernetes' node names); the
/// destinations CIDRs; the errors short, printable text.
fn validate(report: &Report) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    let mut invalid = |field: &str, message: &str| errors.push(FieldError::new(field, message));
    if !is_node_name(&report.node) {
        invalid(
            "node",
            "must be a node's name: lowercase DNS labels, 253 characters at most",
        );
    }
    if report.applied.len() > MAX_ROUTES || report.failed.len() > MAX_ROUTES {
        invalid("applied", "may name at most 10,000 routes");
    }
    if report.applied.iter().any(|d| d.parse::<Block>().is_err()) {
        invalid("applied", "must be IPv4 CIDRs such as 10.64.1.0/24");
    }
    if report
        .failed
        .iter()
        .any(|f| f.destination.parse::<Block>().is_err())
    {
        invalid("failed", "each destination must be an IPv4 CIDR");
    }
    if report
        .failed
        .iter()
        .any(|f| f.error.len() > 1000 || f.error.chars().any(char::is_control))
    {
        invalid(
            "failed",
            "each error must be at most 1,000 printable characters",
        );
    }
    match errors.is_empty() {
        true => Ok(()),
        false => Err(ApiError::Validation(errors)),
    }
}
