//! An operation a caller asks for on a cluster, and the 202 that accepts it:
//! the operation and its job written in the request's transaction (or the
//! operation queued behind the cluster's active job), the answer read in
//! that transaction before its commit — once the commit succeeds the answer
//! is certain, for nothing after it reads the database — and the job's
//! wake-up published after the commit (a lost publish is the sweep's).

use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use super::AppState;
use crate::{
    domain::JobPayload,
    error::ApiError,
    jobs::{self, JobMessage, NewJob, Operation},
};

/// An operation written in a transaction not yet committed.
#[must_use = "the operation is accepted once `commit` commits it"]
pub struct Written {
    pub operation_id: Uuid,
    /// The job's wake-up, when a job was enqueued (none for an operation
    /// queued behind another).
    wake_up: Option<JobMessage>,
}

/// Writes the operation and its pending job for `payload` in `tx`. Fails
/// with the unique violation `idx_cluster_jobs_active_cluster` when the
/// cluster already has an active job (the caller says what that means,
/// e.g. with `error::active_job_conflict`).
pub async fn enqueue<P: JobPayload>(
    state: &AppState,
    tx: &mut PgConnection,
    cluster_id: Uuid,
    requested_by: Uuid,
    payload: &P,
) -> Result<Written, sqlx::Error> {
    let (kind, payload) = jobs::encode(payload).map_err(|e| sqlx::Error::Encode(e.into()))?;
    let new = NewJob {
        cluster_id,
        kind,
        requested_by: Some(requested_by),
        payload: &payload,
        max_attempts: state.settings.jobs.max_attempts,
    };
    let enqueued = jobs::enqueue(tx, new).await?;
    Ok(Written {
        operation_id: enqueued.operation_id,
        wake_up: Some(enqueued.job),
    })
}

/// Writes the operation for `payload` in `tx`, queued behind the cluster's
/// active job (whose end enqueues it).
pub async fn queue_behind<P: JobPayload>(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    requested_by: Uuid,
    payload: &P,
) -> Result<Written, sqlx::Error> {
    let (kind, payload) = jobs::encode(payload).map_err(|e| sqlx::Error::Encode(e.into()))?;
    let operation_id =
        jobs::queue_operation(tx, cluster_id, &kind, Some(requested_by), &payload).await?;
    Ok(Written {
        operation_id,
        wake_up: None,
    })
}

impl Written {
    /// An operation whose failed job was made pending again in the
    /// transaction (a retry), with that job's wake-up.
    pub fn retried(operation_id: Uuid, wake_up: JobMessage) -> Self {
        Self {
            operation_id,
            wake_up: Some(wake_up),
        }
    }

    /// The operation as written, for the answer: read before the commit.
    pub async fn operation(&self, tx: &mut PgConnection) -> Result<Operation, ApiError> {
        Ok(jobs::get_operation(tx, self.operation_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the operation just written is missing"))?)
    }

    /// Commits `tx` and publishes the job's wake-up.
    pub async fn commit(
        self,
        state: &AppState,
        tx: Transaction<'_, Postgres>,
    ) -> Result<(), ApiError> {
        tx.commit().await?;
        tracing::info!(operation_id = %self.operation_id, "operation accepted");
        if let Some(job) = self.wake_up {
            jobs::publish_after_commit(&state.pool, state.publisher.as_ref(), job).await;
        }
        Ok(())
    }
}
