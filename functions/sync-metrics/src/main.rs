#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let host = shared::host::from_env().await?.ok_or_else(|| {
        anyhow::anyhow!("environment variable KUBEBYON_HOST_KUBECONFIG is required")
    })?;
    queues::runtime::schedule_function(
        "sync-metrics",
        |s| s.metrics_interval,
        move |platform| {
            let host = host.clone();
            async move {
                Ok(serde_json::to_value(
                    sync_metrics::run(&platform, &host).await?,
                )?)
            }
        },
    )
    .await
}
