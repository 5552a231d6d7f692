#[tokio::main]
async fn main() -> anyhow::Result<()> {
    local::run(std::env::args().skip(1).collect()).await
}
