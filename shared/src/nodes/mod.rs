//! The `nodes` snapshot and the `node_events` history.

pub mod approval;
pub mod config;
pub mod jointoken;
pub mod reasons;
pub mod tokens;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::domain::{JobKind, JobPayload, NodeEventType, NodeStatus};

/// A node-remove job's payload: which node, and how to drain it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRemoval {
    pub node_id: Uuid,
    pub node_name: String,
    /// Skip the drain: delete the node without evicting its pods.
    pub force: bool,
    pub drain_timeout_seconds: u64,
}

impl JobPayload for NodeRemoval {
    const KIND: JobKind = JobKind::new("node_remove", "node_remove");
}

/// What the platform last saw of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSnapshot {
    pub name: String,
    /// Never `deleted`: a snapshot is of a node the cluster lists.
    pub status: NodeStatus,
    pub internal_ip: Option<String>,
    pub os_image: Option<String>,
    pub kubelet_version: Option<String>,
    pub container_runtime_version: Option<String>,
    pub cpu_allocatable_milli_cores: Option<i64>,
    pub memory_allocatable_bytes: Option<i64>,
    pub ephemeral_storage_allocatable_bytes: Option<i64>,
    pub last_seen_at: Option<DateTime<Utc>>,
}

impl NodeSnapshot {
    /// A node known by its name and status alone: nothing observed of it
    /// yet (a Node registration the admission webhook records as pending).
    pub fn named(name: String, status: NodeStatus) -> Self {
        Self {
            name,
            status,
            internal_ip: None,
            os_image: None,
            kubelet_version: None,
            container_runtime_version: None,
            cpu_allocatable_milli_cores: None,
            memory_allocatable_bytes: None,
            ephemeral_storage_allocatable_bytes: None,
            last_seen_at: None,
        }
    }
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
        r#"SELECT id, name, status AS "status: NodeStatus", host(internal_ip) AS internal_ip,
                  os_image, kubelet_version, container_runtime_version, cpu_allocatable_milli_cores,
                  memory_allocatable_bytes, ephemeral_storage_allocatable_bytes, last_seen_at
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

/// Inserts the nodes seen for the first time and updates the others (reviving
/// deleted ones of the same name), in one statement. Returns each node's id
/// by name.
pub async fn upsert_all(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    nodes: &[&NodeSnapshot],
) -> Result<Vec<(String, Uuid)>, sqlx::Error> {
    macro_rules! column {
        ($field:ident) => {
            nodes.iter().map(|n| n.$field.clone()).collect::<Vec<_>>()
        };
    }
    let rows = sqlx::query!(
        r#"INSERT INTO nodes (cluster_id, name, status, internal_ip, os_image, kubelet_version,
                              container_runtime_version, cpu_allocatable_milli_cores, memory_allocatable_bytes,
                              ephemeral_storage_allocatable_bytes, last_seen_at, source,
                              ready_at, offline_at)
           SELECT $1, name, status, ip::inet, os_image, kubelet_version, runtime_version, cpu, memory, storage,
                  last_seen_at, 'sync',
                  CASE WHEN status = 'ready' THEN now() END, CASE WHEN status = 'offline' THEN now() END
           FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                       $8::bigint[], $9::bigint[], $10::bigint[], $11::timestamptz[])
                AS n(name, status, ip, os_image, kubelet_version, runtime_version, cpu, memory, storage, last_seen_at)
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
           RETURNING name, id"#,
        cluster_id,
        &column!(name),
        &nodes.iter().map(|n| n.status.as_str()).collect::<Vec<_>>() as &[&str],
        &column!(internal_ip) as &[Option<String>],
        &column!(os_image) as &[Option<String>],
        &column!(kubelet_version) as &[Option<String>],
        &column!(container_runtime_version) as &[Option<String>],
        &column!(cpu_allocatable_milli_cores) as &[Option<i64>],
        &column!(memory_allocatable_bytes) as &[Option<i64>],
        &column!(ephemeral_storage_allocatable_bytes) as &[Option<i64>],
        &column!(last_seen_at) as &[Option<DateTime<Utc>>],
    )
    .fetch_all(tx)
    .await?;
    Ok(rows.into_iter().map(|r| (r.name, r.id)).collect())
}

