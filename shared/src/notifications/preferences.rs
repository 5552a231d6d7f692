//! A user's notification preferences: which channels and which kinds of
//! notification they want (`notification_settings`, one row a user, made
//! with the defaults when first read).

use serde::{Deserialize, Serialize};
use sqlx::PgExecutor;
use utoipa::ToSchema;
use uuid::Uuid;

/// A user's notification preferences.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationSettings {
    pub email_enabled: bool,
    pub webhook_enabled: bool,
    pub notify_cluster_ready: bool,
    pub notify_cluster_failed: bool,
    pub notify_node_offline: bool,
    pub notify_node_joined: bool,
    pub notify_order_paid: bool,
    /// A request refused by the plan's limits (default on).
    #[serde(default = "on")]
    pub notify_plan_limit_reached: bool,
}

fn on() -> bool {
    true
}

/// The user's preferences, made with the defaults when they have none.
pub async fn settings(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
) -> Result<NotificationSettings, sqlx::Error> {
    sqlx::query_as!(
        NotificationSettings,
        r#"WITH ensured AS (
               INSERT INTO notification_settings (user_id) VALUES ($1)
               ON CONFLICT (user_id) DO NOTHING
               RETURNING email_enabled, webhook_enabled, notify_cluster_ready, notify_cluster_failed,
                         notify_node_offline, notify_node_joined, notify_order_paid,
                         notify_plan_limit_reached
           )
           SELECT email_enabled AS "email_enabled!", webhook_enabled AS "webhook_enabled!",
                  notify_cluster_ready AS "notify_cluster_ready!", notify_cluster_failed AS "notify_cluster_failed!",
                  notify_node_offline AS "notify_node_offline!", notify_node_joined AS "notify_node_joined!",
                  notify_order_paid AS "notify_order_paid!",
                  notify_plan_limit_reached AS "notify_plan_limit_reached!"
           FROM ensured
           UNION ALL
           SELECT email_enabled, webhook_enabled, notify_cluster_ready, notify_cluster_failed,
                  notify_node_offline, notify_node_joined, notify_order_paid, notify_plan_limit_reached
           FROM notification_settings WHERE user_id = $1"#,
        user_id
    )
    .fetch_one(db)
    .await
}

/// Stores the user's preferences.
pub async fn save_settings(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    s: &NotificationSettings,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO notification_settings (user_id, email_enabled, webhook_enabled, notify_cluster_ready,
                                            notify_cluster_failed, notify_node_offline, notify_node_joined,
                                            notify_order_paid, notify_plan_limit_reached)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (user_id) DO UPDATE SET
             email_enabled = EXCLUDED.email_enabled, webhook_enabled = EXCLUDED.webhook_enabled,
             notify_cluster_ready = EXCLUDED.notify_cluster_ready, notify_cluster_failed = EXCLUDED.notify_cluster_failed,
             notify_node_offline = EXCLUDED.notify_node_offline, notify_node_joined = EXCLUDED.notify_node_joined,
             notify_order_paid = EXCLUDED.notify_order_paid,
             notify_plan_limit_reached = EXCLUDED.notify_plan_limit_reached",
        user_id,
        s.email_enabled,
        s.webhook_enabled,
        s.notify_cluster_ready,
        s.notify_cluster_failed,
        s.notify_node_offline,
        s.notify_node_joined,
        s.notify_order_paid,
        s.notify_plan_limit_reached
    )
    .execute(db)
    .await?;
    Ok(())
}
