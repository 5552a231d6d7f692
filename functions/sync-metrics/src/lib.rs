//! `sync-metrics`: the schedule that takes a snapshot of every ready
//! cluster's control plane from the host's metrics API and the pod's `/proc`
//! (16 clusters at a time, [`collect`]), and prunes snapshots past
//! `METRICS_RETENTION_MS`.

pub mod collect;

use queues::runtime::{Schedule, ScheduleContext};
use shared::config::Millis;

use crate::collect::{MetricsReport, collect_all};

/// Control planes read at once.
pub const CONCURRENCY: usize = 16;

pub const SCHEDULE: Schedule = Schedule {
    name: "sync-metrics",
    interval: Millis::new("SYNC_METRICS_INTERVAL_MS", 60_000),
    needs_host: true,
    needs_publisher: false,
    run: |ctx| Box::pin(async move { Ok(serde_json::to_value(run(&ctx).await?)?) }),
};

pub async fn run(ctx: &ScheduleContext) -> anyhow::Result<MetricsReport> {
    Ok(collect_all(
        &ctx.pool,
        ctx.host()?,
        CONCURRENCY,
        ctx.settings.part::<shared::metrics::Config>()?.retention,
    )
    .await?)
}
