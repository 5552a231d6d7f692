//! What the benchmark programs share.

use anyhow::Context;
use sqlx::PgPool;

/// The number after `name` in `args` (`--clusters 1000`), else `default`.
pub fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .with_context(|| format!("{name} needs a value"))?
            .parse()
            .with_context(|| format!("{name} must be a number")),
        None => Ok(default),
    }
}

/// The `p` quantile of `sorted` milliseconds, to the microsecond.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    (sorted[i] * 1000.0).round() / 1000.0
}

/// Adds `count` ready clusters named `c1`… to the user with `email`, made
/// verified if new, in one statement.
pub async fn seed_clusters(pool: &PgPool, email: &str, count: usize) -> anyhow::Result<uuid::Uuid> {
    let owner: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name, email_verified_at) VALUES ($1, 'Benchmark', now())
         ON CONFLICT (email) DO UPDATE SET display_name = EXCLUDED.display_name
         RETURNING id",
    )
    .bind(email)
    .fetch_one(pool)
    .await?;
    sqlx::query(
        "INSERT INTO clusters (owner_user_id, name, vcluster_name, namespace, kubernetes_version,
             workload_cpu_limit_milli_cores, workload_memory_limit_mib,
             control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
             public_access_mode, status)
         SELECT $1, 'c' || g, 'c' || g, 'kb-c' || g, '1.31', 1000, 1024, 100, 256, 'nodeport', 'ready'
         FROM generate_series(1, $2) g",
    )
    .bind(owner)
    .bind(i64::try_from(count)?)
    .execute(pool)
    .await?;
    Ok(owner)
}

/// Accepts every message and drops it: the benchmarks measure the requests,
/// not the jobs they would start.
pub struct Dropping;

#[async_trait::async_trait]
impl shared::jobs::JobPublisher for Dropping {
    async fn publish(
        &self,
        _: &[shared::jobs::JobMessage],
    ) -> Result<(), shared::jobs::PublishError> {
        Ok(())
    }
}
