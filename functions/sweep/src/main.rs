#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::schedule_function("sweep", |platform, publisher| async move {
        let report = sweep::run(&platform, publisher.as_ref()).await?;
        Ok(serde_json::to_value(report)?)
    })
    .await
}
