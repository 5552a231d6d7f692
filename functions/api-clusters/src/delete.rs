use axum::{extract::State, response::Response};
use shared::{
    clusters::{self, ClusterDeletion},
    domain::JobType,
    error::{ApiError, active_job_conflict},
    extract::AppPath,
    http::{AppState, Caller},
    jobs::{self, NewJob, publish_after_commit},
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
    let (job_type, payload) =
        jobs::encode(&ClusterDeletion::of(&cluster)).map_err(anyhow::Error::from)?;
    if activity.active_job.is_some() {
        let operation_id = jobs::queue_operation(
            &mut tx,
            cluster.id,
            job_type,
            Some(caller.user_id),
            &payload,
        )
        .await?;
        let answer = crate::accepted_operation(&mut tx, caller, operation_id, cluster.id).await?;
        tx.commit().await?;
        return Ok(shared::http::accepted(answer));
    }
    clusters::mark_deleting(&mut tx, cluster.id).await?;
    let enqueued = jobs::enqueue(
        &mut tx,
        NewJob {
            cluster_id: cluster.id,
            job_type,
            requested_by: Some(caller.user_id),
            payload: &payload,
            max_attempts: state.settings.jobs.max_attempts,
        },
    )
    .await
    .map_err(active_job_conflict)?;
    let answer =
        crate::accepted_operation(&mut tx, caller, enqueued.operation_id, cluster.id).await?;
    tx.commit().await?;
    publish_after_commit(&state.pool, state.publisher.as_ref(), enqueued.job).await;
    Ok(shared::http::accepted(answer))
}
