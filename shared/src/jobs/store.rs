//! The `cluster_jobs` queue and the `cluster_operations` it drives.
//!
//! State machine (enforced by CHECK constraints and the fenced updates below):
//!
//! ```text
//!            claim (attempt + 1, lease)            complete (fenced)
//! pending ───────────────────────────────▶ running ───────────────────▶ succeeded
//!    ▲  │                                  │  │
//!    │  │ cancel                           │  │ fatal error or attempts exhausted (fenced)
//!    │  ▼                                  │  └────────────────────────▶ failed
//! cancelled          retryable error,      │
//!    ▲               attempts left,        │ lease expired (sweep rescue)
//!    └─ pending ◀────── due later ─────────┘
//! ```
//!
//! Every update that ends or extends a running job is conditioned on the job id
//! and the attempt number it claimed: a worker whose lease expired and whose job
//! was claimed again cannot finish it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

use super::{Failure, stage};
use crate::domain::{ClusterStatus, FailureCode, JobKind, JobKinds, JobPayload, JobType};

/// What travels on the queue: only the id and the type. The row is the truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobMessage {
    pub job_id: Uuid,
    pub job_type: JobType,
}

/// A new job, written in the caller's transaction.
#[derive(Debug)]
pub struct NewJob<'a> {
    pub cluster_id: Uuid,
    pub kind: JobKind,
    pub requested_by: Option<Uuid>,
    pub payload: &'a serde_json::Value,
    pub max_attempts: i32,
}

/// `payload` as a job of its kind carries it: the kind and the JSON for
/// [`NewJob`] or [`queue_operation`].
pub fn encode<P: JobPayload>(
    payload: &P,
) -> Result<(JobKind, serde_json::Value), serde_json::Error> {
    Ok((P::KIND, serde_json::to_value(payload)?))
}

/// The identifiers of an enqueued job and its operation.
#[derive(Debug, Clone, Copy)]
pub struct Enqueued {
    pub job: JobMessage,
    pub operation_id: Uuid,
}

/// Writes the operation and its pending job. Fails with the unique violation
/// `idx_cluster_jobs_active_cluster` when the cluster already has an active job.
pub async fn enqueue(tx: &mut PgConnection, new: NewJob<'_>) -> Result<Enqueued, sqlx::Error> {
    insert_job(tx, new, false)
        .await?
        .ok_or(sqlx::Error::RowNotFound)
}

/// [`enqueue`], only when the cluster has nothing else to do: no active job
/// and no operation queued behind one (that work comes first, and may make
/// this job moot). `None` when it was not written. Two writers racing for an
/// idle cluster still meet `idx_cluster_jobs_active_cluster`: one of them
/// fails with that unique violation.
pub async fn enqueue_if_idle(
    tx: &mut PgConnection,
    new: NewJob<'_>,
) -> Result<Option<Enqueued>, sqlx::Error> {
    insert_job(tx, new, true).await
}

async fn insert_job(
    tx: &mut PgConnection,
    new: NewJob<'_>,
    only_if_idle: bool,
) -> Result<Option<Enqueued>, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH operation AS (
               INSERT INTO cluster_operations (cluster_id, type, requested_by_user_id, payload)
               SELECT $1, $2, $3, $4
               WHERE NOT $7::bool OR (
                   NOT EXISTS (
                       SELECT 1 FROM cluster_jobs
                       WHERE cluster_id = $1 AND status IN ('pending', 'running')
                   ) AND NOT EXISTS (
                       SELECT 1 FROM cluster_operations o
                       WHERE o.cluster_id = $1 AND o.status = 'pending'
                         AND NOT EXISTS (SELECT 1 FROM cluster_jobs j WHERE j.operation_id = o.id)
                   )
               )
               RETURNING id
           )
           INSERT INTO cluster_jobs (cluster_id, operation_id, type, payload, max_attempts, trace_parent)
           SELECT $1, operation.id, $5, $4, $6, $8 FROM operation
           RETURNING id, operation_id"#,
        new.cluster_id,
        new.kind.operation,
        new.requested_by,
        new.payload,
        new.kind.job_type.as_str(),
        new.max_attempts,
        only_if_idle,
        crate::telemetry::trace::current_traceparent(),
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|row| Enqueued {
        job: JobMessage {
            job_id: row.id,
            job_type: new.kind.job_type,
        },
        operation_id: row.operation_id,
    }))
}

/// Records that a wake-up for the job was accepted by the transport. Its
/// commit does not wait for the disk (`synchronous_commit` off for this
/// transaction only): losing it to a database crash only makes `sweep`
/// publish the job again, and a duplicate wake-up is dropped.
pub async fn mark_published(db: impl PgExecutor<'_>, job_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE cluster_jobs SET published_at = now(), updated_at = now()
         FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed
         WHERE id = $1 AND status = 'pending' AND published_at IS NULL",
        job_id
    )
    .execute(db)
    .await?;
    Ok(())
}

