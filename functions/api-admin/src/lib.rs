//! `api-admin`: the back office under `/api/console/admin/*`. So far: the
//! cluster job queue (read, retry a failed job, cancel a pending one).

mod cluster_jobs;

use axum::{
    Router,
    routing::{get, post},
};
use shared::http::AppState;
use utoipa::OpenApi;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/console/admin/cluster-jobs", get(cluster_jobs::list))
        .route(
            "/api/console/admin/cluster-jobs/{job_id}/retry",
            post(cluster_jobs::retry),
        )
        .route(
            "/api/console/admin/cluster-jobs/{job_id}/cancel",
            post(cluster_jobs::cancel),
        )
}

#[derive(OpenApi)]
#[openapi(
    paths(cluster_jobs::list, cluster_jobs::retry, cluster_jobs::cancel),
    tags((name = "admin", description = "Back office (administrators only)"))
)]
pub struct ApiDoc;
