//! `sync-nodes`: the schedule that lists every ready cluster's Node objects
//! (one list per cluster per cycle, 16 clusters at a time) and keeps the
//! `nodes` snapshot and `node_events` history. A cycle with no change writes nothing.

use queues::runtime::Platform;
use shared::{
    host::HostCluster,
    nodesync::{DEFAULT_CONCURRENCY, NodeSyncReport, sync_all},
};

pub async fn run(platform: &Platform, host: &HostCluster) -> anyhow::Result<NodeSyncReport> {
    Ok(sync_all(
        &platform.pool,
        host,
        DEFAULT_CONCURRENCY,
        platform.settings.node_offline_after,
    )
    .await?)
}
