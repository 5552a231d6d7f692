#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::schedule_function(&sync_databases::SCHEDULE).await
}
