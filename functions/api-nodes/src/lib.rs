//! `api-nodes`: the nodes of a cluster and their history. So far: node events.

mod events;

use axum::{Router, routing::get};
use shared::http::AppState;
use utoipa::OpenApi;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/console/node-events", get(events::list))
}

#[derive(OpenApi)]
#[openapi(paths(events::list), tags((name = "nodes", description = "Nodes and their history")))]
pub struct ApiDoc;
