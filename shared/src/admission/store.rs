//! The webhook's state in PostgreSQL: the per-cluster tokens (hashed), the
//! usage `sync-nodes` observed, and the pods admitted since (reservations,
//! with their sum kept in one row per cluster).
//!
//! What a cluster has in use is its last observation plus the reservations
//! not yet covered by one (an observation covers those made before it began,
//! less [`super::REVIEW_TIMEOUT_SECONDS`], so a pod admitted just before a
//! list that missed it still counts). One row read per review, whatever the
//! number of pods; the API server is never asked.

use std::collections::HashMap;

use base64::Engine;
use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use super::{REVIEW_TIMEOUT_SECONDS, demand::Requests};
use crate::secretbox;

/// Makes the cluster's reservation sum row (from its reservations) when it
/// has none: a new cluster, or after a crash emptied the unlogged tables.
pub async fn ensure_reserved(db: impl PgExecutor<'_>, cluster_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO admission_reserved (cluster_id, cpu_milli_cores, memory_mib)
         SELECT $1, coalesce(sum(cpu_milli_cores), 0), coalesce(sum(memory_mib), 0)
         FROM admission_reservations WHERE cluster_id = $1
         ON CONFLICT (cluster_id) DO NOTHING",
        cluster_id,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Retires the secrets of the URLs the cluster's webhook was registered at
/// before its API server had a token of its own.
pub async fn retire_url_secrets(pool: &PgPool, cluster_id: Uuid) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM cluster_admission_secrets WHERE cluster_id = $1",
        cluster_id,
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// How the API server proved which cluster a review comes from.
#[derive(Debug, Clone, Copy)]
pub enum Credential<'a> {
    /// The cluster's token, sent as bearer credential.
    Token(&'a str),
    /// A secret in the URL of a webhook registered before the cluster's
    /// API server had a token (answered until the next registration).
    UrlSecret(&'a str),
}

impl Credential<'_> {
    /// Whether it is a token, and its hash.
    fn hashed(self) -> (bool, Vec<u8>) {
        match self {
            Credential::Token(token) => (true, secretbox::hash(token)),
            Credential::UrlSecret(secret) => (false, secretbox::hash(secret)),
        }
    }
}

/// A cluster as a review sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitting {
    pub cluster_id: Uuid,
    pub name: String,
    /// Whose plan the cluster counts against.
    pub organization_id: Uuid,
    pub limits: Requests,
    /// Observed plus reserved.
    pub in_use: Requests,
    /// Nodes at the last observation.
    pub nodes: i64,
}

