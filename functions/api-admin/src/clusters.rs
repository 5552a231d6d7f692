use axum::extract::State;
use serde::{Deserialize, Serialize};
use shared::{
    accounts,
    app::health::{self, ClusterWithHealth},
    clusters::{self, After, ClusterOrder},
    domain::ClusterStatus,
    error::ApiError,
    extract::{AppJson, AppQuery},
    http::{AdminCaller, AppState},
};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FleetQuery {
    /// Only clusters whose name contains this (1–63 of the characters a
    /// cluster's name has: letters, taken in lower case, digits and `-`).
    #[param(min_length = 1, max_length = 63, pattern = "^[A-Za-z0-9-]+$")]
    pub q: Option<String>,
    pub status: Option<ClusterStatus>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1–200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
}

/// A cluster as the back office lists it: with its health and its owner's
/// email.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetCluster {
    #[serde(flatten)]
    pub cluster: ClusterWithHealth,
    /// The email of the user who created it, while they exist.
    pub owner_email: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FleetClusterPage {
    pub items: Vec<FleetCluster>,
    /// Pass as `cursor` to read the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Every cluster
///
/// The live clusters of every organization, newest first, paginated by
/// cursor; `q` keeps those whose name contains it, `status` those in it.
#[utoipa::path(
    get,
    path = "/api/console/admin/clusters",
    tag = "admin",
    params(FleetQuery),
    responses(
        (status = 200, body = FleetClusterPage),
        (status = 400, description = "A cursor this API did not return (`invalid_cursor`), or a `status` that is none (`invalid_query`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A bad limit or `q` (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    _admin: AdminCaller,
    AppQuery(query): AppQuery<FleetQuery>,
) -> Result<AppJson<FleetClusterPage>, ApiError> {
    let order = ClusterOrder::Newest;
    let asked = clusters::PageAsked::read(
        order,
        query.limit,
        query.cursor.as_deref(),
        query.q.as_deref(),
    )?;
    let mut items = clusters::list_all(
        &state.pool,
        asked.name_contains.as_deref(),
        query.status,
        asked.after.created(),
        asked.limit + 1,
    )
    .await?;
    let next_cursor = shared::extract::cut_page(&mut items, asked.limit, After::cursor(order));
    let owners: Vec<_> = items.iter().map(|c| c.owner_user_id).collect();
    let items = health::with_health(&state.pool, items).await?;
    let emails = accounts::emails(&state.pool, &owners).await?;
    let items = items
        .into_iter()
        .map(|cluster| FleetCluster {
            owner_email: emails.get(&cluster.cluster.owner_user_id).cloned(),
            cluster,
        })
        .collect();
    Ok(AppJson(FleetClusterPage { items, next_cursor }))
}
