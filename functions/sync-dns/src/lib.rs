//! `sync-dns`: the schedule that converges the platform's Route53 zone to the
//! database (cluster CNAMEs and platform-managed hostnames) and observes the
//! resolution of self-managed hostnames.

use queues::runtime::Platform;
use shared::dns::{DnsReport, sync};

pub async fn run(platform: &Platform) -> anyhow::Result<DnsReport> {
    Ok(sync(&platform.pool, &platform.settings).await?)
}
