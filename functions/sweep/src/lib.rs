//! `sweep`: the backbone's safety net, run on a schedule. It returns jobs whose
//! worker lease expired to pending (or to failed on their last attempt) and
//! publishes every due job that has no live wake-up, so a committed job is
//! always delivered even when the publish after commit was lost. Then it
//! records the expiry of join tokens past their time, prunes expired
//! sessions, old rate-limit windows and Idempotency-Key answers past keeping,
//! and the histories past their retention (`shared::app::retention`).

use queues::runtime::{Schedule, ScheduleContext};
use serde::Serialize;
use shared::config::Millis;
use shared::{
    accounts::{self, auth},
    admission,
    app::retention,
    http::idempotency,
    jobs::{self, SweepReport},
    nodes::tokens,
};

pub const SCHEDULE: Schedule = Schedule {
    name: "sweep",
    interval: Millis::new("SWEEP_INTERVAL_MS", 5_000),
    needs_host: false,
    needs_publisher: true,
    run: |ctx| Box::pin(async move { Ok(serde_json::to_value(run(&ctx).await?)?) }),
};

/// What one sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub jobs: SweepReport,
    /// Join tokens whose expiry was recorded.
    pub tokens_expired: u64,
    /// Expired sessions, old rate-limit windows, device sign-ins a day past
    /// their expiry, Idempotency-Key answers past keeping and deleted
    /// clusters' admission reservations removed.
    pub pruned: u64,
    /// History rows past their retention deleted.
    pub retention: retention::Pruned,
}

/// Every statement on one connection, taken once (see [`jobs::sweep_on`]).
pub async fn run(ctx: &ScheduleContext) -> anyhow::Result<Report> {
    let mut conn = ctx.pool.acquire().await?;
    let kinds = shared::app::capabilities::job_kinds();
    let jobs = jobs::sweep_on(&mut conn, ctx.publisher()?, &ctx.settings.jobs, &kinds).await?;
    let report = Report {
        jobs,
        tokens_expired: tokens::expire_due(&mut *conn).await?,
        pruned: accounts::prune_sessions(&mut *conn).await?
            + auth::prune_rate_limits(&mut *conn).await?
            + accounts::device::prune_expired(&mut *conn).await?
            + idempotency::prune_expired(&mut *conn).await?
            + admission::store::prune(&mut conn).await?,
        retention: retention::prune(
            &mut conn,
            ctx.settings.part::<retention::Config>()?.as_ref(),
        )
        .await?,
    };
    // Where nothing scrapes (under Lambda), the backlog's figures are
    // written every run; a scrape reads them itself.
    let metrics = shared::telemetry::metrics::metrics();
    if metrics.writes_lines() {
        metrics.set_backlog(&kinds, &jobs::backlog(&mut *conn).await?);
    }
    // The backbone's part is logged by `sweep_on`.
    if report.tokens_expired + report.pruned + report.retention.total() > 0 {
        tracing::info!(
            tokens_expired = report.tokens_expired,
            pruned = report.pruned,
            retention = ?report.retention.0,
            "sweep pruned"
        );
    }
    Ok(report)
}
