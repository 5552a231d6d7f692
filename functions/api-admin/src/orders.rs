//! Every organization's orders, and cancelling one (a pending order, or a
//! paid one that was refunded: its plan stops applying at once).

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use shared::{
    audit::{self, AuditEvent},
    billing::orders::{self, Order, OrderStatus},
    error::ApiError,
    extract::{AppJson, AppPath, AppQuery},
    http::{AdminCaller, AppState},
};
use utoipa::IntoParams;
use uuid::Uuid;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OrderQuery {
    /// Only the orders this user placed.
    pub user_id: Option<Uuid>,
    /// Only this organization's orders.
    pub organization_id: Option<Uuid>,
    /// `pending`, `paid` or `cancelled`.
    #[param(pattern = "^(pending|paid|cancelled)$")]
    pub status: Option<String>,
    /// Orders created before this time (the last one's `created_at`).
    pub before: Option<DateTime<Utc>>,
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// All orders
///
/// Newest first, filtered by the user who placed them, their organization
/// and status.
#[utoipa::path(get, path = "/api/console/admin/orders", tag = "admin", params(OrderQuery),
    responses((status = 200, body = [Order]),
              (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(state): State<AppState>,
    _admin: AdminCaller,
    AppQuery(query): AppQuery<OrderQuery>,
) -> Result<AppJson<Vec<Order>>, ApiError> {
    let status = query
        .status
        .as_deref()
        .map(|s| {
            OrderStatus::parse(s).ok_or_else(|| {
                ApiError::invalid("status", format!("must be {}", OrderStatus::names()))
            })
        })
        .transpose()?;
    let limit = shared::extract::page_limit(query.limit)?;
    let before = query
        .before
        .map(|at| shared::extract::instant("before", at))
        .transpose()?;
    Ok(AppJson(
        orders::list(
            &state.pool,
            orders::Of {
                user_id: query.user_id,
                organization_id: query.organization_id,
            },
            status.map(OrderStatus::as_str),
            before,
            limit,
        )
        .await?,
    ))
}

/// Cancel an order
///
/// A pending order, or a paid one (after a refund): the organization's
/// entitlement falls back to its previous paid order or the default plan at
/// once; nothing it has is deleted. A pending order's Checkout Session is
/// expired at Stripe first, and the cancellation is final: a payment event
/// that arrives after it pays nothing (it is audited for a refund). Audited.
#[utoipa::path(post, path = "/api/console/admin/orders/{order_id}/cancel", tag = "admin",
    params(("order_id" = Uuid, Path)),
    responses((status = 200, body = Order),
              (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "Already cancelled (`order_cancelled`), or Stripe has the pending order's payment (`order_paid_in_stripe`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 502, description = "Stripe could not expire the pending order's session (`stripe_unavailable`, `stripe_refused`); the order stays pending", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "A pending order has a session but Stripe is not configured (`billing_not_configured`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn cancel(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppPath(order_id): AppPath<Uuid>,
) -> Result<AppJson<Order>, ApiError> {
    let pending = orders::get(&state.pool, order_id)
        .await?
        .ok_or(ApiError::NotFound { what: "order" })?;
    // A pending order's Checkout Session is expired first, as the user's own
    // cancel does: a cancelled order can no longer be paid.
    if pending.status == OrderStatus::Pending {
        shared::billing::stripe::expire_before_cancel(&state.pool, &state.settings, &pending)
            .await?;
    }
    let mut tx = state.pool.begin().await?;
    let order = orders::get(&mut *tx, order_id)
        .await?
        .ok_or(ApiError::NotFound { what: "order" })?;
    // Under the organization's entitlement lock: a create deciding on the
    // old plan finishes first.
    shared::billing::entitlements::lock(&mut tx, order.organization_id).await?;
    if !orders::cancel(&mut *tx, order.id, "admin").await? {
        return Err(ApiError::Conflict {
            code: "order_cancelled",
            detail: "the order is cancelled already".into(),
        });
    }
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(admin.user_id),
            actor_kind: "admin",
            action: "admin.order.cancel",
            target_kind: "order",
            target_id: order.id.to_string(),
            cluster_id: None,
            metadata: serde_json::json!({ "user_id": order.user_id, "organization_id": order.organization_id, "previous_status": order.status, "plan_id": order.plan_id }),
        },
    )
    .await?;
    let order = orders::get(&mut *tx, order.id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the order just cancelled is missing"))?;
    tx.commit().await?;
    Ok(AppJson(order))
}
