//! `sync-dns`: the schedule that converges the platform's Route53 zone to the
//! database (cluster CNAMEs and platform-managed hostnames), looks up the DNS
//! challenges of self-managed hostnames not verified yet, and observes the
//! resolution of verified ones.

use queues::runtime::Platform;
use shared::dns::{DnsReport, sync};

pub async fn run(platform: &Platform) -> anyhow::Result<DnsReport> {
    Ok(sync(&platform.pool, &platform.settings).await?)
}