/// A job this worker holds the lease on.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub operation_id: Uuid,
    pub job_type: JobType,
    pub payload: serde_json::Value,
    /// The fencing token: every later write is conditioned on it.
    pub attempt: i32,
    pub max_attempts: i32,
    pub worker_id: String,
    /// How long the job had been due (enqueued, or its retry time) when claimed.
    pub due_for: Duration,
    /// The trace of the span that enqueued the job, when traces are exported.
    pub trace_parent: Option<String>,
}

impl ClaimedJob {
    /// The wake-up that names this job.
    pub fn message(&self) -> JobMessage {
        JobMessage {
            job_id: self.id,
            job_type: self.job_type,
        }
    }
}

/// Takes the leases on every claimable job of a batch of wake-ups in one
/// statement. The rows are locked in id order, so two
/// workers claiming overlapping batches (duplicate wake-ups) wait for each
/// other instead of deadlocking. A wake-up whose job is not returned was
/// duplicate or stale.
///
/// The rows are found by primary key alone and their status is read once
/// locked: with a condition on `status` the planner may walk the status
/// indexes instead, whose `pending` entries include every earlier version of
/// every job since the last vacuum, so each claim would cost more than the
/// one before (5 ms after 20,000 jobs).
///
/// A lone wake-up (the common case when jobs trickle in) takes a statement of
/// its own: one row updated where it is found by primary key, without the
/// set's sort and row locks first, which takes about a fifth off the
/// statement. Locking one row cannot deadlock. Its test of `status` is
/// written so that no index can serve it (`IS TRUE`): as a plain equality,
/// the plan made on a nearly empty table walks the status index instead.
///
/// The operation is left as it is: it becomes `running` with its job's first
/// recorded stage ([`record_stage`]), a write every handler makes at once, so
/// the claim does not update a second row for it.
///
/// The claim's commit does not wait for the disk (`synchronous_commit` off for
/// this transaction only): a claim lost to a database crash leaves the job at
/// its previous attempt, so the handler's fenced writes are refused (lease
/// lost) and the job runs again; any later durable commit makes it durable.
pub async fn claim_many(
    db: impl PgExecutor<'_>,
    messages: &[JobMessage],
    worker_id: &str,
    lease: Duration,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    let rows = if let [message] = messages {
        sqlx::query_as!(
            ClaimedRow,
            r#"WITH relaxed AS (
                   SELECT set_config('synchronous_commit', 'off', true)
               )
               UPDATE cluster_jobs j
               SET status = 'running',
                   attempt_count = j.attempt_count + 1,
                   worker_id = $3,
                   leased_until = now() + make_interval(secs => $4),
                   started_at = coalesce(j.started_at, now()),
                   updated_at = now()
               FROM relaxed
               WHERE j.id = $1 AND j.type = $2 AND (j.status = 'pending') IS TRUE
                 AND j.run_after <= now() AND j.attempt_count < j.max_attempts
               RETURNING j.id, j.type AS job_type, j.cluster_id, j.operation_id, j.payload,
                         j.attempt_count, j.max_attempts, j.trace_parent,
                         extract(epoch FROM now() - j.run_after)::float8 AS "due_for_seconds!""#,
            message.job_id,
            message.job_type.as_str(),
            worker_id,
            lease.as_secs_f64(),
        )
        .fetch_all(db)
        .await?
    } else {
        let ids: Vec<Uuid> = messages.iter().map(|m| m.job_id).collect();
        let types: Vec<&str> = messages.iter().map(|m| m.job_type.as_str()).collect();
        sqlx::query_as!(
            ClaimedRow,
            r#"WITH relaxed AS (
                   SELECT set_config('synchronous_commit', 'off', true)
               ), wanted AS (
                   SELECT DISTINCT id, type FROM relaxed, unnest($1::uuid[], $2::text[]) AS w (id, type)
               ), locked AS (
                   SELECT j.id, j.status FROM cluster_jobs j JOIN wanted w ON w.id = j.id AND w.type = j.type
                   ORDER BY j.id
                   FOR UPDATE OF j
               ), claimed AS (
                   UPDATE cluster_jobs j
                   SET status = 'running',
                       attempt_count = j.attempt_count + 1,
                       worker_id = $3,
                       leased_until = now() + make_interval(secs => $4),
                       started_at = coalesce(j.started_at, now()),
                       updated_at = now()
                   FROM locked
                   WHERE j.id = locked.id AND locked.status = 'pending'
                     AND j.run_after <= now() AND j.attempt_count < j.max_attempts
                   RETURNING j.id, j.type, j.cluster_id, j.operation_id, j.payload,
                             j.attempt_count, j.max_attempts, j.trace_parent,
                             extract(epoch FROM now() - j.run_after)::float8 AS due_for_seconds
               )
               SELECT id AS "id!", type AS "job_type!", cluster_id AS "cluster_id!",
                      operation_id AS "operation_id!", payload AS "payload!",
                      attempt_count AS "attempt_count!", max_attempts AS "max_attempts!",
                      trace_parent, due_for_seconds AS "due_for_seconds!"
               FROM claimed"#,
            &ids,
            &types as &[&str],
            worker_id,
            lease.as_secs_f64(),
        )
        .fetch_all(db)
        .await?
    };
    Ok(rows
        .into_iter()
        .map(|r| ClaimedJob {
            id: r.id,
            cluster_id: r.cluster_id,
            operation_id: r.operation_id,
            job_type: JobType::named(&r.job_type),
            payload: r.payload,
            attempt: r.attempt_count,
            max_attempts: r.max_attempts,
            worker_id: worker_id.to_string(),
            due_for: Duration::from_secs_f64(r.due_for_seconds.max(0.0)),
            trace_parent: r.trace_parent,
        })
        .collect())
}

