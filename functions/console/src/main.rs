#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::http_function(console::router).await
}
