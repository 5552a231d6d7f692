use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::{
    error::ApiError,
    extract::{AppJson, AppQuery},
    http::{AppState, OwnedCluster},
    metrics::{self, MetricsPoint},
};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MetricsQuery {
    /// Start (RFC 3339); default 24 hours before `to`.
    pub from: Option<DateTime<Utc>>,
    /// End (RFC 3339); default now.
    pub to: Option<DateTime<Utc>>,
    /// How many equal slices to cut the range into: 1–1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub points: Option<i32>,
}

/// A cluster's control-plane metrics over a range.
#[derive(Debug, Serialize, ToSchema)]
pub struct MetricsSeries {
    /// Start of the first slice: `from` as asked, or the start of the
    /// 10-minute or hourly bucket it falls in when the slices are read from
    /// those buckets' sums.
    pub from: DateTime<Utc>,
    /// End of the last slice: `to` as asked, or later, to a bucket's end.
    pub to: DateTime<Utc>,
    /// Length of one slice, in seconds.
    pub step_seconds: f64,
    /// One point per slice that has snapshots, oldest first.
    pub points: Vec<MetricsPoint>,
}

/// Control-plane metrics
///
/// CPU (percent of one core) and memory working set of the cluster's control
/// plane over `[from, to)` (at most 90 days), downsampled to `points` equal
/// slices, each with its mean and peak and how many snapshots were available.
/// Where a slice would last 10 minutes or more, the series is read from the
/// snapshots' sums per 10 minutes or per hour (the largest that fits): the
/// range is widened to whole buckets and cut into at most `points` slices of
/// whole buckets each, and the answer's `from`, `to` and `step_seconds` say
/// how it was cut; each slice's figures are still those of its snapshots.
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/metrics",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path), MetricsQuery),
    responses(
        (status = 200, body = MetricsSeries),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn series(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<MetricsQuery>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<MetricsSeries>, ApiError> {
    let (from, to) = shared::extract::time_range(
        query.from,
        query.to,
        chrono::TimeDelta::hours(24),
        chrono::TimeDelta::days(90),
    )?;
    let points = query.points.unwrap_or(100);
    if !(1..=1000).contains(&points) {
        return Err(ApiError::invalid("points", "must be between 1 and 1000"));
    }
    let slices = metrics::Slices::of(from, to, points);
    Ok(AppJson(MetricsSeries {
        from: slices.from,
        to: slices.to,
        step_seconds: slices.step_seconds(),
        points: metrics::series(&state.pool, cluster.id, slices).await?,
    }))
}