/// A row the claim returns.
struct ClaimedRow {
    id: Uuid,
    job_type: String,
    cluster_id: Uuid,
    operation_id: Uuid,
    payload: serde_json::Value,
    attempt_count: i32,
    max_attempts: i32,
    trace_parent: Option<String>,
    due_for_seconds: f64,
}

/// Pending jobs by type, and how long the oldest of those already due has
/// been waiting: the figures an alarm or an autoscaler watches.
pub async fn backlog(
    db: impl PgExecutor<'_>,
) -> Result<Vec<crate::telemetry::metrics::Backlog>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT type AS "job_type!", count(*) AS "pending!",
                  COALESCE(extract(epoch FROM now() - min(run_after) FILTER (WHERE run_after <= now())), 0)::float8
                      AS "oldest_due_seconds!"
           FROM cluster_jobs WHERE status = 'pending' GROUP BY type"#
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| crate::telemetry::metrics::Backlog {
            job_type: JobType::named(&r.job_type),
            pending: r.pending,
            oldest_due_seconds: r.oldest_due_seconds,
        })
        .collect())
}

/// Extends the lease. `false` means the lease is no longer ours.
pub async fn heartbeat(
    pool: &PgPool,
    job: &ClaimedJob,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query!(
        "UPDATE cluster_jobs SET leased_until = now() + make_interval(secs => $3), updated_at = now()
         WHERE id = $1 AND attempt_count = $2 AND status = 'running'",
        job.id,
        job.attempt,
        lease.as_secs_f64(),
    )
    .execute(pool)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Records the current step on the operation, if the lease is still ours. The
/// first step of an attempt is also when the operation becomes `running`.
pub async fn record_stage(
    pool: &PgPool,
    job: &ClaimedJob,
    stage: &str,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query!(
        "UPDATE cluster_operations o
         SET stage = $3, stages = operation_stages_append(o.stages, $3),
             status = 'running', started_at = coalesce(o.started_at, j.started_at),
             updated_at = now()
         FROM cluster_jobs j
         WHERE j.id = $1 AND j.attempt_count = $2 AND j.status = 'running' AND o.id = j.operation_id",
        job.id,
        job.attempt,
        stage,
    )
    .execute(pool)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Marks the job and its operation succeeded, inside the handler's transaction
/// (together with its business state). `false` means the lease was lost: roll back.
pub async fn complete(tx: &mut PgConnection, job: &ClaimedJob) -> Result<bool, sqlx::Error> {
    let row = sqlx::query_scalar!(
        r#"WITH done AS (
               UPDATE cluster_jobs
               SET status = 'succeeded', finished_at = now(), leased_until = NULL, last_error = NULL,
                   error_code = NULL, updated_at = now()
               WHERE id = $1 AND attempt_count = $2 AND status = 'running'
               RETURNING operation_id, started_at
           )
           UPDATE cluster_operations o
           SET status = 'succeeded', stage = $3, stages = operation_stages_append(o.stages, $3),
               finished_at = now(), error_message = NULL,
               error_code = NULL, started_at = coalesce(o.started_at, done.started_at), updated_at = now()
           FROM done WHERE o.id = done.operation_id
           RETURNING o.id"#,
        job.id,
        job.attempt,
        stage::DONE.as_str(),
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.is_some())
}

/// [`complete`] for many jobs with nothing else to write, in one statement
/// (its own transaction). Returns the ids completed; a job missing from them
/// had lost its lease.
pub async fn complete_many(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
    attempts: &[i32],
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"WITH done AS (
               UPDATE cluster_jobs j
               SET status = 'succeeded', finished_at = now(), leased_until = NULL, last_error = NULL,
                   error_code = NULL, updated_at = now()
               FROM unnest($1::uuid[], $2::int[]) AS d (id, attempt)
               WHERE j.id = d.id AND j.attempt_count = d.attempt AND j.status = 'running'
               RETURNING j.id, j.operation_id, j.started_at
           ), operation AS (
               UPDATE cluster_operations o
               SET status = 'succeeded', stage = $3, stages = operation_stages_append(o.stages, $3),
                   finished_at = now(), error_message = NULL,
                   error_code = NULL, started_at = coalesce(o.started_at, done.started_at), updated_at = now()
               FROM done WHERE o.id = done.operation_id
           )
           SELECT id AS "id!" FROM done"#,
        ids,
        attempts,
        stage::DONE.as_str(),
    )
    .fetch_all(db)
    .await
}

