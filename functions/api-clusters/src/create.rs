use axum::{extract::State, response::Response};
use serde::{Deserialize, Serialize};
use shared::{
    billing::entitlements::Amounts,
    clusters::{self, Cluster, ClusterCreation, NewCluster},
    domain::{ClusterName, KubernetesVersion, PublicAccessMode},
    error::{ApiError, FieldError, FieldErrorCode, unique_violation},
    extract::AppJson,
    host::engine,
    http::{AppState, Caller, InOrganization, accepted, operations},
    jobs::Operation,
    networks::{self, AllocationError},
    organizations::Action,
};
use utoipa::ToSchema;
use uuid::Uuid;

/// Bounds that hold until plans set tighter ones.
pub(crate) const WORKLOAD_CPU_MILLI: std::ops::RangeInclusive<i64> = 100..=256_000;
pub(crate) const WORKLOAD_MEMORY_MIB: std::ops::RangeInclusive<i64> = 128..=1_048_576;
pub(crate) const CONTROL_PLANE_CPU_MILLI: std::ops::RangeInclusive<i64> = 100..=8_000;
pub(crate) const CONTROL_PLANE_MEMORY_MIB: std::ops::RangeInclusive<i64> = 256..=32_768;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateClusterRequest {
    /// RFC 1123 label, 1–40 characters, unique among the owner's live clusters.
    #[schema(
        min_length = 1,
        max_length = 40,
        pattern = "^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
    )]
    pub name: String,
    /// Kubernetes minor version, e.g. `1.33` (default).
    #[schema(pattern = "^v?1\\.3[1-4]$")]
    pub kubernetes_version: Option<String>,
    /// CPU the tenant's workloads may use in total, in millicores (100–256000).
    #[schema(minimum = 100, maximum = 256_000)]
    pub workload_cpu_limit_milli_cores: i64,
    /// Memory the tenant's workloads may use in total, in MiB (128–1048576).
    #[schema(minimum = 128, maximum = 1_048_576)]
    pub workload_memory_limit_mib: i64,
    /// Control-plane CPU request in millicores (100–8000, default 500).
    #[schema(minimum = 100, maximum = 8_000)]
    pub control_plane_cpu_request_milli_cores: Option<i64>,
    /// Control-plane memory request in MiB (256–32768, default 1024).
    #[schema(minimum = 256, maximum = 32_768)]
    pub control_plane_memory_request_mib: Option<i64>,
    /// How clients reach the control plane (default `loadbalancer`).
    pub public_access_mode: Option<PublicAccessMode>,
    #[serde(default)]
    pub managed_workload_ingress_enabled: bool,
    #[serde(default)]
    pub tailscale_enabled: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OperationAccepted {
    pub operation: Operation,
    pub cluster: Cluster,
}

struct ValidCluster {
    name: ClusterName,
    kubernetes_version: KubernetesVersion,
    workload_cpu: i32,
    workload_memory: i32,
    control_plane_cpu: i32,
    control_plane_memory: i32,
    public_access_mode: PublicAccessMode,
}

pub(crate) fn in_range(
    errors: &mut Vec<FieldError>,
    field: &str,
    value: i64,
    range: std::ops::RangeInclusive<i64>,
) -> i32 {
    if !range.contains(&value) {
        errors.push(FieldError::out_of_range(field, &range));
    }
    value.clamp(*range.start(), *range.end()) as i32
}

impl CreateClusterRequest {
    fn validate(&self) -> Result<ValidCluster, ApiError> {
        let mut errors = Vec::new();
        let name = ClusterName::parse(&self.name).map_err(|message| {
            errors.push(FieldError::coded(
                "name",
                message,
                FieldErrorCode::Name,
                &[("max", ClusterName::MAX_LEN.to_string())],
            ))
        });
        let version = KubernetesVersion::parse(
            self.kubernetes_version
                .as_deref()
                .unwrap_or(KubernetesVersion::DEFAULT),
        )
        .map_err(|message| {
            errors.push(FieldError::coded(
                "kubernetes_version",
                message,
                FieldErrorCode::NotOffered,
                &[("choices", KubernetesVersion::SUPPORTED.join(", "))],
            ))
        });
        let workload_cpu = in_range(
            &mut errors,
            "workload_cpu_limit_milli_cores",
            self.workload_cpu_limit_milli_cores,
            WORKLOAD_CPU_MILLI,
        );
        let workload_memory = in_range(
            &mut errors,
            "workload_memory_limit_mib",
            self.workload_memory_limit_mib,
            WORKLOAD_MEMORY_MIB,
        );
        let control_plane_cpu = in_range(
            &mut errors,
            "control_plane_cpu_request_milli_cores",
            self.control_plane_cpu_request_milli_cores.unwrap_or(500),
            CONTROL_PLANE_CPU_MILLI,
        );
        let control_plane_memory = in_range(
            &mut errors,
            "control_plane_memory_request_mib",
            self.control_plane_memory_request_mib.unwrap_or(1024),
            CONTROL_PLANE_MEMORY_MIB,
        );
        match (name, version) {
            (Ok(name), Ok(kubernetes_version)) if errors.is_empty() => Ok(ValidCluster {
                name,
                kubernetes_version,
                workload_cpu,
                workload_memory,
                control_plane_cpu,
                control_plane_memory,
                public_access_mode: self
                    .public_access_mode
                    .unwrap_or(PublicAccessMode::Loadbalancer),
            }),
            _ => Err(ApiError::Validation(errors)),
        }
    }
}

