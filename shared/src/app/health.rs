//! A cluster's health at a glance: its control plane's state and its live
//! nodes rolled up into one word and their counts, so the console, the
//! command line and the back office judge a cluster the same way, with what
//! its workloads request of its limits. It spans capabilities (clusters,
//! nodes, admission's usage), so it lives here; the judgement
//! itself is written once, as the database view `cluster_health`
//! (migrations/20261215000001_cluster_health.sql), which the reads and the
//! `health` filter both use.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::clusters::{self, After, Cluster};
use crate::domain::text_enum;

text_enum! {
    /// A cluster's health rolled up, worst first where it matters:
    /// `failed` (its last operation failed), `in_progress` (an operation
    /// runs), `unreachable` (ready, but the control plane stopped
    /// answering), `degraded` (ready, but a node is not ready or offline),
    /// `no_nodes` (ready, with no node yet), `healthy` (ready, every node
    /// ready or still joining), `deleted`.
    Health {
        Healthy => "healthy",
        Degraded => "degraded",
        NoNodes => "no_nodes",
        Unreachable => "unreachable",
        InProgress => "in_progress",
        Failed => "failed",
        Deleted => "deleted",
    }
}

/// A cluster's live nodes (not removed) by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct NodeCounts {
    pub total: i64,
    pub ready: i64,
    pub not_ready: i64,
    pub offline: i64,
    /// Joined but not yet seen ready.
    pub pending: i64,
}

/// What a cluster's workloads request, as the platform last observed it
/// (the sum the admission webhook weighs against the cluster's limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct WorkloadUsage {
    pub cpu_requests_milli_cores: i64,
    pub memory_requests_mib: i64,
    pub pods: i32,
    pub observed_at: DateTime<Utc>,
}

/// A cluster with its nodes and its health rolled up, and what its
/// workloads use of its limits.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterWithHealth {
    #[serde(flatten)]
    pub cluster: Cluster,
    pub nodes: NodeCounts,
    pub health: Health,
    /// None until the platform has observed the cluster's workloads.
    pub usage: Option<WorkloadUsage>,
}

/// A page of clusters, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterPage {
    pub items: Vec<ClusterWithHealth>,
    /// Pass as `cursor` to read the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// `clusters` with their health and usage, read in one statement, in
/// their order.
pub async fn with_health(
    db: impl PgExecutor<'_>,
    clusters: Vec<Cluster>,
) -> Result<Vec<ClusterWithHealth>, sqlx::Error> {
    let ids: Vec<Uuid> = clusters.iter().map(|c| c.id).collect();
    type Judged = (NodeCounts, Health, Option<WorkloadUsage>);
    let mut rows: HashMap<Uuid, Judged> = sqlx::query!(
        r#"SELECT h.cluster_id AS "cluster_id!", h.nodes_total AS "total!", h.nodes_ready AS "ready!",
                  h.nodes_not_ready AS "not_ready!", h.nodes_offline AS "offline!",
                  h.nodes_pending AS "pending!", h.health AS "health!: Health",
                  u.cpu_requests_milli_cores AS "cpu?", u.memory_requests_mib AS "memory?",
                  u.pods AS "pods?", u.observed_at AS "observed_at?"
           FROM cluster_health h LEFT JOIN cluster_workload_usage u ON u.cluster_id = h.cluster_id
           WHERE h.cluster_id = ANY($1)"#,
        &ids,
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| {
        let counts = NodeCounts {
            total: r.total,
            ready: r.ready,
            not_ready: r.not_ready,
            offline: r.offline,
            pending: r.pending,
        };
        let usage = match (r.cpu, r.memory, r.pods, r.observed_at) {
            (Some(cpu), Some(memory), Some(pods), Some(observed_at)) => Some(WorkloadUsage {
                cpu_requests_milli_cores: cpu,
                memory_requests_mib: memory,
                pods,
                observed_at,
            }),
            _ => None,
        };
        (r.cluster_id, (counts, r.health, usage))
    })
    .collect();
    Ok(clusters
        .into_iter()
        .map(|cluster| {
            // Every cluster row is in the view (clusters are deleted softly,
            // never removed); one it did not answer for reads as gone.
            let (nodes, health, usage) =
                rows.remove(&cluster.id)
                    .unwrap_or((NodeCounts::default(), Health::Deleted, None));
            ClusterWithHealth {
                cluster,
                nodes,
                health,
                usage,
            }
        })
        .collect())
}

