#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::http_function(api_databases::router).await
}
