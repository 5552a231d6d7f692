#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::schedule_function(&sweep::SCHEDULE).await
}
