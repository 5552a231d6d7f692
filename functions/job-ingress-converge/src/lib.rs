//! `job-ingress-converge`: brings a cluster's managed ingress controller to
//! what the cluster asks for, inside the cluster through its own API: installed
//! (then `provisioning` until a replica is available — it needs a Ready node —
//! and `ready` once one is), or removed (`disabled`). Enqueued by the create
//! and update jobs as they finish, and by `sync-clusters` when it finds the
//! ingress off its target, so this job is the only writer of the controller.
//!
//! Where the host has a workload Gateway, the job also converges the
//! cluster's workload edge on the host ([`shared::ingress::edge`]): its
//! routes and the shim Service and EndpointSlice to its controller while
//! the ingress is wanted, none once it is not. An edge that cannot be
//! converged is recorded as such (`workload_edges.last_error`), apart from
//! the controller's own state, and converged again at the next observation.
//!
//! A failure inside the cluster is recorded on the cluster (`error` with the
//! reason) together with the job's own failure, in one fenced transaction, and
//! the job does not retry it: the next observation enqueues a new convergence,
//! so a failing install never holds the cluster's one active-job slot through
//! a backoff while the user's own operations wait.

use std::sync::Arc;

use async_trait::async_trait;
use shared::{
    clusters::{self, Cluster},
    domain::{FailureCode, IngressStatus},
    host::{HostCluster, WorkloadGateway},
    ingress::{
        self, IngressConvergence,
        edge::{self, Backend, Site, SiteEdge, routes, store},
    },
    jobs::{self, Finished, JobContext, JobError, Stage, TypedJobHandler},
};

pub const NO_HOST_ADAPTER: &str =
    "cannot converge the managed ingress: no host cluster adapter is configured on this platform";

pub struct ConvergeIngress {
    host: Option<Arc<HostCluster>>,
}

impl ConvergeIngress {
    pub fn new(host: Option<Arc<HostCluster>>) -> Self {
        Self { host }
    }
}

// The stages this job records.
shared::stages! {
    CONNECTING = "connecting to the cluster's API";
    INSTALLING = "installing the ingress controller";
    CHECKING = "checking the ingress controller";
    REMOVING = "removing the ingress controller";
    EDGE = "converging the workload edge";
}

#[async_trait]
impl TypedJobHandler for ConvergeIngress {
    type Payload = IngressConvergence;

    fn stages(&self) -> Vec<Stage> {
        STAGES.to_vec()
    }

    async fn run(
        &self,
        ctx: &JobContext,
        target: IngressConvergence,
    ) -> Result<Finished, JobError> {
        let host = ctx.require(&self.host, NO_HOST_ADAPTER).await?;
        let Some(mut cluster) = clusters::get(&ctx.pool, ctx.job.cluster_id).await? else {
            // Deleted since: its controller went with it.
            return ctx.complete_alone().await;
        };
        target.apply_to(&mut cluster);
        let outcome = converge(ctx, host, &cluster).await;
        let mut tx = ctx.pool.begin().await?;
        let finished = match outcome {
            Ok((status, edge)) => {
                clusters::set_ingress_status(&mut *tx, cluster.id, status, None).await?;
                match edge {
                    EdgeOutcome::NotConfigured => {}
                    EdgeOutcome::Served(served) => {
                        store::record(
                            &mut tx,
                            cluster.id,
                            &served.backend,
                            &served.hostnames,
                            &served.sites,
                        )
                        .await?;
                        routes::replace(&mut tx, cluster.id, &served.routes).await?;
                    }
                    EdgeOutcome::TakenDown => {
                        store::forget(&mut tx, cluster.id).await?;
                        routes::forget(&mut tx, cluster.id).await?;
                    }
                    EdgeOutcome::Failed(error) => {
                        store::record_failure(&mut *tx, cluster.id, &error).await?
                    }
                }
                ctx.complete(&mut tx).await?
            }
            Err(Failure::InCluster(reason)) => {
                clusters::set_ingress_status(
                    &mut *tx,
                    cluster.id,
                    IngressStatus::Error,
                    Some(&reason),
                )
                .await?;
                let failure = jobs::Failure {
                    code: FailureCode::IngressInstallFailed,
                    message: reason,
                };
                ctx.fail_within(&mut tx, &failure).await?
            }
            Err(Failure::Job(err)) => return Err(err),
        };
        tx.commit().await?;
        Ok(finished)
    }
}

/// Why a convergence stopped: the cluster refused or failed (recorded on it),
/// or the job itself could not go on (a lost lease, the database).
enum Failure {
    InCluster(String),
    Job(JobError),
}

impl From<JobError> for Failure {
    fn from(err: JobError) -> Self {
        Self::Job(err)
    }
}

/// What became of the cluster's workload edge.
enum EdgeOutcome {
    /// The host has no workload Gateway.
    NotConfigured,
    Served(Served),
    TakenDown,
    Failed(String),
}

struct Served {
    backend: Backend,
    hostnames: Vec<String>,
    sites: Vec<SiteEdge>,
    /// The cluster's route plan, from its nodes.
    routes: Vec<routes::Planned>,
}