/// Sends the job back to pending, due after `delay`, keeping the error in its history.
pub async fn schedule_retry(
    pool: &PgPool,
    job: &ClaimedJob,
    failure: &Failure,
    delay: Duration,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"WITH retried AS (
               UPDATE cluster_jobs
               SET status = 'pending', leased_until = NULL, published_at = NULL,
                   run_after = now() + make_interval(secs => $4),
                   last_error = $3, error_code = $5, updated_at = now(),
                   error_history = error_history || jsonb_build_array(jsonb_build_object(
                       'attempt', attempt_count, 'worker_id', worker_id, 'error', $3::text,
                       'code', $5::text, 'at', now(), 'retry_at', now() + make_interval(secs => $4)))
               WHERE id = $1 AND attempt_count = $2 AND status = 'running'
               RETURNING operation_id, run_after
           ), operation AS (
               UPDATE cluster_operations o
               SET status = 'pending', stage = $6,
                   stages = operation_stages_append(o.stages, $6), error_message = $3,
                   error_code = $5, updated_at = now()
               FROM retried WHERE o.id = retried.operation_id
           )
           SELECT run_after AS "run_after!" FROM retried"#,
        job.id,
        job.attempt,
        failure.message,
        delay.as_secs_f64(),
        failure.code.as_str(),
        stage::WAITING_TO_RETRY.as_str(),
    )
    .fetch_optional(pool)
    .await
}

/// Ends the job as failed with a failure written for the user, and moves the
/// operation and, for a kind of job that moves its cluster through its life,
/// the cluster to `cluster_failed` (its [`crate::domain::Lifecycle`]; a
/// failed node removal or ingress convergence leaves the cluster as it is).
/// `false` means the lease was lost.
pub async fn fail(
    db: impl PgExecutor<'_>,
    job: &ClaimedJob,
    failure: &Failure,
    cluster_failed: Option<ClusterStatus>,
) -> Result<bool, sqlx::Error> {
    let row = sqlx::query_scalar!(
        r#"WITH failed AS (
               UPDATE cluster_jobs
               SET status = 'failed', finished_at = now(), leased_until = NULL, last_error = $3,
                   error_code = $4, updated_at = now(),
                   error_history = error_history || jsonb_build_array(jsonb_build_object(
                       'attempt', attempt_count, 'worker_id', worker_id, 'error', $3::text,
                       'code', $4::text, 'at', now()))
               WHERE id = $1 AND attempt_count = $2 AND status = 'running'
               RETURNING id, operation_id, cluster_id, type, started_at
           ), operation AS (
               UPDATE cluster_operations o
               SET status = 'failed', finished_at = now(), error_message = $3, error_code = $4,
                   updated_at = now(), started_at = coalesce(o.started_at, failed.started_at)
               FROM failed WHERE o.id = failed.operation_id
           ), cluster AS (
               UPDATE clusters c
               SET status = $5, last_error_message = $3
               FROM failed
               WHERE c.id = failed.cluster_id AND c.deleted_at IS NULL AND $5::text IS NOT NULL
           )
           SELECT id FROM failed"#,
        job.id,
        job.attempt,
        failure.message,
        failure.code.as_str(),
        cluster_failed.map(ClusterStatus::as_str),
    )
    .fetch_optional(db)
    .await?;
    Ok(row.is_some())
}

/// Outcome of one rescue pass.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Rescued {
    /// Returned to pending for another worker.
    pub requeued: u64,
    /// Lease expired on the last allowed attempt: failed.
    pub failed: u64,
}

