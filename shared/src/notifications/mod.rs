//! Notifications: what happened to a user's clusters, nodes, orders and plan,
//! delivered by email and by the platform's outbound webhook (Standard
//! Webhooks), as each user's notification settings say.
//!
//! The outbox row is written in the transaction that records the event
//! ([`enqueue`], or a trigger or statement of the capability it happens in).
//! Delivery ([`fan_out`], [`claim`], [`settle`]) runs in the `notify` schedule:
//! each row fans out once into one delivery per opted-in channel; a delivery
//! is claimed (attempt counted, lease taken) before it is sent and settled
//! after. A crash between the two leaves the lease to expire and the delivery
//! is sent again under the same `webhook-id` / `Message-ID`, so a receiver can
//! tell; claims skip locked rows, so copies never send one delivery at once.

pub mod preferences;
pub mod settings;
pub mod webhook;

pub use preferences::NotificationSettings;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use crate::config::{ConfigError, Millis, Part, Source, parse_or};

/// How long a claimed delivery is held before another run may send it again.
pub const LEASE: Duration = Duration::from_secs(120);

/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// Writes one notification for `user_id`, to be delivered as their
/// settings say. `kind` is one of the outbox's kinds.
pub async fn enqueue(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    kind: &str,
    cluster_id: Option<Uuid>,
    payload: serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO notification_outbox (user_id, kind, cluster_id, payload) VALUES ($1, $2, $3, $4)",
        user_id,
        kind,
        cluster_id,
        payload
    )
    .execute(db)
    .await?;
    Ok(())
}

/// A `plan_limit_reached` notification, at most one per user, organisation
/// (the payload's `organization_id`) and resource a day: a member retrying
/// a refused create makes its owners hear of it once.
pub async fn enqueue_limit_reached(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    payload: serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO notification_outbox (user_id, kind, payload)
         SELECT $1, 'plan_limit_reached', $2::jsonb
         WHERE NOT EXISTS (
             SELECT 1 FROM notification_outbox
             WHERE user_id = $1 AND kind = 'plan_limit_reached'
               AND payload->>'resource' = $2::jsonb->>'resource'
               AND payload->>'organization_id' IS NOT DISTINCT FROM $2::jsonb->>'organization_id'
               AND created_at > now() - interval '1 day')",
        user_id,
        payload
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Turns up to `limit` new outbox rows into deliveries, one per channel the
/// user opted into for the kind (the webhook only when the platform has a
/// webhook URL). A row nobody wants is marked delivered at once. Answers the
/// rows fanned out.
pub async fn fan_out(pool: &PgPool, limit: i64) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let rows = sqlx::query!(
        r#"WITH batch AS (
               SELECT o.id, o.user_id, o.kind FROM notification_outbox o
               WHERE o.fanned_out_at IS NULL ORDER BY o.id LIMIT $1 FOR UPDATE SKIP LOCKED),
           wanted AS (
               SELECT b.id,
                      CASE b.kind
                          WHEN 'cluster_ready' THEN coalesce(ns.notify_cluster_ready, true)
                          WHEN 'cluster_failed' THEN coalesce(ns.notify_cluster_failed, true)
                          -- Not a setting: old kubeconfigs and nodes stop working.
                          WHEN 'cluster_endpoint_changed' THEN true
                          WHEN 'node_offline' THEN coalesce(ns.notify_node_offline, true)
                          WHEN 'node_joined' THEN coalesce(ns.notify_node_joined, false)
                          WHEN 'order_paid' THEN coalesce(ns.notify_order_paid, true)
                          WHEN 'plan_limit_reached' THEN coalesce(ns.notify_plan_limit_reached, true)
                          ELSE false END AS wants,
                      coalesce(ns.email_enabled, true) AS email,
                      coalesce(ns.webhook_enabled, false) AND s.outbound_webhook_url IS NOT NULL AS webhook
               FROM batch b
               LEFT JOIN notification_settings ns ON ns.user_id = b.user_id
               CROSS JOIN system_settings s WHERE s.id),
           deliveries AS (
               INSERT INTO notification_deliveries (outbox_id, channel)
               SELECT id, 'email' FROM wanted WHERE wants AND email
               UNION ALL
               SELECT id, 'webhook' FROM wanted WHERE wants AND webhook
               ON CONFLICT (outbox_id, channel) DO NOTHING)
           UPDATE notification_outbox o
           SET fanned_out_at = now(),
               delivered_at = CASE WHEN w.wants AND (w.email OR w.webhook) THEN NULL ELSE now() END
           FROM wanted w WHERE o.id = w.id"#,
        limit
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows.rows_affected())
}

