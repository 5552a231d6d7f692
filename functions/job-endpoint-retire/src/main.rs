#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let host = shared::host::from_env().await?;
    queues::runtime::job_function(std::sync::Arc::new(
        job_endpoint_retire::RetireEndpoint::new(host),
    ))
    .await
}
