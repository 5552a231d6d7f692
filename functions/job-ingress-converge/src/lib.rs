//! `job-ingress-converge`: brings a cluster's managed ingress controller to
//! what the cluster asks for, inside the cluster through its own API: installed
//! (then `provisioning` until a replica is available — it needs a Ready node —
//! and `ready` once one is), or removed (`disabled`). Enqueued by the create
//! and update jobs as they finish, and by `sync-clusters` when it finds the
//! ingress off its target, so this job is the only writer of the controller.
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
    host::HostCluster,
    ingress::{self, IngressConvergence},
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
            Ok(status) => {
                clusters::set_ingress_status(&mut *tx, cluster.id, status, None).await?;
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

/// Installs or removes the controller; the ingress state it leaves.
async fn converge(
    ctx: &JobContext,
    host: &HostCluster,
    cluster: &Cluster,
) -> Result<IngressStatus, Failure> {
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
        Ok(if ingress::available(&client).await.map_err(failed)? {
            IngressStatus::Ready
        } else {
            IngressStatus::Provisioning
        })
    } else {
        ctx.stage(REMOVING).await?;
        ingress::remove(&client, class).await.map_err(|e| {
            Failure::InCluster(format!("removing the ingress controller failed: {e}"))
        })?;
        Ok(IngressStatus::Disabled)
    }
}
