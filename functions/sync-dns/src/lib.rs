//! `sync-dns`: the schedule that converges the platform's Route53 zone to the
//! database (cluster CNAMEs and platform-managed hostnames), looks up the DNS
//! challenges of self-managed hostnames not verified yet, and observes the
//! resolution of verified ones ([`route53`]).

// The Route53 client makes deep futures.
#![recursion_limit = "256"]

pub mod route53;

use queues::runtime::{Schedule, ScheduleContext};
use shared::config::Millis;

use crate::route53::{DnsReport, sync};

pub const SCHEDULE: Schedule = Schedule {
    name: "sync-dns",
    interval: Millis::new("SYNC_DNS_INTERVAL_MS", 60_000),
    needs_host: false,
    needs_publisher: false,
    run: |ctx| Box::pin(async move { Ok(serde_json::to_value(run(&ctx).await?)?) }),
};

pub async fn run(ctx: &ScheduleContext) -> anyhow::Result<DnsReport> {
    sync(&ctx.pool, &ctx.settings).await
}
