// generated from functions.toml by `python3 scripts/check-functions.py --write`: do not edit.

//! Every function of the platform, as `functions.toml` lists them.

use std::sync::Arc;

use axum::Router;
use queues::runtime::Schedule;
use shared::{host::HostCluster, http::AppState, jobs::JobHandler};
use utoipa::OpenApi;

/// The OpenAPI documents of the HTTP functions, to merge.
pub fn documents() -> [utoipa::openapi::OpenApi; 10] {
    [
        api_auth::ApiDoc::openapi(),
        api_account::ApiDoc::openapi(),
        api_clusters::ApiDoc::openapi(),
        api_nodes::ApiDoc::openapi(),
        api_ingress::ApiDoc::openapi(),
        api_admin::ApiDoc::openapi(),
        api_billing::ApiDoc::openapi(),
        join::ApiDoc::openapi(),
        admission::ApiDoc::openapi(),
        api_labels::ApiDoc::openapi(),
    ]
}

/// An HTTP function's router.
pub type MakeRouter = fn() -> Router<AppState>;

/// Each HTTP function's router, by its name.
pub const ROUTERS: [(&str, MakeRouter); 11] = [
    ("api-auth", api_auth::router),
    ("api-account", api_account::router),
    ("api-clusters", api_clusters::router),
    ("api-nodes", api_nodes::router),
    ("api-ingress", api_ingress::router),
    ("api-admin", api_admin::router),
    ("api-billing", api_billing::router),
    ("join", join::router),
    ("admission", admission::router),
    ("console", console::router),
    ("api-labels", api_labels::router),
];

/// Every schedule function.
pub fn schedules() -> [&'static Schedule; 6] {
    [
        &sweep::SCHEDULE,
        &sync_clusters::SCHEDULE,
        &sync_nodes::SCHEDULE,
        &sync_metrics::SCHEDULE,
        &sync_dns::SCHEDULE,
        &notify::SCHEDULE,
    ]
}

/// Every job function's handler, acting on `host`.
pub fn handlers(host: Option<Arc<HostCluster>>) -> Vec<Arc<dyn JobHandler>> {
    vec![
        Arc::new(job_cluster_create::CreateCluster::new(host.clone())),
        Arc::new(job_cluster_update::UpdateCluster::new(host.clone())),
        Arc::new(job_cluster_delete::DeleteCluster::new(host.clone())),
        Arc::new(job_node_remove::RemoveNode::new(host.clone())),
        Arc::new(job_ingress_converge::ConvergeIngress::new(host.clone())),
    ]
}