/// Soft-deletes a node. Returns its status before, or `None` when it was
/// already deleted.
pub async fn mark_deleted(
    tx: &mut PgConnection,
    node_id: Uuid,
) -> Result<Option<NodeStatus>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"UPDATE nodes n SET status = 'deleted', deleted_at = now()
           FROM (SELECT id, status FROM nodes WHERE id = $1 FOR UPDATE) old
           WHERE n.id = old.id AND n.deleted_at IS NULL
           RETURNING old.status AS "status: NodeStatus""#,
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
    pub event_type: NodeEventType,
    pub old_status: Option<NodeStatus>,
    pub new_status: NodeStatus,
    pub message: Option<String>,
}

/// Appends node events in one statement. The notification hook rides along:
/// a joined or offline node is news for the cluster's owner, written to the
/// outbox in the same statement for the notification capability to deliver
/// as their settings say.
pub async fn insert_events(
    tx: &mut PgConnection,
    events: &[NewNodeEvent<'_>],
) -> Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    macro_rules! column {
        ($e:ident => $value:expr) => {
            events.iter().map(|$e| $value).collect::<Vec<_>>()
        };
    }
    sqlx::query!(
        r#"WITH appended AS (
               INSERT INTO node_events (cluster_id, node_id, node_name, type, old_status, new_status, message)
               SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
               RETURNING cluster_id, node_id, node_name, type, old_status, new_status
           )
           INSERT INTO notification_outbox (user_id, kind, cluster_id, payload)
           SELECT c.owner_user_id, 'node_' || a.type, c.id,
                  jsonb_build_object('cluster_name', c.name, 'node_id', a.node_id, 'node_name', a.node_name,
                                     'old_status', a.old_status, 'new_status', a.new_status)
           FROM appended a JOIN clusters c ON c.id = a.cluster_id
           WHERE a.type IN ('joined', 'offline')"#,
        &column!(e => e.cluster_id),
        &column!(e => e.node_id),
        &column!(e => e.node_name.to_string()),
        &column!(e => e.event_type.as_str()) as &[&str],
        &column!(e => e.old_status.map(NodeStatus::as_str)) as &[Option<&str>],
        &column!(e => e.new_status.as_str()) as &[&str],
        &column!(e => e.message.clone()) as &[Option<String>],
    )
    .execute(tx)
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
    #[serde(rename = "type")]
    pub event_type: NodeEventType,
    pub old_status: Option<NodeStatus>,
    pub new_status: Option<NodeStatus>,
    pub message: Option<String>,
    pub observed_at: DateTime<Utc>,
}

/// Deletes up to `batch` node events observed longer than `age` ago, oldest
/// first (`shared::app::retention`). Returns how many.
pub async fn prune_events(
    db: impl PgExecutor<'_>,
    age: std::time::Duration,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM node_events WHERE id IN (
             SELECT id FROM node_events WHERE observed_at < now() - make_interval(secs => $1)
             ORDER BY observed_at LIMIT $2)",
        age.as_secs_f64(),
        batch
    )
    .execute(db)
    .await?
    .rows_affected())
}

/// `SELECT` of a node event, then the statement's own conditions and order.
macro_rules! node_event_query {
    ($rest:literal, $($arg:expr),* $(,)?) => {
        sqlx::query_as!(
            NodeEvent,
            r#"SELECT id, cluster_id, node_id, node_name, type AS "event_type: NodeEventType",
                      old_status AS "old_status: NodeStatus", new_status AS "new_status: NodeStatus",
                      message, observed_at
               FROM node_events "# + $rest,
            $($arg),*
        )
    };
}

