use axum::extract::State;
use serde::Deserialize;
use shared::{
    domain::NodeEventType,
    error::ApiError,
    extract::{AppJson, AppQuery},
    http::{AppState, Caller},
    nodes::{self, NodeEvent},
    organizations::Action,
};
use utoipa::IntoParams;
use uuid::Uuid;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    pub cluster_id: Uuid,
    pub node_id: Option<Uuid>,
    #[serde(rename = "type")]
    #[param(rename = "type", value_type = Option<NodeEventType>)]
    pub event_type: Option<String>,
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// Node events of a cluster
///
/// Newest first (`observed_at DESC, id DESC`), optionally for one node and of one type.
#[utoipa::path(
    get,
    path = "/api/console/node-events",
    tag = "nodes",
    params(EventsQuery),
    responses(
        (status = 200, body = Vec<NodeEvent>),
        (status = 400, description = "Missing or malformed parameters", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster of the caller", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    AppQuery(query): AppQuery<EventsQuery>,
) -> Result<AppJson<Vec<NodeEvent>>, ApiError> {
    let limit = shared::extract::page_limit(query.limit)?;
    let event_type = query
        .event_type
        .as_deref()
        .map(|text| {
            NodeEventType::parse(text).ok_or_else(|| {
                ApiError::invalid("type", format!("must be {}", NodeEventType::names()))
            })
        })
        .transpose()?;
    shared::http::owned::authorize(
        &mut *state.pool.acquire().await?,
        &caller,
        query.cluster_id,
        Action::Read,
    )
    .await?;
    let events = nodes::list_events(
        &state.pool,
        query.cluster_id,
        query.node_id,
        event_type,
        limit,
    )
    .await?;
    Ok(AppJson(events))
}
