use axum::extract::State;
use serde::Deserialize;
use shared::{
    audit::{self, AuditEvent},
    domain::JobStatus,
    error::{ApiError, active_job_conflict},
    extract::{AppJson, AppPath, AppQuery},
    http::{AdminCaller, AppState},
    jobs::{self, JobRecord, publish_after_commit},
};
use utoipa::IntoParams;
use uuid::Uuid;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct QueueQuery {
    pub status: Option<JobStatus>,
    pub cluster_id: Option<Uuid>,
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// The cluster job queue
///
/// Every job, newest first: status, cluster, attempts, lease, worker, last
/// error and every attempt's error.
#[utoipa::path(
    get,
    path = "/api/console/admin/cluster-jobs",
    tag = "admin",
    params(QueueQuery),
    responses(
        (status = 200, body = Vec<JobRecord>),
        (status = 403, description = "Not an administrator", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    _admin: AdminCaller,
    AppQuery(query): AppQuery<QueueQuery>,
) -> Result<AppJson<Vec<JobRecord>>, ApiError> {
    let limit = shared::extract::page_limit(query.limit)?;
    let jobs = jobs::list_all(
        &state.pool,
        query.status.map(JobStatus::as_str),
        query.cluster_id,
        limit,
    )
    .await?;
    Ok(AppJson(jobs))
}

async fn job_or_404(state: &AppState, job_id: Uuid) -> Result<JobRecord, ApiError> {
    jobs::get(&state.pool, job_id)
        .await?
        .ok_or(ApiError::NotFound {
            what: "cluster job",
        })
}

/// Retry a failed job
///
/// Gives the job a fresh set of attempts and queues it now; its operation and
/// cluster move back in progress.
#[utoipa::path(
    post,
    path = "/api/console/admin/cluster-jobs/{job_id}/retry",
    tag = "admin",
    params(("job_id" = Uuid, Path)),
    responses(
        (status = 200, body = JobRecord),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not failed (`job_not_failed`), or the cluster has another active job (`cluster_job_active`)", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn retry(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppPath(job_id): AppPath<Uuid>,
) -> Result<AppJson<JobRecord>, ApiError> {
    let job = job_or_404(&state, job_id).await?;
    let mut tx = state.pool.begin().await?;
    let kinds = shared::app::capabilities::job_kinds();
    let message = jobs::retry_failed(&mut tx, job_id, state.settings.jobs.max_attempts, &kinds)
        .await
        .map_err(active_job_conflict)?
        .ok_or_else(|| ApiError::Conflict {
            code: "job_not_failed",
            detail: format!(
                "only a failed job can be retried; this one is {}",
                job.status
            ),
        })?;
    let metadata = serde_json::json!({ "previous_error": job.last_error, "attempts_so_far": job.attempt_count });
    audit_job_action(&mut tx, admin, &job, "cluster_job.retry", metadata).await?;
    tx.commit().await?;
    publish_after_commit(&state.pool, state.publisher.as_ref(), message).await;
    Ok(AppJson(job_or_404(&state, job_id).await?))
}

/// Cancel a pending job
#[utoipa::path(
    post,
    path = "/api/console/admin/cluster-jobs/{job_id}/cancel",
    tag = "admin",
    params(("job_id" = Uuid, Path)),
    responses(
        (status = 200, body = JobRecord),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not pending (`job_not_pending`): a running job cannot be cancelled", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn cancel(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppPath(job_id): AppPath<Uuid>,
) -> Result<AppJson<JobRecord>, ApiError> {
    let job = job_or_404(&state, job_id).await?;
    let mut tx = state.pool.begin().await?;
    let kinds = shared::app::capabilities::job_kinds();
    if !jobs::cancel_pending(&mut tx, job_id, "cancelled by an administrator", &kinds).await? {
        return Err(ApiError::Conflict {
            code: "job_not_pending",
            detail: format!(
                "only a pending job can be cancelled; this one is {}",
                job.status
            ),
        });
    }
    let metadata = serde_json::json!({ "type": job.job_type });
    audit_job_action(&mut tx, admin, &job, "cluster_job.cancel", metadata).await?;
    tx.commit().await?;
    Ok(AppJson(job_or_404(&state, job_id).await?))
}

async fn audit_job_action(
    tx: &mut sqlx::PgConnection,
    admin: AdminCaller,
    job: &JobRecord,
    action: &str,
    metadata: serde_json::Value,
) -> Result<(), sqlx::Error> {
    audit::record(
        tx,
        AuditEvent {
            actor_user_id: Some(admin.user_id),
            actor_kind: "admin",
            action,
            target_kind: "cluster_job",
            target_id: job.id.to_string(),
            cluster_id: Some(job.cluster_id),
            metadata,
        },
    )
    .await
}
