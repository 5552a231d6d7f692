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
    /// metrics snapshots and their sums are kept.
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

/// Writes the snapshots in one statement (and, by its trigger, their
/// 10-minute and hourly sums).
pub async fn insert_all(
    db: impl PgExecutor<'_>,
    all: &[NewSnapshot<'_>],
) -> Result<(), sqlx::Error> {
    if all.is_empty() {
        return Ok(());
    }
    let load = |i: usize| -> Vec<Option<f64>> {
        all.iter().map(|s| s.load_averages.map(|l| l[i])).collect()
    };
    let (load_1, load_5, load_15) = (load(0), load(1), load(2));
    sqlx::query!(
        "INSERT INTO control_plane_metrics_snapshots
             (cluster_id, available, namespace, pod_name, load_average_1, load_average_5, load_average_15,
              total_cpu_percent, total_memory_rss_bytes, total_memory_virtual_bytes, components, error_message)
         SELECT * FROM unnest($1::uuid[], $2::bool[], $3::text[], $4::text[], $5::float8[], $6::float8[],
                              $7::float8[], $8::float8[], $9::int8[], $10::int8[], $11::jsonb[], $12::text[])",
        &all.iter().map(|s| s.cluster_id).collect::<Vec<_>>(),
        &all.iter().map(|s| s.available).collect::<Vec<_>>(),
        &all.iter().map(|s| s.namespace).collect::<Vec<_>>() as &[&str],
        &all.iter().map(|s| s.pod_name).collect::<Vec<_>>() as &[Option<&str>],
        &load_1 as &[Option<f64>],
        &load_5 as &[Option<f64>],
        &load_15 as &[Option<f64>],
        &all.iter().map(|s| s.total_cpu_percent).collect::<Vec<_>>() as &[Option<f64>],
        &all.iter().map(|s| s.total_memory_rss_bytes).collect::<Vec<_>>() as &[Option<i64>],
        &all.iter().map(|s| s.total_memory_virtual_bytes).collect::<Vec<_>>() as &[Option<i64>],
        &all.iter().map(|s| s.components.clone()).collect::<Vec<_>>(),
        &all.iter().map(|s| s.error.as_deref()).collect::<Vec<_>>() as &[Option<&str>],
    )
    .execute(db)
    .await?;
    Ok(())
}

/// What one [`prune`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub samples: u64,
    /// 10-minute and hourly sums wholly older than the retention.
    pub rollups: u64,
}

/// Drops up to `batch` snapshots older than `retention`, oldest first, and
/// up to `batch` of their sums.
pub async fn prune(
    db: impl PgExecutor<'_>,
    retention: std::time::Duration,
    batch: i64,
) -> Result<Pruned, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH samples AS (
               DELETE FROM control_plane_metrics_snapshots WHERE id IN (
                   SELECT id FROM control_plane_metrics_snapshots
                   WHERE collected_at < now() - make_interval(secs => $1)
                   ORDER BY collected_at LIMIT $2)
               RETURNING 1),
           rollups AS (
               DELETE FROM control_plane_metrics_rollups r USING (
                   SELECT cluster_id, bucket_seconds, starts_at FROM control_plane_metrics_rollups
                   WHERE starts_at < now() - make_interval(secs => $1)
                     AND starts_at + make_interval(secs => bucket_seconds) <= now() - make_interval(secs => $1)
                   ORDER BY starts_at LIMIT $2) old
               WHERE (r.cluster_id, r.bucket_seconds, r.starts_at) = (old.cluster_id, old.bucket_seconds, old.starts_at)
               RETURNING 1)
           SELECT (SELECT count(*) FROM samples) AS "samples!", (SELECT count(*) FROM rollups) AS "rollups!""#,
        retention.as_secs_f64(),
        batch
    )
    .fetch_one(db)
    .await?;
    Ok(Pruned {
        samples: row.samples.try_into().unwrap_or_default(),
        rollups: row.rollups.try_into().unwrap_or_default(),
    })
}

/// The sizes of the sums kept of the samples (`control_plane_metrics_rollups`),
/// largest first.
pub const BUCKETS_SECONDS: [i64; 2] = [3600, 600];

/// How a range is cut into slices. A range whose slices would last a
/// bucket or more is read from the largest such bucket's sums: its start is
/// moved back to a bucket's start, each slice lasts whole buckets, and its
/// end follows; so every sum falls in one slice, and a slice's figures are
/// those of its samples. Shorter slices are read from the samples, as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slices {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub count: i32,
    /// The sums read, or `None` for the samples themselves.
    pub bucket_seconds: Option<i64>,
}

impl Slices {
    /// `[from, to)` (`from` before `to`) in at most `points` (≥ 1) slices.
    pub fn of(from: DateTime<Utc>, to: DateTime<Utc>, points: i32) -> Self {
        let span_ms = (to - from).num_milliseconds();
        let wanted = i64::from(points.max(1));
        let Some(bucket) = BUCKETS_SECONDS
            .into_iter()
            .find(|b| b * 1000 * wanted <= span_ms)
        else {
            return Self {
                from,
                to,
                count: points,
                bucket_seconds: None,
            };
        };
        let bucket_ms = bucket * 1000;
        let start = from.timestamp_millis().div_euclid(bucket_ms) * bucket_ms;
        let end = to.timestamp_millis().div_euclid(bucket_ms) * bucket_ms
            + if to.timestamp_millis().rem_euclid(bucket_ms) == 0 {
                0
            } else {
                bucket_ms
            };
        let buckets = (end - start) / bucket_ms;
        // Both positive: a bucket fits `wanted` times in the range.
        let per_slice = (buckets + wanted - 1) / wanted;
        let count = (buckets + per_slice - 1) / per_slice;
        let at = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or(from);
        Self {
            from: at(start),
            to: at(start + count * per_slice * bucket_ms),
            count: i32::try_from(count).unwrap_or(points),
            bucket_seconds: Some(bucket),
        }
    }

