//! `api-databases`: tenant PostgreSQL databases (docs/databases.md). The
//! back office registers the external PostgreSQL servers ([`instances`]);
//! users ask for databases on them for their clusters ([`databases`]),
//! which the `database_converge` job makes.

pub mod databases;
pub mod instances;

use axum::Router;
use shared::http::AppState;
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

/// The function's routes and its part of the OpenAPI document.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(shared::openapi::answering(ApiDoc::openapi(), PROBLEM_CODES))
        .routes(routes!(instances::list, instances::create))
        .routes(routes!(instances::get, instances::put, instances::delete))
        .routes(routes!(databases::list, databases::create))
        .routes(routes!(
            databases::get,
            databases::update,
            databases::delete
        ))
        .routes(routes!(databases::retry))
        .routes(routes!(databases::rotate))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(tags(
    (name = "databases", description = "Tenant PostgreSQL databases of clusters, and the instances they are made on")
))]
struct ApiDoc;

/// The problem codes of this function's own refusals (the platform's and
/// its capabilities' come with `shared::http::problem_codes`).
const PROBLEM_CODES: &[&str] = &[
    "database_instance_in_use",
    "database_instance_name_taken",
    "database_instance_unreachable",
    "database_changed",
    "database_deleting",
    "database_instance_disabled",
    "database_name_taken",
    "database_not_ready",
    "database_not_stopped",
    "database_server_name_taken",
    "extensions_append_only",
    "no_database_instance",
];
