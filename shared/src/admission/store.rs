//! The webhook's state in PostgreSQL: the per-cluster secrets (hashed), the
//! usage `sync-nodes` observed, and the pods admitted since (reservations).
//!
//! What a cluster has in use is its last observation plus the reservations
//! made after it began (less [`super::REVIEW_TIMEOUT_SECONDS`], so a pod
//! admitted just before a list that missed it still counts). One read per
//! review, whatever the number of pods; the API server is never asked.

use base64::Engine;
use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use super::{REVIEW_TIMEOUT_SECONDS, demand::Requests};
use crate::secretbox;

/// A new webhook secret for the cluster, its hash stored. 32 random bytes,
/// base64url.
pub async fn issue_secret(pool: &PgPool, cluster_id: Uuid) -> Result<String, sqlx::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    sqlx::query!(
        "INSERT INTO cluster_admission_secrets (cluster_id, secret_hash) VALUES ($1, $2)",
        cluster_id,
        secretbox::hash(&secret),
    )
    .execute(pool)
    .await?;
    Ok(secret)
}

/// Retires every secret of the cluster but `kept` (the one now applied).
pub async fn retire_other_secrets(
    pool: &PgPool,
    cluster_id: Uuid,
    kept: &str,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM cluster_admission_secrets WHERE cluster_id = $1 AND secret_hash <> $2",
        cluster_id,
        secretbox::hash(kept),
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// A cluster as a review sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitting {
    pub cluster_id: Uuid,
    pub name: String,
    pub owner_user_id: Uuid,
    pub limits: Requests,
    /// Observed plus reserved.
    pub in_use: Requests,
    /// Nodes at the last observation.
    pub nodes: i64,
}

/// The cluster a review is for, when `secret` is one of its current
/// secrets and it is not deleted; `None` alike for an unknown cluster, a
/// deleted one and a wrong secret. What is in use is summed as `numeric` and
/// saturates at `i64::MAX`: reservations of huge pods, there for a moment
/// before their refusal drops them, cannot make the sum fail.
pub async fn admitting(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    secret: &str,
) -> Result<Option<Admitting>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT c.id, c.name, c.owner_user_id,
                  c.workload_cpu_limit_milli_cores, c.workload_memory_limit_mib,
                  least(coalesce(u.cpu_requests_milli_cores, 0) + r.cpu,
                        9223372036854775807)::bigint AS "cpu!",
                  least(coalesce(u.memory_requests_mib, 0) + r.memory,
                        9223372036854775807)::bigint AS "memory!",
                  coalesce(u.nodes, 0)::bigint AS "nodes!"
           FROM cluster_admission_secrets s
           JOIN clusters c ON c.id = s.cluster_id AND c.deleted_at IS NULL
           LEFT JOIN cluster_workload_usage u ON u.cluster_id = c.id
           CROSS JOIN LATERAL (
               SELECT coalesce(sum(a.cpu_milli_cores), 0) AS cpu,
                      coalesce(sum(a.memory_mib), 0) AS memory
               FROM admission_reservations a
               WHERE a.cluster_id = c.id
                 AND a.created_at > coalesce(u.observed_at, '-infinity'::timestamptz)
                                    - make_interval(secs => $3)) r
           WHERE s.cluster_id = $1 AND s.secret_hash = $2"#,
        cluster_id,
        secretbox::hash(secret),
        REVIEW_TIMEOUT_SECONDS as f64,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| Admitting {
        cluster_id: r.id,
        name: r.name,
        owner_user_id: r.owner_user_id,
        limits: Requests {
            cpu_milli_cores: r.workload_cpu_limit_milli_cores.into(),
            memory_mib: r.workload_memory_limit_mib.into(),
        },
        in_use: Requests {
            cpu_milli_cores: r.cpu,
            memory_mib: r.memory,
        },
        nodes: r.nodes,
    }))
}

/// Reserves what the pod of review `uid` requests, when `secret` is one of
/// the live cluster's (nothing is written for anyone else). A review sent again
/// reserves once. Made before the cluster is read, so that of two pods
/// admitted at once the second to read sees the first.
pub async fn reserve(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    secret: &str,
    uid: &str,
    requests: Requests,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO admission_reservations (cluster_id, review_uid, cpu_milli_cores, memory_mib)
         SELECT $1, $3, $4, $5
         WHERE EXISTS (SELECT 1 FROM cluster_admission_secrets s
                       JOIN clusters c ON c.id = s.cluster_id AND c.deleted_at IS NULL
                       WHERE s.cluster_id = $1 AND s.secret_hash = $2)
         ON CONFLICT (cluster_id, review_uid) DO NOTHING",
        cluster_id,
        secretbox::hash(secret),
        uid,
        requests.cpu_milli_cores,
        requests.memory_mib,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Drops the reservation of a pod that was refused after all.
pub async fn release(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    uid: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM admission_reservations WHERE cluster_id = $1 AND review_uid = $2",
        cluster_id,
        uid,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// What one list of a cluster found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub requests: Requests,
    pub pods: i64,
    pub nodes: i64,
    /// When the list began.
    pub at: DateTime<Utc>,
}

/// Records an observation and drops the reservations it covers. An older
/// observation than the stored one changes nothing.
pub async fn record_usage(
    pool: &PgPool,
    cluster_id: Uuid,
    observed: &Observed,
) -> Result<(), sqlx::Error> {
    let clamp = |v: i64| i32::try_from(v.max(0)).unwrap_or(i32::MAX);
    let mut tx = pool.begin().await?;
    let stored = sqlx::query!(
        "INSERT INTO cluster_workload_usage AS u
             (cluster_id, cpu_requests_milli_cores, memory_requests_mib, pods, nodes, observed_at)
         SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS (SELECT 1 FROM clusters WHERE id = $1)
         ON CONFLICT (cluster_id) DO UPDATE
             SET cpu_requests_milli_cores = EXCLUDED.cpu_requests_milli_cores,
                 memory_requests_mib = EXCLUDED.memory_requests_mib,
                 pods = EXCLUDED.pods, nodes = EXCLUDED.nodes, observed_at = EXCLUDED.observed_at
             WHERE u.observed_at < EXCLUDED.observed_at",
        cluster_id,
        observed.requests.cpu_milli_cores.max(0),
        observed.requests.memory_mib.max(0),
        clamp(observed.pods),
        clamp(observed.nodes),
        observed.at,
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if stored > 0 {
        sqlx::query!(
            "DELETE FROM admission_reservations
             WHERE cluster_id = $1 AND created_at <= $2::timestamptz - make_interval(secs => $3)",
            cluster_id,
            observed.at,
            REVIEW_TIMEOUT_SECONDS as f64,
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}
