//! `sweep`: the backbone's safety net, run on a schedule. It returns jobs whose
//! worker lease expired to pending (or to failed on their last attempt) and
//! publishes every due job that has no live wake-up, so a committed job is
//! always delivered even when the publish after commit was lost.

use queues::runtime::{Schedule, ScheduleContext};
use shared::jobs::{self, SweepReport};

pub const SCHEDULE: Schedule = Schedule {
    name: "sweep",
    interval: |s| s.sweep_interval,
    needs_host: false,
    needs_publisher: true,
    run: |ctx| Box::pin(async move { Ok(serde_json::to_value(run(&ctx).await?)?) }),
};

pub async fn run(ctx: &ScheduleContext) -> anyhow::Result<SweepReport> {
    Ok(jobs::sweep(&ctx.pool, ctx.publisher()?, &ctx.settings.jobs).await?)
}
