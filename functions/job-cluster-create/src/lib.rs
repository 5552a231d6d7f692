//! `job-cluster-create`: builds a cluster's control plane on the host Kubernetes:
//! namespace, quota and limits, network policy, the platform's authorizer
//! files, the control plane its engine makes (a Kamaji `TenantControlPlane` or
//! vCluster's `HelmChart`, its API server started with them), the public endpoint
//! Service; then waits (the lease heartbeats meanwhile) until the control plane
//! is ready and its kubeconfig Secret exists, registers the admission webhook
//! inside it, and records the endpoint. Every
//! step is a server-side apply: a rerun after a crash picks up where it was.
//! A cluster created with the managed ingress gets an `ingress_converge` job
//! in the transaction that finishes this one.

use std::sync::Arc;

use async_trait::async_trait;
use shared::{
    admission,
    clusters::{self, Cluster, ClusterCreation},
    domain::FailureCode,
    host::HostCluster,
    ingress::{self, IngressConvergence},
    jobs::{Finished, JobContext, JobError, Stage, StepError, TypedJobHandler},
};

/// The reason a create fails while no host adapter is configured.
pub const NO_HOST_ADAPTER: &str =
    "cannot create the control plane: no host cluster adapter is configured on this platform";

pub struct CreateCluster {
    host: Option<Arc<HostCluster>>,
}

impl CreateCluster {
    pub fn new(host: Option<Arc<HostCluster>>) -> Self {
        Self { host }
    }
}

// The stages this job records.
shared::stages! {
    CREATING_NAMESPACE = "creating the namespace";
    APPLYING_LIMITS = "applying the resource quota and limits";
    ISOLATING = "isolating the control plane's network";
    REMOVING_FAILED_INSTALL = "removing the failed install";
    EXPOSING = "exposing the control plane";
    INSTALLING = "installing the control plane";
    WAITING_FOR_READY = "waiting for the control plane to become ready";
}

#[async_trait]
impl TypedJobHandler for CreateCluster {
    type Payload = ClusterCreation;

    fn stages(&self) -> Vec<Stage> {
        [
            STAGES,
            admission::registration::STAGES,
            admission::authorizer::STAGES,
        ]
        .concat()
    }

    async fn run(&self, ctx: &JobContext, target: ClusterCreation) -> Result<Finished, JobError> {
        let host = ctx.require(&self.host, NO_HOST_ADAPTER).await?;
        let mut cluster = clusters::get(&ctx.pool, ctx.job.cluster_id)
            .await?
            .ok_or_else(|| {
                JobError::fatal(
                    FailureCode::ClusterDeleted,
                    "the cluster was deleted before it was created",
                )
            })?;
        target.apply_to(&mut cluster);
        create(ctx, host, &cluster).await
    }
}

async fn create(
    ctx: &JobContext,
    host: &HostCluster,
    cluster: &Cluster,
) -> Result<Finished, JobError> {
    // The namespace, and who may act in it (the jobs, and the HTTP
    // functions only to read the cluster's kubeconfig Secret).
    ctx.step(CREATING_NAMESPACE, async {
        host.ensure_namespace(cluster).await?;
        host.ensure_access(&ctx.pool, cluster).await
    })
    .await?;
    ctx.step(APPLYING_LIMITS, host.ensure_limits(cluster))
        .await?;
    ctx.step(ISOLATING, host.ensure_isolation(cluster)).await?;
    // A create run again after its chart failed starts the install afresh:
    // only then is there a stage to show for it.
    let failed_install = host
        .has_failed_install(cluster)
        .await
        .map_err(|e| e.at_step(REMOVING_FAILED_INSTALL.as_str()))?;
    if failed_install {
        ctx.step(REMOVING_FAILED_INSTALL, host.remove_failed_install(cluster))
            .await?;
    }
    let api_server = admission::authorizer::prepare(ctx, host, cluster).await?;
    // The endpoint first: its address goes into the control plane's
    // certificate (a load balancer's is allocated without the control plane).
    let public_host = ctx
        .step(EXPOSING, async {
            host.ensure_public_endpoint(cluster).await?;
            host.await_public_host(cluster).await
        })
        .await?;
    ctx.step(
        INSTALLING,
        host.ensure_control_plane(cluster, api_server.as_ref(), public_host.as_slice()),
    )
    .await?;

    ctx.stage(WAITING_FOR_READY).await?;
    let endpoint = host
        .await_control_plane(cluster, INSTALLING.as_str())
        .await
        .map_err(JobError::from_transient)?;

    let url = endpoint.url();
    admission::registration::register(ctx, host, cluster, &url).await?;
    let mut tx = ctx.pool.begin().await?;
    clusters::mark_ready(&mut tx, cluster.id, &url, &endpoint.host, endpoint.port).await?;
    let finished = ctx.complete(&mut tx).await?;
    if ingress::needs_convergence(cluster) {
        ctx.enqueue_follow_up(&mut tx, &IngressConvergence::of(cluster))
            .await?;
    }
    tx.commit().await?;
    tracing::info!(api_endpoint = url, "control plane ready");
    Ok(finished)
}
