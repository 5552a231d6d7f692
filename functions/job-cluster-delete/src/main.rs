#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::job_function(std::sync::Arc::new(job_cluster_delete::DeleteCluster)).await
}
