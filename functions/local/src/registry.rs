// generated from functions.toml by `python3 scripts/check-functions.py --write`: do not edit.

//! Every function of the platform, as `functions.toml` lists them.

use std::sync::Arc;

use axum::Router;
use queues::runtime::Schedule;
use shared::{host::HostCluster, http::AppState, jobs::JobHandler, secretbox::SecretBox};

/// The OpenAPI documents of the HTTP functions, to merge: each from the
/// function's routes.
pub fn documents() -> [utoipa::openapi::OpenApi; 12] {
    [
        api_auth::routes().into_openapi(),
        api_account::routes().into_openapi(),
        api_clusters::routes().into_openapi(),
        api_nodes::routes().into_openapi(),
        api_ingress::routes().into_openapi(),
        api_admin::routes().into_openapi(),
        api_billing::routes().into_openapi(),
        join::routes().into_openapi(),
        admission::routes().into_openapi(),
        api_labels::routes().into_openapi(),
        api_databases::routes().into_openapi(),
        api_organizations::routes().into_openapi(),
    ]
}

/// An HTTP function's router.
pub type MakeRouter = fn() -> Router<AppState>;

/// Each HTTP function's router, by its name.
pub const ROUTERS: [(&str, MakeRouter); 13] = [
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
    ("api-databases", api_databases::router),
    ("api-organizations", api_organizations::router),
];

/// Every schedule function.
pub fn schedules() -> [&'static Schedule; 9] {
    [
        &sweep::SCHEDULE,
        &sync_clusters::SCHEDULE,
        &sync_nodes::SCHEDULE,
        &sync_metrics::SCHEDULE,
        &sync_edge::SCHEDULE,
        &sync_haproxy::SCHEDULE,
        &sync_databases::SCHEDULE,
        &sync_dns::SCHEDULE,
        &notify::SCHEDULE,
    ]
}

/// Every job function's handler, acting on `host`; those that hold the
/// settings key (`secrets` naming `settings_key`) seal and open with `key`.
pub fn handlers(
    host: Option<Arc<HostCluster>>,
    key: Option<Arc<SecretBox>>,
) -> Vec<Arc<dyn JobHandler>> {
    vec![
        Arc::new(job_cluster_create::CreateCluster::new(host.clone())),
        Arc::new(job_cluster_update::UpdateCluster::new(host.clone())),
        Arc::new(job_cluster_delete::DeleteCluster::new(host.clone())),
        Arc::new(job_node_remove::RemoveNode::new(host.clone())),
        Arc::new(job_ingress_converge::ConvergeIngress::new(host.clone())),
        Arc::new(job_database_converge::ConvergeDatabases::new(
            host.clone(),
            key.clone(),
        )),
        Arc::new(job_endpoint_retire::RetireEndpoint::new(host.clone())),
    ]
}
