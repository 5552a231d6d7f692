//! `job-cluster-update`: converges the host to the cluster's updated snapshot:
//! quota and limits, the network policy, the control plane's values, and the public endpoint
//! Service (a change of public access mode changes its type, and so the
//! endpoint, the kubeconfig server and the join command). When the managed
//! ingress switch leaves the controller off its target, an `ingress_converge`
//! job is enqueued in the transaction that finishes this one.

use std::sync::Arc;

use async_trait::async_trait;
use shared::{
    admission,
    clusters::{self, ClusterChanges},
    domain::FailureCode,
    host::HostCluster,
    ingress::{self, IngressConvergence},
    jobs::{Finished, JobContext, JobError, Stage, TypedJobHandler},
};

pub const NO_HOST_ADAPTER: &str =
    "cannot update the control plane: no host cluster adapter is configured on this platform";

pub struct UpdateCluster {
    host: Option<Arc<HostCluster>>,
}

impl UpdateCluster {
    pub fn new(host: Option<Arc<HostCluster>>) -> Self {
        Self { host }
    }
}

// The stages this job records.
shared::stages! {
    APPLYING_LIMITS = "applying the resource quota and limits";
    ISOLATING = "isolating the control plane's network";
    UPDATING_ENDPOINT = "updating the public endpoint";
    UPDATING = "updating the control plane";
    WAITING_FOR_READY = "waiting for the control plane and its endpoint";
}

#[async_trait]
impl TypedJobHandler for UpdateCluster {
    type Payload = ClusterChanges;

    fn stages(&self) -> Vec<Stage> {
        [
            STAGES,
            admission::registration::STAGES,
            admission::authorizer::STAGES,
        ]
        .concat()
    }

    async fn run(&self, ctx: &JobContext, target: ClusterChanges) -> Result<Finished, JobError> {
        let host = ctx.require(&self.host, NO_HOST_ADAPTER).await?;
        let mut cluster = clusters::get(&ctx.pool, ctx.job.cluster_id)
            .await?
            .ok_or_else(|| {
                JobError::fatal(
                    FailureCode::ClusterDeleted,
                    "the cluster was deleted before it could be updated",
                )
            })?;
        target.apply_to(&mut cluster);
        ctx.step(APPLYING_LIMITS, async {
            // A cluster made before the platform's identities were split gets its access now.
            host.ensure_access(&ctx.pool, &cluster).await?;
            host.ensure_limits(&cluster).await
        })
        .await?;
        ctx.step(ISOLATING, host.ensure_isolation(&cluster)).await?;
        // The platform's authorizer: a cluster made before it gets it now.
        let api_server = admission::authorizer::prepare(ctx, host, &cluster).await?;
        // The endpoint first: its address goes into the control plane's
        // certificate.
        let public_host = ctx
            .step(UPDATING_ENDPOINT, async {
                host.ensure_public_endpoint(&cluster).await?;
                host.await_public_host(&cluster).await
            })
            .await?;
        ctx.step(
            UPDATING,
            host.ensure_control_plane(&cluster, api_server.as_ref(), public_host.as_deref()),
        )
        .await?;

        ctx.stage(WAITING_FOR_READY).await?;
        let endpoint = host
            .await_control_plane(&cluster, UPDATING.as_str())
            .await
            .map_err(JobError::from_transient)?;
        let url = endpoint.url();
        admission::registration::register(ctx, host, &cluster, &url).await?;
        let mut tx = ctx.pool.begin().await?;
        clusters::mark_ready(&mut tx, cluster.id, &url, &endpoint.host, endpoint.port).await?;
        let finished = ctx.complete(&mut tx).await?;
        if ingress::needs_convergence(&cluster) {
            ctx.enqueue_follow_up(&mut tx, &IngressConvergence::of(&cluster))
                .await?;
        }
        tx.commit().await?;
        tracing::info!(api_endpoint = url, "cluster updated");
        Ok(finished)
    }
}
