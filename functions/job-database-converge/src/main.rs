#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let host = shared::host::from_env().await?;
    let key = shared::config::Settings::from_env()?
        .secret_box()
        .map(std::sync::Arc::new);
    queues::runtime::job_function(std::sync::Arc::new(
        job_database_converge::ConvergeDatabases::new(host, key),
    ))
    .await
}
