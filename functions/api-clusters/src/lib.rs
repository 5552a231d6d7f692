//! `api-clusters`: create, list, read and delete clusters, their operation
//! and job history, and the kubeconfigs issued for them. Lifecycle changes are answered 202 with the operation; the
//! work is done by the cluster job functions.

mod create;
mod delete;
mod history;
mod kubeconfig;
mod metrics;
mod read;
mod retry;
mod update;
mod versions;

use axum::Router;
use shared::http::AppState;
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

pub use create::{CreateClusterRequest, OperationAccepted};

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(shared::openapi::answering(ApiDoc::openapi(), PROBLEM_CODES))
        .routes(routes!(create::create, read::list))
        .routes(routes!(read::get, update::update, delete::delete))
        .routes(routes!(history::operations))
        .routes(routes!(retry::retry))
        .routes(routes!(history::jobs))
        .routes(routes!(history::activity))
        .routes(routes!(kubeconfig::issue, kubeconfig::list))
        .routes(routes!(kubeconfig::get, kubeconfig::revoke))
        .routes(routes!(kubeconfig::connection))
        .routes(routes!(kubeconfig::exec_credential))
        .routes(routes!(metrics::series))
        .routes(routes!(versions::list))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

/// Records in the audit stream, in the request's transaction, that the
/// caller asked for `action` (`cluster.create`, `cluster.update`,
/// `cluster.delete`) on the cluster: the operation it wrote, the cluster's
/// name, the API key it came with, and `details`.
pub(crate) async fn audit_operation(
    tx: &mut sqlx::PgConnection,
    caller: &shared::http::Caller,
    cluster: &shared::clusters::Cluster,
    action: &'static str,
    written: &shared::http::operations::Written,
    details: serde_json::Value,
) -> Result<(), sqlx::Error> {
    let mut metadata = serde_json::json!({
        "operation_id": written.operation_id,
        "name": cluster.name,
        "api_key_id": caller.api_key_id,
    });
    if let (Some(all), serde_json::Value::Object(details)) = (metadata.as_object_mut(), details) {
        all.extend(details);
    }
    shared::audit::record(
        &mut *tx,
        shared::audit::AuditEvent {
            actor_user_id: Some(caller.user_id),
            actor_kind: "user",
            action,
            target_kind: "cluster",
            target_id: cluster.id.to_string(),
            cluster_id: Some(cluster.id),
            metadata,
        },
    )
    .await
}

/// The 202 answer to an accepted operation, read in the transaction that
/// wrote it, before its commit: once the commit succeeds the answer is
/// certain, for nothing after it reads the database (a 503 after a commit
/// would tell the client that nothing was done).
pub(crate) async fn accepted_operation(
    tx: &mut sqlx::PgConnection,
    written: &shared::http::operations::Written,
    cluster_id: uuid::Uuid,
) -> Result<OperationAccepted, shared::error::ApiError> {
    use shared::{clusters, error::ApiError};
    let operation = written.operation(&mut *tx).await?;
    let cluster = clusters::get(&mut *tx, cluster_id)
        .await?
        .ok_or(ApiError::NotFound { what: "cluster" })?;
    Ok(OperationAccepted { operation, cluster })
}

#[derive(OpenApi)]
#[openapi(
    components(schemas(shared::error::Problem, shared::error::FieldError, shared::clusters::ClusterOrder)),
    tags((name = "clusters", description = "Cluster lifecycle"))
)]
struct ApiDoc;

/// The problem codes of this function's own refusals (the platform's and
/// its capabilities' come with `shared::http::problem_codes`).
const PROBLEM_CODES: &[&str] = &[
    "api_key_required",
    "cluster_unreachable",
    "kubeconfig_unavailable",
    "cluster_name_taken",
    "network_pool_exhausted",
    "cluster_delete_in_progress",
    "operation_not_failed",
    "operation_not_retryable",
    "operation_superseded",
    "cluster_not_ready",
];
