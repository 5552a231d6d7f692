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

use axum::{
    Router,
    routing::{get, post},
};
use shared::http::AppState;
use utoipa::OpenApi;

pub use create::{CreateClusterRequest, OperationAccepted};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/console/clusters",
            post(create::create).get(read::list),
        )
        .route(
            "/api/console/clusters/{cluster_id}",
            get(read::get).patch(update::update).delete(delete::delete),
        )
        .route(
            "/api/console/clusters/{cluster_id}/operations",
            get(history::operations),
        )
        .route(
            "/api/console/clusters/{cluster_id}/operations/{operation_id}/retry",
            post(retry::retry),
        )
        .route(
            "/api/console/clusters/{cluster_id}/jobs",
            get(history::jobs),
        )
        .route(
            "/api/console/clusters/{cluster_id}/kubeconfigs",
            post(kubeconfig::issue).get(kubeconfig::list),
        )
        .route(
            "/api/console/clusters/{cluster_id}/kubeconfigs/{credential_id}",
            get(kubeconfig::get).delete(kubeconfig::revoke),
        )
        .route(
            "/api/console/clusters/{cluster_id}/metrics",
            get(metrics::series),
        )
}

/// 202 with the operation and the cluster as they are after the commit.
/// The 202 answer to an accepted operation, read in the transaction that
/// wrote it, before its commit: once the commit succeeds the answer is
/// certain, for nothing after it reads the database (a 503 after a commit
/// would tell the client that nothing was done).
pub(crate) async fn accepted_operation(
    tx: &mut sqlx::PgConnection,
    caller: shared::http::Caller,
    written: &shared::http::operations::Written,
    cluster_id: uuid::Uuid,
) -> Result<OperationAccepted, shared::error::ApiError> {
    use shared::{clusters, error::ApiError};
    let operation = written.operation(&mut *tx).await?;
    let cluster = clusters::get_owned(&mut *tx, caller.user_id, cluster_id)
        .await?
        .ok_or(ApiError::NotFound { what: "cluster" })?;
    Ok(OperationAccepted { operation, cluster })
}

#[derive(OpenApi)]
#[openapi(
    paths(create::create, read::list, read::get, update::update, delete::delete, history::operations, retry::retry, history::jobs, kubeconfig::issue, kubeconfig::list, kubeconfig::get, kubeconfig::revoke, metrics::series),
    components(schemas(shared::error::Problem, shared::error::FieldError)),
    tags((name = "clusters", description = "Cluster lifecycle"))
)]
pub struct ApiDoc;