/// A delivery taken for one attempt.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: i64,
    pub outbox_id: i64,
    pub channel: String,
    /// This attempt's number (1 for the first).
    pub attempt: i32,
    pub kind: String,
    pub cluster_id: Option<Uuid>,
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub user_id: Uuid,
    pub email: String,
}

impl Claimed {
    /// The id a receiver sees on every attempt of this notification: the
    /// webhook's `webhook-id`, the email's `Message-ID` local part.
    pub fn message_id(&self) -> String {
        format!("msg_kubebyon_{}", self.outbox_id)
    }

    /// The event as the webhook sends it.
    pub fn event(&self) -> Event<'_> {
        Event {
            kind: event_type(&self.kind),
            timestamp: self.created_at,
            data: EventData {
                user_id: self.user_id,
                user_email: &self.email,
                cluster_id: self.cluster_id,
                details: &self.payload,
            },
        }
    }
}

/// The webhook body (Standard Webhooks' recommended `type`, `timestamp`,
/// `data`). The types are listed in docs/notifications.md.
#[derive(Debug, Serialize)]
pub struct Event<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub timestamp: DateTime<Utc>,
    pub data: EventData<'a>,
}

#[derive(Debug, Serialize)]
pub struct EventData<'a> {
    pub user_id: Uuid,
    pub user_email: &'a str,
    pub cluster_id: Option<Uuid>,
    /// What the kind says: cluster and node names, the order, the limit.
    pub details: &'a serde_json::Value,
}

/// The outbox kind as an event type.
pub fn event_type(kind: &str) -> &'static str {
    match kind {
        "cluster_ready" => "cluster.ready",
        "cluster_failed" => "cluster.failed",
        "cluster_endpoint_changed" => "cluster.endpoint_changed",
        "node_joined" => "node.joined",
        "node_offline" => "node.offline",
        "order_paid" => "order.paid",
        "plan_limit_reached" => "plan.limit_reached",
        _ => "unknown",
    }
}

/// Claims up to `limit` deliveries that are due, or whose lease ran out,
/// counting the attempt and taking the lease before anything is sent.
pub async fn claim(pool: &PgPool, limit: i64) -> Result<Vec<Claimed>, sqlx::Error> {
    let lease = LEASE.as_secs_f64();
    sqlx::query_as!(
        Claimed,
        r#"WITH due AS (
               SELECT id FROM notification_deliveries
               WHERE (status = 'pending' AND next_attempt_at <= now())
                  OR (status = 'sending' AND lease_expires_at < now())
               ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED),
           claimed AS (
               UPDATE notification_deliveries d
               SET status = 'sending', attempts = d.attempts + 1, last_attempt_at = now(),
                   lease_expires_at = now() + make_interval(secs => $2)
               FROM due WHERE d.id = due.id
               RETURNING d.id, d.outbox_id, d.channel, d.attempts)
           SELECT c.id AS "id!", c.outbox_id AS "outbox_id!", c.channel AS "channel!",
                  c.attempts AS "attempt!", o.kind, o.cluster_id, o.payload, o.created_at,
                  o.user_id, u.email::text AS "email!"
           FROM claimed c
           JOIN notification_outbox o ON o.id = c.outbox_id
           JOIN users u ON u.id = o.user_id
           ORDER BY c.id"#,
        limit,
        lease
    )
    .fetch_all(pool)
    .await
}

