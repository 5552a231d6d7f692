//! Node observation: list each ready cluster's Node objects once per cycle,
//! keep the `nodes` snapshot and append `node_events` for every transition;
//! and list its pods, recording what they request for the admission webhook.
//! A cycle with no change writes no node row.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use shared::{
    admission::{
        self,
        demand::{self, Requests},
        store,
    },
    domain::{NodeEventType, NodeStatus},
    host::HostCluster,
    nodes::{
        self, NewNodeEvent, NodeSnapshot, StoredNode, jointoken,
        tokens::{self, JOIN_GRACE, StaleSecret},
    },
};

/// Clusters listed at once by default.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// The platform's view of one Node object at `now`.
pub fn snapshot_of(
    node: &Node,
    now: DateTime<Utc>,
    offline_after: Duration,
) -> Option<NodeSnapshot> {
    let name = node.metadata.name.clone()?;
    let status = node.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready");
    let last_seen_at = ready
        .as_ref()
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .and_then(|t| DateTime::from_timestamp_micros(t.0.as_microsecond()));
    let stale = last_seen_at.is_some_and(|seen| {
        now.signed_duration_since(seen)
            .to_std()
            .is_ok_and(|age| age > offline_after)
    });
    let state = match ready.as_ref().map(|c| c.status.as_str()) {
        None => NodeStatus::Pending,
        Some("Unknown") => NodeStatus::Offline,
        Some(_) if stale => NodeStatus::Offline,
        Some("True") => NodeStatus::Ready,
        Some(_) => NodeStatus::NotReady,
    };
    let info = status.node_info;
    let allocatable = status.allocatable.unwrap_or_default();
    let amount = |key: &str, scale: f64| {
        allocatable
            .get(key)
            .and_then(|q| shared::host::quantity(&q.0, scale))
    };
    Some(NodeSnapshot {
        name,
        status: state,
        internal_ip: status
            .addresses
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.type_ == "InternalIP")
            .map(|a| a.address),
        os_image: info.as_ref().map(|i| i.os_image.clone()),
        kubelet_version: info.as_ref().map(|i| i.kubelet_version.clone()),
        container_runtime_version: info.as_ref().map(|i| i.container_runtime_version.clone()),
        cpu_allocatable_milli_cores: amount("cpu", 1000.0),
        memory_allocatable_bytes: amount("memory", 1.0),
        ephemeral_storage_allocatable_bytes: amount("ephemeral-storage", 1.0),
        last_seen_at,
    })
}

/// What one cluster's cycle changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NodeSyncReport {
    pub clusters: u64,
    pub failed_clusters: u64,
    pub nodes: u64,
    pub written: u64,
    pub events: u64,
    /// New nodes linked to the join attempt (and token) that brought them.
    pub linked: u64,
    /// Bootstrap Secrets of unusable tokens deleted.
    pub secrets_deleted: u64,
}

/// Labels a join token asks for, to put on the node it joined.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelRequest {
    pub node_name: String,
    pub labels: serde_json::Value,
}

/// Applies the observed nodes of one cluster: one transaction, only when
/// something changed.
pub async fn apply(
    pool: &PgPool,
    cluster_id: Uuid,
    observed: &[NodeSnapshot],
) -> Result<(NodeSyncReport, Vec<LabelRequest>), sqlx::Error> {
    let stored = nodes::list_live(pool, cluster_id).await?;
    let mut labels = Vec::new();
    let mut report = NodeSyncReport {
        nodes: observed.len() as u64,
        ..NodeSyncReport::default()
    };
    let find = |name: &str| stored.iter().find(|s| s.snapshot.name == name);
    let changed: Vec<(&NodeSnapshot, Option<&StoredNode>)> = observed
        .iter()
        .map(|node| (node, find(&node.name)))
        .filter(|(node, old)| old.is_none_or(|old| old.snapshot != **node))
        .collect();
    let gone: Vec<&StoredNode> = stored
        .iter()
        .filter(|s| !observed.iter().any(|o| o.name == s.snapshot.name))
        .collect();
    if changed.is_empty() && gone.is_empty() {
        return Ok((report, labels));
    }
    let mut tx = pool.begin().await?;
    let changed_nodes: Vec<&NodeSnapshot> = changed.iter().map(|(node, _)| *node).collect();
    let ids: std::collections::HashMap<String, Uuid> =
        nodes::upsert_all(&mut tx, cluster_id, &changed_nodes)
            .await?
            .into_iter()
            .collect();
    report.written += changed.len() as u64;
    let new_names: Vec<String> = changed
        .iter()
        .filter(|(_, old)| old.is_none())
        .map(|(node, _)| node.name.clone())
        .collect();
    let joining = if new_names.is_empty() {
        Vec::new()
    } else {
        tokens::joining_hostnames(&mut tx, cluster_id, &new_names).await?
    };
    let mut events = Vec::new();
    for (node, old) in &changed {
        let id = *ids
            .get(&node.name)
            .ok_or_else(|| sqlx::Error::RowNotFound)?;
        let event = |event_type: NodeEventType, old_status: Option<NodeStatus>| NewNodeEvent {
            cluster_id,
            node_id: id,
            node_name: &node.name,
            event_type,
            old_status,
            new_status: if event_type == NodeEventType::Joined {
                NodeStatus::Pending
            } else {
                node.status
            },
            message: None,
        };
        match old {
            None => {
                if joining.contains(&node.name)
                    && let Some(wanted) =
                        tokens::link_joined_node(&mut tx, cluster_id, id, &node.name).await?
                {
                    report.linked += 1;
                    if wanted.as_object().is_some_and(|m| !m.is_empty()) {
                        labels.push(LabelRequest {
                            node_name: node.name.clone(),
                            labels: wanted,
                        });
                    }
                }
                events.push(event(NodeEventType::Joined, None));
                if node.status != NodeStatus::Pending {
                    events.push(event(
                        NodeEventType::of_status(node.status),
                        Some(NodeStatus::Pending),
                    ));
                }
            }
            Some(old) if old.snapshot.status != node.status => {
                events.push(event(
                    NodeEventType::of_status(node.status),
                    Some(old.snapshot.status),
                ));
            }
            Some(_) => {}
        }
    }
    for node in gone {
        nodes::mark_deleted(&mut tx, node.id).await?;
        events.push(NewNodeEvent {
            cluster_id,
            node_id: node.id,
            node_name: &node.snapshot.name,
            event_type: NodeEventType::Deleted,
            old_status: Some(node.snapshot.status),
            new_status: NodeStatus::Deleted,
            message: Some("the Node object is gone from the cluster".into()),
        });
        report.written += 1;
    }
    nodes::insert_events(&mut tx, &events).await?;
    report.events += events.len() as u64;
    tx.commit().await?;
    Ok((report, labels))
}