/// Installs or removes the controller; the ingress state it leaves, and
/// what became of its edge.
async fn converge(
    ctx: &JobContext,
    host: &HostCluster,
    cluster: &Cluster,
) -> Result<(IngressStatus, EdgeOutcome), Failure> {
    ctx.stage(CONNECTING).await?;
    let reached = match cluster.api_endpoint.as_deref() {
        Some(server) => host
            .vcluster_client(cluster, server)
            .await
            .map_err(|e| e.to_string()),
        None => Err("the cluster has no endpoint".to_string()),
    };
    let client = reached.map_err(|e| {
        Failure::InCluster(format!(
            "reaching the cluster's API for the ingress controller failed: {e}"
        ))
    })?;
    let class = cluster.managed_workload_ingress_class.as_str();
    if cluster.managed_workload_ingress_enabled {
        let failed =
            |e| Failure::InCluster(format!("installing the ingress controller failed: {e}"));
        ctx.stage(INSTALLING).await?;
        ingress::install(&client, class).await.map_err(failed)?;
        ctx.stage(CHECKING).await?;
        let status = if ingress::available(&client).await.map_err(failed)? {
            IngressStatus::Ready
        } else {
            IngressStatus::Provisioning
        };
        let Some(gateway) = &host.settings().workload_gateway else {
            return Ok((status, EdgeOutcome::NotConfigured));
        };
        ctx.stage(EDGE).await?;
        let edge = match serve(ctx, host, gateway, cluster, &client).await {
            Ok(served) => EdgeOutcome::Served(served),
            Err(error) => EdgeOutcome::Failed(error),
        };
        Ok((status, edge))
    } else {
        ctx.stage(REMOVING).await?;
        ingress::remove(&client, class).await.map_err(|e| {
            Failure::InCluster(format!("removing the ingress controller failed: {e}"))
        })?;
        if host.settings().workload_gateway.is_none() {
            return Ok((IngressStatus::Disabled, EdgeOutcome::NotConfigured));
        }
        ctx.stage(EDGE).await?;
        let edge = match prune(host, cluster, &[]).await {
            Ok(()) => EdgeOutcome::TakenDown,
            Err(error) => EdgeOutcome::Failed(error),
        };
        Ok((IngressStatus::Disabled, edge))
    }
}

/// Converges the cluster's edge on the host: what its controller can be
/// reached on, a route per site, and no route of a site that went.
async fn serve(
    ctx: &JobContext,
    host: &HostCluster,
    gateway: &WorkloadGateway,
    cluster: &Cluster,
    client: &kube::Client,
) -> Result<Served, String> {
    let observed = edge::observe(client).await.map_err(|e| {
        format!("reading the ingress controller from the cluster's API failed: {e}")
    })?;
    let forbidden = edge::Forbidden::read(&ctx.pool, host).await?;
    let routed = routes::routed(&ctx.pool).await.map_err(|e| e.to_string())?;
    let pod_network = cluster.pod_cidr.as_deref().and_then(|c| c.parse().ok());
    let (plan, backend) = edge::reach(&observed, pod_network, &routed, &forbidden);
    let base = ingress::settings::load(&ctx.pool)
        .await
        .map_err(|e| e.to_string())?
        .fields
        .managed_workload_ingress_base_domain
        .map(|b| ingress::dns::normalize(&b));
    let canonical = base
        .as_deref()
        .map(|base| ingress::dns::cluster_record(&cluster.vcluster_name, cluster.id, base));
    let mut sites: Vec<Site> = canonical
        .iter()
        .map(|name| Site {
            binding_id: None,
            hostname: name.clone(),
            self_managed: false,
        })
        .collect();
    sites.extend(
        store::served(&ctx.pool, cluster.id)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|b| Site {
                binding_id: Some(b.id),
                hostname: b.hostname,
                self_managed: b.self_managed,
            }),
    );
    let rendered = edge::render(
        cluster.id,
        &cluster.namespace,
        gateway,
        canonical.as_deref().unwrap_or_default(),
        &sites,
        &backend,
    );
    host.apply_objects(&rendered.objects)
        .await
        .map_err(|e| format!("applying the edge's objects on the host failed: {e}"))?;
    let keep: Vec<&str> = rendered.objects.iter().map(|o| o.name.as_str()).collect();
    prune(host, cluster, &keep).await?;
    Ok(Served {
        backend,
        hostnames: sites.into_iter().map(|s| s.hostname).collect(),
        sites: rendered.sites,
        routes: plan,
    })
}

/// Deletes the cluster's edge objects `keep` does not name.
async fn prune(host: &HostCluster, cluster: &Cluster, keep: &[&str]) -> Result<(), String> {
    let selector = edge::selector(cluster);
    for kind in [edge::ROUTE_KIND, edge::SLICE_KIND, edge::SERVICE_KIND] {
        host.prune_objects(kind, &cluster.namespace, &selector, keep)
            .await
            .map_err(|e| format!("removing the edge's old objects on the host failed: {e}"))?;
    }
    Ok(())
}
