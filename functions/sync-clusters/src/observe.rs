//! Control-plane observation: a cheap call (`/version`) to every ready
//! cluster's own API through its public endpoint, recording
//! `connection_status` and `last_observed_at`; the managed ingress kept on
//! its target (an `ingress_converge` job enqueued when it or its workload
//! edge is off it, its availability followed otherwise); the admission webhook kept as
//! registered ([`keep_webhook`]); the hostnames' certificates in the
//! cluster followed, unless the workload edge serves them over HTTPS; a
//! `cluster_update` enqueued for a cluster whose endpoint is not what its
//! mode gives with the platform's settings now (the update switches it); and
//! an `endpoint_retire` job enqueued for each cluster whose previous
//! endpoint's grace period is over.

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use chrono::Utc;
use uuid::Uuid;

use kube::Client;
use serde::Serialize;
use sqlx::PgPool;

use shared::{
    admission::{self, registration, store::Registration},
    clusters::{self, Cluster, ClusterChanges, EndpointRetirement},
    domain::{ClusterStatus, IngressStatus, JobPayload},
    host::HostCluster,
    ingress::{self, IngressConvergence, edge, records::BindingName},
    jobs::{self, JobPublisher, NewJob},
};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ObservationReport {
    pub connected: u64,
    pub unreachable: u64,
    /// `ingress_converge` jobs enqueued for clusters whose ingress was off its target.
    pub ingress_convergences: u64,
    /// Admission webhook configurations applied again as the platform
    /// registered them (whatever the cluster's admin made of them).
    pub webhooks_reapplied: u64,
    /// `cluster_update` jobs enqueued for clusters whose webhook is
    /// registered with a secret in its URL, not at all, or with files that
    /// name another host than the platform's.
    pub registrations_renewed: u64,
    /// `endpoint_retire` jobs enqueued for clusters whose previous
    /// endpoint's grace period is over.
    pub endpoints_retired: u64,
    /// `cluster_update` jobs enqueued for clusters whose recorded endpoint
    /// is not what their mode gives with the platform's settings now (a
    /// changed provider or node address): each switches its cluster.
    pub endpoints_moved: u64,
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
    let webhook_base = &registration::base_url(pool, host).await?;
    let webhook_host = webhook_base
        .as_deref()
        .and_then(admission::authorizer::webhook_host)
        .unwrap_or_default();
    let registrations = &admission::store::registrations(pool, &webhook_host).await?;
    let edges = &Edges::read(pool, host).await?;
    let edge_https = host
        .settings()
        .workload_gateway
        .as_ref()
        .is_some_and(|g| g.https.is_some());
    let (convergences, reapplied, renewed) =
        (&AtomicU64::new(0), &AtomicU64::new(0), &AtomicU64::new(0));
    let results = host
        .across_ready_clusters(
            pool,
            concurrency,
            Some(CALL_TIMEOUT),
            |cluster, client| async move {
                let version = client.apiserver_version().await.map_err(|e| e.to_string())?;
                let hostnames = bindings.get(&cluster.id).map_or(&[][..], Vec::as_slice);
                let edge_stale = match edges {
                    Some(edges) => edges.stale(host, &cluster, hostnames, &client).await,
                    None => false,
                };
                match follow_ingress(pool, enqueuing, &cluster, &client, edge_stale).await {
                    Ok(true) => {
                        convergences.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(cluster_id = %cluster.id, %error, "could not follow the ingress state");
                    }
                }
                if let Some(base) = webhook_base {
                    let renew = registrations.get(&cluster.id).copied();
                    match keep_webhook(pool, host, enqueuing, &cluster, &client, base, renew).await {
                        Ok(Some(Registration::Current)) => {
                            reapplied.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Some(Registration::Outdated)) => {
                            renewed.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(None) => {}
                        Err(error) => {
                            tracing::warn!(cluster_id = %cluster.id, %error, "could not keep the admission webhook");
                        }
                    }
                }
                // With HTTPS on the workload edge, the edge's certificates
                // are what visitors get (`sync-edge` follows them).
                if !edge_https
                    && let Err(error) = crate::tls::observe(pool, &cluster, hostnames, &client).await
                {
                    tracing::warn!(cluster_id = %cluster.id, %error, "could not record the TLS state");
                }
                Ok(version)
            },
        )
        .await?;
    let mut report = ObservationReport {
        ingress_convergences: convergences.load(Ordering::Relaxed),
        webhooks_reapplied: reapplied.load(Ordering::Relaxed),
        registrations_renewed: renewed.load(Ordering::Relaxed),
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
        if cluster.status == ClusterStatus::Ready && host.endpoint_drifted(&cluster) {
            match enqueue_when_idle(pool, enqueuing, &cluster, &ClusterChanges::of(&cluster)).await
            {
                Ok(true) => report.endpoints_moved += 1,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(cluster_id = %cluster.id, %error, "could not enqueue the endpoint's switch");
                }
            }
        }
        if connected {
            report.connected += 1;
        } else {
            report.unreachable += 1;
        }
    }
    report.endpoints_retired = retire_previous_endpoints(pool, enqueuing).await?;
    Ok(report)
}

/// Enqueues an `endpoint_retire` job for each idle cluster whose previous
/// endpoint's grace period is over; a busy one is left to the next
/// observation. Answers how many were enqueued.
async fn retire_previous_endpoints(
    pool: &PgPool,
    enqueuing: Enqueuing<'_>,
) -> Result<u64, sqlx::Error> {
    let mut enqueued = 0;
    for cluster in clusters::list_previous_endpoints_due(pool).await? {
        let Some(api_endpoint) = cluster.previous_api_endpoint.clone() else {
            continue;
        };
        match enqueue_when_idle(
            pool,
            enqueuing,
            &cluster,
            &EndpointRetirement { api_endpoint },
        )
        .await
        {
            Ok(true) => enqueued += 1,
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(cluster_id = %cluster.id, %error, "could not enqueue the old endpoint's removal");
            }
        }
    }
    Ok(enqueued)
}