/// How failed deliveries are tried again, from the variables
/// `NOTIFY_RETRY_BASE_MS` (default 10 s: the wait before the second
/// attempt, doubled for each further one, up to [`MAX_BACKOFF`]) and
/// `NOTIFY_MAX_ATTEMPTS` (default 8, 1–50: attempts per notification and
/// channel before it is `failed`).
#[derive(Debug, Clone, Copy)]
pub struct Retries {
    pub base: Duration,
    pub max_attempts: i32,
}

impl Part for Retries {
    fn read(source: &dyn Source) -> Result<Self, ConfigError> {
        let max_attempts = parse_or(source, "NOTIFY_MAX_ATTEMPTS", 8)?;
        if !(1..=50).contains(&max_attempts) {
            return Err(ConfigError::Invalid {
                name: "NOTIFY_MAX_ATTEMPTS",
                reason: "must be between 1 and 50".into(),
            });
        }
        Ok(Self {
            base: Millis::new("NOTIFY_RETRY_BASE_MS", 10_000).read(source)?,
            max_attempts,
        })
    }
}

/// The wait before the attempt after `attempt`: `base × 2^(attempt-1)`, at
/// most [`MAX_BACKOFF`].
pub fn backoff(base: Duration, attempt: i32) -> Duration {
    let doublings = attempt.clamp(1, 31) as u32 - 1;
    base.saturating_mul(1u32 << doublings.min(20))
        .min(MAX_BACKOFF)
}

