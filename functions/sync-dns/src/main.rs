// The Route53 client makes deep futures.
#![recursion_limit = "256"]

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    queues::runtime::schedule_function(
        "sync-dns",
        |s| s.dns_interval,
        |platform| async move { Ok(serde_json::to_value(sync_dns::run(&platform).await?)?) },
    )
    .await
}