/// Returns running jobs whose lease expired to pending (or to failed when that was
/// their last attempt, moving the cluster as its kind says), recording the
/// lost attempt in the history.
pub async fn rescue_expired(
    db: impl PgExecutor<'_>,
    kinds: &JobKinds,
) -> Result<Rescued, sqlx::Error> {
    let kinds = kinds.columns();
    let rows = sqlx::query!(
        r#"WITH expired AS (
               SELECT id FROM cluster_jobs
               WHERE status = 'running' AND leased_until < now()
               FOR UPDATE SKIP LOCKED
           ), rescued AS (
               UPDATE cluster_jobs j
               SET status = CASE WHEN j.attempt_count >= j.max_attempts THEN 'failed' ELSE 'pending' END,
                   finished_at = CASE WHEN j.attempt_count >= j.max_attempts THEN now() END,
                   leased_until = NULL, published_at = NULL, run_after = now(), updated_at = now(),
                   last_error = 'the worker ' || j.worker_id || ' stopped before finishing (lease expired)',
                   error_code = 'worker_lost',
                   error_history = j.error_history || jsonb_build_array(jsonb_build_object(
                       'attempt', j.attempt_count, 'worker_id', j.worker_id,
                       'error', 'lease expired', 'code', 'worker_lost', 'at', now()))
               FROM expired WHERE j.id = expired.id
               RETURNING j.id, j.status, j.operation_id, j.cluster_id, j.type, j.last_error,
                         j.error_code, j.started_at
           ), operation AS (
               UPDATE cluster_operations o
               SET status = rescued.status,
                   started_at = coalesce(o.started_at, rescued.started_at),
                   stage = CASE WHEN rescued.status = 'pending' THEN $1 ELSE o.stage END,
                   finished_at = CASE WHEN rescued.status = 'failed' THEN now() END,
                   error_message = rescued.last_error, error_code = rescued.error_code,
                   updated_at = now()
               FROM rescued WHERE o.id = rescued.operation_id
           ), cluster AS (
               UPDATE clusters c
               SET status = kind.failed, last_error_message = rescued.last_error
               FROM rescued
               JOIN unnest($2::text[], $3::text[]) AS kind (job_type, failed)
                 ON kind.job_type = rescued.type AND kind.failed IS NOT NULL
               WHERE rescued.status = 'failed' AND c.id = rescued.cluster_id AND c.deleted_at IS NULL
           )
           SELECT status AS "status!" FROM rescued"#,
        stage::WAITING_TO_RETRY.as_str(),
        &kinds.job_types as &[&str],
        &kinds.failed as &[Option<&str>],
    )
    .fetch_all(db)
    .await?;
    let failed = rows.iter().filter(|r| r.status == "failed").count() as u64;
    Ok(Rescued {
        requeued: rows.len() as u64 - failed,
        failed,
    })
}

/// Takes up to `limit` due pending jobs that were never published (or whose
/// wake-up is older than `republish_after`) and stamps them published. The caller
/// publishes them and calls [`unmark_published`] for any the transport refused.
pub async fn take_due_unpublished(
    db: impl PgExecutor<'_>,
    republish_after: Duration,
    limit: i64,
) -> Result<Vec<JobMessage>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"UPDATE cluster_jobs SET published_at = now(), updated_at = now()
           WHERE id IN (
               SELECT id FROM cluster_jobs
               WHERE status = 'pending' AND run_after <= now()
                 AND (published_at IS NULL OR published_at < now() - make_interval(secs => $1))
               ORDER BY run_after
               LIMIT $2
               FOR UPDATE SKIP LOCKED
           )
           RETURNING id, type"#,
        republish_after.as_secs_f64(),
        limit,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| JobMessage {
            job_id: r.id,
            job_type: JobType::named(&r.r#type),
        })
        .collect())
}

/// Clears `published_at` of jobs whose wake-up could not be delivered.
pub async fn unmark_published(
    db: impl PgExecutor<'_>,
    job_ids: &[Uuid],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE cluster_jobs SET published_at = NULL, updated_at = now()
         WHERE id = ANY($1) AND status = 'pending'",
        job_ids
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The full record of one job, for history views and tests.
/// A failure's code, whether running it again may help, and what the user
/// can do: read from the stored code, so a changed hint applies to old
/// failures too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FailureDetail {
    pub code: FailureCode,
    /// Whether the same operation may succeed when run again with nothing
    /// changed; a user may retry their own failed operation only then.
    pub retryable: bool,
    #[schema(value_type = String)]
    pub hint: &'static str,
}

impl From<FailureCode> for FailureDetail {
    fn from(code: FailureCode) -> Self {
        Self {
            code,
            retryable: code.retryable(),
            hint: code.hint(),
        }
    }
}

