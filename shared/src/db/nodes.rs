//! The `nodes` snapshot and the `node_events` history.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;
use uuid::Uuid;

/// What the platform last saw of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSnapshot {
    pub name: String,
    /// `pending`, `ready`, `not_ready` or `offline`.
    pub status: String,
    pub internal_ip: Option<String>,
    pub os_image: Option<String>,
    pub kubelet_version: Option<String>,
    pub container_runtime_version: Option<String>,
    pub cpu_allocatable_milli_cores: Option<i64>,
    pub memory_allocatable_bytes: Option<i64>,
    pub ephemeral_storage_allocatable_bytes: Option<i64>,
    pub last_seen_at: Option<DateTime<Utc>>,
}

/// A stored live node: its id and snapshot.
#[derive(Debug, Clone)]
pub struct StoredNode {
    pub id: Uuid,
    pub snapshot: NodeSnapshot,
}

pub async fn list_live(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
) -> Result<Vec<StoredNode>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT id, name, status, host(internal_ip) AS internal_ip, os_image, kubelet_version,
                  container_runtime_version, cpu_allocatable_milli_cores, memory_allocatable_bytes,
                  ephemeral_storage_allocatable_bytes, last_seen_at
           FROM nodes WHERE cluster_id = $1 AND deleted_at IS NULL"#,
        cluster_id
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| StoredNode {
            id: r.id,
            snapshot: NodeSnapshot {
                name: r.name,
                status: r.status,
                internal_ip: r.internal_ip,
                os_image: r.os_image,
                kubelet_version: r.kubelet_version,
                container_runtime_version: r.container_runtime_version,
                cpu_allocatable_milli_cores: r.cpu_allocatable_milli_cores,
                memory_allocatable_bytes: r.memory_allocatable_bytes,
                ephemeral_storage_allocatable_bytes: r.ephemeral_storage_allocatable_bytes,
                last_seen_at: r.last_seen_at,
            },
        })
        .collect())
}

/// Inserts a node seen for the first time, or revives a deleted one of the same
/// name. Returns its id.
pub async fn upsert(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    node: &NodeSnapshot,
) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO nodes (cluster_id, name, status, internal_ip, os_image, kubelet_version,
                              container_runtime_version, cpu_allocatable_milli_cores, memory_allocatable_bytes,
                              ephemeral_storage_allocatable_bytes, last_seen_at, source,
                              ready_at, offline_at)
           VALUES ($1, $2, $3, $4::text::inet, $5, $6, $7, $8, $9, $10, $11, 'sync',
                   CASE WHEN $3 = 'ready' THEN now() END, CASE WHEN $3 = 'offline' THEN now() END)
           ON CONFLICT (cluster_id, name) DO UPDATE
           SET status = EXCLUDED.status, internal_ip = EXCLUDED.internal_ip, os_image = EXCLUDED.os_image,
               kubelet_version = EXCLUDED.kubelet_version,
               container_runtime_version = EXCLUDED.container_runtime_version,
               cpu_allocatable_milli_cores = EXCLUDED.cpu_allocatable_milli_cores,
               memory_allocatable_bytes = EXCLUDED.memory_allocatable_bytes,
               ephemeral_storage_allocatable_bytes = EXCLUDED.ephemeral_storage_allocatable_bytes,
               last_seen_at = EXCLUDED.last_seen_at,
               ready_at = CASE WHEN EXCLUDED.status = 'ready' AND nodes.status <> 'ready' THEN now() ELSE nodes.ready_at END,
               offline_at = CASE WHEN EXCLUDED.status = 'offline' AND nodes.status <> 'offline' THEN now() ELSE nodes.offline_at END,
               deleted_at = NULL
           RETURNING id"#,
        cluster_id,
        node.name,
        node.status,
        node.internal_ip,
        node.os_image,
        node.kubelet_version,
        node.container_runtime_version,
        node.cpu_allocatable_milli_cores,
        node.memory_allocatable_bytes,
        node.ephemeral_storage_allocatable_bytes,
        node.last_seen_at,
    )
    .fetch_one(tx)
    .await
}

/// A node that is no longer in the cluster's API.
/// Soft-deletes a node. Returns its status before, or `None` when it was
/// already deleted.
pub async fn mark_deleted(
    tx: &mut PgConnection,
    node_id: Uuid,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"UPDATE nodes n SET status = 'deleted', deleted_at = now()
           FROM (SELECT id, status FROM nodes WHERE id = $1 FOR UPDATE) old
           WHERE n.id = old.id AND n.deleted_at IS NULL
           RETURNING old.status"#,
        node_id
    )
    .fetch_optional(tx)
    .await
}

/// One node transition.
#[derive(Debug)]
pub struct NewNodeEvent<'a> {
    pub cluster_id: Uuid,
    pub node_id: Uuid,
    pub node_name: &'a str,
    pub event_type: &'a str,
    pub old_status: Option<String>,
    pub new_status: &'a str,
    pub message: Option<String>,
}

