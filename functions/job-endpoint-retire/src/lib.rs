//! `job-endpoint-retire`: removes what served a cluster's previous public
//! endpoint once its grace period has passed (`previous_endpoint_until`):
//! the Service, route or HAProxy map entry of every mode the cluster no
//! longer uses, then forgets the previous endpoint in the transaction that
//! completes the job. Kubeconfigs naming the old address stop working.
//! Enqueued by `sync-clusters` when the grace period is over and the
//! cluster is idle; the payload names the endpoint it retires, so a job
//! that finds another recorded (a later switch) leaves it alone.

use std::sync::Arc;

use async_trait::async_trait;
use shared::{
    clusters::{self, EndpointRetirement},
    host::HostCluster,
    jobs::{Finished, JobContext, JobError, Stage, TypedJobHandler},
};

pub const NO_HOST_ADAPTER: &str =
    "cannot remove the old endpoint: no host cluster adapter is configured on this platform";

pub struct RetireEndpoint {
    host: Option<Arc<HostCluster>>,
}

impl RetireEndpoint {
    pub fn new(host: Option<Arc<HostCluster>>) -> Self {
        Self { host }
    }
}

// The stages this job records.
shared::stages! {
    REMOVING = "removing the old endpoint";
}

#[async_trait]
impl TypedJobHandler for RetireEndpoint {
    type Payload = EndpointRetirement;

    fn stages(&self) -> Vec<Stage> {
        STAGES.to_vec()
    }

    async fn run(
        &self,
        ctx: &JobContext,
        target: EndpointRetirement,
    ) -> Result<Finished, JobError> {
        let host = ctx.require(&self.host, NO_HOST_ADAPTER).await?;
        let Some(cluster) = clusters::get(&ctx.pool, ctx.job.cluster_id).await? else {
            // Deleted since: its entries went with it.
            return ctx.complete_alone().await;
        };
        if cluster.previous_api_endpoint.as_deref() != Some(target.api_endpoint.as_str()) {
            // Retired already, or replaced by a later switch's.
            return ctx.complete_alone().await;
        }
        ctx.step(
            REMOVING,
            host.prune_public_entries(&cluster, cluster.public_access_mode),
        )
        .await?;
        let mut tx = ctx.pool.begin().await?;
        clusters::forget_previous_endpoint(&mut tx, cluster.id, &target.api_endpoint).await?;
        let finished = ctx.complete(&mut tx).await?;
        tx.commit().await?;
        tracing::info!(cluster_id = %cluster.id, api_endpoint = target.api_endpoint, "old endpoint removed");
        Ok(finished)
    }
}