/// Events of one cluster, newest first (`observed_at DESC, id DESC`), of
/// one node (`idx_node_events_node_observed_at`) or all
/// (`idx_node_events_cluster_observed_at`); the type filter is an array,
/// every type when absent, so one plan serves both.
pub async fn list_events(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    node_id: Option<Uuid>,
    event_type: Option<NodeEventType>,
    limit: i64,
) -> Result<Vec<NodeEvent>, sqlx::Error> {
    let types: Vec<&str> = match event_type {
        Some(event_type) => vec![event_type.as_str()],
        None => NodeEventType::ALL.iter().map(|t| t.as_str()).collect(),
    };
    match node_id {
        Some(node_id) => {
            node_event_query!(
                "WHERE node_id = $1 AND cluster_id = $2 AND type = ANY($3)
                 ORDER BY observed_at DESC, id DESC LIMIT $4",
                node_id,
                cluster_id,
                &types as &[&str],
                limit
            )
            .fetch_all(db)
            .await
        }
        None => {
            node_event_query!(
                "WHERE cluster_id = $1 AND type = ANY($2)
                 ORDER BY observed_at DESC, id DESC LIMIT $3",
                cluster_id,
                &types as &[&str],
                limit
            )
            .fetch_all(db)
            .await
        }
    }
}

/// A node of a cluster as the console shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Node {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub name: String,
    /// `pending`, `ready`, `not_ready`, `offline` or `deleted`.
    pub status: NodeStatus,
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

/// `SELECT` of a node as the console shows it, then the statement's own
/// conditions and order.
macro_rules! node_query {
    ($rest:literal, $($arg:expr),* $(,)?) => {
        sqlx::query_as!(
            Node,
            r#"SELECT id, cluster_id, name, status AS "status: NodeStatus", host(internal_ip) AS internal_ip,
                      os_image, kubelet_version, container_runtime_version, cpu_allocatable_milli_cores,
                      memory_allocatable_bytes, ephemeral_storage_allocatable_bytes, source, last_seen_at,
                      ready_at, offline_at, deleted_at, created_at
               FROM nodes "# + $rest,
            $($arg),*
        )
    };
}

/// A page of a cluster's nodes by name, after `after` (the last name of the
/// previous page; the empty string, before every name, for the first), up to
/// `limit`; deleted ones only when asked for. Either shape walks the index
/// on `(cluster_id, name)` from the cursor.
pub async fn list(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    include_deleted: bool,
    after: &str,
    limit: i64,
) -> Result<Vec<Node>, sqlx::Error> {
    if include_deleted {
        node_query!(
            "WHERE cluster_id = $1 AND name > $2 ORDER BY name LIMIT $3",
            cluster_id,
            after,
            limit
        )
        .fetch_all(db)
        .await
    } else {
        node_query!(
            "WHERE cluster_id = $1 AND name > $2 AND deleted_at IS NULL ORDER BY name LIMIT $3",
            cluster_id,
            after,
            limit
        )
        .fetch_all(db)
        .await
    }
}

/// One node of a cluster; a deleted one only when asked for.
pub async fn get(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    node_id: Uuid,
    include_deleted: bool,
) -> Result<Option<Node>, sqlx::Error> {
    node_query!(
        "WHERE id = $1 AND cluster_id = $2 AND ($3 OR deleted_at IS NULL)",
        node_id,
        cluster_id,
        include_deleted
    )
    .fetch_optional(db)
    .await
}

/// At most this many of a period's events are listed in a node's timeline:
/// the newest.
pub const TIMELINE_EVENTS: i64 = 1_000;

/// A node's events between `from` and `to`: the newest `limit` of them,
/// oldest first, preceded by the last event before `from` (the state the
/// period starts in), if any.
pub async fn events_for_timeline(
    db: impl PgExecutor<'_>,
    node_id: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<NodeEvent>, sqlx::Error> {
    sqlx::query_as!(
        NodeEvent,
        r#"SELECT id AS "id!", cluster_id AS "cluster_id!", node_id, node_name AS "node_name!",
                  event_type AS "event_type!: NodeEventType", old_status AS "old_status: NodeStatus",
                  new_status AS "new_status: NodeStatus", message, observed_at AS "observed_at!"
           FROM (
               (SELECT id, cluster_id, node_id, node_name, type AS event_type, old_status, new_status, message, observed_at
                FROM node_events WHERE node_id = $1 AND observed_at < $2
                ORDER BY observed_at DESC, id DESC LIMIT 1)
               UNION ALL
               (SELECT id, cluster_id, node_id, node_name, type, old_status, new_status, message, observed_at
                FROM node_events WHERE node_id = $1 AND observed_at >= $2 AND observed_at <= $3
                ORDER BY observed_at DESC, id DESC LIMIT $4)
           ) e
           ORDER BY observed_at, id"#,
        node_id,
        from,
        to,
        limit
    )
    .fetch_all(db)
    .await
}

/// What a node's transitions say of a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uptime {
    /// Seconds of the period the node existed for: from its first state in
    /// it (or the one it started in) until it was deleted or the period ended.
    pub observed_seconds: i64,
    /// Seconds of those it was `ready`.
    pub ready_seconds: i64,
    /// Events inside the period.
    pub events: i64,
}

