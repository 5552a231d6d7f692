use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::{
    clusters::{self, Cluster},
    error::ApiError,
    extract::{AppJson, AppQuery},
    http::{AppState, InOrganization, OwnedCluster},
};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

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
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterPage {
    pub items: Vec<Cluster>,
    /// Pass as `cursor` to read the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// 9999-12-31T23:59:59.999999Z in microseconds since the epoch.
const MAX_CURSOR_MICROS: i64 = 253_402_300_799_999_999;

fn parse_cursor(raw: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let invalid = || ApiError::BadRequest {
        code: "invalid_cursor",
        detail: "cursor is not one this API returned".into(),
    };
    let (at, id) = raw.split_once('_').ok_or_else(invalid)?;
    let micros: i64 = at.parse().map_err(|_| invalid())?;
    // A cluster's creation time: from 1970 to the end of year 9999, inside
    // what both chrono and PostgreSQL's timestamptz hold.
    if !(0..=MAX_CURSOR_MICROS).contains(&micros) {
        return Err(invalid());
    }
    Ok((
        DateTime::from_timestamp_micros(micros).ok_or_else(invalid)?,
        id.parse().map_err(|_| invalid())?,
    ))
}

/// The text a search looks for in names: what a cluster's name can hold,
/// in lower case; anything else (a wildcard, a look-alike letter) cannot
/// match a name and is refused rather than searched for.
fn search_text(raw: &str) -> Result<String, ApiError> {
    let valid = (1..=63).contains(&raw.len())
        && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !valid {
        return Err(ApiError::invalid(
            "q",
            "must be 1–63 letters, digits or '-', as a cluster's name has",
        ));
    }
    Ok(raw.to_ascii_lowercase())
}

fn cursor_of(cluster: &Cluster) -> String {
    format!("{}_{}", cluster.created_at.timestamp_micros(), cluster.id)
}

/// List clusters
///
/// The organization's live clusters, newest first, paginated by cursor;
/// `q` keeps those whose name contains it.
#[utoipa::path(
    get,
    path = "/api/console/clusters",
    tag = "clusters",
    params(ListQuery, ("KubeBYON-Organization" = Option<Uuid>, Header, nullable = false, description = "The organization to act in (its id); the caller's personal one when absent")),
    responses(
        (status = 200, body = ClusterPage),
        (status = 400, description = "Bad limit or cursor", body = shared::error::Problem, content_type = "application/problem+json"),
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
    let limit = shared::extract::short_page_limit(query.limit)?;
    let before = query.cursor.as_deref().map(parse_cursor).transpose()?;
    let name_contains = query.q.as_deref().map(search_text).transpose()?;
    let mut items = clusters::list_of(
        &state.pool,
        organization.id,
        name_contains.as_deref(),
        before,
        limit + 1,
    )
    .await?;
    let next_cursor = shared::extract::cut_page(&mut items, limit, cursor_of);
    Ok(AppJson(ClusterPage { items, next_cursor }))
}

/// Get a cluster
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path)),
    responses(
        (status = 200, body = Cluster),
        (status = 404, description = "No such live cluster of the caller", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(OwnedCluster(cluster): OwnedCluster) -> AppJson<Cluster> {
    AppJson(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let at = DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap();
        let id = Uuid::new_v4();
        let raw = format!("{}_{}", at.timestamp_micros(), id);
        assert_eq!(parse_cursor(&raw).unwrap(), (at, id));
        let last = format!("{MAX_CURSOR_MICROS}_{id}");
        assert!(parse_cursor(&last).is_ok());
        for bad in [
            "",
            "abc",
            "12_notauuid",
            "x_00000000-0000-0000-0000-000000000000",
            // The review's cursor: chrono takes it, PostgreSQL does not.
            "-8000000000000000000_00000000-0000-0000-0000-000000000000",
            "-1_00000000-0000-0000-0000-000000000000",
            "253402300800000000_00000000-0000-0000-0000-000000000000",
            "9223372036854775807_00000000-0000-0000-0000-000000000000",
        ] {
            assert!(parse_cursor(bad).is_err(), "{bad:?}");
        }
    }
}
