//! What the benchmark programs share.

use sqlx::PgPool;

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
