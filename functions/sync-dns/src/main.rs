// The Route53 client makes deep futures.
#![recursion_limit = "256"]

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::schedule_function(&sync_dns::SCHEDULE).await
}
