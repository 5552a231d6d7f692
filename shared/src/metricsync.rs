//! Control-plane metrics: every ready cluster's control-plane pod as the host's
//! metrics API (metrics-server) sees it, stored as one snapshot per cycle —
//! or an unavailable snapshot with the reason — and pruned after a retention.
//!
//! The metrics API gives CPU and memory working set per container; load
//! averages and virtual memory (which would need a shell in the pod's /proc)
//! are not collected and stay empty.

use std::time::Duration;

use futures_util::{StreamExt, stream};
use serde::Serialize;
use sqlx::PgPool;

use crate::{
    db::{
        clusters,
        metrics::{self, NewSnapshot},
    },
    host::{HostCluster, PodUsage},
};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MetricsReport {
    pub collected: u64,
    pub unavailable: u64,
    pub pruned: u64,
}

/// The snapshot of one cluster from what the metrics API answered.
fn snapshot<'a>(
    cluster: &'a clusters::Cluster,
    answer: &'a Result<Vec<PodUsage>, String>,
) -> NewSnapshot<'a> {
    let unavailable = |error: &'a str| NewSnapshot {
        cluster_id: cluster.id,
        namespace: &cluster.namespace,
        pod_name: None,
        error: Some(error),
        total_cpu_percent: None,
        total_memory_rss_bytes: None,
        components: serde_json::json!([]),
    };
    let pods = match answer {
        Ok(pods) => pods,
        Err(error) => return unavailable(error),
    };
    let Some(pod) = pods.first() else {
        return unavailable(
            "the metrics API has no figures for the control-plane pod (is metrics-server running on the host, and the pod running?)",
        );
    };
    let components: Vec<_> = pod
        .containers
        .iter()
        .map(|c| serde_json::json!({ "name": c.name, "cpu_percent": c.cpu_cores * 100.0, "memory_bytes": c.memory_bytes }))
        .collect();
    NewSnapshot {
        cluster_id: cluster.id,
        namespace: &cluster.namespace,
        pod_name: Some(&pod.pod),
        error: None,
        total_cpu_percent: Some(pod.containers.iter().map(|c| c.cpu_cores).sum::<f64>() * 100.0),
        total_memory_rss_bytes: Some(pod.containers.iter().map(|c| c.memory_bytes).sum()),
        components: serde_json::Value::Array(components),
    }
}

/// One cycle: a snapshot of every ready cluster, `concurrency` at a time,
/// then the snapshots older than `retention` pruned.
pub async fn collect_all(
    pool: &PgPool,
    host: &HostCluster,
    concurrency: usize,
    retention: Duration,
) -> Result<MetricsReport, sqlx::Error> {
    let ready = clusters::list_observable(pool).await?;
    let answers: Vec<_> = stream::iter(ready)
        .map(|cluster| async move {
            let answer = host
                .control_plane_metrics(&cluster)
                .await
                .map_err(|e| format!("the host's metrics API: {e}"));
            (cluster, answer)
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut report = MetricsReport::default();
    for (cluster, answer) in &answers {
        let snapshot = snapshot(cluster, answer);
        if snapshot.error.is_some() {
            report.unavailable += 1;
        } else {
            report.collected += 1;
        }
        metrics::insert(pool, &snapshot).await?;
    }
    report.pruned = metrics::prune(pool, retention).await?;
    Ok(report)
}
