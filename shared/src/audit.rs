//! The `audit_events` stream.

use sqlx::PgExecutor;
use uuid::Uuid;

/// One audited action.
#[derive(Debug)]
pub struct AuditEvent<'a> {
    pub actor_user_id: Option<Uuid>,
    /// `user`, `admin`, `system` or `node`.
    pub actor_kind: &'a str,
    pub action: &'a str,
    pub target_kind: &'a str,
    pub target_id: String,
    pub cluster_id: Option<Uuid>,
    pub metadata: serde_json::Value,
}

pub async fn record(db: impl PgExecutor<'_>, event: AuditEvent<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO audit_events (actor_user_id, actor_kind, action, target_kind, target_id, cluster_id, metadata)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        event.actor_user_id,
        event.actor_kind,
        event.action,
        event.target_kind,
        event.target_id,
        event.cluster_id,
        event.metadata,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// One audited action as it is read back.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct AuditRecord {
    pub id: i64,
    pub actor_user_id: Option<Uuid>,
    /// The acting user's email, while they exist; in an organization's
    /// activity only while they are one of its members.
    pub actor_email: Option<String>,
    pub actor_kind: String,
    pub action: String,
    pub target_kind: Option<String>,
    pub target_id: Option<String>,
    pub cluster_id: Option<Uuid>,
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    pub ip: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// A page of an activity, as the activity routes take it.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ActivityQuery {
    /// Only events older than this id (the last id of the previous page).
    pub before_id: Option<i64>,
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// `SELECT` of an audit record, then the statement's own `WHERE` and order.
macro_rules! audit_query {
    ($rest:literal, $($arg:expr),* $(,)?) => {
        sqlx::query_as!(
            AuditRecord,
            "SELECT id, actor_user_id,
                    (SELECT u.email::text FROM users u WHERE u.id = actor_user_id) AS actor_email,
                    actor_kind, action, target_kind, target_id, cluster_id,
                    metadata, host(ip) AS ip, created_at
             FROM audit_events " + $rest,
            $($arg),*
        )
    };
}

/// Audit events newest first (by id), of one actor or of everyone, older
/// than `before_id` when paging. One statement per shape, each an index range
/// in the list's order (`idx_audit_events_actor_id`, the primary key).
pub async fn list(
    db: impl PgExecutor<'_>,
    actor: Option<Uuid>,
    before_id: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditRecord>, sqlx::Error> {
    let before_id = before_id.unwrap_or(i64::MAX);
    match actor {
        Some(actor) => {
            audit_query!(
                "WHERE actor_user_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
                actor,
                before_id,
                limit
            )
            .fetch_all(db)
            .await
        }
        None => {
            audit_query!("WHERE id < $1 ORDER BY id DESC LIMIT $2", before_id, limit)
                .fetch_all(db)
                .await
        }
    }
}

/// What was done to a cluster, newest first, older than `before_id` when
/// paging (`idx_audit_events_cluster_id`). As in an organisation's
/// activity, the addresses events were made from stay with the platform's
/// administrators, and so do the emails of actors who are not members of
/// the cluster's organisation (an administrator of the platform, a member
/// who left).
pub async fn of_cluster(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    organization_id: Uuid,
    before_id: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditRecord>, sqlx::Error> {
    sqlx::query_as!(
        AuditRecord,
        r#"SELECT id, actor_user_id,
                  (SELECT u.email::text FROM users u
                   JOIN organization_members m ON m.user_id = u.id AND m.organization_id = $2
                   WHERE u.id = actor_user_id) AS actor_email,
                  actor_kind, action, target_kind, target_id, cluster_id,
                  metadata, NULL::text AS ip, created_at
           FROM audit_events
           WHERE cluster_id = $1 AND id < $3
           ORDER BY id DESC LIMIT $4"#,
        cluster_id,
        organization_id,
        before_id.unwrap_or(i64::MAX),
        limit
    )
    .fetch_all(db)
    .await
}

/// Deletes up to `batch` audit events older than `age`, oldest first
/// (`shared::app::retention`). Returns how many.
pub async fn prune(
    db: impl PgExecutor<'_>,
    age: std::time::Duration,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM audit_events WHERE id IN (
             SELECT id FROM audit_events WHERE created_at < now() - make_interval(secs => $1)
             ORDER BY created_at LIMIT $2)",
        age.as_secs_f64(),
        batch
    )
    .execute(db)
    .await?
    .rows_affected())
}