/// A node's uptime over `[from, to]` from every transition in it and the
/// last one before it, summed by the database in one statement: each event
/// holds its state until the next (or the end of the period), counted from
/// the start of the period; whole seconds of each span; `deleted` is not
/// observed time, `ready` is ready time, any other state observed time.
pub async fn uptime(
    db: impl PgExecutor<'_>,
    node_id: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Uptime, sqlx::Error> {
    let r = sqlx::query!(
        r#"WITH e AS (
               (SELECT id, observed_at, new_status, false AS in_period
                FROM node_events WHERE node_id = $1 AND observed_at < $2
                ORDER BY observed_at DESC, id DESC LIMIT 1)
               UNION ALL
               (SELECT id, observed_at, new_status, true
                FROM node_events WHERE node_id = $1 AND observed_at >= $2 AND observed_at <= $3)),
           spans AS (
               SELECT new_status, in_period, greatest(observed_at, $2) AS start,
                      least(coalesce(lead(observed_at) OVER (ORDER BY observed_at, id), $3), $3) AS finish
               FROM e),
           seconds AS (
               SELECT new_status, in_period,
                      CASE WHEN finish > start THEN floor(extract(epoch FROM finish - start))::bigint
                           ELSE 0 END AS s
               FROM spans)
           SELECT coalesce(sum(s) FILTER (WHERE new_status IS DISTINCT FROM 'deleted'), 0)::bigint AS "observed!",
                  coalesce(sum(s) FILTER (WHERE new_status = 'ready'), 0)::bigint AS "ready!",
                  count(*) FILTER (WHERE in_period) AS "events!"
           FROM seconds"#,
        node_id,
        from,
        to
    )
    .fetch_one(db)
    .await?;
    Ok(Uptime {
        observed_seconds: r.observed,
        ready_seconds: r.ready,
        events: r.events,
    })
}

/// Whether a Node named `name` is counted against the organization's plan already:
/// a live node of that name, or a join under way from a machine of that
/// name (the join took its place when it started).
pub async fn counted(
    db: impl sqlx::PgExecutor<'_>,
    cluster_id: Uuid,
    name: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM nodes
                          WHERE cluster_id = $1 AND name = $2 AND deleted_at IS NULL
                            AND status <> 'deleted')
               OR EXISTS (SELECT 1 FROM join_attempts
                          WHERE cluster_id = $1 AND outcome = 'joining' AND node_id IS NULL
                            AND lower(hostname) = lower($2) AND bootstrap_expires_at > now())
           AS "counted!""#,
        cluster_id,
        name,
    )
    .fetch_one(db)
    .await
}

/// What nodes brings to the platform: the kind of work that removes a node, and the join tokens' settings.
pub const CAPABILITY: crate::capability::Capability = crate::capability::Capability {
    job_kinds: &[NodeRemoval::KIND],
    settings: &[crate::capability::setting::<config::Config>],
    // The longest timeline a node's page shows.
    histories: &[crate::capability::History {
        name: "node_events",
        variable: "NODE_EVENTS_RETENTION_MS",
        default_days: 90,
        prune: |conn, age, batch| Box::pin(prune_events(conn, age, batch)),
    }],
    cluster_routes: &[
        crate::capability::ClusterRoute::new(
            "DELETE",
            "/nodes/{node_id}",
            crate::organizations::Action::Operate,
        ),
        crate::capability::ClusterRoute::new(
            "POST",
            "/tokens",
            crate::organizations::Action::Operate,
        ),
        crate::capability::ClusterRoute::new(
            "DELETE",
            "/tokens/{token_id}",
            crate::organizations::Action::Operate,
        ),
    ],
    organization_key_routes: &["/api/console/node-events"],
    ..crate::capability::Capability::named("nodes")
};
