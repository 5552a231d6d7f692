//! `control_plane_metrics_snapshots`: what the control plane used, over time.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::config::{ConfigError, Millis, Part, Source};

/// The metrics' own settings, from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// `METRICS_RETENTION_MS` (default 7 days): how long control-plane
    /// metrics snapshots are kept.
    pub retention: std::time::Duration,
}

impl Part for Config {
    fn read(source: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            retention: Millis::new("METRICS_RETENTION_MS", 7 * 86_400_000).read(source)?,
        })
    }
}

/// One observation of a cluster's control plane.
#[derive(Debug, Clone)]
pub struct NewSnapshot<'a> {
    pub cluster_id: Uuid,
    pub namespace: &'a str,
    pub pod_name: Option<&'a str>,
    /// Whether any figure was read.
    pub available: bool,
    /// Why figures are missing (all of them when not `available`).
    pub error: Option<String>,
    /// 1, 5 and 15 minutes.
    pub load_averages: Option<[f64; 3]>,
    pub total_cpu_percent: Option<f64>,
    pub total_memory_rss_bytes: Option<i64>,
    pub total_memory_virtual_bytes: Option<i64>,
    pub components: serde_json::Value,
}

pub async fn insert(db: impl PgExecutor<'_>, s: &NewSnapshot<'_>) -> Result<(), sqlx::Error> {
    let [load_1, load_5, load_15] = s.load_averages.map_or([None; 3], |l| l.map(Some));
    sqlx::query!(
        "INSERT INTO control_plane_metrics_snapshots
             (cluster_id, available, namespace, pod_name, load_average_1, load_average_5, load_average_15,
              total_cpu_percent, total_memory_rss_bytes, total_memory_virtual_bytes, components, error_message)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        s.cluster_id,
        s.available,
        s.namespace,
        s.pod_name,
        load_1,
        load_5,
        load_15,
        s.total_cpu_percent,
        s.total_memory_rss_bytes,
        s.total_memory_virtual_bytes,
        s.components,
        s.error
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Drops up to `batch` snapshots older than `retention`, oldest first.
/// Returns how many.
pub async fn prune(
    db: impl PgExecutor<'_>,
    retention: std::time::Duration,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM control_plane_metrics_snapshots WHERE id IN (
             SELECT id FROM control_plane_metrics_snapshots
             WHERE collected_at < now() - make_interval(secs => $1)
             ORDER BY collected_at LIMIT $2)",
        retention.as_secs_f64(),
        batch
    )
    .execute(db)
    .await?
    .rows_affected())
}

/// One point of a downsampled series: the snapshots of one equal slice of the range.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct MetricsPoint {
    /// Start of the slice.
    pub at: DateTime<Utc>,
    /// Snapshots in the slice with metrics, and without.
    pub samples: i64,
    pub unavailable: i64,
    /// CPU of the control plane, in percent of one core: mean and peak.
    pub cpu_percent_avg: Option<f64>,
    pub cpu_percent_max: Option<f64>,
    /// Resident memory (the working set when `/proc` could not be read): mean and peak.
    pub memory_bytes_avg: Option<i64>,
    pub memory_bytes_max: Option<i64>,
    /// Virtual memory of the control plane's processes: mean and peak.
    pub memory_virtual_bytes_avg: Option<i64>,
    pub memory_virtual_bytes_max: Option<i64>,
    /// The 1-minute load average of the node the control plane runs on: mean and peak.
    pub load_average_1_avg: Option<f64>,
    pub load_average_1_max: Option<f64>,
}

/// The snapshots of `[from, to)` in `points` equal slices (empty slices are left out).
pub async fn series(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    points: i32,
) -> Result<Vec<MetricsPoint>, sqlx::Error> {
    sqlx::query_as!(
        MetricsPoint,
        r#"WITH sliced AS (
               SELECT width_bucket(extract(epoch FROM collected_at)::float8,
                                   extract(epoch FROM $2::timestamptz)::float8,
                                   extract(epoch FROM $3::timestamptz)::float8, $4) AS slice,
                      available, total_cpu_percent, total_memory_rss_bytes,
                      total_memory_virtual_bytes, load_average_1
               FROM control_plane_metrics_snapshots
               WHERE cluster_id = $1 AND collected_at >= $2 AND collected_at < $3
           )
           SELECT $2::timestamptz + (slice - 1) * (($3::timestamptz - $2::timestamptz) / $4) AS "at!",
                  count(*) FILTER (WHERE available) AS "samples!",
                  count(*) FILTER (WHERE NOT available) AS "unavailable!",
                  avg(total_cpu_percent) AS cpu_percent_avg,
                  max(total_cpu_percent) AS cpu_percent_max,
                  avg(total_memory_rss_bytes)::bigint AS memory_bytes_avg,
                  max(total_memory_rss_bytes) AS memory_bytes_max,
                  avg(total_memory_virtual_bytes)::bigint AS memory_virtual_bytes_avg,
                  max(total_memory_virtual_bytes) AS memory_virtual_bytes_max,
                  avg(load_average_1) AS load_average_1_avg,
                  max(load_average_1) AS load_average_1_max
           FROM sliced GROUP BY slice ORDER BY slice"#,
        cluster_id,
        from,
        to,
        points
    )
    .fetch_all(db)
    .await
}
