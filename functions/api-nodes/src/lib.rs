//! `api-nodes`: join tokens and their attempt ledger, the nodes of a cluster,
//! and their history.

mod events;
mod nodes;
mod remove;
mod tokens;

use axum::{
    Router,
    routing::{delete, get},
};
use shared::http::AppState;
use utoipa::OpenApi;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/console/node-events", get(events::list))
        .route(
            "/api/console/clusters/{cluster_id}/tokens",
            get(tokens::list).post(tokens::create),
        )
        .route(
            "/api/console/clusters/{cluster_id}/tokens/{token_id}",
            delete(tokens::revoke),
        )
        .route(
            "/api/console/clusters/{cluster_id}/join-attempts",
            get(tokens::attempts),
        )
        .route("/api/console/clusters/{cluster_id}/nodes", get(nodes::list))
        .route(
            "/api/console/clusters/{cluster_id}/nodes/{node_id}",
            delete(remove::remove),
        )
        .route(
            "/api/console/clusters/{cluster_id}/nodes/{node_id}/timeline",
            get(nodes::timeline),
        )
}

#[derive(OpenApi)]
#[openapi(
    paths(
        events::list,
        tokens::create,
        tokens::list,
        tokens::revoke,
        tokens::attempts,
        nodes::list,
        nodes::timeline,
        remove::remove
    ),
    tags((name = "nodes", description = "Join tokens, nodes and their history"))
)]
pub struct ApiDoc;
