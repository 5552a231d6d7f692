//! `sync-clusters`: the schedule that checks every ready cluster's control
//! plane and records whether it answers (`connection_status`, `last_observed_at`),
//! then deletes the ServiceAccounts of revoked and expired kubeconfig
//! credentials from their clusters.

use queues::runtime::Platform;
use serde::Serialize;
use shared::{
    host::HostCluster,
    kubecred::{self, RemovalReport},
    observe::{ObservationReport, observe_clusters},
};

/// Control planes checked at once.
pub const CONCURRENCY: usize = 16;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub observation: ObservationReport,
    pub credentials: RemovalReport,
}

pub async fn run(platform: &Platform, host: &HostCluster) -> anyhow::Result<Report> {
    let observation = observe_clusters(&platform.pool, host, CONCURRENCY).await?;
    let credentials = kubecred::remove_stale(&platform.pool, host, None).await?;
    Ok(Report {
        observation,
        credentials,
    })
}
