//! The edge's records: each cluster's `workload_edges` row and its
//! bindings' routes.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor, PgPool};
use utoipa::ToSchema;
use uuid::Uuid;

use super::{Backend, SiteEdge};

/// A verified, live binding the edge serves.
#[derive(Debug, Clone)]
pub struct Served {
    pub id: Uuid,
    pub hostname: String,
    pub self_managed: bool,
}

/// The cluster's bindings the edge serves: live and verified.
pub async fn served(db: impl PgExecutor<'_>, cluster_id: Uuid) -> Result<Vec<Served>, sqlx::Error> {
    sqlx::query_as!(
        Served,
        r#"SELECT id, hostname, dns_management_scope = 'self_managed' AS "self_managed!"
           FROM workload_ingress_hostname_bindings
           WHERE cluster_id = $1 AND deleted_at IS NULL AND verified_at IS NOT NULL
           ORDER BY hostname"#,
        cluster_id
    )
    .fetch_all(db)
    .await
}

/// A cluster's edge as its last convergence left it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkloadEdge {
    pub cluster_id: Uuid,
    /// `pod_ips`: the Gateway reaches the cluster's ingress controller's
    /// pods directly (the host routes to them); `node_ports`: on its
    /// nodes; `unavailable`: nowhere (`backend_reason` says why), and the
    /// cluster's sites answer 503.
    #[schema(pattern = "^(pod_ips|node_ports|unavailable)$")]
    pub backend: String,
    pub backend_reason: Option<String>,
    /// Where requests go, as `ip:port`.
    pub endpoints: Vec<String>,
    /// The hostnames served, each with an `HTTPRoute`.
    pub hostnames: Vec<String>,
    pub converged_at: DateTime<Utc>,
    /// Why the last convergence failed, when it did.
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
}

pub async fn get(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
) -> Result<Option<WorkloadEdge>, sqlx::Error> {
    sqlx::query_as!(
        WorkloadEdge,
        "SELECT cluster_id, backend, backend_reason, endpoints, hostnames, converged_at,
                last_error, last_error_at
         FROM workload_edges WHERE cluster_id = $1",
        cluster_id
    )
    .fetch_optional(db)
    .await
}

/// Records a convergence: the backend, the hostnames served and each
/// binding's route; the cluster's other bindings are served nowhere.
pub async fn record(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    backend: &Backend,
    hostnames: &[String],
    sites: &[SiteEdge],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO workload_edges (cluster_id, backend, backend_reason, endpoints, hostnames, converged_at)
         VALUES ($1, $2, $3, $4, $5, now())
         ON CONFLICT (cluster_id) DO UPDATE
         SET backend = EXCLUDED.backend, backend_reason = EXCLUDED.backend_reason,
             endpoints = EXCLUDED.endpoints, hostnames = EXCLUDED.hostnames,
             converged_at = now(), last_error = NULL, last_error_at = NULL",
        cluster_id,
        backend.kind(),
        backend.reason(),
        &backend.endpoints(),
        hostnames,
    )
    .execute(&mut *tx)
    .await?;
    let bound: Vec<&SiteEdge> = sites.iter().filter(|s| s.binding_id.is_some()).collect();
    let ids: Vec<Uuid> = bound.iter().filter_map(|s| s.binding_id).collect();
    let routes: Vec<String> = bound.iter().map(|s| s.route.clone()).collect();
    let listeners: Vec<String> = bound.iter().map(|s| s.listener.clone()).collect();
    let certificates: Vec<Option<String>> = bound.iter().map(|s| s.certificate.clone()).collect();
    sqlx::query!(
        r#"UPDATE workload_ingress_hostname_bindings b
           SET edge_route = s.route, edge_listener = s.listener, edge_certificate = s.certificate
           FROM (SELECT * FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[])
                 AS s(id, route, listener, certificate)) s
           WHERE b.cluster_id = $1 AND b.id = s.id
             AND (b.edge_route, b.edge_listener, b.edge_certificate)
                 IS DISTINCT FROM (s.route, s.listener, s.certificate)"#,
        cluster_id,
        &ids,
        &routes,
        &listeners,
        &certificates as &[Option<String>],
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE workload_ingress_hostname_bindings
         SET edge_route = NULL, edge_listener = NULL, edge_certificate = NULL
         WHERE cluster_id = $1 AND NOT (id = ANY($2)) AND edge_route IS NOT NULL",
        cluster_id,
        &ids,
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The edge was taken down (the managed ingress is off): nothing is served.
pub async fn forget(tx: &mut PgConnection, cluster_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM workload_edges WHERE cluster_id = $1",
        cluster_id
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE workload_ingress_hostname_bindings
         SET edge_route = NULL, edge_listener = NULL, edge_certificate = NULL
         WHERE cluster_id = $1 AND edge_route IS NOT NULL",
        cluster_id,
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// A convergence failed: why, kept with what was served before.
pub async fn record_failure(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    error: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO workload_edges (cluster_id, backend, backend_reason, last_error, last_error_at, converged_at)
         VALUES ($1, 'unavailable', 'the edge has not been converged yet', $2, now(), now())
         ON CONFLICT (cluster_id) DO UPDATE SET last_error = $2, last_error_at = now()",
        cluster_id,
        error,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// When each cluster's edge was last converged, and for which hostnames.
#[derive(Debug, Clone)]
pub struct Converged {
    pub hostnames: Vec<String>,
    /// Where it sent requests, `ip:port`, in order.
    pub endpoints: Vec<String>,
    /// The destinations of its route plan.
    pub routes: Vec<String>,
    pub at: DateTime<Utc>,
}

pub async fn converged(pool: &PgPool) -> Result<HashMap<Uuid, Converged>, sqlx::Error> {
    let rows = sqlx::query!(
        "SELECT e.cluster_id, e.hostnames, e.endpoints, e.converged_at,
                coalesce((SELECT array_agg(r.destination::text) FROM edge_routes r
                          WHERE r.cluster_id = e.cluster_id), '{}') AS \"routes!\"
         FROM workload_edges e WHERE e.last_error IS NULL"
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.cluster_id,
                Converged {
                    hostnames: r.hostnames,
                    endpoints: r.endpoints,
                    routes: r.routes,
                    at: r.converged_at,
                },
            )
        })
        .collect())
}

/// Every hostname the clusters' edges serve, as last converged (only the
/// clusters whose managed ingress is on), each with its binding: a
/// self-managed binding's listener takes routes from its cluster's
/// namespace alone. Self-managed hostnames in the order they were bound.
pub async fn served_everywhere(pool: &PgPool) -> Result<Vec<super::https::Served>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT h.hostname AS "hostname!", c.namespace, b.id AS "binding_id?",
                  coalesce(b.dns_management_scope = 'self_managed', false) AS "self_managed!"
           FROM workload_edges e
           JOIN clusters c ON c.id = e.cluster_id
           CROSS JOIN LATERAL unnest(e.hostnames) AS h(hostname)
           LEFT JOIN workload_ingress_hostname_bindings b
                  ON b.cluster_id = e.cluster_id AND b.hostname = h.hostname
                 AND b.deleted_at IS NULL AND b.verified_at IS NOT NULL
           WHERE c.deleted_at IS NULL AND c.managed_workload_ingress_enabled
           ORDER BY b.created_at NULLS FIRST, b.id, h.hostname"#
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| super::https::Served {
            hostname: r.hostname,
            namespace: r.namespace,
            binding_id: r.binding_id,
            self_managed: r.self_managed,
        })
        .collect())
}