impl sqlx::Type<sqlx::Postgres> for FailureDetail {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <FailureCode as sqlx::Type<sqlx::Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <FailureCode as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Postgres> for FailureDetail {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        <FailureCode as sqlx::Decode<'r, sqlx::Postgres>>::decode(value).map(Self::from)
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobRecord {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub operation_id: Uuid,
    #[serde(rename = "type")]
    pub job_type: String,
    pub status: String,
    pub attempt_count: i32,
    pub max_attempts: i32,
    pub run_after: DateTime<Utc>,
    pub published_at: Option<DateTime<Utc>>,
    pub leased_until: Option<DateTime<Utc>>,
    pub worker_id: Option<String>,
    pub last_error: Option<String>,
    /// The code of `last_error`: why the job failed, or why its last attempt
    /// did while it waits to retry.
    pub error: Option<FailureDetail>,
    /// One entry per failed attempt: attempt, worker_id, error, code, at, retry_at.
    #[schema(value_type = Vec<Object>)]
    pub error_history: serde_json::Value,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// `query_as!` for [`JobRecord`]: its column list once, then `$tail`
/// (from `FROM cluster_jobs` on).
macro_rules! job_query {
    ($tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            JobRecord,
            r#"SELECT id, cluster_id, operation_id, type AS job_type, status, attempt_count, max_attempts,
                  run_after, published_at, leased_until, worker_id, last_error,
                  error_code AS "error: FailureDetail", error_history,
                  started_at, finished_at, created_at
           "# + $tail,
            $($arg),*
        )
    };
}

pub async fn get(db: impl PgExecutor<'_>, job_id: Uuid) -> Result<Option<JobRecord>, sqlx::Error> {
    job_query!(r#"FROM cluster_jobs WHERE id = $1"#, job_id)
        .fetch_optional(db)
        .await
}

pub async fn list_for_cluster(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    limit: i64,
) -> Result<Vec<JobRecord>, sqlx::Error> {
    job_query!(
        r#"FROM cluster_jobs WHERE cluster_id = $1
           ORDER BY created_at DESC, id DESC LIMIT $2"#,
        cluster_id,
        limit
    )
    .fetch_all(db)
    .await
}

/// The job that runs operation `operation_id` of cluster `cluster_id`, and
/// whether a later operation of the cluster exists (then running this one
/// again would undo what came after it).
pub async fn job_of_operation(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    operation_id: Uuid,
) -> Result<Option<(JobRecord, bool)>, sqlx::Error> {
    let job = job_query!(
        r#"FROM cluster_jobs WHERE operation_id = $1 AND cluster_id = $2"#,
        operation_id,
        cluster_id,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(job) = job else { return Ok(None) };
    let superseded = sqlx::query_scalar!(
        r#"SELECT EXISTS (
               SELECT 1 FROM cluster_operations later, cluster_operations this
               WHERE this.id = $2 AND later.cluster_id = $1 AND later.id <> this.id
                 AND (later.created_at, later.id) > (this.created_at, this.id)
           ) AS "superseded!""#,
        cluster_id,
        operation_id,
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(Some((job, superseded)))
}

/// The business view of one lifecycle operation.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Operation {
    pub id: Uuid,
    pub cluster_id: Uuid,
    #[serde(rename = "type")]
    pub operation_type: String,
    pub status: String,
    pub stage: String,
    pub requested_by_user_id: Option<Uuid>,
    pub error_message: Option<String>,
    /// The code of `error_message`, with whether the operation may be retried.
    pub error: Option<FailureDetail>,
    /// Every stage the operation's job recorded, oldest first, with when
    /// (the newest 100): `stage` is the last of them.
    #[schema(value_type = Vec<StageRecord>)]
    pub stages: sqlx::types::Json<Vec<StageRecord>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// One stage an operation passed through.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StageRecord {
    pub stage: String,
    /// When the job recorded it.
    pub at: DateTime<Utc>,
}

pub async fn get_operation(
    db: impl PgExecutor<'_>,
    operation_id: Uuid,
) -> Result<Option<Operation>, sqlx::Error> {
    sqlx::query_as!(
        Operation,
        r#"SELECT id, cluster_id, type AS operation_type, status, stage, requested_by_user_id,
                  error_message, error_code AS "error: FailureDetail",
                  stages AS "stages: sqlx::types::Json<Vec<StageRecord>>", started_at, finished_at,
                  created_at
           FROM cluster_operations WHERE id = $1"#,
        operation_id
    )
    .fetch_optional(db)
    .await
}

pub async fn list_operations(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    limit: i64,
) -> Result<Vec<Operation>, sqlx::Error> {
    sqlx::query_as!(
        Operation,
        r#"SELECT id, cluster_id, type AS operation_type, status, stage, requested_by_user_id,
                  error_message, error_code AS "error: FailureDetail",
                  stages AS "stages: sqlx::types::Json<Vec<StageRecord>>", started_at, finished_at,
                  created_at
           FROM cluster_operations WHERE cluster_id = $1
           ORDER BY created_at DESC, id DESC LIMIT $2"#,
        cluster_id,
        limit
    )
    .fetch_all(db)
    .await
}

/// Deletes up to `batch` jobs that finished longer than `age` ago, oldest
/// first (`shared::app::retention`); their operations stay. Returns how many.
pub async fn prune_finished(
    db: impl PgExecutor<'_>,
    age: std::time::Duration,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM cluster_jobs WHERE id IN (
             SELECT id FROM cluster_jobs
             WHERE status IN ('succeeded', 'failed', 'cancelled')
               AND finished_at < now() - make_interval(secs => $1)
             ORDER BY finished_at LIMIT $2)",
        age.as_secs_f64(),
        batch
    )
    .execute(db)
    .await?
    .rows_affected())
}

/// The admin view of the queue: newest first, optionally by status and cluster.
/// One statement per filter shape, each with an index that gives its order:
/// a statement shared by filtered and unfiltered calls (`$1 IS NULL OR …`)
/// is planned once for all of them when PostgreSQL turns to a generic plan,
/// a sequential scan of every job.
pub async fn list_all(
    db: impl PgExecutor<'_>,
    status: Option<&str>,
    cluster_id: Option<Uuid>,
    limit: i64,
) -> Result<Vec<JobRecord>, sqlx::Error> {
    match (status, cluster_id) {
        (None, None) => {
            job_query!(
                r#"FROM cluster_jobs ORDER BY created_at DESC, id DESC LIMIT $1"#,
                limit
            )
            .fetch_all(db)
            .await
        }
        (Some(status), None) => {
            job_query!(
                r#"FROM cluster_jobs WHERE status = $1
                   ORDER BY created_at DESC, id DESC LIMIT $2"#,
                status,
                limit
            )
            .fetch_all(db)
            .await
        }
        (None, Some(cluster_id)) => list_for_cluster(db, cluster_id, limit).await,
        (Some(status), Some(cluster_id)) => {
            job_query!(
                r#"FROM cluster_jobs WHERE cluster_id = $1 AND status = $2
                   ORDER BY created_at DESC, id DESC LIMIT $3"#,
                cluster_id,
                status,
                limit
            )
            .fetch_all(db)
            .await
        }
    }
}

/// Gives a failed job `extra_attempts` more attempts, due now, and moves its
/// operation back in progress, and its cluster too when its kind moves the
/// cluster through its life (`kinds`). `None` when the job is not failed.
/// Fails with `idx_cluster_jobs_active_cluster` when the cluster has another active job.
pub async fn retry_failed(
    tx: &mut PgConnection,
    job_id: Uuid,
    extra_attempts: i32,
    kinds: &JobKinds,
) -> Result<Option<JobMessage>, sqlx::Error> {
    let kinds = kinds.columns();
    let row = sqlx::query!(
        r#"WITH retried AS (
               UPDATE cluster_jobs
               SET status = 'pending', max_attempts = attempt_count + $2, run_after = now(),
                   published_at = NULL, finished_at = NULL, leased_until = NULL, updated_at = now()
               WHERE id = $1 AND status = 'failed'
               RETURNING id, type, operation_id, cluster_id
           ), operation AS (
               UPDATE cluster_operations o
               SET status = 'pending', stage = $3,
                   stages = operation_stages_append(o.stages, $3), finished_at = NULL,
                   updated_at = now()
               FROM retried WHERE o.id = retried.operation_id
           ), cluster AS (
               UPDATE clusters c
               SET status = kind.retried
               FROM retried
               JOIN unnest($4::text[], $5::text[]) AS kind (job_type, retried)
                 ON kind.job_type = retried.type AND kind.retried IS NOT NULL
               WHERE c.id = retried.cluster_id AND c.deleted_at IS NULL
           )
           SELECT id, type FROM retried"#,
        job_id,
        extra_attempts,
        stage::QUEUED_FOR_RETRY.as_str(),
        &kinds.job_types as &[&str],
        &kinds.retried as &[Option<&str>],
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|r| JobMessage {
        job_id: r.id,
        job_type: JobType::named(&r.r#type),
    }))
}