/// Create a cluster
///
/// Validates the request, checks the plan's limits, writes the cluster, its
/// `create` operation and the job in one transaction, and answers 202; the control plane is built by the
/// `cluster_create` job.
#[utoipa::path(
    post,
    path = "/api/console/clusters",
    tag = "clusters",
    request_body = CreateClusterRequest,
    params(("KubeBYON-Organization" = Option<Uuid>, Header, nullable = false, description = "The organization to act in (its id); the caller's personal one when absent")),
    responses(
        (status = 202, description = "Accepted; the operation tracks the work", body = OperationAccepted),
        (status = 400, description = "Malformed body", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Not authenticated", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 403, description = "The plan's cluster, CPU or memory limit would be passed (`plan_limit_exceeded`, with `plan_limit`), or the caller's role in the organization does not allow creating clusters (`forbidden`)", body = shared::billing::entitlements::PlanLimitProblem, content_type = "application/problem+json"),
        (status = 404, description = "The caller is not a member of the organization (`not_found`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A live cluster of this name exists (`cluster_name_taken`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields or organization header (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Every pod or service network of the platform's pools is taken (`network_pool_exhausted`): nothing was written", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    organization: InOrganization,
    AppJson(request): AppJson<CreateClusterRequest>,
) -> Result<Response, ApiError> {
    organization.require(Action::CreateCluster)?;
    let valid = request.validate()?;
    let id = Uuid::new_v4();
    let namespace = format!("kb-{}", id.simple());
    let mut new = NewCluster {
        id,
        owner_user_id: caller.user_id,
        organization_id: organization.id,
        name: valid.name.as_str(),
        vcluster_name: valid.name.as_str(),
        namespace: &namespace,
        kubernetes_version: valid.kubernetes_version.as_str(),
        workload_cpu_limit_milli_cores: valid.workload_cpu,
        workload_memory_limit_mib: valid.workload_memory,
        control_plane_cpu_request_milli_cores: valid.control_plane_cpu,
        control_plane_memory_request_mib: valid.control_plane_memory,
        public_access_mode: valid.public_access_mode,
        managed_workload_ingress_enabled: request.managed_workload_ingress_enabled,
        tailscale_enabled: request.tailscale_enabled,
        // The host's engine settings when this function has a host (the
        // process that makes clusters reads the same), else its own.
        engine: match &state.host {
            Some(host) => host.settings().engines.default,
            None => state.settings.part::<engine::Config>()?.default,
        },
        networks: None,
    };
    let tx = state.pool.begin().await?;
    let adds = Amounts {
        clusters: 1,
        cpu_milli_cores: valid.workload_cpu.into(),
        memory_mib: valid.workload_memory.into(),
        ..Amounts::default()
    };
    let mut tx = shared::http::plan::require(&state, tx, organization.id, &adds).await?;
    let pools = state.settings.part::<networks::Config>()?;
    new.networks = Some(networks::allocate(&mut tx, &pools, id).await.map_err(
        |err| match err {
            AllocationError::Exhausted(purpose) => ApiError::NotConfigured {
                code: "network_pool_exhausted",
                detail: format!(
                    "the platform has no free {} network for a new cluster; \
                         an administrator must widen its pools",
                    purpose.as_str()
                ),
            },
            AllocationError::Database(err) => err.into(),
        },
    )?);
    let cluster =
        clusters::insert(&mut tx, &new)
            .await
            .map_err(|err| match unique_violation(&err) {
                Some("idx_clusters_organization_name_active") => ApiError::Conflict {
                    code: "cluster_name_taken",
                    detail: format!(
                        "the organization has a cluster named {:?} already",
                        valid.name.as_str()
                    ),
                },
                _ => err.into(),
            })?;
    let creation = ClusterCreation::of(&cluster);
    let written =
        operations::enqueue(&state, &mut tx, cluster.id, caller.user_id, &creation).await?;
    crate::audit_operation(
        &mut tx,
        &caller,
        &cluster,
        "cluster.create",
        &written,
        serde_json::to_value(&creation).map_err(|e| sqlx::Error::Encode(e.into()))?,
    )
    .await?;
    let operation = written.operation(&mut tx).await?;
    written.commit(&state, tx).await?;
    Ok(accepted(OperationAccepted { operation, cluster }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: serde_json::Value) -> CreateClusterRequest {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn every_invalid_field_is_reported_at_once() {
        let err = request(serde_json::json!({
            "name": "Bad_Name",
            "kubernetes_version": "1.2",
            "workload_cpu_limit_milli_cores": 0,
            "workload_memory_limit_mib": 10_000_000,
            "control_plane_memory_request_mib": 1,
        }))
        .validate()
        .err()
        .unwrap();
        let ApiError::Validation(errors) = err else {
            panic!("{err:?}")
        };
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "name",
                "kubernetes_version",
                "workload_cpu_limit_milli_cores",
                "workload_memory_limit_mib",
                "control_plane_memory_request_mib"
            ]
        );
    }

    #[test]
    fn defaults_fill_optional_fields() {
        let valid = request(serde_json::json!({
            "name": "demo",
            "workload_cpu_limit_milli_cores": 2000,
            "workload_memory_limit_mib": 4096,
        }))
        .validate()
        .unwrap();
        assert_eq!(
            valid.kubernetes_version.as_str(),
            KubernetesVersion::DEFAULT
        );
        assert_eq!(valid.control_plane_cpu, 500);
        assert_eq!(valid.control_plane_memory, 1024);
        assert_eq!(valid.public_access_mode, PublicAccessMode::Loadbalancer);
    }
}
