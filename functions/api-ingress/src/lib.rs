//! `api-ingress`: hostname bindings of a cluster's managed ingress. A hostname
//! under the platform's base domain is platform-managed (`sync-dns` keeps its
//! CNAME) unless the platform keeps it; any other is self-managed, and holds
//! its name only once a DNS TXT challenge proves its owner controls it.

mod agents;

use axum::{
    Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use shared::{
    audit::{self, AuditEvent},
    clusters::Cluster,
    domain::DnsManagementScope,
    error::{ApiError, unique_violation},
    extract::{AppJson, AppPath},
    host::WorkloadGateway,
    http::{AppState, Caller, OwnedCluster},
    ingress::{
        IngressConvergence,
        dnsproof::{self, Verdict},
        edge::{self, store::WorkloadEdge},
        records::{self, Binding},
    },
    jobs::{self, NewJob},
    settings,
};
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(shared::openapi::answering(ApiDoc::openapi(), PROBLEM_CODES))
        .routes(routes!(list, create))
        .routes(routes!(remove))
        .routes(routes!(verify))
        .routes(routes!(edge))
        .routes(routes!(agents::plan))
        .routes(routes!(agents::report))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(tags((name = "ingress", description = "Hostnames of the managed workload ingress")))]
struct ApiDoc;

/// RFC 1123: lowercase labels of letters, digits and inner hyphens, 1–63
/// characters each, at least two labels, 253 characters at most; no wildcard.
pub fn check_hostname(raw: &str) -> Result<(), String> {
    if raw.starts_with("*.") {
        return Err("wildcard hostnames are not allowed".into());
    }
    if raw.len() > 253 {
        return Err("must be at most 253 characters".into());
    }
    if raw != raw.to_ascii_lowercase() {
        return Err("must be lowercase".into());
    }
    let labels: Vec<&str> = raw.split('.').collect();
    let label_ok = |l: &&str| {
        (1..=63).contains(&l.len())
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if labels.len() < 2 || !labels.iter().all(label_ok) {
        return Err(
            "must be a DNS name of lowercase letters, digits and hyphens, such as shop.example.com"
                .into(),
        );
    }
    Ok(())
}

fn taken(hostname: &str) -> ApiError {
    ApiError::Conflict {
        code: "hostname_taken",
        detail: format!("{hostname} is already bound to a cluster"),
    }
}

/// The host of a URL, lowercased.
fn host_of(url: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .host_str()
        .map(str::to_ascii_lowercase)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBinding {
    /// A lowercase DNS name of two labels or more, no wildcard.
    #[schema(
        max_length = 253,
        pattern = "^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\\.)+[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
    )]
    pub hostname: String,
}

