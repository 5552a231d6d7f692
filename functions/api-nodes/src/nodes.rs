//! A cluster's nodes and each node's timeline with its uptime.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::{
    domain::NodeName,
    error::ApiError,
    extract::{AppJson, AppPath, AppQuery},
    http::{AppState, OwnedCluster},
    nodes::{self, Node, NodeEvent},
};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct NodesQuery {
    /// Also list removed nodes.
    #[serde(default)]
    pub include_deleted: bool,
    /// Nodes per page, 1–500; default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A page of a cluster's nodes.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodePage {
    /// By name.
    pub items: Vec<Node>,
    /// Pass as `cursor` to read the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// List a cluster's nodes
///
/// The snapshot the node sync keeps: status, addresses, versions, allocatable
/// resources, and when the node was last seen, became ready or went offline.
/// By name, a page at a time.
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/nodes",
    tag = "nodes",
    params(("cluster_id" = Uuid, Path), NodesQuery),
    responses(
        (status = 200, body = NodePage),
        (status = 400, description = "A cursor this API did not return (`invalid_cursor`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A bad limit (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<NodesQuery>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<NodePage>, ApiError> {
    let limit = shared::extract::page_limit(query.limit)?;
    // A cursor is the last name of a page: a node's name, nothing else.
    let after = query
        .cursor
        .as_deref()
        .map(NodeName::parse)
        .transpose()
        .map_err(|_| ApiError::BadRequest {
            code: "invalid_cursor",
            detail: "cursor is not one this API returned".into(),
        })?
        .map(NodeName::into_inner)
        .unwrap_or_default();
    let mut items = nodes::list(
        &state.pool,
        cluster.id,
        query.include_deleted,
        &after,
        limit + 1,
    )
    .await?;
    let next_cursor = shared::extract::cut_page(&mut items, limit, |node| node.name.clone());
    Ok(AppJson(NodePage { items, next_cursor }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TimelineQuery {
    /// Start of the period (RFC 3339); default 24 hours before `to`.
    pub from: Option<DateTime<Utc>>,
    /// End of the period (RFC 3339); default now.
    pub to: Option<DateTime<Utc>>,
}

/// One node's history over a period.
#[derive(Debug, Serialize, ToSchema)]
pub struct Timeline {
    pub node: Node,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Events of the period, oldest first, preceded by the last one before
    /// it; at most the period's newest 1,000 (then without the one before).
    pub events: Vec<NodeEvent>,
    /// The period's oldest events left out of `events`; 0 when it lists them all.
    pub events_omitted: i64,
    /// Seconds of the period the node existed for.
    pub observed_seconds: i64,
    /// Seconds of those it was `ready`.
    pub ready_seconds: i64,
    /// `ready_seconds / observed_seconds`; absent when the node did not exist in the period.
    pub uptime_ratio: Option<f64>,
}

/// A node's timeline and uptime
///
/// Its events over a period (at most 90 days; the newest 1,000 of them) and
/// the share of the period it was ready, derived from all the recorded
/// transitions.
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/nodes/{node_id}/timeline",
    tag = "nodes",
    params(("cluster_id" = Uuid, Path), ("node_id" = Uuid, Path), TimelineQuery),
    responses(
        (status = 200, body = Timeline),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn timeline(
    State(state): State<AppState>,
    AppPath((_, node_id)): AppPath<(Uuid, Uuid)>,
    AppQuery(query): AppQuery<TimelineQuery>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<Timeline>, ApiError> {
    let cluster_id = cluster.id;
    // A period reaching into the future is counted up to now.
    let now = Utc::now();
    let (from, to) = shared::extract::time_range(
        query.from,
        query.to,
        chrono::TimeDelta::hours(24),
        chrono::TimeDelta::days(90),
    )?;
    let to = to.min(now);
    if from >= to {
        return Err(ApiError::invalid("from", "must be in the past"));
    }
    let node = nodes::get(&state.pool, cluster_id, node_id, true)
        .await?
        .ok_or(ApiError::NotFound { what: "node" })?;
    let uptime = nodes::uptime(&state.pool, node_id, from, to).await?;
    let mut events =
        nodes::events_for_timeline(&state.pool, node_id, from, to, nodes::TIMELINE_EVENTS).await?;
    let events_omitted = uptime.events.saturating_sub(nodes::TIMELINE_EVENTS).max(0);
    if events_omitted > 0 {
        // The state before the period is not the state before the first one listed.
        events.retain(|event| event.observed_at >= from);
    }
    let (observed, ready) = (uptime.observed_seconds, uptime.ready_seconds);
    Ok(AppJson(Timeline {
        node,
        from,
        to,
        observed_seconds: observed,
        ready_seconds: ready,
        uptime_ratio: (observed > 0).then(|| ready as f64 / observed as f64),
        events,
        events_omitted,
    }))
}
