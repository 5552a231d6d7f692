use sqlx::{PgConnection, PgPool};

use super::JobPublisher;
use crate::{config::JobSettings, domain::JobKinds, jobs};

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SweepReport {
    pub requeued: u64,
    /// Jobs created for operations that were queued behind another job.
    pub promoted: u64,
    pub failed: u64,
    pub published: u64,
    pub publish_failed: u64,
}

const PUBLISH_BATCH: i64 = 500;

/// Rescues expired leases, creates the jobs of operations queued behind a
/// finished job, then publishes every due job that has no live wake-up.
/// `kinds` are every kind of work the platform knows (what a lost or
/// promoted job does to its cluster). Safe to run from several places at
/// once (`SKIP LOCKED`, idempotent claims).
pub async fn sweep(
    pool: &PgPool,
    publisher: &dyn JobPublisher,
    settings: &JobSettings,
    kinds: &JobKinds,
) -> Result<SweepReport, sqlx::Error> {
    sweep_on(&mut *pool.acquire().await?, publisher, settings, kinds).await
}

/// [`sweep`] on one connection the caller took. Every statement runs on it:
/// the pool tests a connection with a round trip when it is given back, so
/// statements taken from the pool one after another would each find the
/// previous one's connection still out and, on a cold start, open another.
pub async fn sweep_on(
    conn: &mut PgConnection,
    publisher: &dyn JobPublisher,
    settings: &JobSettings,
    kinds: &JobKinds,
) -> Result<SweepReport, sqlx::Error> {
    let rescued = jobs::rescue_expired(&mut *conn, kinds).await?;
    let mut report = SweepReport {
        requeued: rescued.requeued,
        failed: rescued.failed,
        promoted: jobs::promote_queued(&mut *conn, settings.max_attempts, kinds).await?,
        ..SweepReport::default()
    };
    loop {
        let batch =
            jobs::take_due_unpublished(&mut *conn, settings.republish_after, PUBLISH_BATCH).await?;
        if batch.is_empty() {
            break;
        }
        let full = batch.len() as i64 == PUBLISH_BATCH;
        match publisher.publish(&batch).await {
            Ok(()) => report.published += batch.len() as u64,
            Err(err) => {
                tracing::warn!(error = %err, jobs = batch.len(), "sweep could not publish; will try again next run");
                let ids: Vec<_> = batch.iter().map(|m| m.job_id).collect();
                jobs::unmark_published(&mut *conn, &ids).await?;
                report.publish_failed += batch.len() as u64;
                break;
            }
        }
        if !full {
            break;
        }
    }
    if report != SweepReport::default() {
        tracing::info!(?report, "sweep");
    }
    Ok(report)
}