/// The cluster a review is for, when `credential` is its own and it is not
/// deleted; `None` alike for an unknown cluster, a deleted one and a wrong
/// credential. What is in use saturates at `i64::MAX`.
pub async fn admitting(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    credential: Credential<'_>,
) -> Result<Option<Admitting>, sqlx::Error> {
    let (by_token, hash) = credential.hashed();
    let row = sqlx::query!(
        r#"SELECT c.id, c.name, c.organization_id,
                  c.workload_cpu_limit_milli_cores, c.workload_memory_limit_mib,
                  least(coalesce(u.cpu_requests_milli_cores, 0)::numeric
                        + coalesce(r.cpu_milli_cores, 0), 9223372036854775807)::bigint AS "cpu!",
                  least(coalesce(u.memory_requests_mib, 0)::numeric
                        + coalesce(r.memory_mib, 0), 9223372036854775807)::bigint AS "memory!",
                  coalesce(u.nodes, 0)::bigint AS "nodes!"
           FROM clusters c
           LEFT JOIN cluster_workload_usage u ON u.cluster_id = c.id
           LEFT JOIN admission_reserved r ON r.cluster_id = c.id
           WHERE c.id = $1 AND c.deleted_at IS NULL
             AND CASE WHEN $3
                 THEN EXISTS (SELECT 1 FROM cluster_authorizers a
                              WHERE a.cluster_id = c.id AND a.token_hash = $2)
                 ELSE EXISTS (SELECT 1 FROM cluster_admission_secrets s
                              WHERE s.cluster_id = c.id AND s.secret_hash = $2)
                 END"#,
        cluster_id,
        hash,
        by_token,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| Admitting {
        cluster_id: r.id,
        name: r.name,
        organization_id: r.organization_id,
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

/// What [`reserve`] did with a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// No live cluster has that credential: nothing was written.
    Unknown,
    /// Reserved now, or by an earlier delivery of the same review.
    Admitted,
    /// It does not fit: the cluster as the statement saw it (`in_use` without
    /// the pod).
    Refused(Admitting),
}

/// Weighs the pod of review `uid` against the cluster's limits and reserves
/// what it requests if it fits, in one statement: the sum row is updated
/// only when `observed + reserved + requests` stays within the limits,
/// checked under that row's lock, so of two pods at once the second is
/// weighed with the first. A review the API server sends again is admitted
/// once more without counting twice. The sum row is made first where it is
/// missing.
pub async fn reserve(
    pool: &PgPool,
    cluster_id: Uuid,
    credential: Credential<'_>,
    uid: &str,
    requests: Requests,
) -> Result<Reservation, sqlx::Error> {
    let (by_token, hash) = credential.hashed();
    let mut summed_made = false;
    loop {
        let row = sqlx::query!(
            r#"WITH c AS (
                   SELECT c.id, c.name, c.organization_id,
                          c.workload_cpu_limit_milli_cores AS cpu_limit,
                          c.workload_memory_limit_mib AS memory_limit,
                          coalesce(u.cpu_requests_milli_cores, 0) AS cpu_observed,
                          coalesce(u.memory_requests_mib, 0) AS memory_observed,
                          coalesce(u.nodes, 0) AS nodes,
                          EXISTS (SELECT 1 FROM admission_reservations a
                                  WHERE a.cluster_id = c.id AND a.review_uid = $3) AS already
                   FROM clusters c
                   LEFT JOIN cluster_workload_usage u ON u.cluster_id = c.id
                   WHERE c.id = $1 AND c.deleted_at IS NULL
                     AND CASE WHEN $6
                         THEN EXISTS (SELECT 1 FROM cluster_authorizers t
                                      WHERE t.cluster_id = c.id AND t.token_hash = $2)
                         ELSE EXISTS (SELECT 1 FROM cluster_admission_secrets s
                                      WHERE s.cluster_id = c.id AND s.secret_hash = $2)
                         END),
               added AS (
                   UPDATE admission_reserved r
                   SET cpu_milli_cores = r.cpu_milli_cores + $4::bigint,
                       memory_mib = r.memory_mib + $5::bigint
                   FROM c
                   WHERE r.cluster_id = c.id AND NOT c.already
                     AND ($4::bigint = 0 OR c.cpu_observed::numeric + r.cpu_milli_cores + $4::bigint <= c.cpu_limit)
                     AND ($5::bigint = 0 OR c.memory_observed::numeric + r.memory_mib + $5::bigint <= c.memory_limit)
                   RETURNING r.cluster_id),
               recorded AS (
                   INSERT INTO admission_reservations
                       (cluster_id, review_uid, cpu_milli_cores, memory_mib)
                   SELECT cluster_id, $3, $4::bigint, $5::bigint FROM added
                   ON CONFLICT (cluster_id, review_uid) DO NOTHING)
               SELECT c.id AS "id!", c.name AS "name!", c.organization_id AS "organization_id!",
                      c.cpu_limit AS "cpu_limit!", c.memory_limit AS "memory_limit!",
                      c.nodes::bigint AS "nodes!", c.already AS "already!",
                      EXISTS (SELECT 1 FROM added) AS "added!",
                      r.cluster_id IS NOT NULL AS "summed!",
                      least(c.cpu_observed::numeric + coalesce(r.cpu_milli_cores, 0),
                            9223372036854775807)::bigint AS "cpu!",
                      least(c.memory_observed::numeric + coalesce(r.memory_mib, 0),
                            9223372036854775807)::bigint AS "memory!"
               FROM c LEFT JOIN admission_reserved r ON r.cluster_id = c.id"#,
            cluster_id,
            hash,
            uid,
            requests.cpu_milli_cores,
            requests.memory_mib,
            by_token,
        )
        .fetch_optional(pool)
        .await?;
        let Some(row) = row else {
            return Ok(Reservation::Unknown);
        };
        if row.already || row.added {
            return Ok(Reservation::Admitted);
        }
        if !row.summed {
            if summed_made {
                // Made a moment ago and gone: the cluster was deleted.
                return Ok(Reservation::Unknown);
            }
            ensure_reserved(pool, cluster_id).await?;
            summed_made = true;
            continue;
        }
        return Ok(Reservation::Refused(Admitting {
            cluster_id: row.id,
            name: row.name,
            organization_id: row.organization_id,
            limits: Requests {
                cpu_milli_cores: row.cpu_limit.into(),
                memory_mib: row.memory_limit.into(),
            },
            in_use: Requests {
                cpu_milli_cores: row.cpu,
                memory_mib: row.memory,
            },
            nodes: row.nodes,
        }));
    }
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

/// Records an observation, drops the reservations it covers and sets the
/// cluster's sum of reservations from those left. An older observation than
/// the stored one changes nothing.
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
        // The sum row first (made, and locked, here): reservers wait on it
        // rather than the other way round, and none adds while it is set.
        sqlx::query!(
            "INSERT INTO admission_reserved (cluster_id, cpu_milli_cores, memory_mib)
             VALUES ($1, 0, 0)
             ON CONFLICT (cluster_id) DO UPDATE SET cluster_id = EXCLUDED.cluster_id",
            cluster_id,
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "DELETE FROM admission_reservations
             WHERE cluster_id = $1 AND created_at <= $2::timestamptz - make_interval(secs => $3)",
            cluster_id,
            observed.at,
            REVIEW_TIMEOUT_SECONDS as f64,
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "UPDATE admission_reserved
             SET (cpu_milli_cores, memory_mib) =
                 (SELECT coalesce(sum(cpu_milli_cores), 0), coalesce(sum(memory_mib), 0)
                  FROM admission_reservations WHERE cluster_id = $1)
             WHERE cluster_id = $1",
            cluster_id,
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// Removes the reservations and sums of clusters that are deleted (no
/// observation comes for them any more to retire them).
pub async fn prune(db: &mut sqlx::PgConnection) -> Result<u64, sqlx::Error> {
    let reservations = sqlx::query!(
        "DELETE FROM admission_reservations a
         WHERE NOT EXISTS (SELECT 1 FROM clusters c
                           WHERE c.id = a.cluster_id AND c.deleted_at IS NULL)"
    )
    .execute(&mut *db)
    .await?
    .rows_affected();
    let sums = sqlx::query!(
        "DELETE FROM admission_reserved r
         WHERE NOT EXISTS (SELECT 1 FROM clusters c
                           WHERE c.id = r.cluster_id AND c.deleted_at IS NULL)"
    )
    .execute(&mut *db)
    .await?
    .rows_affected();
    Ok(reservations + sums)
}

/// A new bearer token for the cluster's API server, its hash stored in place
/// of any earlier one, with the `host:port` its files name for the
/// platform's webhooks. 32 random bytes, base64url.
pub async fn issue_authorizer_token(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    webhook_host: &str,
) -> Result<String, sqlx::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    sqlx::query!(
        "INSERT INTO cluster_authorizers (cluster_id, token_hash, webhook_host) VALUES ($1, $2, $3)
         ON CONFLICT (cluster_id) DO UPDATE
         SET token_hash = EXCLUDED.token_hash, webhook_host = EXCLUDED.webhook_host",
        cluster_id,
        secretbox::hash(&token),
        webhook_host,
    )
    .execute(db)
    .await?;
    Ok(token)
}

/// How a ready cluster's webhook is registered, for `sync-clusters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// With the cluster's token, for the platform's current webhook host:
    /// the configuration can be applied again as it is.
    Current,
    /// Not at all, with a secret in its URL, or for another host (the
    /// platform's URL moved): the API server needs its files first, which
    /// an update job writes.
    Outdated,
}

/// The registration of every ready cluster with no active job (one busy
/// with a job is left to it: its API server may be between two
/// configurations), against the platform's current `webhook_host`.
pub async fn registrations(
    pool: &PgPool,
    webhook_host: &str,
) -> Result<HashMap<Uuid, Registration>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT c.id,
                  EXISTS (SELECT 1 FROM cluster_authorizers a
                          WHERE a.cluster_id = c.id AND a.webhook_host = $1)
                  AND NOT EXISTS (SELECT 1 FROM cluster_admission_secrets s
                                  WHERE s.cluster_id = c.id) AS "current!"
           FROM clusters c
           WHERE c.status = 'ready' AND c.deleted_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM cluster_jobs j
                             WHERE j.cluster_id = c.id AND j.status IN ('pending', 'running'))"#,
        webhook_host
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let registration = if r.current {
                Registration::Current
            } else {
                Registration::Outdated
            };
            (r.id, registration)
        })
        .collect())
}

/// Whether the cluster has a token stored for files that name `webhook_host`.
pub async fn has_authorizer(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    webhook_host: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM cluster_authorizers
                          WHERE cluster_id = $1 AND webhook_host = $2) AS "exists!""#,
        cluster_id,
        webhook_host
    )
    .fetch_one(db)
    .await
}

/// Whether `token` is the authorizer token of a live cluster.
pub async fn authorizer_token_valid(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    token: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM cluster_authorizers a JOIN clusters c ON c.id = a.cluster_id
                          WHERE a.cluster_id = $1 AND a.token_hash = $2 AND c.deleted_at IS NULL) AS "valid!""#,
        cluster_id,
        secretbox::hash(token),
    )
    .fetch_one(db)
    .await
}
