//! Removing a node: accepted here, carried out by the `node_remove` job.

use axum::{extract::State, response::Response};
use serde::{Deserialize, Serialize};
use shared::{
    audit::{self, AuditEvent},
    clusters::{self, ClusterDeletion},
    domain::JobPayload,
    error::{ApiError, active_job_conflict, unique_violation},
    extract::{AppPath, AppQuery},
    http::{AppState, Caller, OwnedCluster, accepted, operations},
    jobs::{self, Operation},
    nodes::{self, Node, NodeRemoval},
    organizations::Action,
};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

/// Longest drain a removal may wait for.
const MAX_DRAIN_TIMEOUT_SECS: u64 = 3600;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RemoveQuery {
    /// Skip draining: for a node that is unreachable or whose pods may be cut
    /// off. Default false.
    #[serde(default)]
    pub force: bool,
    /// How long to wait for the node's pods to be evicted: 1–3600 s, default 300.
    #[param(minimum = 1, maximum = 3600)]
    pub drain_timeout_seconds: Option<u64>,
}

/// A removal accepted: its operation, and the node as it is now.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeRemovalAccepted {
    pub operation: Operation,
    pub node: Node,
}

/// Remove a node
///
/// Cordons the node, drains it (evicting its pods through the Eviction API,
/// so disruption budgets are respected; DaemonSet and mirror pods stay) and
/// deletes its Node object; the node is then soft-deleted with a `deleted`
/// event. A drain that does not finish within the timeout fails the removal
/// and leaves the node cordoned; `force=true` skips the drain. While another
/// operation of the cluster runs, the removal waits its turn.
///
/// The machine itself is not touched: its kubelet, if still running, would
/// register again; stop it or reset the machine.
#[utoipa::path(
    delete,
    path = "/api/console/clusters/{cluster_id}/nodes/{node_id}",
    tag = "nodes",
    params(("cluster_id" = Uuid, Path), ("node_id" = Uuid, Path), RemoveQuery),
    responses(
        (status = 202, body = NodeRemovalAccepted),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The node is already being removed (`node_removal_in_progress`), or the cluster is being deleted or not ready (`cluster_not_ready`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
    AppPath((_, node_id)): AppPath<(Uuid, Uuid)>,
    AppQuery(query): AppQuery<RemoveQuery>,
) -> Result<Response, ApiError> {
    let cluster_id = authorized.id;
    let drain_timeout = query.drain_timeout_seconds.unwrap_or(300);
    if !(1..=MAX_DRAIN_TIMEOUT_SECS).contains(&drain_timeout) {
        return Err(ApiError::invalid(
            "drain_timeout_seconds",
            format!("must be between 1 and {MAX_DRAIN_TIMEOUT_SECS}"),
        ));
    }
    let mut tx = state.pool.begin().await?;
    shared::http::owned::lock(&mut tx, &caller, cluster_id, Action::Operate).await?;
    let cluster = clusters::get(&mut *tx, cluster_id)
        .await?
        .ok_or(ApiError::NotFound { what: "cluster" })?;
    let node = nodes::get(&mut *tx, cluster_id, node_id, false)
        .await?
        .ok_or(ApiError::NotFound { what: "node" })?;
    if !cluster.status.is_live() {
        return Err(ApiError::Conflict {
            code: "cluster_not_ready",
            detail: format!(
                "nodes can be removed while the cluster is ready; it is {}",
                cluster.status
            ),
        });
    }
    let activity = jobs::activity(&mut tx, cluster_id).await?;
    if activity.has(&ClusterDeletion::KIND) {
        return Err(ApiError::Conflict {
            code: "cluster_not_ready",
            detail: "the cluster is being deleted, and its nodes with it".into(),
        });
    }
    let removal = NodeRemoval {
        node_id: node.id,
        node_name: node.name.clone(),
        force: query.force,
        drain_timeout_seconds: drain_timeout,
    };
    let payload = serde_json::to_value(&removal).map_err(anyhow::Error::from)?;
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(caller.user_id),
            actor_kind: "user",
            action: "node.remove",
            target_kind: "node",
            target_id: node.id.to_string(),
            cluster_id: Some(cluster_id),
            metadata: payload.clone(),
        },
    )
    .await?;
    let in_progress = |err: sqlx::Error| match unique_violation(&err) {
        Some("idx_cluster_operations_node_removal_active") => ApiError::Conflict {
            code: "node_removal_in_progress",
            detail: format!("node {} is already being removed", node.name),
        },
        _ => active_job_conflict(err),
    };
    let written = if activity.active_job.is_some() || activity.queued_operation.is_some() {
        operations::queue_behind(&mut tx, cluster_id, caller.user_id, &removal).await
    } else {
        operations::enqueue(&state, &mut tx, cluster_id, caller.user_id, &removal).await
    }
    .map_err(in_progress)?;
    let operation = written.operation(&mut tx).await?;
    written.commit(&state, tx).await?;
    Ok(accepted(NodeRemovalAccepted { operation, node }))
}