/// One cluster with its health.
pub async fn of(
    db: impl PgExecutor<'_>,
    cluster: Cluster,
) -> Result<ClusterWithHealth, sqlx::Error> {
    let mut one = with_health(db, vec![cluster]).await?;
    Ok(one.pop().expect("one cluster in, one out"))
}

/// The organisation's live clusters in `health`, after `after` (newest
/// first or by name, as it says), with `name_contains` as
/// [`clusters::list_of`] takes it: the organisation's clusters walked in
/// its index's order, each judged until the page is full.
pub async fn list_of(
    pool: &sqlx::PgPool,
    organization_id: Uuid,
    health: Health,
    name_contains: Option<&str>,
    after: &After,
    limit: i64,
) -> Result<Vec<Cluster>, sqlx::Error> {
    // One statement per order and filter, each an index walk of the
    // organisation's clusters (`idx_clusters_organization_id_created_at`,
    // `idx_clusters_organization_name_active`), as `clusters::list_of` does.
    let ids = match (after, name_contains) {
        (After::Created(before_at, before_id), None) => {
            sqlx::query_scalar!(
                r#"SELECT c.id
                   FROM clusters c JOIN cluster_health h ON h.cluster_id = c.id
                   WHERE c.organization_id = $1 AND c.deleted_at IS NULL
                     AND (c.created_at, c.id) < ($2, $3) AND h.health = $4
                   ORDER BY c.created_at DESC, c.id DESC
                   LIMIT $5"#,
                organization_id,
                before_at,
                before_id,
                health.as_str(),
                limit,
            )
            .fetch_all(pool)
            .await?
        }
        (After::Created(before_at, before_id), Some(text)) => {
            sqlx::query_scalar!(
                r#"SELECT c.id
                   FROM clusters c JOIN cluster_health h ON h.cluster_id = c.id
                   WHERE c.organization_id = $1 AND c.deleted_at IS NULL
                     AND (c.created_at, c.id) < ($2, $3) AND h.health = $4
                     AND strpos(c.name, $5) > 0
                   ORDER BY c.created_at DESC, c.id DESC
                   LIMIT $6"#,
                organization_id,
                before_at,
                before_id,
                health.as_str(),
                text,
                limit,
            )
            .fetch_all(pool)
            .await?
        }
        (After::Name(after), None) => {
            sqlx::query_scalar!(
                r#"SELECT c.id
                   FROM clusters c JOIN cluster_health h ON h.cluster_id = c.id
                   WHERE c.organization_id = $1 AND c.deleted_at IS NULL
                     AND c.name > $2 AND h.health = $3
                   ORDER BY c.name
                   LIMIT $4"#,
                organization_id,
                after,
                health.as_str(),
                limit,
            )
            .fetch_all(pool)
            .await?
        }
        (After::Name(after), Some(text)) => {
            sqlx::query_scalar!(
                r#"SELECT c.id
                   FROM clusters c JOIN cluster_health h ON h.cluster_id = c.id
                   WHERE c.organization_id = $1 AND c.deleted_at IS NULL
                     AND c.name > $2 AND h.health = $3 AND strpos(c.name, $4) > 0
                   ORDER BY c.name
                   LIMIT $5"#,
                organization_id,
                after,
                health.as_str(),
                text,
                limit,
            )
            .fetch_all(pool)
            .await?
        }
    };
    clusters::by_ids(pool, &ids).await
}