/// Bind a hostname
///
/// Under the platform's base domain the binding is `platform_managed`,
/// verified at once, globally unique (409 `hostname_taken`) and gets its CNAME
/// from `sync-dns`; names the platform keeps (its own hosts and labels such as
/// `console` or `www`, and the form of clusters' names, `<name>-<8 hex>`) are
/// refused (409 `hostname_reserved`), and so is a name under or over one
/// another organization's cluster holds (409 `hostname_taken`). Any other name is `self_managed` and
/// unverified: create the TXT record the answer names
/// (`verification_record_name` = `verification_record_value`), then ask
/// `…/verify` (`sync-dns` also checks). Until verified it holds nothing:
/// another cluster may claim the same name, and the first to prove it keeps
/// it (409 `hostname_taken` once a verified binding holds it).
#[utoipa::path(post, path = "/api/console/clusters/{cluster_id}/hostnames", tag = "ingress",
    params(("cluster_id" = Uuid, Path)), request_body = CreateBinding,
    responses((status = 201, body = Binding),
              (status = 403, description = "The plan's hostname limit is reached (`plan_limit_exceeded`, with `plan_limit`)", body = shared::billing::entitlements::PlanLimitProblem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "`hostname_taken` or `hostname_reserved`", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(cluster): OwnedCluster,
    AppJson(body): AppJson<CreateBinding>,
) -> Result<Response, ApiError> {
    let cluster_id = cluster.id;
    let hostname = body.hostname.trim().trim_end_matches('.').to_string();
    check_hostname(&hostname).map_err(|m| ApiError::invalid("hostname", m))?;
    let platform = settings::load(&state.pool).await?.fields;
    let stored = shared::ingress::settings::load(&state.pool).await?.fields;
    let base = stored
        .managed_workload_ingress_base_domain
        .as_deref()
        .map(shared::ingress::dns::normalize);
    let platform_hosts: Vec<String> = [
        stored.managed_workload_ingress_edge_target.clone(),
        platform.public_base_url.as_deref().and_then(host_of),
        platform.join_base_url.as_deref().and_then(host_of),
        host_of(&state.settings.public_base_url),
        host_of(&state.settings.join_base_url),
    ]
    .into_iter()
    .flatten()
    .collect();
    let scope = match base.as_deref() {
        Some(base) if shared::ingress::dns::is_under(&hostname, base) => {
            DnsManagementScope::PlatformManaged
        }
        Some(base) if hostname == base => {
            return Err(ApiError::invalid(
                "hostname",
                "the platform's base domain itself cannot be bound",
            ));
        }
        _ => DnsManagementScope::SelfManaged,
    };
    let own_label = shared::ingress::dns::cluster_record(&cluster.vcluster_name, cluster_id, "")
        .trim_end_matches('.')
        .to_string();
    if let Some(reason) = shared::ingress::dns::reserved(
        &hostname,
        base.as_deref().unwrap_or_default(),
        &own_label,
        &platform_hosts,
    ) {
        return Err(ApiError::Conflict {
            code: "hostname_reserved",
            detail: format!("{reason}; bind another name"),
        });
    }
    let token = (scope == DnsManagementScope::SelfManaged).then(dnsproof::new_token);
    let tx = state.pool.begin().await?;
    let adds = shared::billing::entitlements::Amounts {
        hostnames: 1,
        ..Default::default()
    };
    let mut tx = shared::http::plan::require(&state, tx, cluster.organization_id, &adds).await?;
    if records::hostname_held(&mut *tx, &hostname).await? {
        return Err(taken(&hostname));
    }
    if records::hostname_nests(&mut *tx, &hostname, cluster.organization_id).await? {
        return Err(ApiError::Conflict {
            code: "hostname_taken",
            detail: format!(
                "{hostname} is under, or over, a name another organization holds: bind a name of your own"
            ),
        });
    }
    let id = records::insert_binding(&mut *tx, cluster_id, &hostname, scope, token.as_deref())
        .await
        .map_err(|err| match unique_violation(&err) {
            Some(
                "idx_workload_ingress_hostname_bindings_hostname"
                | "idx_workload_ingress_hostname_bindings_cluster_hostname",
            ) => taken(&hostname),
            _ => err.into(),
        })?;
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(caller.user_id),
            actor_kind: "user",
            action: "hostname.bind",
            target_kind: "hostname_binding",
            target_id: id.to_string(),
            cluster_id: Some(cluster_id),
            metadata: serde_json::json!({ "hostname": hostname, "scope": scope }),
        },
    )
    .await?;
    tx.commit().await?;
    converge_edge(&state, &cluster).await?;
    let binding = records::get_binding(&state.pool, cluster_id, id)
        .await?
        .ok_or(ApiError::NotFound {
            what: "hostname binding",
        })?;
    Ok((StatusCode::CREATED, AppJson(binding)).into_response())
}

/// Check a hostname's DNS challenge now
///
/// Looks up the binding's TXT record (`verification_record_name`). Found:
/// the binding is verified and holds the name (other clusters' unverified
/// claims on it are dropped). Not found: 409 `hostname_not_verified` with
/// what the lookup saw. Verifying a verified binding changes nothing.
#[utoipa::path(post, path = "/api/console/clusters/{cluster_id}/hostnames/{binding_id}/verify", tag = "ingress",
    params(("cluster_id" = Uuid, Path), ("binding_id" = Uuid, Path)),
    responses((status = 200, body = Binding),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "`hostname_not_verified` (the record is not there yet) or `hostname_taken` (another cluster proved the name first)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn verify(
    State(state): State<AppState>,
    OwnedCluster(cluster): OwnedCluster,
    AppPath((_, binding_id)): AppPath<(Uuid, Uuid)>,
) -> Result<AppJson<Binding>, ApiError> {
    let cluster_id = cluster.id;
    if let Some(pending) = records::unverified_binding(&state.pool, cluster_id, binding_id).await? {
        match dnsproof::check_and_record(
            &state.pool,
            state
                .settings
                .part::<shared::ingress::config::Config>()?
                .dns_resolver,
            &pending,
        )
        .await?
        {
            Verdict::Verified => converge_edge(&state, &cluster).await?,
            Verdict::Taken => return Err(taken(&pending.hostname)),
            Verdict::NotFound(message) => {
                return Err(ApiError::Conflict {
                    code: "hostname_not_verified",
                    detail: message,
                });
            }
        }
    }
    records::get_binding(&state.pool, cluster_id, binding_id)
        .await?
        .map(AppJson)
        .ok_or(ApiError::NotFound {
            what: "hostname binding",
        })
}