/// Records the results of a batch of attempts, fenced by each attempt's
/// number: a run whose lease ran out and whose delivery was claimed again
/// changes nothing. Failures retry after [`backoff`] until `max_attempts`,
/// then stay `failed` with the last error. Once no delivery of its
/// notification is open, the outbox row is marked delivered. One
/// transaction of three statements, however many results: a commit per
/// delivery was most of a delivery's cost.
pub async fn settle(
    pool: &PgPool,
    results: &[(Claimed, Result<(), String>)],
    retries: Retries,
) -> Result<(), sqlx::Error> {
    let (mut sent, mut sent_attempts) = (Vec::new(), Vec::new());
    let (mut failed, mut failed_attempts, mut waits, mut errors) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (delivery, result) in results {
        match result {
            Ok(()) => {
                sent.push(delivery.id);
                sent_attempts.push(delivery.attempt);
            }
            Err(error) => {
                failed.push(delivery.id);
                failed_attempts.push(delivery.attempt);
                waits.push(backoff(retries.base, delivery.attempt).as_secs_f64());
                errors.push(error.chars().take(1000).collect::<String>());
            }
        }
    }
    let outboxes: Vec<i64> = results.iter().map(|(d, _)| d.outbox_id).collect();
    let mut tx = pool.begin().await?;
    if !sent.is_empty() {
        sqlx::query!(
            "UPDATE notification_deliveries d
             SET status = 'delivered', delivered_at = now(), lease_expires_at = NULL, last_error = NULL
             FROM unnest($1::bigint[], $2::int[]) AS r(id, attempt)
             WHERE d.id = r.id AND d.attempts = r.attempt AND d.status = 'sending'",
            &sent,
            &sent_attempts
        )
        .execute(&mut *tx)
        .await?;
    }
    if !failed.is_empty() {
        sqlx::query!(
            "UPDATE notification_deliveries d
             SET status = CASE WHEN d.attempts >= $3 THEN 'failed' ELSE 'pending' END,
                 next_attempt_at = now() + make_interval(secs => r.wait),
                 lease_expires_at = NULL, last_error = r.error
             FROM unnest($1::bigint[], $2::int[], $4::float8[], $5::text[]) AS r(id, attempt, wait, error)
             WHERE d.id = r.id AND d.attempts = r.attempt AND d.status = 'sending'",
            &failed,
            &failed_attempts,
            retries.max_attempts,
            &waits,
            &errors
        )
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query!(
        "UPDATE notification_outbox o SET delivered_at = now()
         WHERE o.id = ANY($1) AND o.delivered_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM notification_deliveries d
                           WHERE d.outbox_id = o.id AND d.status IN ('pending', 'sending'))",
        &outboxes
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// The subject and text of a notification's email.
pub fn email_text(delivery: &Claimed) -> (String, String) {
    let p = &delivery.payload;
    let text = |key: &str| p[key].as_str().unwrap_or("?").to_string();
    // Rows queued before plans belonged to organisations name none.
    let organization = || {
        p["organization"]
            .as_str()
            .unwrap_or("Your organization")
            .to_string()
    };
    let (subject, body) = match delivery.kind.as_str() {
        "cluster_ready" => (
            format!("Cluster {} is ready", text("cluster_name")),
            format!(
                "Your cluster {} is ready. Its API server: {}.\n\nDownload its kubeconfig from the console and create a join token to add nodes.",
                text("cluster_name"),
                text("api_endpoint")
            ),
        ),
        "cluster_failed" => (
            format!("Cluster {} failed", text("cluster_name")),
            format!(
                "Your cluster {} could not be built: {}\n\nRetry it from the console, or delete it.",
                text("cluster_name"),
                text("error")
            ),
        ),
        "cluster_endpoint_changed" => (
            format!("Cluster {} has a new API address", text("cluster_name")),
            format!(
                "The API server of your cluster {} moved to {} (it was {}).\n\nThe old address keeps working until {}; after that, kubeconfigs that name it stop working and the console lists them as stale. Download a new kubeconfig from the console. Nodes that joined through the old address reach the cluster through it too: point their kubelet at the new address (or join them again) before then. Join commands made from now on use the new address.",
                text("cluster_name"),
                text("api_endpoint"),
                text("previous_api_endpoint"),
                text("previous_endpoint_until")
            ),
        ),
        "node_joined" => (
            format!("Node {} joined {}", text("node_name"), text("cluster_name")),
            format!(
                "The node {} joined your cluster {}.",
                text("node_name"),
                text("cluster_name")
            ),
        ),
        "node_offline" => (
            format!(
                "Node {} of {} is offline",
                text("node_name"),
                text("cluster_name")
            ),
            format!(
                "The node {} of your cluster {} stopped reporting and is offline.",
                text("node_name"),
                text("cluster_name")
            ),
        ),
        "order_paid" => (
            format!("Payment received: the {} plan", text("plan")),
            format!(
                "Thank you: order {} is paid and the {} plan applies to {} now.",
                text("order_id"),
                text("plan"),
                organization()
            ),
        ),
        "plan_limit_reached" if p["requested"] == 0 => (
            format!(
                "{} is past its {} plan's {} limit",
                organization(),
                text("plan"),
                text("resource")
            ),
            format!(
                "{} has {} {} in use, past its plan's limit of {}. Nothing is removed, but more is refused until it is back within it.\n\nChoose a bigger plan at {}",
                organization(),
                p["usage"],
                text("resource"),
                p["limit"],
                text("upgrade_url")
            ),
        ),
        "plan_limit_reached" => (
            format!(
                "{}'s {} plan's {} limit is reached",
                organization(),
                text("plan"),
                text("resource")
            ),
            format!(
                "A request in {} was refused: {} would pass its plan's limit of {} (in use: {}).\n\nChoose a bigger plan at {}",
                organization(),
                text("resource"),
                p["limit"],
                p["usage"],
                text("upgrade_url")
            ),
        ),
        other => (format!("KubeBYON: {other}"), p.to_string()),
    };
    (
        subject,
        format!(
            "{body}\n\nYou can choose which notifications you get in your account's notification settings.\n"
        ),
    )
}

/// What notifications brings to the platform: its deliveries' retries and its mail and webhook settings' sealed secrets.
pub const CAPABILITY: crate::capability::Capability = crate::capability::Capability {
    settings: &[crate::capability::setting::<Retries>],
    reseal: Some(|tx, key| Box::pin(settings::reseal(tx, key))),
    ..crate::capability::Capability::named("notifications")
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_the_base_and_stops_at_an_hour() {
        let base = Duration::from_secs(10);
        assert_eq!(backoff(base, 1), Duration::from_secs(10));
        assert_eq!(backoff(base, 2), Duration::from_secs(20));
        assert_eq!(backoff(base, 4), Duration::from_secs(80));
        assert_eq!(backoff(base, 30), MAX_BACKOFF);
        assert_eq!(backoff(base, i32::MAX), MAX_BACKOFF);
    }
}
