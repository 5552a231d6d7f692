use axum::{extract::State, response::Response};
use shared::{
    db::{
        clusters,
        jobs::{self, NewJob},
    },
    domain::JobType,
    error::{ApiError, unique_violation},
    extract::AppPath,
    http::{AppState, Caller, accepted},
    jobs::enqueue_and_publish_after_commit,
};
use uuid::Uuid;

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
    AppPath(cluster_id): AppPath<Uuid>,
) -> Result<Response, ApiError> {
    let mut tx = state.pool.begin().await?;
    clusters::lock_owned(&mut tx, caller.user_id, cluster_id)
        .await?
        .ok_or(ApiError::NotFound { what: "cluster" })?;
    let cluster = clusters::get_owned(&mut *tx, caller.user_id, cluster_id)
        .await?
        .ok_or(ApiError::NotFound { what: "cluster" })?;
    let activity = jobs::activity(&mut tx, cluster.id).await?;
    if activity.active_job.as_deref() == Some(JobType::ClusterDelete.as_str())
        || activity.queued_operation.as_deref() == Some(JobType::ClusterDelete.operation())
    {
        return Err(ApiError::Conflict {
            code: "cluster_delete_in_progress",
            detail: "this cluster is already being deleted".into(),
        });
    }
    if activity.active_job.is_some() {
        let operation_id = jobs::queue_operation(
            &mut tx,
            cluster.id,
            JobType::ClusterDelete,
            Some(caller.user_id),
        )
        .await?;
        tx.commit().await?;
        let operation = jobs::get_operation(&state.pool, operation_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("operation vanished after commit"))?;
        return Ok(accepted(OperationAccepted { operation, cluster }));
    }
    clusters::mark_deleting(&mut tx, cluster.id).await?;
    let payload = serde_json::json!({ "namespace": cluster.namespace, "vcluster_name": cluster.vcluster_name });
    let enqueued = enqueue_and_publish_after_commit(
        &state.pool,
        state.publisher.as_ref(),
        tx,
        NewJob {
            cluster_id: cluster.id,
            job_type: JobType::ClusterDelete,
            requested_by: Some(caller.user_id),
            payload: &payload,
            max_attempts: state.settings.jobs.max_attempts,
        },
    )
    .await
    .map_err(job_conflict)?;
    let operation = jobs::get_operation(&state.pool, enqueued.operation_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("operation vanished after commit"))?;
    let cluster = clusters::get_owned(&state.pool, caller.user_id, cluster.id)
        .await?
        .ok_or(ApiError::NotFound { what: "cluster" })?;
    Ok(accepted(OperationAccepted { operation, cluster }))
}

/// 409 `cluster_job_active` when the cluster already has a pending or running job.
pub(crate) fn job_conflict(err: sqlx::Error) -> ApiError {
    match unique_violation(&err) {
        Some("idx_cluster_jobs_active_cluster") => ApiError::Conflict {
            code: "cluster_job_active",
            detail: "another operation on this cluster is still pending or running; try again when it has finished".into(),
        },
        _ => err.into(),
    }
}
