use axum::extract::State;
use serde::Deserialize;
use shared::{
    audit::{self, ActivityQuery, AuditRecord},
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

/// A cluster's activity
///
/// Who did what to the cluster (its operations, kubeconfigs, join tokens,
/// nodes, hostnames…), newest first; page with `before_id`. For every
/// member who may read it. The addresses events were made from are not
/// shown, nor the emails of actors who are not members of its organization.
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/activity",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path), ActivityQuery),
    responses(
        (status = 200, body = Vec<AuditRecord>),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn activity(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<ActivityQuery>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<Vec<AuditRecord>>, ApiError> {
    let limit = shared::extract::page_limit(query.limit)?;
    Ok(AppJson(
        audit::of_cluster(
            &state.pool,
            cluster.id,
            cluster.organization_id,
            query.before_id,
            limit,
        )
        .await?,
    ))
}
