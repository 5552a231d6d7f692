//! `sync-clusters`: the schedule that checks every ready cluster's control
//! plane and records whether it answers (`connection_status`, `last_observed_at`).

use queues::runtime::Platform;
use shared::{
    host::HostCluster,
    observe::{ObservationReport, observe_clusters},
};

/// Control planes checked at once.
pub const CONCURRENCY: usize = 16;

pub async fn run(platform: &Platform, host: &HostCluster) -> anyhow::Result<ObservationReport> {
    Ok(observe_clusters(&platform.pool, host, CONCURRENCY).await?)
}
