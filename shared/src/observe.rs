//! Control-plane observation: a cheap call (`/version`) to every ready
//! cluster's own API through its public endpoint, recording
//! `connection_status` and `last_observed_at`.

use std::time::Duration;

use futures_util::{StreamExt, stream};
use serde::Serialize;
use sqlx::PgPool;

use crate::{
    db::clusters::{self, Cluster},
    host::HostCluster,
};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ObservationReport {
    pub connected: u64,
    pub unreachable: u64,
}

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Observes every ready cluster, `concurrency` at a time.
pub async fn observe_clusters(
    pool: &PgPool,
    host: &HostCluster,
    concurrency: usize,
) -> Result<ObservationReport, sqlx::Error> {
    let clusters = clusters::list_observable(pool).await?;
    let results: Vec<(Cluster, bool)> = stream::iter(clusters)
        .map(|cluster| async move {
            let reachable = reachable(host, &cluster).await;
            (cluster, reachable)
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut report = ObservationReport::default();
    for (cluster, connected) in results {
        clusters::record_observation(pool, cluster.id, connected).await?;
        if connected {
            report.connected += 1;
        } else {
            report.unreachable += 1;
        }
    }
    Ok(report)
}

async fn reachable(host: &HostCluster, cluster: &Cluster) -> bool {
    let Some(server) = cluster.api_endpoint.as_deref() else {
        return false;
    };
    let attempt = async {
        let client = host
            .vcluster_client(cluster, server)
            .await
            .map_err(|e| e.to_string())?;
        client.apiserver_version().await.map_err(|e| e.to_string())
    };
    match tokio::time::timeout(CALL_TIMEOUT, attempt).await {
        Ok(Ok(_)) => true,
        Ok(Err(error)) => {
            tracing::info!(cluster_id = %cluster.id, error, "control plane unreachable");
            false
        }
        Err(_) => {
            tracing::info!(cluster_id = %cluster.id, "control plane did not answer in time");
            false
        }
    }
}
