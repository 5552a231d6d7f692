//! A cluster's nodes and each node's timeline with its uptime.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::{
    domain::{NodeName, NodeStatus},
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
    /// Events of the period, oldest first, preceded by the last one before it.
    pub events: Vec<NodeEvent>,
    /// Seconds of the period the node existed for.
    pub observed_seconds: i64,
    /// Seconds of those it was `ready`.
    pub ready_seconds: i64,
    /// `ready_seconds / observed_seconds`; absent when the node did not exist in the period.
    pub uptime_ratio: Option<f64>,
}

/// A node's timeline and uptime
///
/// Its events over a period (at most 90 days) and the share of the period it
/// was ready, derived from the recorded transitions.
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
    let events = nodes::events_for_timeline(&state.pool, node_id, from, to).await?;
    let (observed, ready) = uptime(&events, from, to);
    Ok(AppJson(Timeline {
        node,
        from,
        to,
        observed_seconds: observed,
        ready_seconds: ready,
        uptime_ratio: (observed > 0).then(|| ready as f64 / observed as f64),
        events,
    }))
}

/// Seconds within `[from, to]` the node existed, and of those it was ready,
/// from its transitions in time order (the first may precede `from`).
fn uptime(events: &[NodeEvent], from: DateTime<Utc>, to: DateTime<Utc>) -> (i64, i64) {
    let mut observed = 0;
    let mut ready = 0;
    for (i, event) in events.iter().enumerate() {
        let start = event.observed_at.max(from);
        let end = events
            .get(i + 1)
            .map_or(to, |next| next.observed_at)
            .min(to);
        if end <= start {
            continue;
        }
        let seconds = (end - start).num_seconds();
        match event.new_status {
            Some(NodeStatus::Deleted) => {}
            Some(NodeStatus::Ready) => {
                observed += seconds;
                ready += seconds;
            }
            _ => observed += seconds,
        }
    }
    (observed, ready)
}

#[cfg(test)]
mod tests {
    use shared::domain::NodeEventType;

    use super::*;

    fn at(minute: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + minute * 60, 0).unwrap()
    }

    fn event(minute: i64, status: NodeStatus) -> NodeEvent {
        NodeEvent {
            id: minute,
            cluster_id: Uuid::nil(),
            node_id: None,
            node_name: "n".into(),
            event_type: NodeEventType::of_status(status),
            old_status: None,
            new_status: Some(status),
            message: None,
            observed_at: at(minute),
        }
    }

    #[test]
    fn uptime_counts_ready_time_inside_the_period() {
        // Ready before the period, offline for 15 of its 60 minutes, then ready.
        let events = [
            event(-10, NodeStatus::Ready),
            event(20, NodeStatus::Offline),
            event(35, NodeStatus::Ready),
        ];
        assert_eq!(uptime(&events, at(0), at(60)), (3600, 2700));
    }

    #[test]
    fn time_before_joining_and_after_deletion_is_not_observed() {
        let events = [
            event(30, NodeStatus::Pending),
            event(40, NodeStatus::Ready),
            event(50, NodeStatus::Deleted),
        ];
        assert_eq!(uptime(&events, at(0), at(60)), (1200, 600));
        assert_eq!(uptime(&[], at(0), at(60)), (0, 0));
    }
}