/// Cancels a pending job; its operation is cancelled and, when its kind
/// moves the cluster through its life (`kinds`), the cluster goes back to
/// what it was (`failed` for a create that never ran, or a cluster without
/// a kubeconfig). `false` when the job is not pending.
pub async fn cancel_pending(
    tx: &mut PgConnection,
    job_id: Uuid,
    reason: &str,
    kinds: &JobKinds,
) -> Result<bool, sqlx::Error> {
    let kinds = kinds.columns();
    let row = sqlx::query_scalar!(
        r#"WITH cancelled AS (
               UPDATE cluster_jobs
               SET status = 'cancelled', finished_at = now(), last_error = $2,
                   error_code = 'cancelled', updated_at = now()
               WHERE id = $1 AND status = 'pending'
               RETURNING id, type, operation_id, cluster_id
           ), operation AS (
               UPDATE cluster_operations o
               SET status = 'cancelled', finished_at = now(), error_message = $2,
                   error_code = 'cancelled', updated_at = now()
               FROM cancelled WHERE o.id = cancelled.operation_id
           ), cluster AS (
               UPDATE clusters c
               SET status = CASE WHEN c.kubeconfig_available THEN kind.cancelled ELSE 'failed' END,
                   last_error_message = $2
               FROM cancelled
               JOIN unnest($3::text[], $4::text[]) AS kind (job_type, cancelled)
                 ON kind.job_type = cancelled.type AND kind.cancelled IS NOT NULL
               WHERE c.id = cancelled.cluster_id AND c.deleted_at IS NULL
           )
           SELECT id FROM cancelled"#,
        job_id,
        reason,
        &kinds.job_types as &[&str],
        &kinds.cancelled as &[Option<&str>],
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.is_some())
}

