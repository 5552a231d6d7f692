use serde::Serialize;
use shared::{domain::KubernetesVersion, extract::AppJson, http::Caller};
use utoipa::ToSchema;

/// The Kubernetes versions a cluster can be created with.
#[derive(Debug, Serialize, ToSchema)]
pub struct KubernetesVersions {
    /// Minor versions, oldest first (`1.33`).
    pub versions: Vec<String>,
    /// The one a create without `kubernetes_version` gets.
    pub default: String,
}

/// Supported Kubernetes versions
///
/// The minor versions the platform runs as a control plane, for a client
/// to offer as a choice.
#[utoipa::path(
    get,
    path = "/api/console/kubernetes-versions",
    tag = "clusters",
    responses(
        (status = 200, body = KubernetesVersions),
        (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(_caller: Caller) -> AppJson<KubernetesVersions> {
    AppJson(KubernetesVersions {
        versions: KubernetesVersion::SUPPORTED
            .iter()
            .map(|v| v.to_string())
            .collect(),
        default: KubernetesVersion::DEFAULT.to_string(),
    })
}
