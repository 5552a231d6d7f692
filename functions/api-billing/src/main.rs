#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::http_function(api_billing::router).await
}
