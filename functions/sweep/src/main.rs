#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::schedule_function(
        "sweep",
        |s| s.sweep_interval,
        |platform| async move {
            let report = sweep::run(&platform, platform.publisher()?.as_ref()).await?;
            Ok(serde_json::to_value(report)?)
        },
    )
    .await
}
