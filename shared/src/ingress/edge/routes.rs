//! The route plan: each cluster's node pod networks (`podCIDR`s inside the
//! network allocated to the cluster) and the node address the host reaches
//! each through. `route-agent`, on every host node, reads the whole plan
//! (`GET /api/route-agent/routes`, with its own credential), programs it as
//! routes marked with [`PROTOCOL`], and reports what it applied; the edge
//! reaches a cluster's ingress pods directly only through routes every
//! agent reports applied.

use std::{net::Ipv4Addr, time::Duration};

use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgPool};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::networks::Block;

/// The routing protocol number (`rtm_protocol`, `ip route … proto 250`)
/// the agents mark their routes with: a route without it is never theirs,
/// so never changed or removed. 250 is outside the numbers iproute2's
/// `rt_protos` names.
pub const PROTOCOL: u8 = 250;

/// How long an agent's report counts: a host node whose agent has not
/// reported for this long is not waited for (it is gone, or its agent is),
/// and routes it may still hold are not relied on.
pub const FRESH: Duration = Duration::from_secs(120);

/// A route of a cluster's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub node: String,
    pub destination: Block,
    pub via: Ipv4Addr,
}

/// A route as the agents are given it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Route {
    /// A node's pod network, `10.64.1.0/24`.
    pub destination: String,
    /// The node's address, the next hop.
    pub via: String,
}

/// Every route the host's nodes should hold.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RoutePlan {
    /// The protocol number to mark routes with; routes without it are not
    /// the agent's to touch.
    pub protocol: u8,
    pub routes: Vec<Route>,
}

/// What an agent applied on its node.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// The host node's name (its `spec.nodeName`), 1–253 characters.
    pub node: String,
    /// The destinations it holds a route to, as planned.
    pub applied: Vec<String>,
    /// The routes it could not apply, and why.
    #[serde(default)]
    pub failed: Vec<Failed>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Failed {
    pub destination: String,
    pub error: String,
}

/// Makes `plan` the cluster's route plan. The plans of deleted clusters
/// go first: their networks may have been given to this one.
pub async fn replace(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    plan: &[Planned],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM edge_routes r USING clusters c
         WHERE c.id = r.cluster_id AND (c.id = $1 OR c.deleted_at IS NOT NULL)",
        cluster_id
    )
    .execute(&mut *tx)
    .await?;
    let nodes: Vec<String> = plan.iter().map(|p| p.node.clone()).collect();
    let destinations: Vec<String> = plan.iter().map(|p| p.destination.to_string()).collect();
    let vias: Vec<String> = plan.iter().map(|p| p.via.to_string()).collect();
    sqlx::query!(
        "INSERT INTO edge_routes (cluster_id, node_name, destination, via)
         SELECT $1, n, d::cidr, v::inet FROM unnest($2::text[], $3::text[], $4::text[]) AS p(n, d, v)",
        cluster_id,
        &nodes,
        &destinations,
        &vias,
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// The cluster has no route plan (its edge was taken down).
pub async fn forget(tx: &mut PgConnection, cluster_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM edge_routes WHERE cluster_id = $1", cluster_id)
        .execute(tx)
        .await?;
    Ok(())
}

/// Every live cluster's route, by destination.
pub async fn plan(pool: &PgPool) -> Result<RoutePlan, sqlx::Error> {
    let routes = sqlx::query_as!(
        Route,
        r#"SELECT r.destination::text AS "destination!", host(r.via) AS "via!"
           FROM edge_routes r JOIN clusters c ON c.id = r.cluster_id AND c.deleted_at IS NULL
           ORDER BY r.destination"#
    )
    .fetch_all(pool)
    .await?;
    Ok(RoutePlan {
        protocol: PROTOCOL,
        routes,
    })
}

/// Records an agent's report; `applied` must be CIDRs.
pub async fn record_report(pool: &PgPool, report: &Report) -> Result<(), sqlx::Error> {
    let failed = serde_json::to_value(&report.failed).map_err(|e| sqlx::Error::Encode(e.into()))?;
    sqlx::query!(
        "INSERT INTO route_agent_reports (host_node, applied, failed, reported_at)
         VALUES ($1, $2::text[]::cidr[], $3, now())
         ON CONFLICT (host_node) DO UPDATE
         SET applied = EXCLUDED.applied, failed = EXCLUDED.failed, reported_at = now()",
        report.node,
        &report.applied,
        failed,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The planned destinations every agent that reported within [`FRESH`]
/// holds; none while no agent reports.
pub async fn routed(pool: &PgPool) -> Result<Vec<Block>, sqlx::Error> {
    let fresh = i64::try_from(FRESH.as_millis()).unwrap_or(i64::MAX);
    Ok(sqlx::query_scalar!(
        r#"WITH agents AS (
               SELECT applied FROM route_agent_reports
               WHERE reported_at > now() - $1 * interval '1 millisecond'
           )
           SELECT r.destination::text AS "destination!"
           FROM edge_routes r JOIN clusters c ON c.id = r.cluster_id AND c.deleted_at IS NULL
           WHERE EXISTS (SELECT 1 FROM agents)
             AND NOT EXISTS (SELECT 1 FROM agents a WHERE NOT (r.destination = ANY(a.applied)))"#,
        fresh as f64,
    )
    .fetch_all(pool)
    .await?
    .iter()
    .filter_map(|d| d.parse().ok())
    .collect())
}
