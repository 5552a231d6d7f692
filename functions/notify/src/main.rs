#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::schedule_function(&notify::SCHEDULE).await
}
