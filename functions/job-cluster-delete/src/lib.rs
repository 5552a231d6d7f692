//! `job-cluster-delete`: removes a cluster's host namespace and soft-deletes it.
//!
//! Like create, it needs the host cluster adapter, which is not part of this
//! build yet: until it is, the job fails at once and says why, and the cluster
//! row is kept (nothing is reported deleted that may still run somewhere).

use async_trait::async_trait;
use shared::{
    domain::JobType,
    jobs::{Completed, JobContext, JobError, JobHandler},
};

pub const NO_HOST_ADAPTER: &str =
    "cannot delete the control plane: no host cluster adapter is configured on this platform";

pub struct DeleteCluster;

#[async_trait]
impl JobHandler for DeleteCluster {
    fn job_type(&self) -> JobType {
        JobType::ClusterDelete
    }

    async fn handle(&self, ctx: &JobContext) -> Result<Completed, JobError> {
        ctx.stage("connecting to the host cluster").await?;
        Err(JobError::fatal(NO_HOST_ADAPTER))
    }
}
