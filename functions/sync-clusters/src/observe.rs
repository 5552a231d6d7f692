//! Control-plane observation: a cheap call (`/version`) to every ready
//! cluster's own API through its public endpoint, recording
//! `connection_status` and `last_observed_at`; and the managed ingress
//! converged (its availability followed, a failed install retried, a
//! switched-off one removed), and the hostnames' certificates followed.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

use shared::{clusters, host::HostCluster};

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
    let bindings = &shared::ingress::records::live_bindings(pool).await?;
    let results = host
        .across_ready_clusters(
            pool,
            concurrency,
            Some(CALL_TIMEOUT),
            |cluster, client| async move {
                let version = client.apiserver_version().await.map_err(|e| e.to_string())?;
                if let Err(error) = shared::ingress::converge(pool, &cluster, &client).await {
                    tracing::warn!(cluster_id = %cluster.id, %error, "could not record the ingress state");
                }
                let hostnames = bindings.get(&cluster.id).map_or(&[][..], Vec::as_slice);
                if let Err(error) = crate::tls::observe(pool, &cluster, hostnames, &client).await {
                    tracing::warn!(cluster_id = %cluster.id, %error, "could not record the TLS state");
                }
                Ok(version)
            },
        )
        .await?;
    let mut report = ObservationReport::default();
    for (cluster, result) in results {
        let connected = match result {
            Ok(_) => true,
            Err(error) => {
                tracing::info!(cluster_id = %cluster.id, error, "control plane unreachable");
                false
            }
        };
        clusters::record_observation(pool, cluster.id, connected).await?;
        if connected {
            report.connected += 1;
        } else {
            report.unreachable += 1;
        }
    }
    Ok(report)
}
