#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::http_function(api_organizations::router).await
}
