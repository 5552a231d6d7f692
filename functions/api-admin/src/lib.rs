//! `api-admin`: the back office under `/api/console/admin/*`: the cluster job
//! queue (read, retry a failed job, cancel a pending one), users, the audit
//! stream, plans, orders, the system settings and billing's settings.

mod billing_settings;
mod cluster_jobs;
mod clusters;
mod orders;
mod plans;
mod settings;
mod users;

use axum::Router;
use shared::http::AppState;
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(shared::openapi::answering(ApiDoc::openapi(), PROBLEM_CODES))
        .routes(routes!(clusters::list))
        .routes(routes!(cluster_jobs::list))
        .routes(routes!(cluster_jobs::retry))
        .routes(routes!(cluster_jobs::cancel))
        .routes(routes!(users::list))
        .routes(routes!(users::update, users::delete))
        .routes(routes!(users::audit_events))
        .routes(routes!(plans::list, plans::create))
        .routes(routes!(plans::get, plans::put, plans::delete))
        .routes(routes!(orders::list))
        .routes(routes!(orders::cancel))
        .routes(routes!(settings::get, settings::put))
        .routes(routes!(billing_settings::get, billing_settings::put))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(
    // Named by the query parameters, which utoipa does not collect from.
    components(schemas(shared::domain::JobStatus, shared::domain::UserStatus, shared::domain::UserRole)),
    tags((name = "admin", description = "Back office (administrators only)"))
)]
struct ApiDoc;

/// The problem codes of this function's own refusals (the platform's and
/// its capabilities' come with `shared::http::problem_codes`).
const PROBLEM_CODES: &[&str] = &[
    "settings_key_missing",
    "plan_in_use",
    "plan_name_taken",
    "job_not_failed",
    "job_not_pending",
    "cannot_change_self",
    "user_has_clusters",
    "user_owns_organization",
    "order_cancelled",
];
