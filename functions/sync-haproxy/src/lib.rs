//! `sync-haproxy`: the schedule that keeps the shared HAProxy's map of the
//! `haproxy` provider ([`shared::host::haproxy`]) equal to the clusters,
//! on every replica: each live `loadbalancer` cluster's SNI host mapped to
//! its control plane, nothing else. The cluster jobs write an entry as they
//! create, switch or delete a cluster; this run repairs what they could not
//! (a replica that restarted with the chart's empty map, a new replica, an
//! entry left by a job that died, a Service whose address changed). It
//! reads one Service per load-balanced cluster and one map per replica,
//! and writes only the differences; other providers skip it.

use std::{collections::BTreeMap, net::SocketAddr};

use queues::runtime::{Schedule, ScheduleContext};
use serde::Serialize;
use shared::{
    clusters,
    config::Millis,
    host::{HostCluster, LoadBalancerProvider, haproxy::map_value, sni_host},
};

pub const SCHEDULE: Schedule = Schedule {
    name: "sync-haproxy",
    interval: Millis::new("SYNC_HAPROXY_INTERVAL_MS", 10_000),
    needs_host: true,
    needs_publisher: false,
    run: |ctx| Box::pin(async move { Ok(serde_json::to_value(run(&ctx).await?)?) }),
};

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct MapReport {
    /// Why nothing was done, when nothing was.
    pub skipped: Option<&'static str>,
    pub replicas: usize,
    /// The clusters that should be mapped, and were found an address.
    pub clusters: usize,
    /// Entries added or changed, over all replicas.
    pub written: usize,
    /// Entries of no live cluster, removed, over all replicas.
    pub removed: usize,
}

pub async fn run(ctx: &ScheduleContext) -> anyhow::Result<MapReport> {
    converge(&ctx.pool, ctx.host()?).await
}

pub async fn converge(pool: &sqlx::PgPool, host: &HostCluster) -> anyhow::Result<MapReport> {
    let LoadBalancerProvider::Haproxy(haproxy) = &host.settings().load_balancer else {
        return Ok(MapReport {
            skipped: Some("the load balancer provider is not haproxy"),
            ..MapReport::default()
        });
    };
    let mut wanted: BTreeMap<String, SocketAddr> = BTreeMap::new();
    let mut unknown = Vec::new();
    for cluster in clusters::list_load_balanced(pool).await? {
        let name = sni_host(&cluster, &haproxy.base_domain);
        match host.haproxy_target(&cluster, haproxy).await? {
            Some(target) => {
                wanted.insert(name, target);
            }
            // No address yet (its Service is being made): what a replica
            // holds for it stays, neither written nor removed.
            None => unknown.push(name),
        }
    }
    let mut report = MapReport {
        clusters: wanted.len(),
        ..MapReport::default()
    };
    for replica in haproxy.replicas().await? {
        report.replicas += 1;
        let current = haproxy.show(replica).await?;
        for (name, target) in &wanted {
            if current.get(name) != Some(&map_value(*target)) {
                haproxy.put(replica, &current, name, *target).await?;
                report.written += 1;
            }
        }
        for name in current.keys() {
            if !wanted.contains_key(name) && !unknown.contains(name) {
                haproxy.remove(replica, name).await?;
                report.removed += 1;
            }
        }
    }
    Ok(report)
}