/// What the cluster's pods request, outside the exempt namespaces and
/// leaving out those that finished, and how many they are (the admission
/// webhook's observed usage).
pub async fn observe_pods(client: &kube::Client) -> Result<(Requests, i64), String> {
    let pods = Api::<Pod>::all(client.clone())
        .list(&Default::default())
        .await
        .map_err(|e| format!("listing the pods: {e}"))?;
    let running = pods.items.iter().filter(|pod| {
        !admission::exempt(pod.metadata.namespace.as_deref())
            && !matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
    });
    let mut count = 0;
    let mut total = Requests::default();
    for pod in running {
        let spec = serde_json::to_value(&pod.spec).unwrap_or_default();
        total = total.plus(demand::pod(&spec));
        count += 1;
    }
    Ok((total, count))
}

/// One cycle over every ready cluster, `concurrency` clusters at a time: one
/// Node list per cluster, the snapshot and events written where something
/// changed, token labels put on newly joined nodes, and the bootstrap Secrets
/// of tokens that can no longer be used deleted.
pub async fn sync_all(
    pool: &PgPool,
    host: &HostCluster,
    concurrency: usize,
    offline_after: Duration,
) -> Result<NodeSyncReport, sqlx::Error> {
    let mut stale: std::collections::HashMap<Uuid, Vec<StaleSecret>> = Default::default();
    for secret in tokens::stale_secrets(pool, JOIN_GRACE).await? {
        stale.entry(secret.cluster_id).or_default().push(secret);
    }
    let stale = &stale;
    let results = host
        .across_ready_clusters(pool, concurrency, None, |cluster, client| async move {
            let cluster_id = cluster.id;
            let began = Utc::now();
            let pods = observe_pods(&client).await?;
            let api = Api::<Node>::all(client.clone());
            let list = api
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let now = Utc::now();
            let observed: Vec<_> = list
                .items
                .iter()
                .filter_map(|n| snapshot_of(n, now, offline_after))
                .collect();
            let (mut report, labels) = apply(pool, cluster_id, &observed)
                .await
                .map_err(|e| format!("recording the nodes: {e}"))?;
            let usage = store::Observed {
                requests: pods.0,
                pods: pods.1,
                nodes: list.items.len() as i64,
                at: began,
            };
            store::record_usage(pool, cluster_id, &usage)
                .await
                .map_err(|e| format!("recording the workload usage: {e}"))?;
            for request in labels {
                let patch = serde_json::json!({ "metadata": { "labels": request.labels } });
                if let Err(error) = api
                    .patch(&request.node_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    tracing::warn!(%cluster_id, node = %request.node_name, %error, "could not label a joined node");
                }
            }
            for secret in stale.get(&cluster_id).into_iter().flatten() {
                match jointoken::delete_bootstrap_secret(client.clone(), &secret.name).await {
                    Ok(()) => {
                        tokens::mark_secret_deleted(pool, secret)
                            .await
                            .map_err(|e| e.to_string())?;
                        report.secrets_deleted += 1;
                    }
                    Err(error) => {
                        tracing::info!(%cluster_id, token_id = %secret.token_id, %error, "bootstrap Secret not deleted yet");
                    }
                }
            }
            Ok(report)
        })
        .await?;
    let mut total = NodeSyncReport::default();
    for (cluster, result) in results {
        total.clusters += 1;
        match result {
            Ok(report) => {
                total.nodes += report.nodes;
                total.written += report.written;
                total.events += report.events;
                total.linked += report.linked;
                total.secrets_deleted += report.secrets_deleted;
            }
            Err(error) => {
                tracing::info!(cluster_id = %cluster.id, error, "could not sync nodes");
                total.failed_clusters += 1;
            }
        }
    }
    Ok(total)
}
