//! Control-plane observation: a cheap call (`/version`) to every ready
//! cluster's own API through its public endpoint, recording
//! `connection_status` and `last_observed_at`; the managed ingress kept on
//! its target (an `ingress_converge` job enqueued when it is off it, its
//! availability followed otherwise); and the hostnames' certificates followed.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use kube::Client;
use serde::Serialize;
use sqlx::PgPool;

use shared::{
    clusters::{self, Cluster},
    error::unique_violation,
    host::HostCluster,
    ingress::{self, IngressConvergence},
    jobs::{self, JobPublisher, NewJob},
};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ObservationReport {
    pub connected: u64,
    pub unreachable: u64,
    /// `ingress_converge` jobs enqueued for clusters whose ingress was off its target.
    pub ingress_convergences: u64,
}

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How the observation enqueues the jobs it finds needed.
#[derive(Clone, Copy)]
pub struct Enqueuing<'a> {
    pub publisher: &'a dyn JobPublisher,
    pub max_attempts: i32,
}

/// Observes every ready cluster, `concurrency` at a time.
pub async fn observe_clusters(
    pool: &PgPool,
    host: &HostCluster,
    enqueuing: Enqueuing<'_>,
    concurrency: usize,
) -> Result<ObservationReport, sqlx::Error> {
    let bindings = &shared::ingress::records::live_bindings(pool).await?;
    let convergences = &AtomicU64::new(0);
    let results = host
        .across_ready_clusters(
            pool,
            concurrency,
            Some(CALL_TIMEOUT),
            |cluster, client| async move {
                let version = client.apiserver_version().await.map_err(|e| e.to_string())?;
                match follow_ingress(pool, enqueuing, &cluster, &client).await {
                    Ok(true) => {
                        convergences.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(cluster_id = %cluster.id, %error, "could not follow the ingress state");
                    }
                }
                let hostnames = bindings.get(&cluster.id).map_or(&[][..], Vec::as_slice);
                if let Err(error) = crate::tls::observe(pool, &cluster, hostnames, &client).await {
                    tracing::warn!(cluster_id = %cluster.id, %error, "could not record the TLS state");
                }
                Ok(version)
            },
        )
        .await?;
    let mut report = ObservationReport {
        ingress_convergences: convergences.load(Ordering::Relaxed),
        ..ObservationReport::default()
    };
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

/// Enqueues an `ingress_converge` job when the ingress is off its target and
/// the cluster is idle (`true` then); otherwise follows an installed
/// controller's availability. A cluster busy with another job is left to the
/// next observation.
async fn follow_ingress(
    pool: &PgPool,
    enqueuing: Enqueuing<'_>,
    cluster: &Cluster,
    client: &Client,
) -> Result<bool, String> {
    if ingress::needs_convergence(cluster) {
        let (job_type, payload) =
            jobs::encode(&IngressConvergence::of(cluster)).map_err(|e| e.to_string())?;
        let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
        let new = NewJob {
            cluster_id: cluster.id,
            job_type,
            requested_by: None,
            payload: &payload,
            max_attempts: enqueuing.max_attempts,
        };
        let enqueued = match jobs::enqueue_if_idle(&mut tx, new).await {
            Ok(enqueued) => enqueued,
            // Another job took the cluster's slot since the check.
            Err(err) if unique_violation(&err) == Some("idx_cluster_jobs_active_cluster") => None,
            Err(err) => return Err(err.to_string()),
        };
        let Some(enqueued) = enqueued else {
            return Ok(false);
        };
        tx.commit().await.map_err(|e| e.to_string())?;
        jobs::publish_after_commit(pool, enqueuing.publisher, enqueued.job).await;
        return Ok(true);
    }
    if cluster.managed_workload_ingress_enabled {
        let available = ingress::available(client)
            .await
            .map_err(|e| e.to_string())?;
        clusters::follow_ingress_availability(pool, cluster.id, available)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(false)
}
