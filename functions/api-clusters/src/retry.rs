use axum::{extract::State, response::Response};
use shared::{
    audit::{self, AuditEvent},
    error::{ApiError, active_job_conflict},
    extract::AppPath,
    http::{AppState, Caller, OwnedCluster, operations, owned},
    jobs,
    organizations::Action,
};
use uuid::Uuid;

use crate::create::OperationAccepted;

/// Retry a failed operation
///
/// Runs the operation's job again with a fresh set of attempts, when its
/// failure may go away on its own (`error.retryable`), and it is the cluster's
/// latest operation (running an older one again would undo what came after
/// it). The operation and its cluster move back in progress.
#[utoipa::path(
    post,
    path = "/api/console/clusters/{cluster_id}/operations/{operation_id}/retry",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path), ("operation_id" = Uuid, Path)),
    responses(
        (status = 202, body = OperationAccepted),
        (status = 404, description = "No such cluster of the caller's, or no such operation of it", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The operation has not failed (`operation_not_failed`), its failure would repeat (`operation_not_retryable`, the detail says what to do), a later operation exists (`operation_superseded`), or the cluster has another active job (`cluster_job_active`)", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
    AppPath((_, operation_id)): AppPath<(Uuid, Uuid)>,
) -> Result<Response, ApiError> {
    let cluster_id = authorized.id;
    let mut tx = state.pool.begin().await?;
    owned::lock(&mut tx, &caller, cluster_id, Action::Operate).await?;
    let (job, superseded) = jobs::job_of_operation(&mut tx, cluster_id, operation_id)
        .await?
        .ok_or(ApiError::NotFound { what: "operation" })?;
    let not_failed = || ApiError::Conflict {
        code: "operation_not_failed",
        detail: format!(
            "only a failed operation can be retried; this one is {}",
            job.status
        ),
    };
    if job.status != "failed" {
        return Err(not_failed());
    }
    let error = job.error.ok_or_else(not_failed)?;
    if !error.retryable {
        return Err(ApiError::Conflict {
            code: "operation_not_retryable",
            detail: format!(
                "this operation failed with {}, which a retry would meet again: {}",
                error.code, error.hint
            ),
        });
    }
    if superseded {
        return Err(ApiError::Conflict {
            code: "operation_superseded",
            detail: "a later operation exists on this cluster; request the change again instead"
                .into(),
        });
    }
    let kinds = shared::app::capabilities::job_kinds();
    let message = jobs::retry_failed(&mut tx, job.id, state.settings.jobs.max_attempts, &kinds)
        .await
        .map_err(active_job_conflict)?
        .ok_or_else(not_failed)?;
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(caller.user_id),
            actor_kind: "user",
            action: "cluster_operation.retry",
            target_kind: "cluster_operation",
            target_id: operation_id.to_string(),
            cluster_id: Some(cluster_id),
            metadata: serde_json::json!({
                "job_id": job.id,
                "previous_error": job.last_error,
                "error_code": error.code,
                "attempts_so_far": job.attempt_count,
            }),
        },
    )
    .await?;
    let written = operations::Written::retried(operation_id, message);
    let answer = crate::accepted_operation(&mut tx, &written, cluster_id).await?;
    written.commit(&state, tx).await?;
    Ok(shared::http::accepted(answer))
}
