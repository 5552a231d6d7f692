//! `sync-nodes`: the schedule that lists every ready cluster's Node objects
//! (one list per cluster per cycle, 16 clusters at a time) and keeps the
//! `nodes` snapshot and `node_events` history (a cycle with no change writes
//! no node), and records what the cluster's pods request and how many nodes
//! it has (`cluster_workload_usage`), which the admission webhook weighs
//! against.

pub mod sync;

use queues::runtime::{Schedule, ScheduleContext};
use shared::config::Millis;

use crate::sync::{DEFAULT_CONCURRENCY, NodeSyncReport, sync_all};

pub const SCHEDULE: Schedule = Schedule {
    name: "sync-nodes",
    interval: Millis::new("SYNC_NODES_INTERVAL_MS", 15_000),
    needs_host: true,
    needs_publisher: false,
    run: |ctx| Box::pin(async move { Ok(serde_json::to_value(run(&ctx).await?)?) }),
};

pub async fn run(ctx: &ScheduleContext) -> anyhow::Result<NodeSyncReport> {
    Ok(sync_all(
        &ctx.pool,
        ctx.host()?,
        DEFAULT_CONCURRENCY,
        ctx.settings
            .part::<shared::nodes::config::Config>()?
            .node_offline_after,
    )
    .await?)
}