/// Hostnames of a cluster
#[utoipa::path(get, path = "/api/console/clusters/{cluster_id}/hostnames", tag = "ingress",
    params(("cluster_id" = Uuid, Path)),
    responses((status = 200, body = Vec<Binding>), (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(state): State<AppState>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<Vec<Binding>>, ApiError> {
    let cluster_id = cluster.id;
    Ok(AppJson(
        records::list_bindings(&state.pool, cluster_id).await?,
    ))
}

/// Unbind a hostname
///
/// `sync-dns` removes its record (a platform-managed one) on its next run.
#[utoipa::path(delete, path = "/api/console/clusters/{cluster_id}/hostnames/{binding_id}", tag = "ingress",
    params(("cluster_id" = Uuid, Path), ("binding_id" = Uuid, Path)),
    responses((status = 204, description = "Unbound"), (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(cluster): OwnedCluster,
    AppPath((_, binding_id)): AppPath<(Uuid, Uuid)>,
) -> Result<StatusCode, ApiError> {
    let cluster_id = cluster.id;
    let mut tx = state.pool.begin().await?;
    if !records::delete_binding(&mut *tx, cluster_id, binding_id).await? {
        return Err(ApiError::NotFound {
            what: "hostname binding",
        });
    }
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(caller.user_id),
            actor_kind: "user",
            action: "hostname.unbind",
            target_kind: "hostname_binding",
            target_id: binding_id.to_string(),
            cluster_id: Some(cluster_id),
            metadata: serde_json::json!({}),
        },
    )
    .await?;
    tx.commit().await?;
    converge_edge(&state, &cluster).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The cluster's workload edge as last converged.
#[derive(Debug, Serialize, ToSchema)]
pub struct EdgeState {
    /// Absent until the edge was first converged, or where the platform has
    /// no workload Gateway.
    pub edge: Option<WorkloadEdge>,
}

/// The cluster's workload edge
///
/// Where the platform's shared workload Gateway sends the cluster's sites
/// (its nodes' NodePorts, or nowhere and why), the hostnames it serves and
/// the last failure; each binding's route, listener and certificate are on
/// the binding.
#[utoipa::path(get, path = "/api/console/clusters/{cluster_id}/edge", tag = "ingress",
    params(("cluster_id" = Uuid, Path)),
    responses((status = 200, body = EdgeState), (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn edge(
    State(state): State<AppState>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<EdgeState>, ApiError> {
    Ok(AppJson(EdgeState {
        edge: edge::store::get(&state.pool, cluster.id).await?,
    }))
}

/// Asks for the cluster's workload edge to serve its hostnames as they now
/// are: an `ingress_converge` job, where the host has a workload Gateway,
/// the cluster its managed ingress, and nothing else to do. A busy
/// cluster's edge is found off its target at its next observation.
async fn converge_edge(state: &AppState, cluster: &Cluster) -> Result<(), ApiError> {
    // This function holds no host client when deployed: the Gateway's
    // settings are read where every function reads its settings.
    let edge = match &state.host {
        Some(host) => host.settings().workload_gateway.is_some(),
        // Settings that do not read are the host functions' to refuse at
        // their start; a binding change still asks for its convergence.
        None => WorkloadGateway::from_source(&state.settings.environment)
            .map_or(true, |gateway| gateway.is_some()),
    };
    if !edge || !cluster.managed_workload_ingress_enabled {
        return Ok(());
    }
    let (kind, payload) =
        jobs::encode(&IngressConvergence::of(cluster)).map_err(|e| ApiError::Internal(e.into()))?;
    let new = NewJob {
        cluster_id: cluster.id,
        kind,
        requested_by: None,
        payload: &payload,
        max_attempts: state.settings.jobs.max_attempts,
    };
    jobs::enqueue_when_idle(&state.pool, &*state.publisher, new).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames_follow_rfc_1123() {
        assert!(check_hostname("shop.apps.example.com").is_ok());
        assert!(check_hostname("a-1.example.io").is_ok());
        for bad in [
            "*.example.com",
            "Shop.example.com",
            "example",
            "-a.example.com",
            "a_b.example.com",
            "a..example.com",
        ] {
            assert!(check_hostname(bad).is_err(), "{bad}");
        }
        assert!(check_hostname(&format!("{}.com", "a".repeat(64))).is_err());
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::check_hostname;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// An accepted hostname is a plain lowercase ASCII DNS name.
        #[test]
        fn an_accepted_hostname_is_lowercase_ascii_labels(
            raw in proptest::collection::vec(
                prop_oneof![
                    4 => proptest::sample::select(vec!['a', 'z', '0', '9', '-', '.', '*']),
                    1 => proptest::sample::select(vec!['A', 'İ', 'ı', '_', ' ', '\u{200b}', 'ｇ']),
                    1 => any::<char>(),
                ],
                0..70,
            ).prop_map(|c| c.into_iter().collect::<String>())
        ) {
            if check_hostname(&raw).is_ok() {
                prop_assert!(raw.len() <= 253 && raw.contains('.'));
                prop_assert!(raw.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'));
                prop_assert!(raw.split('.').all(|l| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-')));
            }
        }
    }
}

/// The problem codes of this function's own refusals (the platform's and
/// its capabilities' come with `shared::http::problem_codes`).
const PROBLEM_CODES: &[&str] = &[
    "hostname_not_verified",
    "hostname_reserved",
    "hostname_taken",
    "invalid_route_agent_token",
    "route_agents_not_configured",
];