    /// Length of one slice, in seconds.
    pub fn step_seconds(&self) -> f64 {
        (self.to - self.from).num_milliseconds() as f64 / 1000.0 / f64::from(self.count)
    }
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

/// The snapshots of `slices`, one point per slice that has any (oldest
/// first), from the samples or from their sums.
pub async fn series(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    slices: Slices,
) -> Result<Vec<MetricsPoint>, sqlx::Error> {
    let Slices {
        from,
        to,
        count,
        bucket_seconds,
    } = slices;
    let Some(bucket_seconds) = bucket_seconds else {
        return sqlx::query_as!(
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
            count
        )
        .fetch_all(db)
        .await;
    };
    // Whole buckets a slice: each sum's start places it in one slice.
    let step_seconds = (to - from).num_seconds() / i64::from(count);
    sqlx::query_as!(
        MetricsPoint,
        r#"WITH sliced AS (
               SELECT extract(epoch FROM starts_at - $2::timestamptz)::bigint / $5 AS slice, *
               FROM control_plane_metrics_rollups
               WHERE cluster_id = $1 AND bucket_seconds = $4 AND starts_at >= $2 AND starts_at < $3
           )
           SELECT $2::timestamptz + make_interval(secs => (slice * $5)::float8) AS "at!",
                  sum(samples)::bigint AS "samples!",
                  sum(unavailable)::bigint AS "unavailable!",
                  sum(cpu_percent_sum) / nullif(sum(cpu_percent_count), 0)::float8 AS cpu_percent_avg,
                  max(cpu_percent_max) AS cpu_percent_max,
                  (sum(memory_bytes_sum) / nullif(sum(memory_bytes_count), 0))::bigint AS memory_bytes_avg,
                  max(memory_bytes_max) AS memory_bytes_max,
                  (sum(memory_virtual_sum) / nullif(sum(memory_virtual_count), 0))::bigint AS memory_virtual_bytes_avg,
                  max(memory_virtual_max) AS memory_virtual_bytes_max,
                  sum(load_average_1_sum) / nullif(sum(load_average_1_count), 0)::float8 AS load_average_1_avg,
                  max(load_average_1_max) AS load_average_1_max
           FROM sliced GROUP BY slice ORDER BY slice"#,
        cluster_id,
        from,
        to,
        i32::try_from(bucket_seconds).unwrap_or(i32::MAX),
        step_seconds
    )
    .fetch_all(db)
    .await
}

/// What metrics brings to the platform: the retention of the control planes' metrics.
pub const CAPABILITY: crate::capability::Capability = crate::capability::Capability {
    settings: &[crate::capability::setting::<Config>],
    ..crate::capability::Capability::named("metrics")
};

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta, Utc};
    use proptest::prelude::*;

    use super::{BUCKETS_SECONDS, Slices};

    proptest! {
        /// The slices cover the range asked, in no more slices than asked,
        /// and a slice read from sums holds whole buckets from a bucket's
        /// start, reaching back less than a bucket before the range.
        #[test]
        fn slices_cover_the_range_in_whole_buckets(
            from_ms in 1_600_000_000_000i64..1_900_000_000_000,
            span_ms in 1i64..90 * 86_400_000,
            points in 1i32..=1000,
        ) {
            let from = DateTime::from_timestamp_millis(from_ms).unwrap();
            let to = from + TimeDelta::milliseconds(span_ms);
            let s = Slices::of(from, to, points);
            prop_assert!(s.from <= from && s.to >= to);
            prop_assert!(s.count >= 1 && s.count <= points);
            match s.bucket_seconds {
                None => prop_assert_eq!((s.from, s.to, s.count), (from, to, points)),
                Some(bucket) => {
                    prop_assert!(BUCKETS_SECONDS.contains(&bucket));
                    prop_assert!(bucket as f64 <= span_ms as f64 / 1000.0 / f64::from(points));
                    prop_assert!((from - s.from).num_seconds() < bucket);
                    prop_assert_eq!(s.from.timestamp_subsec_nanos(), 0);
                    prop_assert_eq!(s.from.timestamp() % bucket, 0);
                    let step = (s.to - s.from).num_seconds();
                    prop_assert_eq!(step % (bucket * i64::from(s.count)), 0);
                    // No slice lies wholly after the range.
                    prop_assert!(s.to - TimeDelta::seconds(step / i64::from(s.count)) < to);
                }
            }
        }
    }

    #[test]
    fn a_week_in_a_hundred_slices_reads_two_hour_sums() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let s = Slices::of(at("2026-11-20T10:17:00Z"), at("2026-11-27T10:17:00Z"), 100);
        assert_eq!(s.bucket_seconds, Some(3600));
        assert_eq!(
            (s.from, s.to),
            (at("2026-11-20T10:00:00Z"), at("2026-11-27T12:00:00Z"))
        );
        assert_eq!((s.count, s.step_seconds()), (85, 7200.0));
        // 24 hours in 120 slices: 12 minutes each, read from 10-minute sums.
        let s = Slices::of(at("2026-11-20T10:17:00Z"), at("2026-11-21T10:17:00Z"), 120);
        assert_eq!(
            (s.bucket_seconds, s.count, s.step_seconds()),
            (Some(600), 73, 1200.0)
        );
        // An hour in 120 slices: 30 s each, from the samples as asked.
        let s = Slices::of(at("2026-11-20T10:17:00Z"), at("2026-11-20T11:17:00Z"), 120);
        assert_eq!(
            (s.bucket_seconds, s.count, s.step_seconds()),
            (None, 120, 30.0)
        );
    }
}
