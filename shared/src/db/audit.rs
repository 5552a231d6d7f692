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