pub async fn insert_event(
    tx: &mut PgConnection,
    event: &NewNodeEvent<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO node_events (cluster_id, node_id, node_name, type, old_status, new_status, message)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        event.cluster_id,
        event.node_id,
        event.node_name,
        event.event_type,
        event.old_status,
        event.new_status,
        event.message,
    )
    .execute(&mut *tx)
    .await?;
    // The notification hook: a joined or offline node is news for the owner,
    // delivered by the notification capability as their settings say.
    sqlx::query!(
        "INSERT INTO notification_outbox (user_id, kind, cluster_id, payload)
         SELECT owner_user_id, 'node_' || $2, id,
                jsonb_build_object('cluster_name', name, 'node_id', $3::uuid, 'node_name', $4::text,
                                   'old_status', $5::text, 'new_status', $6::text)
         FROM clusters WHERE id = $1 AND $2 IN ('joined', 'offline')",
        event.cluster_id,
        event.event_type,
        event.node_id,
        event.node_name,
        event.old_status,
        event.new_status,
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A node event as the console shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeEvent {
    pub id: i64,
    pub cluster_id: Uuid,
    pub node_id: Option<Uuid>,
    pub node_name: String,
    /// `joined`, `ready`, `not_ready`, `pending`, `offline` or `deleted`.
    #[serde(rename = "type")]
    pub event_type: String,
    pub old_status: Option<String>,
    pub new_status: Option<String>,
    pub message: Option<String>,
    pub observed_at: DateTime<Utc>,
}

/// Events of one cluster, newest first (`observed_at DESC, id DESC`).
pub async fn list_events(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    node_id: Option<Uuid>,
    event_type: Option<&str>,
    limit: i64,
) -> Result<Vec<NodeEvent>, sqlx::Error> {
    sqlx::query_as!(
        NodeEvent,
        r#"SELECT id, cluster_id, node_id, node_name, type AS event_type, old_status, new_status, message, observed_at
           FROM node_events
           WHERE cluster_id = $1 AND ($2::uuid IS NULL OR node_id = $2) AND ($3::text IS NULL OR type = $3)
           ORDER BY observed_at DESC, id DESC
           LIMIT $4"#,
        cluster_id,
        node_id,
        event_type,
        limit
    )
    .fetch_all(db)
    .await
}

/// A node of a cluster as the console shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Node {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub name: String,
    /// `pending`, `ready`, `not_ready`, `offline` or `deleted`.
    pub status: String,
    pub internal_ip: Option<String>,
    pub os_image: Option<String>,
    pub kubelet_version: Option<String>,
    pub container_runtime_version: Option<String>,
    pub cpu_allocatable_milli_cores: Option<i64>,
    pub memory_allocatable_bytes: Option<i64>,
    pub ephemeral_storage_allocatable_bytes: Option<i64>,
    /// `sync` (seen by the node sync) or `join`.
    pub source: String,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub ready_at: Option<DateTime<Utc>>,
    pub offline_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// A cluster's nodes by name; deleted ones only when asked for.
pub async fn list(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    node_id: Option<Uuid>,
    include_deleted: bool,
) -> Result<Vec<Node>, sqlx::Error> {
    sqlx::query_as!(
        Node,
        r#"SELECT id, cluster_id, name, status, host(internal_ip) AS internal_ip, os_image, kubelet_version,
                  container_runtime_version, cpu_allocatable_milli_cores, memory_allocatable_bytes,
                  ephemeral_storage_allocatable_bytes, source, last_seen_at, ready_at, offline_at,
                  deleted_at, created_at
           FROM nodes
           WHERE cluster_id = $1 AND ($2::uuid IS NULL OR id = $2) AND ($3 OR deleted_at IS NULL)
           ORDER BY name"#,
        cluster_id,
        node_id,
        include_deleted
    )
    .fetch_all(db)
    .await
}

/// A node's events between `from` and `to`, oldest first, preceded by the last
/// event before `from` (the state the period starts in), if any.
pub async fn events_for_timeline(
    db: impl PgExecutor<'_>,
    node_id: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<NodeEvent>, sqlx::Error> {
    sqlx::query_as!(
        NodeEvent,
        r#"SELECT id AS "id!", cluster_id AS "cluster_id!", node_id, node_name AS "node_name!",
                  event_type AS "event_type!", old_status, new_status, message, observed_at AS "observed_at!"
           FROM (
               (SELECT id, cluster_id, node_id, node_name, type AS event_type, old_status, new_status, message, observed_at
                FROM node_events WHERE node_id = $1 AND observed_at < $2
                ORDER BY observed_at DESC, id DESC LIMIT 1)
               UNION ALL
               (SELECT id, cluster_id, node_id, node_name, type, old_status, new_status, message, observed_at
                FROM node_events WHERE node_id = $1 AND observed_at >= $2 AND observed_at <= $3)
           ) e
           ORDER BY observed_at, id"#,
        node_id,
        from,
        to
    )
    .fetch_all(db)
    .await
}
