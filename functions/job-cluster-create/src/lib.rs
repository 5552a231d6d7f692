//! `job-cluster-create`: builds a cluster's control plane on the host Kubernetes.
//!
//! The host cluster adapter (namespace, quota, the vCluster HelmChart, the public
//! endpoint, readiness and kubeconfig) is not part of this build yet. Until it
//! is, the job fails at once with a reason that says so: a cluster is never
//! reported ready without a control plane behind it.

use async_trait::async_trait;
use shared::{
    domain::JobType,
    jobs::{Completed, JobContext, JobError, JobHandler},
};

/// The reason a create fails while no host adapter is configured.
pub const NO_HOST_ADAPTER: &str =
    "cannot create the control plane: no host cluster adapter is configured on this platform";

pub struct CreateCluster;

#[async_trait]
impl JobHandler for CreateCluster {
    fn job_type(&self) -> JobType {
        JobType::ClusterCreate
    }

    async fn handle(&self, ctx: &JobContext) -> Result<Completed, JobError> {
        ctx.stage("connecting to the host cluster").await?;
        Err(JobError::fatal(NO_HOST_ADAPTER))
    }
}
