//! `api-nodes`: join tokens and their attempt ledger, the nodes of a cluster,
//! and their history.

mod events;
mod nodes;
mod remove;
mod tokens;

use axum::Router;
use shared::http::AppState;
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(shared::openapi::answering(ApiDoc::openapi(), PROBLEM_CODES))
        .routes(routes!(events::list))
        .routes(routes!(tokens::list, tokens::create))
        .routes(routes!(tokens::revoke))
        .routes(routes!(tokens::attempts))
        .routes(routes!(nodes::list))
        .routes(routes!(remove::remove))
        .routes(routes!(nodes::timeline))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(
    tags((name = "nodes", description = "Join tokens, nodes and their history"))
)]
struct ApiDoc;

/// The problem codes of this function's own refusals (the platform's and
/// its capabilities' come with `shared::http::problem_codes`).
const PROBLEM_CODES: &[&str] = &["node_removal_in_progress", "token_not_active"];
