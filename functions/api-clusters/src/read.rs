use axum::extract::State;
use serde::Deserialize;
use shared::{
    app::health::{self, ClusterPage, ClusterWithHealth, Health},
    clusters::{self, After, ClusterOrder},
    error::ApiError,
    extract::{AppJson, AppQuery},
    http::{AppState, InOrganization, OwnedCluster},
};
use utoipa::IntoParams;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Page size, 1–200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Only clusters whose name contains this (1–63 of the characters a
    /// cluster's name has: letters, taken in lower case, digits and `-`).
    #[param(min_length = 1, max_length = 63, pattern = "^[A-Za-z0-9-]+$")]
    pub q: Option<String>,
    /// Only clusters whose health is this.
    pub health: Option<Health>,
    /// The order: `newest` first (the default) or by `name`. A cursor reads
    /// on only in the order of the page that returned it.
    pub sort: Option<ClusterOrder>,
}

/// List clusters
///
/// The organization's live clusters, newest first or by name (`sort`),
/// paginated by cursor, each with its nodes counted, its health rolled up
/// and its usage; `q` keeps those whose name contains it, `health` those
/// whose health it is.
#[utoipa::path(
    get,
    path = "/api/console/clusters",
    tag = "clusters",
    params(ListQuery, ("KubeBYON-Organization" = Option<Uuid>, Header, nullable = false, description = "The organization to act in (its id); the caller's personal one when absent")),
    responses(
        (status = 200, body = ClusterPage),
        (status = 400, description = "A cursor this API did not return in this order (`invalid_cursor`), or a `health` or `sort` that is none (`invalid_query`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "The caller is not a member of the organization (`not_found`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A bad limit, `q` or organization header (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    organization: InOrganization,
    AppQuery(query): AppQuery<ListQuery>,
) -> Result<AppJson<ClusterPage>, ApiError> {
    let asked = clusters::PageAsked::read(
        query.sort.unwrap_or(ClusterOrder::Newest),
        query.limit,
        query.cursor.as_deref(),
        query.q.as_deref(),
    )?;
    let mut items = match query.health {
        None => {
            clusters::list_of(
                &state.pool,
                organization.id,
                asked.name_contains.as_deref(),
                &asked.after,
                asked.limit + 1,
            )
            .await?
        }
        Some(wanted) => {
            health::list_of(
                &state.pool,
                organization.id,
                wanted,
                asked.name_contains.as_deref(),
                &asked.after,
                asked.limit + 1,
            )
            .await?
        }
    };
    let next_cursor =
        shared::extract::cut_page(&mut items, asked.limit, After::cursor(asked.order));
    let items = health::with_health(&state.pool, items).await?;
    Ok(AppJson(ClusterPage { items, next_cursor }))
}

/// Get a cluster
///
/// The cluster, its nodes counted and its health rolled up.
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path)),
    responses(
        (status = 200, body = ClusterWithHealth),
        (status = 404, description = "No such live cluster of the caller", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<ClusterWithHealth>, ApiError> {
    Ok(AppJson(health::of(&state.pool, cluster).await?))
}
