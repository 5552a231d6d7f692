//! `job-node-remove`: takes a node out of its cluster as `kubectl drain` and
//! `kubectl delete node` would: cordon, evict its pods through the Eviction API
//! (DaemonSet and mirror pods stay; disruption budgets are respected), delete
//! the Node object, then soft-delete the node with a `deleted` event. Every
//! step is idempotent, so a retried attempt picks up where one stopped.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api,
    api::{EvictParams, ListParams, Patch, PatchParams},
};
use shared::{
    clusters,
    domain::{FailureCode, NodeEventType, NodeStatus},
    host::{HostCluster, HostError},
    jobs::{Finished, JobContext, JobError, Stage, StepError, TypedJobHandler},
    nodes::{self, NewNodeEvent, NodeRemoval},
};

pub const NO_HOST_ADAPTER: &str =
    "cannot reach the cluster: no host cluster adapter is configured on this platform";

pub struct RemoveNode {
    host: Option<Arc<HostCluster>>,
}

impl RemoveNode {
    pub fn new(host: Option<Arc<HostCluster>>) -> Self {
        Self { host }
    }
}

/// `Ok(false)` when the object is already gone.
fn present<T>(result: Result<T, kube::Error>, step: &str) -> Result<bool, JobError> {
    match result.map_err(HostError::from) {
        Ok(_) => Ok(true),
        Err(HostError::Api { code: 404, .. }) => Ok(false),
        Err(err) => Err(err.at_step(step)),
    }
}

// The stages this job records.
shared::stages! {
    CONNECTING = "connecting to the cluster";
    CORDONING = "cordoning the node";
    DRAINING = "draining the node";
    DELETING_NODE = "deleting the Node object";
}

#[async_trait]
impl TypedJobHandler for RemoveNode {
    type Payload = NodeRemoval;

    fn stages(&self) -> Vec<Stage> {
        STAGES.to_vec()
    }

    async fn run(&self, ctx: &JobContext, removal: NodeRemoval) -> Result<Finished, JobError> {
        let host = ctx.require(&self.host, NO_HOST_ADAPTER).await?;
        let Some(cluster) = clusters::get(&ctx.pool, ctx.job.cluster_id).await? else {
            // The cluster was deleted, and its nodes with it.
            return ctx.complete_alone().await;
        };
        let endpoint = cluster.api_endpoint.as_deref().ok_or_else(|| {
            JobError::fatal(
                FailureCode::ClusterNotReady,
                "the cluster has no API endpoint",
            )
        })?;
        let client = ctx
            .step(CONNECTING, async {
                // A cluster made before the platform's identities were split
                // gets its access now (sync-clusters would, in time).
                host.ensure_access(&ctx.pool, &cluster).await?;
                host.vcluster_client(&cluster, endpoint).await
            })
            .await?;
        let name = removal.node_name.as_str();
        let api: Api<Node> = Api::all(client.clone());

        ctx.stage(CORDONING).await?;
        let cordon = serde_json::json!({ "spec": { "unschedulable": true } });
        let exists = present(
            api.patch(name, &PatchParams::default(), &Patch::Merge(&cordon))
                .await,
            "cordoning the node",
        )?;
        let how = if !exists {
            "the Node object was already gone"
        } else if removal.force {
            "cordoned and deleted without draining (forced)"
        } else {
            ctx.stage(DRAINING).await?;
            drain(
                client,
                name,
                Duration::from_secs(removal.drain_timeout_seconds),
                host.settings().poll_interval,
            )
            .await?;
            "cordoned, drained and deleted"
        };
        if exists {
            ctx.stage(DELETING_NODE).await?;
            present(
                api.delete(name, &Default::default()).await,
                "deleting the Node object",
            )?;
        }

        let mut tx = ctx.pool.begin().await?;
        if let Some(old_status) = nodes::mark_deleted(&mut tx, removal.node_id).await? {
            nodes::insert_events(
                &mut tx,
                &[NewNodeEvent {
                    cluster_id: cluster.id,
                    node_id: removal.node_id,
                    node_name: name,
                    event_type: NodeEventType::Deleted,
                    old_status: Some(old_status),
                    new_status: NodeStatus::Deleted,
                    message: Some(format!("removed: {how}")),
                }],
            )
            .await?;
        }
        let completed = ctx.complete(&mut tx).await?;
        tx.commit().await?;
        Ok(completed)
    }
}

/// Whether draining leaves the pod where it is: DaemonSet pods (their
/// controller would put them back) and static pods' mirrors.
fn stays(pod: &Pod) -> bool {
    let daemon = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    daemon || mirror
}

/// Evicts every pod of the node that should go, until none is left or the
/// timeout passes (a fatal failure naming the pods that stayed).
async fn drain(
    client: kube::Client,
    node: &str,
    timeout: Duration,
    poll: Duration,
) -> Result<(), JobError> {
    let step = "draining the node";
    let deadline = tokio::time::Instant::now() + timeout;
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    loop {
        let pods = Api::<Pod>::all(client.clone())
            .list(&on_node)
            .await
            .map_err(|e| HostError::from(e).at_step(step))?;
        let remaining: Vec<&Pod> = pods.items.iter().filter(|p| !stays(p)).collect();
        if remaining.is_empty() {
            return Ok(());
        }
        let mut blocked = Vec::new();
        for pod in &remaining {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            match Api::<Pod>::namespaced(client.clone(), namespace)
                .evict(name, &EvictParams::default())
                .await
                .map_err(HostError::from)
            {
                Ok(_) | Err(HostError::Api { code: 404, .. }) => {}
                Err(HostError::Api { code: 429, message }) => {
                    blocked.push(format!("{namespace}/{name} ({message})"));
                }
                Err(err) => return Err(err.at_step(step)),
            }
        }
        if tokio::time::Instant::now() >= deadline {
            let names: Vec<String> = remaining
                .iter()
                .take(5)
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.metadata.namespace.as_deref().unwrap_or("default"),
                        p.metadata.name.as_deref().unwrap_or_default()
                    )
                })
                .collect();
            let why = if blocked.is_empty() {
                String::new()
            } else {
                format!("; evictions refused: {}", blocked.join(", "))
            };
            return Err(JobError::fatal(
                FailureCode::DrainTimeout,
                format!(
                    "draining {node} did not finish within {} s: {} pod(s) still on it ({}){why}. \
                 The node stays cordoned; remove it with force=true to skip draining",
                    timeout.as_secs(),
                    remaining.len(),
                    names.join(", ")
                ),
            ));
        }
        tokio::time::sleep(poll).await;
    }
}
