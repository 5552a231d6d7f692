//! Orders: an organisation's choice of a plan, made by one of its owners and
//! paid through a Stripe Checkout Session.
//! `pending` until Stripe says it is paid (→ `paid`) or the session expired,
//! the user or an administrator cancelled it (→ `cancelled`). A payment is
//! never undone by an event that arrives after it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;
use uuid::Uuid;

crate::domain::text_enum! {
    /// Where an order is in its life.
    OrderStatus {
        Pending => "pending",
        Paid => "paid",
        Cancelled => "cancelled",
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Order {
    pub id: Uuid,
    /// The organisation the plan is for.
    pub organization_id: Uuid,
    /// The member who placed the order.
    pub user_id: Uuid,
    pub plan_id: Uuid,
    pub plan_name: String,
    pub status: OrderStatus,
    /// In the currency's minor units; what the plan cost when it was chosen.
    pub amount: i64,
    pub currency: String,
    pub stripe_checkout_session_id: Option<String>,
    /// Where the user pays, while the order is pending.
    pub checkout_url: Option<String>,
    pub stripe_payment_intent_id: Option<String>,
    pub paid_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    /// `user`, `admin` or `expired` (the Checkout Session expired unpaid).
    pub cancel_reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

pub async fn get(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as!(Order, "SELECT o.id, o.organization_id, o.user_id, o.plan_id, p.name AS plan_name, o.status AS \"status: OrderStatus\", o.amount, o.currency,
                    o.stripe_checkout_session_id,
                    CASE WHEN o.status = 'pending' THEN o.stripe_checkout_url END AS checkout_url,
                    o.stripe_payment_intent_id, o.paid_at, o.cancelled_at, o.cancel_reason, o.created_at
             FROM orders o JOIN plans p ON p.id = o.plan_id WHERE o.id = $1", id)
        .fetch_optional(db)
        .await
}

/// The order, locked, when it is the organisation's.
pub async fn lock_in(
    tx: &mut PgConnection,
    organization_id: Uuid,
    id: Uuid,
) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as!(
        Order,
        "SELECT o.id, o.organization_id, o.user_id, o.plan_id, p.name AS plan_name, o.status AS \"status: OrderStatus\", o.amount, o.currency,
                    o.stripe_checkout_session_id,
                    CASE WHEN o.status = 'pending' THEN o.stripe_checkout_url END AS checkout_url,
                    o.stripe_payment_intent_id, o.paid_at, o.cancelled_at, o.cancel_reason, o.created_at
             FROM orders o JOIN plans p ON p.id = o.plan_id WHERE o.id = $1 AND o.organization_id = $2 FOR UPDATE OF o",
        id,
        organization_id
    )
    .fetch_optional(tx)
    .await
}

/// The organisation's pending order, locked.
pub async fn lock_pending(
    tx: &mut PgConnection,
    organization_id: Uuid,
) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as!(
        Order,
        "SELECT o.id, o.organization_id, o.user_id, o.plan_id, p.name AS plan_name, o.status AS \"status: OrderStatus\", o.amount, o.currency,
                    o.stripe_checkout_session_id,
                    CASE WHEN o.status = 'pending' THEN o.stripe_checkout_url END AS checkout_url,
                    o.stripe_payment_intent_id, o.paid_at, o.cancelled_at, o.cancel_reason, o.created_at
             FROM orders o JOIN plans p ON p.id = o.plan_id WHERE o.organization_id = $1 AND o.status = 'pending' FOR UPDATE OF o",
        organization_id
    )
    .fetch_optional(tx)
    .await
}

/// Whose orders a list holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Of {
    /// Placed by this user.
    pub user_id: Option<Uuid>,
    /// For this organisation.
    pub organization_id: Option<Uuid>,
}

/// `SELECT` of an order with its plan's name, then the statement's own
/// `WHERE` and order.
macro_rules! order_query {
    ($rest:literal, $($arg:expr),* $(,)?) => {
        sqlx::query_as!(
            Order,
            r#"SELECT o.id, o.organization_id, o.user_id, o.plan_id, p.name AS plan_name,
                      o.status AS "status: OrderStatus", o.amount, o.currency,
                      o.stripe_checkout_session_id,
                      CASE WHEN o.status = 'pending' THEN o.stripe_checkout_url END AS checkout_url,
                      o.stripe_payment_intent_id, o.paid_at, o.cancelled_at, o.cancel_reason,
                      o.created_at
               FROM orders o JOIN plans p ON p.id = o.plan_id "# + $rest,
            $($arg),*
        )
    };
}

/// Newest first; `before` is the keyset cursor (the last order's creation
/// time). One statement per shape, each an index range in the list's order:
/// by user or by organization (a status is a filter over that owner's
/// orders), else by status, else all.
pub async fn list(
    db: impl PgExecutor<'_>,
    of: Of,
    status: Option<&str>,
    before: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<Order>, sqlx::Error> {
    let before = before.unwrap_or_else(|| crate::extract::before_everything().0);
    match (of, status) {
        (
            Of {
                user_id: Some(user_id),
                organization_id,
            },
            status,
        ) => {
            order_query!(
                "WHERE o.user_id = $1 AND o.organization_id = coalesce($2, o.organization_id)
                   AND o.status = coalesce($3, o.status) AND o.created_at < $4
                 ORDER BY o.created_at DESC, o.id DESC LIMIT $5",
                user_id,
                organization_id,
                status,
                before,
                limit
            )
            .fetch_all(db)
            .await
        }
        (
            Of {
                user_id: None,
                organization_id: Some(organization_id),
            },
            status,
        ) => {
            order_query!(
                "WHERE o.organization_id = $1 AND o.status = coalesce($2, o.status)
                   AND o.created_at < $3
                 ORDER BY o.created_at DESC, o.id DESC LIMIT $4",
                organization_id,
                status,
                before,
                limit
            )
            .fetch_all(db)
            .await
        }
        (
            Of {
                user_id: None,
                organization_id: None,
            },
            Some(status),
        ) => {
            order_query!(
                "WHERE o.status = $1 AND o.created_at < $2
                 ORDER BY o.created_at DESC, o.id DESC LIMIT $3",
                status,
                before,
                limit
            )
            .fetch_all(db)
            .await
        }
        (
            Of {
                user_id: None,
                organization_id: None,
            },
            None,
        ) => {
            order_query!(
                "WHERE o.created_at < $1 ORDER BY o.created_at DESC, o.id DESC LIMIT $2",
                before,
                limit
            )
            .fetch_all(db)
            .await
        }
    }
}

/// A pending order for the plan at its current price, placed by `user_id`
/// for `organization_id`. Fails with the unique violation
/// `idx_orders_one_pending_per_organization` when the organisation has one.
pub async fn insert_pending(
    tx: &mut PgConnection,
    organization_id: Uuid,
    user_id: Uuid,
    plan: &super::Plan,
) -> Result<Order, sqlx::Error> {
    let id = sqlx::query_scalar!(
        "INSERT INTO orders (organization_id, user_id, plan_id, amount, currency)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
        organization_id,
        user_id,
        plan.id,
        plan.price_minor_units,
        plan.currency
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(get(&mut *tx, id)
        .await?
        .expect("the order was just written in this transaction"))
}

/// Records the Checkout Session made for a pending order.
pub async fn set_checkout(
    db: impl PgExecutor<'_>,
    id: Uuid,
    session_id: &str,
    url: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE orders SET stripe_checkout_session_id = $2, stripe_checkout_url = $3, updated_at = now()
         WHERE id = $1 AND status = 'pending'",
        id,
        session_id,
        url
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Cancels an order that is not cancelled yet; `false` when it was.
pub async fn cancel(db: impl PgExecutor<'_>, id: Uuid, reason: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE orders SET status = 'cancelled', cancelled_at = now(), cancel_reason = $2, updated_at = now()
         WHERE id = $1 AND status <> 'cancelled'",
        id,
        reason
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// What one Stripe event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    /// It changed an order.
    Applied,
    /// Its order is already where the event would put it, or past it (an
    /// expiry after the payment), or unknown.
    NoChange,
    /// A type the platform does not handle.
    Ignored,
    /// This event id was processed before: nothing was done again.
    Replayed,
    /// A payment for an order an administrator or its user cancelled: the
    /// cancellation stands (the payment is for a refund), stored as `no_change`.
    PaidAfterCancel,
    /// A payment whose amount or currency is not the order's: nothing is
    /// paid by it, stored as `no_change`.
    WrongAmount,
}

impl EventOutcome {
    /// The outcome as the webhook answers it, and as `stripe_events` keeps
    /// it (a replay is never stored: the first delivery's row stands).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::NoChange | Self::PaidAfterCancel | Self::WrongAmount => "no_change",
            Self::Ignored => "ignored",
            Self::Replayed => "replayed",
        }
    }
}

/// What a Stripe event asks of an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventChange {
    Paid {
        payment_intent: Option<String>,
        /// What the session charged, in minor units, and in which currency.
        amount_total: Option<i64>,
        currency: Option<String>,
    },
    Expired,
    Nothing,
}

/// Records the event by id and applies it, in the caller's transaction. The
/// id's primary key makes a second delivery, even one running at the same
/// moment, wait for the first and then do nothing.
pub async fn apply_event(
    tx: &mut PgConnection,
    event_id: &str,
    event_type: &str,
    order_id: Option<Uuid>,
    session_id: Option<&str>,
    change: &EventChange,
) -> Result<(EventOutcome, Option<Order>), sqlx::Error> {
    let first = sqlx::query_scalar!(
        "INSERT INTO stripe_events (id, type, outcome) VALUES ($1, $2, 'ignored')
         ON CONFLICT (id) DO NOTHING RETURNING id",
        event_id,
        event_type
    )
    .fetch_optional(&mut *tx)
    .await?;
    if first.is_none() {
        return Ok((EventOutcome::Replayed, None));
    }
    // The order the session was made for: by the id the platform gave it
    // (client_reference_id), and only for a Checkout Session (`cs_…`) that is
    // the one recorded for it, if one is; an object of any other kind (a
    // Payment Link's, say) pays no order.
    let found = match (order_id, session_id) {
        (Some(id), Some(session)) => {
            sqlx::query!(
                r#"SELECT id, status AS "status: OrderStatus", cancel_reason, amount, currency FROM orders WHERE id = $1
               AND (stripe_checkout_session_id IS NULL OR stripe_checkout_session_id = $2)
             FOR UPDATE"#,
                id,
                session
            )
            .fetch_optional(&mut *tx)
            .await?
        }
        _ => None,
    };
    let order = found.as_ref().map(|o| o.id);
    let outcome = match (change, found) {
        (EventChange::Nothing, _) => EventOutcome::Ignored,
        (_, None) => EventOutcome::NoChange,
        (EventChange::Paid { .. }, Some(o)) if o.status == OrderStatus::Paid => {
            EventOutcome::NoChange
        }
        // Only a lapse (`expired`) gives way to a payment; a cancellation by
        // an administrator or the user is final.
        (EventChange::Paid { .. }, Some(o))
            if o.status == OrderStatus::Cancelled
                && o.cancel_reason.as_deref() != Some("expired") =>
        {
            EventOutcome::PaidAfterCancel
        }
        (
            EventChange::Paid {
                amount_total,
                currency,
                ..
            },
            Some(o),
        ) if *amount_total != Some(o.amount)
            || !currency
                .as_deref()
                .is_some_and(|c| c.eq_ignore_ascii_case(&o.currency)) =>
        {
            EventOutcome::WrongAmount
        }
        (EventChange::Paid { payment_intent, .. }, Some(o)) => {
            let id = o.id;
            // A payment wins over a cancellation: the money was taken.
            let done = sqlx::query!(
                "UPDATE orders SET status = 'paid', paid_at = now(), cancelled_at = NULL,
                        cancel_reason = NULL, stripe_payment_intent_id = $2,
                        stripe_checkout_session_id = coalesce(stripe_checkout_session_id, $3),
                        updated_at = now()
                 WHERE id = $1 AND status <> 'paid'",
                id,
                payment_intent.as_deref(),
                session_id
            )
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 1 {
                EventOutcome::Applied
            } else {
                EventOutcome::NoChange
            }
        }
        (EventChange::Expired, Some(o)) => {
            let id = o.id;
            let done = sqlx::query!(
                "UPDATE orders SET status = 'cancelled', cancelled_at = now(), cancel_reason = 'expired',
                        updated_at = now()
                 WHERE id = $1 AND status = 'pending'",
                id
            )
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 1 {
                EventOutcome::Applied
            } else {
                EventOutcome::NoChange
            }
        }
    };
    sqlx::query!(
        "UPDATE stripe_events SET outcome = $2, order_id = $3 WHERE id = $1",
        event_id,
        outcome.as_str(),
        order
    )
    .execute(&mut *tx)
    .await?;
    let order = match (outcome, order) {
        (
            EventOutcome::Applied | EventOutcome::PaidAfterCancel | EventOutcome::WrongAmount,
            Some(id),
        ) => get(&mut *tx, id).await?,
        _ => None,
    };
    Ok((outcome, order))
}
