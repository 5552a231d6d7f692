//! Gives the platform's identities their access in the namespaces of
//! clusters that lack its current revision ([`shared::host::access`]):
//! clusters made before it, a few each pass. New clusters get it from their
//! create job.

use serde::Serialize;
use shared::{
    clusters,
    host::{ACCESS_REVISION, HostCluster},
};

/// Clusters given their access in one pass, at most.
pub const PER_PASS: i64 = 64;

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct AccessReport {
    pub access_granted: usize,
    pub access_failed: usize,
}

pub async fn grant_missing(
    pool: &sqlx::PgPool,
    host: &HostCluster,
) -> anyhow::Result<AccessReport> {
    let mut report = AccessReport::default();
    if host.settings().tenant_access.is_none() {
        return Ok(report);
    }
    for cluster in clusters::lacking_host_access(pool, ACCESS_REVISION, PER_PASS).await? {
        match host.ensure_access(pool, &cluster).await {
            Ok(_) => report.access_granted += 1,
            Err(error) => {
                tracing::warn!(cluster_id = %cluster.id, %error, "could not grant the platform's access in the cluster's namespace");
                report.access_failed += 1;
            }
        }
    }
    Ok(report)
}
