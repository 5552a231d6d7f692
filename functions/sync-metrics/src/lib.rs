//! `sync-metrics`: the schedule that takes a snapshot of every ready
//! cluster's control plane from the host's metrics API (16 clusters at a
//! time), and prunes snapshots past `METRICS_RETENTION_MS`.

use queues::runtime::Platform;
use shared::{
    host::HostCluster,
    metricsync::{MetricsReport, collect_all},
    nodesync::DEFAULT_CONCURRENCY,
};

pub async fn run(platform: &Platform, host: &HostCluster) -> anyhow::Result<MetricsReport> {
    Ok(collect_all(
        &platform.pool,
        host,
        DEFAULT_CONCURRENCY,
        platform.settings.metrics_retention,
    )
    .await?)
}
