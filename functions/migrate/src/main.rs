#[tokio::main]
async fn main() -> anyhow::Result<()> {
    migrate::run().await
}
