//! `api-admin`: the back office under `/api/console/admin/*`: the cluster job
//! queue (read, retry a failed job, cancel a pending one), users, the audit
//! stream, plans, orders, the system settings and billing's settings.

mod billing_settings;
mod cluster_jobs;
mod orders;
mod plans;
mod settings;
mod users;

use axum::{
    Router,
    routing::{get, patch, post},
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
        .route("/api/console/admin/users", get(users::list))
        .route(
            "/api/console/admin/users/{user_id}",
            patch(users::update).delete(users::delete),
        )
        .route("/api/console/admin/audit-events", get(users::audit_events))
        .route(
            "/api/console/admin/plans",
            get(plans::list).post(plans::create),
        )
        .route(
            "/api/console/admin/plans/{plan_id}",
            get(plans::get).put(plans::put).delete(plans::delete),
        )
        .route("/api/console/admin/orders", get(orders::list))
        .route(
            "/api/console/admin/orders/{order_id}/cancel",
            post(orders::cancel),
        )
        .route(
            "/api/console/admin/settings",
            get(settings::get).put(settings::put),
        )
        .route(
            "/api/console/admin/billing-settings",
            get(billing_settings::get).put(billing_settings::put),
        )
}

#[derive(OpenApi)]
#[openapi(
    paths(cluster_jobs::list, cluster_jobs::retry, cluster_jobs::cancel, users::list, users::update, users::delete, users::audit_events, plans::list, plans::create, plans::get, plans::put, plans::delete, orders::list, orders::cancel, settings::get, settings::put, billing_settings::get, billing_settings::put),
    // Named by the query parameters, which utoipa does not collect from.
    components(schemas(shared::domain::JobStatus, shared::domain::UserStatus, shared::domain::UserRole)),
    tags((name = "admin", description = "Back office (administrators only)"))
)]
pub struct ApiDoc;
