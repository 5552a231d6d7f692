use axum::extract::State;
use serde::Deserialize;
use shared::{
    error::ApiError,
    extract::{AppJson, AppQuery},
    http::{AppState, OwnedCluster},
    jobs::{self, JobRecord, Operation},
};
use utoipa::IntoParams;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// Entries to return, 1–500 (default 100), newest first.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

fn limit(query: &HistoryQuery) -> Result<i64, ApiError> {
    shared::extract::page_limit(query.limit)
}

/// Operation history of a cluster
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/operations",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path), HistoryQuery),
    responses(
        (status = 200, body = Vec<Operation>),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn operations(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<HistoryQuery>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<Vec<Operation>>, ApiError> {
    let limit = limit(&query)?;
    Ok(AppJson(
        jobs::list_operations(&state.pool, cluster.id, limit).await?,
    ))
}

/// Job history of a cluster, with every attempt's error
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/jobs",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path), HistoryQuery),
    responses(
        (status = 200, body = Vec<JobRecord>),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn jobs(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<HistoryQuery>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<Vec<JobRecord>>, ApiError> {
    let limit = limit(&query)?;
    Ok(AppJson(
        jobs::list_for_cluster(&state.pool, cluster.id, limit).await?,
    ))
}