/// The workload edges as last converged, the base domain the clusters'
/// own names are under, and the addresses no edge may reach.
struct Edges {
    converged: HashMap<Uuid, edge::store::Converged>,
    base_domain: Option<String>,
    forbidden: edge::Forbidden,
    /// The pod networks the host routes to.
    routed: Vec<shared::networks::Block>,
}

impl Edges {
    /// What an observation cycle compares the clusters' edges with, where
    /// the host has a workload Gateway. Without the host's nodes (they
    /// could not be listed) no edge is compared this cycle.
    async fn read(pool: &PgPool, host: &HostCluster) -> Result<Option<Self>, sqlx::Error> {
        if host.settings().workload_gateway.is_none() {
            return Ok(None);
        }
        let forbidden = match edge::Forbidden::read(pool, host).await {
            Ok(forbidden) => forbidden,
            Err(error) => {
                tracing::warn!(%error, "could not read what the workload edge may not reach");
                return Ok(None);
            }
        };
        Ok(Some(Self {
            converged: edge::store::converged(pool).await?,
            base_domain: ingress::settings::load(pool)
                .await?
                .fields
                .managed_workload_ingress_base_domain
                .map(|b| ingress::dns::normalize(&b)),
            forbidden,
            routed: edge::routes::routed(pool).await?,
        }))
    }

    /// Whether a cluster with its ingress wanted has an edge that serves
    /// other hostnames than it should, reaches other endpoints or plans
    /// other routes than its ready controller and nodes now give, failed,
    /// or was converged longer than the Gateway's resync interval ago.
    async fn stale(
        &self,
        host: &HostCluster,
        cluster: &Cluster,
        bindings: &[BindingName],
        client: &Client,
    ) -> bool {
        let Some(gateway) = &host.settings().workload_gateway else {
            return false;
        };
        if !cluster.managed_workload_ingress_enabled {
            return false;
        }
        let mut wanted: Vec<String> = bindings.iter().map(|b| b.hostname.clone()).collect();
        if let Some(base) = &self.base_domain {
            wanted.push(ingress::dns::cluster_record(
                &cluster.vcluster_name,
                cluster.id,
                base,
            ));
        }
        let seen = match cluster.managed_workload_ingress_status {
            IngressStatus::Ready => match edge::observe(client).await {
                Ok(observed) => {
                    let pod_network = cluster.pod_cidr.as_deref().and_then(|c| c.parse().ok());
                    let (plan, backend) =
                        edge::reach(&observed, pod_network, &self.routed, &self.forbidden);
                    Some(edge::Seen {
                        endpoints: backend.endpoints(),
                        routes: plan.iter().map(|p| p.destination.to_string()).collect(),
                    })
                }
                Err(error) => {
                    tracing::info!(cluster_id = %cluster.id, %error, "could not read the ingress controller");
                    None
                }
            },
            _ => None,
        };
        edge::stale(
            self.converged.get(&cluster.id),
            wanted,
            seen.as_ref(),
            gateway.resync,
            Utc::now(),
        )
    }
}

/// Enqueues an `ingress_converge` job when the ingress or its edge
/// (`edge_stale`) is off its target and the cluster is idle (`true` then);
/// otherwise follows an installed controller's availability. A cluster busy
/// with another job is left to the next observation.
async fn follow_ingress(
    pool: &PgPool,
    enqueuing: Enqueuing<'_>,
    cluster: &Cluster,
    client: &Client,
    edge_stale: bool,
) -> Result<bool, String> {
    if ingress::needs_convergence(cluster) || edge_stale {
        return enqueue_when_idle(pool, enqueuing, cluster, &IngressConvergence::of(cluster)).await;
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

/// Keeps the cluster's admission webhook as the platform registered it: a
/// current registration is applied again (a change or deletion by the
/// cluster's admin undone, should its authorizer ever let one through); an
/// outdated one gets an update job, which writes the API server's files and
/// registers the webhook with the cluster's token. A cluster busy with a
/// job (`registration` `None`) is left to it. Says what it did.
async fn keep_webhook(
    pool: &PgPool,
    host: &HostCluster,
    enqueuing: Enqueuing<'_>,
    cluster: &Cluster,
    client: &Client,
    base: &str,
    registration: Option<Registration>,
) -> Result<Option<Registration>, String> {
    match registration {
        Some(Registration::Current) => {
            let configuration = registration::configuration_for(host, base, cluster.id);
            registration::apply(client, configuration)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Some(Registration::Current))
        }
        Some(Registration::Outdated) => {
            let enqueued =
                enqueue_when_idle(pool, enqueuing, cluster, &ClusterChanges::of(cluster)).await?;
            Ok(enqueued.then_some(Registration::Outdated))
        }
        None => Ok(None),
    }
}

/// Enqueues `payload`'s job for the cluster when it is idle (`true` then);
/// a cluster busy with another job is left to the next observation.
async fn enqueue_when_idle(
    pool: &PgPool,
    enqueuing: Enqueuing<'_>,
    cluster: &Cluster,
    payload: &impl JobPayload,
) -> Result<bool, String> {
    let (kind, payload) = jobs::encode(payload).map_err(|e| e.to_string())?;
    let new = NewJob {
        cluster_id: cluster.id,
        kind,
        requested_by: None,
        payload: &payload,
        max_attempts: enqueuing.max_attempts,
    };
    jobs::enqueue_when_idle(pool, enqueuing.publisher, new)
        .await
        .map_err(|e| e.to_string())
}
