use axum::{
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use shared::{
    billing::entitlements::Amounts,
    clusters::{self, ClusterChanges},
    domain::{ClusterStatus, PublicAccessMode},
    error::{ApiError, active_job_conflict},
    extract::AppJson,
    http::{AppState, Caller, OwnedCluster, operations, owned},
    organizations::Action,
};
use utoipa::ToSchema;

use crate::create::{
    CONTROL_PLANE_CPU_MILLI, CONTROL_PLANE_MEMORY_MIB, OperationAccepted, WORKLOAD_CPU_MILLI,
    WORKLOAD_MEMORY_MIB, in_range,
};

/// Fields to change; absent fields keep their value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateClusterRequest {
    #[schema(minimum = 100, maximum = 256_000)]
    pub workload_cpu_limit_milli_cores: Option<i64>,
    #[schema(minimum = 128, maximum = 1_048_576)]
    pub workload_memory_limit_mib: Option<i64>,
    #[schema(minimum = 100, maximum = 8_000)]
    pub control_plane_cpu_request_milli_cores: Option<i64>,
    #[schema(minimum = 256, maximum = 32_768)]
    pub control_plane_memory_request_mib: Option<i64>,
    /// Changing it moves the public endpoint. The update job makes the new
    /// entry, verifies it from the platform, and only then records the mode
    /// and the new `api_endpoint` (until then the cluster shows the mode that
    /// serves it); the old address keeps serving until
    /// `previous_endpoint_until`, and kubeconfigs naming it are listed as
    /// `stale`. A new address that does not answer fails the operation with
    /// `endpoint_unreachable` and the cluster stays on its old endpoint.
    pub public_access_mode: Option<PublicAccessMode>,
    pub managed_workload_ingress_enabled: Option<bool>,
}

/// Update a cluster
///
/// Writes the new snapshot, moves the cluster to `updating` and enqueues the
/// `cluster_update` job, in one transaction. Only a `ready` cluster can be
/// updated, and only one job may be active per cluster. A request that
/// changes nothing (no field, or every field as it is) writes nothing and
/// answers 200 with the cluster, except while an update runs (409).
#[utoipa::path(
    patch,
    path = "/api/console/clusters/{cluster_id}",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path)),
    request_body = UpdateClusterRequest,
    responses(
        (status = 200, description = "Nothing to change: the cluster as it is; no operation was written", body = shared::clusters::Cluster),
        (status = 202, body = OperationAccepted),
        (status = 403, description = "Raising a workload limit would pass the plan's CPU or memory limit (`plan_limit_exceeded`, with `plan_limit`)", body = shared::billing::entitlements::PlanLimitProblem, content_type = "application/problem+json"),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not ready (`cluster_not_ready`), or another operation is active (`cluster_job_active`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
    AppJson(request): AppJson<UpdateClusterRequest>,
) -> Result<Response, ApiError> {
    let cluster_id = authorized.id;
    let mut tx = state.pool.begin().await?;
    let cluster = owned::authorize(&mut tx, &caller, cluster_id, Action::Operate).await?;
    let mut errors = Vec::new();
    let mut pick = |field: &str, value: Option<i64>, current: i32, range| match value {
        Some(v) => in_range(&mut errors, field, v, range),
        None => current,
    };
    let changes = ClusterChanges {
        workload_cpu_limit_milli_cores: pick(
            "workload_cpu_limit_milli_cores",
            request.workload_cpu_limit_milli_cores,
            cluster.workload_cpu_limit_milli_cores,
            WORKLOAD_CPU_MILLI,
        ),
        workload_memory_limit_mib: pick(
            "workload_memory_limit_mib",
            request.workload_memory_limit_mib,
            cluster.workload_memory_limit_mib,
            WORKLOAD_MEMORY_MIB,
        ),
        control_plane_cpu_request_milli_cores: pick(
            "control_plane_cpu_request_milli_cores",
            request.control_plane_cpu_request_milli_cores,
            cluster.control_plane_cpu_request_milli_cores,
            CONTROL_PLANE_CPU_MILLI,
        ),
        control_plane_memory_request_mib: pick(
            "control_plane_memory_request_mib",
            request.control_plane_memory_request_mib,
            cluster.control_plane_memory_request_mib,
            CONTROL_PLANE_MEMORY_MIB,
        ),
        public_access_mode: request
            .public_access_mode
            .unwrap_or(cluster.public_access_mode),
        managed_workload_ingress_enabled: request
            .managed_workload_ingress_enabled
            .unwrap_or(cluster.managed_workload_ingress_enabled),
    };
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    // While an update runs, the row holds its target limits but still the
    // mode that serves the cluster (a switch records the new one when it is
    // verified): "nothing to change" cannot be told, and the request meets
    // the running update below.
    if changes == ClusterChanges::of(&cluster) && cluster.status != ClusterStatus::Updating {
        return Ok((StatusCode::OK, AppJson(cluster)).into_response());
    }
    if cluster.status != ClusterStatus::Ready {
        return Err(ApiError::Conflict {
            code: "cluster_not_ready",
            detail: format!(
                "the cluster is {}; only a ready cluster can be updated",
                cluster.status
            ),
        });
    }
    let adds = Amounts {
        cpu_milli_cores: i64::from(changes.workload_cpu_limit_milli_cores)
            - i64::from(cluster.workload_cpu_limit_milli_cores),
        memory_mib: i64::from(changes.workload_memory_limit_mib)
            - i64::from(cluster.workload_memory_limit_mib),
        ..Amounts::default()
    };
    let mut tx = shared::http::plan::require(&state, tx, cluster.organization_id, &adds).await?;
    clusters::apply_changes(&mut tx, cluster.id, &changes).await?;
    let written = operations::enqueue(&state, &mut tx, cluster.id, caller.user_id, &changes)
        .await
        .map_err(active_job_conflict)?;
    crate::audit_operation(
        &mut tx,
        &caller,
        &cluster,
        "cluster.update",
        &written,
        serde_json::json!({"changed": changed(&ClusterChanges::of(&cluster), &changes)}),
    )
    .await?;
    let answer = crate::accepted_operation(&mut tx, &written, cluster.id).await?;
    written.commit(&state, tx).await?;
    Ok(shared::http::accepted(answer))
}

/// The fields `after` sets to another value than `before`, each with both.
fn changed(before: &ClusterChanges, after: &ClusterChanges) -> serde_json::Value {
    let (serde_json::Value::Object(before), serde_json::Value::Object(after)) = (
        serde_json::to_value(before).unwrap_or_default(),
        serde_json::to_value(after).unwrap_or_default(),
    ) else {
        return serde_json::Value::Null;
    };
    after
        .into_iter()
        .filter(|(field, value)| before.get(field) != Some(value))
        .map(|(field, to)| {
            let from = before.get(&field).cloned().unwrap_or_default();
            (field, serde_json::json!({"from": from, "to": to}))
        })
        .collect()
}
