use axum::{
    extract::State,
    http::header,
    response::{IntoResponse, Response},
};
use shared::{
    error::ApiError,
    extract::AppPath,
    http::{AppState, Caller},
};
use uuid::Uuid;

use crate::read::owned;

/// Download the cluster's kubeconfig
///
/// The admin kubeconfig of the cluster's control plane, with its server set to
/// the public endpoint. 409 while the control plane is not ready.
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/kubeconfig",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path)),
    responses(
        (status = 200, description = "A kubeconfig (JSON, which is also valid YAML)", content_type = "application/yaml", body = String),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not available yet (`kubeconfig_unavailable`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "No host cluster is configured", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn download(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(cluster_id): AppPath<Uuid>,
) -> Result<Response, ApiError> {
    let cluster = owned(&state, caller, cluster_id).await?;
    let unavailable = || ApiError::Conflict {
        code: "kubeconfig_unavailable",
        detail: format!(
            "the kubeconfig is not available while the cluster is {}; try again when it is ready",
            cluster.status
        ),
    };
    let (true, Some(server)) = (
        cluster.kubeconfig_available,
        cluster.api_endpoint.as_deref(),
    ) else {
        return Err(unavailable());
    };
    let host = state.host.as_ref().ok_or(ApiError::Unavailable)?;
    let kubeconfig = host
        .kubeconfig(&cluster, server)
        .await
        .map_err(|err| ApiError::Internal(anyhow::anyhow!("reading the kubeconfig: {err}")))?
        .ok_or_else(unavailable)?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/yaml".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"kubeconfig-{}.yaml\"", cluster.name),
            ),
        ],
        kubeconfig,
    )
        .into_response())
}
