use std::sync::Arc;

use async_trait::async_trait;
use sqlx::PgPool;

use crate::jobs::{self, JobMessage};

#[derive(Debug, thiserror::Error)]
#[error("could not publish job wake-ups: {0}")]
pub struct PublishError(pub String);

/// Carries job wake-ups to workers: RabbitMQ in deployments, a channel in
/// single-node mode. Only ids travel; `cluster_jobs` stays the truth.
#[async_trait]
pub trait JobPublisher: Send + Sync + 'static {
    /// Publishes every message, returning once the transport has accepted all of
    /// them (publisher confirms), or an error when any was not accepted.
    async fn publish(&self, messages: &[JobMessage]) -> Result<(), PublishError>;

    /// Opens what publishing needs ahead of the first publish, so that the
    /// first request that enqueues does not wait for it. Nothing to open by
    /// default; a failure is left for the next publish to retry.
    async fn connect(&self) -> Result<(), PublishError> {
        Ok(())
    }
}

/// Starts [`JobPublisher::connect`] in the background, for a process that
/// serves requests: it answers at once and its first enqueue finds the
/// transport open.
pub fn connect_in_background(publisher: &Arc<dyn JobPublisher>) {
    let publisher = publisher.clone();
    tokio::spawn(async move {
        if let Err(err) = publisher.connect().await {
            tracing::warn!(error = %err, "cannot reach the job transport yet; the first publish will try again");
        }
    });
}

/// After the enqueuing transaction committed: publish the wake-up and stamp
/// `published_at`. A failure is logged and left to `sweep`, which publishes
/// every due unpublished job.
pub async fn publish_after_commit(
    pool: &PgPool,
    publisher: &dyn JobPublisher,
    message: JobMessage,
) {
    match publisher.publish(&[message]).await {
        Ok(()) => {
            if let Err(err) = jobs::mark_published(pool, message.job_id).await {
                tracing::warn!(job_id = %message.job_id, error = %err, "could not stamp published_at; sweep will publish again");
            }
        }
        Err(err) => {
            tracing::warn!(job_id = %message.job_id, error = %err, "publish after commit failed; sweep will publish it");
        }
    }
}

/// Enqueues `new` in a transaction of its own when its cluster is idle
/// ([`jobs::enqueue_if_idle`]), then publishes its wake-up: `true` then. A
/// cluster busy with another job (or taken by one since the check) is left
/// as it is: `false`.
pub async fn enqueue_when_idle(
    pool: &PgPool,
    publisher: &dyn JobPublisher,
    new: jobs::NewJob<'_>,
) -> Result<bool, sqlx::Error> {
    Ok(
        enqueue_when_idle_with(pool, publisher, new, async |_| Ok(()))
            .await?
            .is_some(),
    )
}

/// [`enqueue_when_idle`], with `also` written in the same transaction once
/// the job is (what the job is to act on): its answer, or `None` when the
/// cluster was busy and nothing was written.
pub async fn enqueue_when_idle_with<T>(
    pool: &PgPool,
    publisher: &dyn JobPublisher,
    new: jobs::NewJob<'_>,
    also: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<T, sqlx::Error>,
) -> Result<Option<T>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let enqueued = match jobs::enqueue_if_idle(&mut tx, new).await {
        Ok(enqueued) => enqueued,
        Err(err)
            if crate::error::unique_violation(&err) == Some("idx_cluster_jobs_active_cluster") =>
        {
            None
        }
        Err(err) => return Err(err),
    };
    let Some(enqueued) = enqueued else {
        return Ok(None);
    };
    let done = also(&mut tx).await?;
    tx.commit().await?;
    publish_after_commit(pool, publisher, enqueued.job).await;
    Ok(Some(done))
}
