use std::{collections::HashMap, sync::Arc};

use async_trait::async_trait;
use sqlx::{PgConnection, PgPool};
use tracing::Instrument;

use super::{JobError, retry_delay};
use crate::{
    config::JobSettings,
    db::jobs::{self, ClaimedJob, JobMessage},
    domain::JobType,
};

/// Proof that a handler finished its job inside a fenced transaction. Only
/// [`JobContext::complete`] makes one.
#[must_use = "commit the transaction that completed the job, then return this"]
#[derive(Debug)]
pub struct Completed(());

/// One job type's work. `handle` re-reads state, performs idempotent steps,
/// records its stage, and ends by writing its business state and calling
/// [`JobContext::complete`] in one transaction.
#[async_trait]
pub trait JobHandler: Send + Sync + 'static {
    fn job_type(&self) -> JobType;
    async fn handle(&self, ctx: &JobContext) -> Result<Completed, JobError>;
}

/// What a handler sees of the job and the platform.
pub struct JobContext {
    pub pool: PgPool,
    pub job: ClaimedJob,
}

impl JobContext {
    /// Records the current step on the operation, so the console can show it.
    pub async fn stage(&self, stage: &str) -> Result<(), JobError> {
        tracing::info!(stage, "job stage");
        if jobs::record_stage(&self.pool, &self.job, stage).await? {
            Ok(())
        } else {
            Err(JobError::LeaseLost)
        }
    }

    /// Marks the job succeeded inside `tx`, fenced by the claimed attempt.
    pub async fn complete(&self, tx: &mut PgConnection) -> Result<Completed, JobError> {
        if jobs::complete(tx, &self.job).await? {
            Ok(Completed(()))
        } else {
            Err(JobError::LeaseLost)
        }
    }

    /// Marks the job succeeded with nothing else to write: its work was done
    /// already (say, by an attempt that lost its lease after committing).
    pub async fn complete_alone(&self) -> Result<Completed, JobError> {
        let mut tx = self.pool.begin().await?;
        let completed = self.complete(&mut tx).await?;
        tx.commit().await?;
        Ok(completed)
    }
}

/// What became of one delivered wake-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// The job was not claimable: already done, running elsewhere, not due, or unknown.
    Skipped,
    Succeeded,
    /// A retryable failure; the job is pending again.
    RetryScheduled,
    /// Ended failed (fatal, or out of attempts).
    Failed,
    /// The lease was lost mid-run; the job belongs to another worker now.
    LeaseLost,
    /// No handler for this job type runs here.
    NoHandler,
}

/// Claims, runs and finishes jobs for the handlers it was given.
#[derive(Clone)]
pub struct Worker {
    pool: PgPool,
    settings: JobSettings,
    worker_id: Arc<str>,
    handlers: Arc<HashMap<JobType, Arc<dyn JobHandler>>>,
}

impl Worker {
    pub fn new(
        pool: PgPool,
        settings: JobSettings,
        worker_id: impl Into<Arc<str>>,
        handlers: Vec<Arc<dyn JobHandler>>,
    ) -> Self {
        let handlers = handlers.into_iter().map(|h| (h.job_type(), h)).collect();
        Self {
            pool,
            settings,
            worker_id: worker_id.into(),
            handlers: Arc::new(handlers),
        }
    }

    pub fn job_types(&self) -> Vec<JobType> {
        let mut types: Vec<_> = self.handlers.keys().copied().collect();
        types.sort_by_key(|t| t.as_str());
        types
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn settings(&self) -> &JobSettings {
        &self.settings
    }

    /// Handles one wake-up to the end. An `Err` is an infrastructure failure
    /// (the database is unreachable): the transport should redeliver later.
    pub async fn process(&self, message: JobMessage) -> Result<Processed, sqlx::Error> {
        let Some(handler) = self.handlers.get(&message.job_type).cloned() else {
            tracing::warn!(job_id = %message.job_id, job_type = %message.job_type, "no handler for job type");
            return Ok(Processed::NoHandler);
        };
        let Some(job) =
            jobs::claim(&self.pool, message, &self.worker_id, self.settings.lease).await?
        else {
            tracing::debug!(job_id = %message.job_id, "wake-up for a job that is not claimable; dropped");
            return Ok(Processed::Skipped);
        };
        let span = tracing::info_span!(
            "job",
            job_id = %job.id,
            job_type = %job.job_type,
            attempt = job.attempt,
            cluster_id = %job.cluster_id,
        );
        self.run_claimed(handler, job).instrument(span).await
    }

    async fn run_claimed(
        &self,
        handler: Arc<dyn JobHandler>,
        job: ClaimedJob,
    ) -> Result<Processed, sqlx::Error> {
        let started = std::time::Instant::now();
        let ctx = JobContext {
            pool: self.pool.clone(),
            job: job.clone(),
        };
        // Stops with the attempt, however it ends (even when its task is aborted).
        let heartbeat = AbortOnDrop(tokio::spawn(heartbeat(
            self.pool.clone(),
            job.clone(),
            self.settings.lease,
        )));
        let result = handler.handle(&ctx).await;
        drop(heartbeat);
        let outcome = match result {
            Ok(Completed(())) => Processed::Succeeded,
            Err(JobError::LeaseLost) => Processed::LeaseLost,
            Err(JobError::Retryable(error)) if job.attempt < job.max_attempts => {
                let delay = retry_delay(
                    job.attempt,
                    self.settings.retry_base,
                    self.settings.retry_max,
                );
                match jobs::schedule_retry(&self.pool, &job, &error, delay).await? {
                    Some(at) => {
                        tracing::warn!(error, retry_at = %at, "job attempt failed; retry scheduled");
                        Processed::RetryScheduled
                    }
                    None => Processed::LeaseLost,
                }
            }
            Err(JobError::Retryable(error)) => {
                let reason = format!("gave up after {} attempts: {error}", job.attempt);
                self.fail(&job, &reason).await?
            }
            Err(JobError::Fatal(reason)) => self.fail(&job, &reason).await?,
        };
        tracing::info!(
            ?outcome,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "job attempt finished"
        );
        Ok(outcome)
    }

    async fn fail(&self, job: &ClaimedJob, reason: &str) -> Result<Processed, sqlx::Error> {
        if jobs::fail(&self.pool, job, reason).await? {
            tracing::warn!(reason, "job failed");
            Ok(Processed::Failed)
        } else {
            Ok(Processed::LeaseLost)
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Extends the lease every third of its length while the handler runs.
async fn heartbeat(pool: PgPool, job: ClaimedJob, lease: std::time::Duration) {
    let mut interval = tokio::time::interval(lease / 3);
    interval.tick().await;
    loop {
        interval.tick().await;
        match jobs::heartbeat(&pool, &job, lease).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!("lease lost; the job's result will not be recorded");
                return;
            }
            Err(err) => tracing::warn!(error = %err, "heartbeat failed"),
        }
    }
}
