//! `job-cluster-delete`: deletes a cluster's host namespace (the control plane,
//! its data and its endpoint go with it), waits until it is gone, then
//! soft-deletes the cluster and releases its pod and service networks.

use std::sync::Arc;

use async_trait::async_trait;
use shared::{
    clusters::{self, ClusterDeletion},
    domain::FailureCode,
    host::HostCluster,
    jobs::{Finished, JobContext, JobError, Stage, StepError, TypedJobHandler},
    networks,
};

pub const NO_HOST_ADAPTER: &str =
    "cannot delete the control plane: no host cluster adapter is configured on this platform";

pub struct DeleteCluster {
    host: Option<Arc<HostCluster>>,
}

impl DeleteCluster {
    pub fn new(host: Option<Arc<HostCluster>>) -> Self {
        Self { host }
    }
}

// The stages this job records.
shared::stages! {
    DELETING_NAMESPACE = "deleting the namespace";
    WAITING_FOR_GONE = "waiting for the namespace to be gone";
}

#[async_trait]
impl TypedJobHandler for DeleteCluster {
    type Payload = ClusterDeletion;

    fn stages(&self) -> Vec<Stage> {
        STAGES.to_vec()
    }

    async fn run(&self, ctx: &JobContext, deletion: ClusterDeletion) -> Result<Finished, JobError> {
        let host = ctx.require(&self.host, NO_HOST_ADAPTER).await?;
        let Some(mut cluster) = clusters::get(&ctx.pool, ctx.job.cluster_id).await? else {
            // Already deleted by an earlier attempt that lost its lease after committing.
            return ctx.complete_alone().await;
        };
        deletion.apply_to(&mut cluster);
        ctx.step(DELETING_NAMESPACE, async {
            host.remove_public_entry(&cluster).await?;
            host.delete_namespace(&cluster).await
        })
        .await?;
        ctx.stage(WAITING_FOR_GONE).await?;
        let settings = host.settings();
        let deadline = tokio::time::Instant::now() + settings.ready_timeout;
        while host
            .namespace_exists(&cluster)
            .await
            .map_err(|e| e.at_step("checking the namespace"))?
        {
            if tokio::time::Instant::now() >= deadline {
                return Err(JobError::retryable(
                    FailureCode::Timeout,
                    format!(
                        "the namespace {} was still terminating after {} s",
                        cluster.namespace,
                        settings.ready_timeout.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(settings.poll_interval).await;
        }
        let mut tx = ctx.pool.begin().await?;
        clusters::mark_deleted(&mut tx, cluster.id).await?;
        networks::release(&mut tx, cluster.id).await?;
        let completed = ctx.complete(&mut tx).await?;
        tx.commit().await?;
        Ok(completed)
    }
}
