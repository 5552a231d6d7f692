use axum::{extract::State, response::Response};
use shared::{
    clusters::{self, ClusterDeletion},
    domain::JobPayload,
    error::{ApiError, active_job_conflict},
    http::{AppState, Caller, OwnedCluster, operations, owned},
    jobs,
    organizations::Action,
};

use crate::create::OperationAccepted;

/// Delete a cluster
///
/// Marks the cluster `deleting` and enqueues the `cluster_delete` job, which
/// removes its host namespace and soft-deletes it. While a create or update is
/// still pending or running, the delete is accepted and waits its turn: its
/// operation is queued and its job starts once the other one has finished.
/// A second delete is 409.
#[utoipa::path(
    delete,
    path = "/api/console/clusters/{cluster_id}",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path)),
    responses(
        (status = 202, body = OperationAccepted),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A delete is already pending or running (`cluster_delete_in_progress`)", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
) -> Result<Response, ApiError> {
    let cluster_id = authorized.id;
    let mut tx = state.pool.begin().await?;
    owned::lock(&mut tx, &caller, cluster_id, Action::DeleteCluster).await?;
    let cluster = clusters::get(&mut *tx, cluster_id)
        .await?
        .ok_or(ApiError::NotFound { what: "cluster" })?;
    let activity = jobs::activity(&mut tx, cluster.id).await?;
    if activity.has(&ClusterDeletion::KIND) {
        return Err(ApiError::Conflict {
            code: "cluster_delete_in_progress",
            detail: "this cluster is already being deleted".into(),
        });
    }
    let deletion = ClusterDeletion::of(&cluster);
    let written = if activity.active_job.is_some() {
        operations::queue_behind(&mut tx, cluster.id, caller.user_id, &deletion).await?
    } else {
        clusters::mark_deleting(&mut tx, cluster.id).await?;
        operations::enqueue(&state, &mut tx, cluster.id, caller.user_id, &deletion)
            .await
            .map_err(active_job_conflict)?
    };
    crate::audit_operation(
        &mut tx,
        &caller,
        &cluster,
        "cluster.delete",
        &written,
        serde_json::json!({"queued_behind_active_job": activity.active_job.is_some()}),
    )
    .await?;
    let answer = crate::accepted_operation(&mut tx, &written, cluster.id).await?;
    written.commit(&state, tx).await?;
    Ok(shared::http::accepted(answer))
}