/// What a cluster has going on: the type of its active job, and the type of an
/// operation queued behind it (accepted, but without a job yet; a queued
/// delete shows before anything else).
#[derive(Debug, Clone, Default)]
pub struct Activity {
    pub active_job: Option<String>,
    pub queued_operation: Option<String>,
}

impl Activity {
    /// Whether its active job, or the operation queued behind it, is of `kind`.
    pub fn has(&self, kind: &JobKind) -> bool {
        self.active_job.as_deref() == Some(kind.job_type.as_str())
            || self.queued_operation.as_deref() == Some(kind.operation)
    }
}

pub async fn activity(tx: &mut PgConnection, cluster_id: Uuid) -> Result<Activity, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT
               (SELECT type FROM cluster_jobs
                WHERE cluster_id = $1 AND status IN ('pending', 'running') LIMIT 1) AS active_job,
               (SELECT o.type FROM cluster_operations o
                WHERE o.cluster_id = $1 AND o.status = 'pending'
                  AND NOT EXISTS (SELECT 1 FROM cluster_jobs j WHERE j.operation_id = o.id)
                ORDER BY o.type = 'delete' DESC, o.created_at LIMIT 1) AS queued_operation"#,
        cluster_id
    )
    .fetch_one(tx)
    .await?;
    Ok(Activity {
        active_job: row.active_job,
        queued_operation: row.queued_operation,
    })
}

/// The oldest operation of `kind` queued behind the cluster's active job
/// (accepted, without a job yet), if there is one: a request it would serve
/// as well joins it instead of queueing another.
pub async fn queued_operation_of(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    kind: &JobKind,
) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT o.id FROM cluster_operations o
           WHERE o.cluster_id = $1 AND o.type = $2 AND o.status = 'pending'
             AND NOT EXISTS (SELECT 1 FROM cluster_jobs j WHERE j.operation_id = o.id)
           ORDER BY o.created_at LIMIT 1"#,
        cluster_id,
        kind.operation,
    )
    .fetch_optional(tx)
    .await
}

/// Accepts an operation that must wait for the cluster's active job: the
/// operation is recorded now, its job is created by [`promote_queued`] once the
/// cluster has no active job.
pub async fn queue_operation(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    kind: &JobKind,
    requested_by: Option<Uuid>,
    payload: &serde_json::Value,
) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO cluster_operations (cluster_id, type, requested_by_user_id, stage, payload)
           VALUES ($1, $2, $3, $5, $4) RETURNING id"#,
        cluster_id,
        kind.operation,
        requested_by,
        payload,
        stage::QUEUED_BEHIND.as_str(),
    )
    .fetch_one(tx)
    .await
}

/// Creates the job of every queued operation whose cluster has no active job
/// (oldest first, one per cluster; the active-job index settles races), of
/// the kind (`kinds`) whose operation it is. A kind that moves its cluster
/// when promoted (a queued delete: `deleting`) does. Returns how many jobs
/// were created; they are unpublished, so the same sweep publishes them.
pub async fn promote_queued(
    db: impl PgExecutor<'_>,
    max_attempts: i32,
    kinds: &JobKinds,
) -> Result<u64, sqlx::Error> {
    let kinds = kinds.columns();
    let rows = sqlx::query_scalar!(
        r#"WITH promoted AS (
               INSERT INTO cluster_jobs (cluster_id, operation_id, type, payload, max_attempts)
               SELECT DISTINCT ON (o.cluster_id) o.cluster_id, o.id, t.job_type, o.payload, $1
               FROM cluster_operations o
               JOIN unnest($2::text[], $3::text[]) AS t(operation, job_type) ON t.operation = o.type
               WHERE o.status = 'pending'
                 AND NOT EXISTS (SELECT 1 FROM cluster_jobs j WHERE j.operation_id = o.id)
                 AND NOT EXISTS (SELECT 1 FROM cluster_jobs j
                                 WHERE j.cluster_id = o.cluster_id AND j.status IN ('pending', 'running'))
               ORDER BY o.cluster_id, o.created_at
               ON CONFLICT DO NOTHING
               RETURNING cluster_id, operation_id, type
           ), operation AS (
               UPDATE cluster_operations o
               SET stage = $4, stages = operation_stages_append(o.stages, $4), updated_at = now()
               FROM promoted WHERE o.id = promoted.operation_id
           ), cluster AS (
               UPDATE clusters c SET status = kind.promoted
               FROM promoted
               JOIN unnest($3::text[], $5::text[]) AS kind (job_type, promoted)
                 ON kind.job_type = promoted.type AND kind.promoted IS NOT NULL
               WHERE c.id = promoted.cluster_id AND c.deleted_at IS NULL
           )
           SELECT operation_id AS "operation_id!" FROM promoted"#,
        max_attempts,
        &kinds.operations as &[&str],
        &kinds.job_types as &[&str],
        stage::QUEUED.as_str(),
        &kinds.promoted as &[Option<&str>],
    )
    .fetch_all(db)
    .await?;
    Ok(rows.len() as u64)
}
