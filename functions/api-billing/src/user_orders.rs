//! An organisation's orders: list and read (owners and admins), create with a
//! Stripe Checkout Session as the organisation's Stripe customer, cancel
//! (owners).

use axum::{
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::{
    accounts,
    audit::{self, AuditEvent},
    billing::{
        self,
        orders::{self, EventChange, Order, OrderStatus},
        stripe::{self, CheckoutRequest, LineItem},
    },
    error::{ApiError, unique_violation},
    extract::{AppJson, AppPath, AppQuery},
    http::{AppState, Caller, InOrganization},
    organizations::Action,
    settings,
};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// Orders created before this time (the last one's `created_at`).
    pub before: Option<DateTime<Utc>>,
}

const ORGANIZATION: &str =
    "The organization the orders are for (its id); the caller's personal one when absent";

/// The organization's orders
///
/// Newest first, whichever owner placed them. For owners and admins.
#[utoipa::path(get, path = "/api/console/billing/orders", tag = "billing",
    params(ListQuery, ("KubeBYON-Organization" = Option<Uuid>, Header, nullable = false, description = ORGANIZATION)),
    responses((status = 200, body = [Order]),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "The caller's role in the organization does not allow reading its orders (`forbidden`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "The caller is not a member of the organization (`not_found`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(state): State<AppState>,
    organization: InOrganization,
    AppQuery(query): AppQuery<ListQuery>,
) -> Result<AppJson<Vec<Order>>, ApiError> {
    organization.require(Action::ReadBilling)?;
    let limit = shared::extract::page_limit(query.limit)?;
    let before = query
        .before
        .map(|at| shared::extract::instant("before", at))
        .transpose()?;
    Ok(AppJson(
        orders::list(
            &state.pool,
            orders::Of {
                organization_id: Some(organization.id),
                ..orders::Of::default()
            },
            None,
            before,
            limit,
        )
        .await?,
    ))
}

/// One of the organization's orders
///
/// For owners and admins; an order of another organization is 404.
#[utoipa::path(get, path = "/api/console/billing/orders/{order_id}", tag = "billing",
    params(("order_id" = Uuid, Path), ("KubeBYON-Organization" = Option<Uuid>, Header, nullable = false, description = ORGANIZATION)),
    responses((status = 200, body = Order),
              (status = 403, description = "The caller's role in the organization does not allow reading its orders (`forbidden`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "The organization header is not an id (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn read(
    State(state): State<AppState>,
    organization: InOrganization,
    AppPath(order_id): AppPath<Uuid>,
) -> Result<AppJson<Order>, ApiError> {
    organization.require(Action::ReadBilling)?;
    match orders::get(&state.pool, order_id).await? {
        Some(order) if order.organization_id == organization.id => Ok(AppJson(order)),
        _ => Err(ApiError::NotFound { what: "order" }),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewOrder {
    pub plan_id: Uuid,
}

/// An order and where to pay it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Checkout {
    pub order: Order,
    /// The Stripe Checkout page: send the user there.
    pub checkout_url: String,
}

/// Choose a plan
///
/// Writes a pending order at the plan's current price, makes its Stripe
/// Checkout Session (one `Idempotency-Key` per order, so a retry cannot make
/// a second one) and answers the page to pay on. Choosing the plan of the
/// pending order again resumes that order and its session; another plan
/// while one is pending is refused. When Stripe cannot be reached the order stays pending and the
/// same request can be sent again.
#[utoipa::path(post, path = "/api/console/billing/orders", tag = "billing", request_body = NewOrder,
    params(("KubeBYON-Organization" = Option<Uuid>, Header, nullable = false, description = ORGANIZATION)),
    responses((status = 201, description = "A new order", body = Checkout),
              (status = 200, description = "The pending order for this plan, resumed", body = Checkout),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "Only the organization's owners pay (`forbidden`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "The caller is not a member of the organization (`not_found`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "An order for another plan is pending (`order_pending`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "No such active plan, or a free one (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 502, description = "Stripe refused or could not be reached (`stripe_unavailable`, `stripe_refused`); the order stays pending", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "Stripe is not configured (`billing_not_configured`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    organization: InOrganization,
    AppJson(body): AppJson<NewOrder>,
) -> Result<Response, ApiError> {
    organization.require(Action::Own)?;
    let platform = settings::load(&state.pool).await?;
    let api = stripe::Api::from_settings(
        &state.settings,
        &billing::settings::load(&state.pool).await?,
    )?;
    let plan = billing::get_plan(&state.pool, body.plan_id)
        .await?
        .filter(|p| p.active)
        .ok_or_else(|| ApiError::invalid("plan_id", "no active plan has this id"))?;
    if plan.stripe_price_id.is_none() && plan.price_minor_units == 0 {
        return Err(ApiError::invalid("plan_id", "is free: it needs no order"));
    }
    let user = accounts::get_user(&state.pool, caller.user_id)
        .await?
        .ok_or(ApiError::Unauthenticated)?;

    let mut tx = state.pool.begin().await?;
    let (order, created) = match orders::lock_pending(&mut tx, organization.id).await? {
        Some(pending) if pending.plan_id == plan.id => (pending, false),
        Some(pending) => {
            return Err(ApiError::Conflict {
                code: "order_pending",
                detail: format!(
                    "order {} for the {} plan is pending; pay or cancel it first",
                    pending.id, pending.plan_name
                ),
            });
        }
        None => {
            let order = orders::insert_pending(&mut tx, organization.id, caller.user_id, &plan)
                .await
                .map_err(|err| match unique_violation(&err) {
                    Some("idx_orders_one_pending_per_organization") => ApiError::Conflict {
                        code: "order_pending",
                        detail: "another order is pending; pay or cancel it first".into(),
                    },
                    _ => err.into(),
                })?;
            audit::record(
                &mut *tx,
                order_event(caller, "billing.order.create", &order),
            )
            .await?;
            (order, true)
        }
    };
    tx.commit().await?;
    // A session made before is answered as it is: asking Stripe again after
    // its idempotency window (24 h) would make a second session, and the
    // first one's payment would no longer match the order.
    if let Some(url) = order.checkout_url.clone() {
        return Ok((
            StatusCode::OK,
            AppJson(Checkout {
                order,
                checkout_url: url,
            }),
        )
            .into_response());
    }

    let base = platform
        .fields
        .public_base_url
        .clone()
        .unwrap_or_else(|| state.settings.public_base_url.clone());
    let base = base.trim_end_matches('/');
    let success_url = format!("{base}/billing?order={}&checkout=success", order.id);
    let cancel_url = format!("{base}/billing?order={}&checkout=cancelled", order.id);
    let line_item = match plan.stripe_price_id.as_deref() {
        Some(price) => LineItem::Price(price),
        None => LineItem::Amount {
            currency: &order.currency,
            unit_amount: order.amount,
            product_name: &plan.name,
        },
    };
    let customer =
        stripe::customer_for(&state.pool, &api, organization.id, &user.email, order.id).await?;
    let request = CheckoutRequest {
        order_id: order.id,
        line_item,
        customer: &customer,
        success_url: &success_url,
        cancel_url: &cancel_url,
    };
    let session = stripe::create_checkout_session(&api.client, &api.base, &api.key, &request)
        .await
        .map_err(|err| {
            tracing::warn!(order_id = %order.id, error = %err, "no Checkout Session for the order");
            stripe::pending_order_error(err, order.id)
        })?;
    orders::set_checkout(&state.pool, order.id, &session.id, &session.url).await?;
    let order = orders::get(&state.pool, order.id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the order just written is missing"))?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        AppJson(Checkout {
            order,
            checkout_url: session.url,
        }),
    )
        .into_response())
}

pub(crate) fn order_event<'a>(caller: Caller, action: &'a str, order: &Order) -> AuditEvent<'a> {
    AuditEvent {
        actor_user_id: Some(caller.user_id),
        actor_kind: "user",
        action,
        target_kind: "order",
        target_id: order.id.to_string(),
        cluster_id: None,
        metadata: serde_json::json!({ "organization_id": order.organization_id, "plan_id": order.plan_id, "amount": order.amount, "currency": order.currency }),
    }
}

/// Cancel a pending order
///
/// Its Checkout Session is expired at Stripe first, so it can no longer be
/// paid (409 `order_paid_in_stripe` when Stripe has the payment already: its
/// event marks the order paid). The previous entitlement stays.
#[utoipa::path(post, path = "/api/console/billing/orders/{order_id}/cancel", tag = "billing",
    params(("order_id" = Uuid, Path), ("KubeBYON-Organization" = Option<Uuid>, Header, nullable = false, description = ORGANIZATION)),
    responses((status = 200, body = Order),
              (status = 403, description = "Only the organization's owners cancel its orders (`forbidden`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "The order is not pending (`order_not_pending`), or Stripe has its payment (`order_paid_in_stripe`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "The organization header is not an id (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 502, description = "Stripe could not expire the session (`stripe_unavailable`, `stripe_refused`); the order stays pending", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "Stripe is not configured (`billing_not_configured`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    organization: InOrganization,
    AppPath(order_id): AppPath<Uuid>,
) -> Result<AppJson<Order>, ApiError> {
    organization.require(Action::Own)?;
    let not_pending = |order: &Order| ApiError::Conflict {
        code: "order_not_pending",
        detail: format!(
            "the order is {}; only a pending order can be cancelled",
            order.status
        ),
    };
    let order = orders::get(&state.pool, order_id)
        .await?
        .filter(|o| o.organization_id == organization.id)
        .ok_or(ApiError::NotFound { what: "order" })?;
    if order.status != OrderStatus::Pending {
        return Err(not_pending(&order));
    }
    // The session is expired first, so that a cancelled order cannot be
    // paid; a session Stripe says is complete was paid: its event settles it.
    stripe::expire_before_cancel(&state.pool, &state.settings, &order).await?;
    let mut tx = state.pool.begin().await?;
    let order = orders::lock_in(&mut tx, organization.id, order_id)
        .await?
        .ok_or(ApiError::NotFound { what: "order" })?;
    if order.status != OrderStatus::Pending {
        return Err(not_pending(&order));
    }
    orders::cancel(&mut *tx, order.id, "user").await?;
    audit::record(
        &mut *tx,
        order_event(caller, "billing.order.cancel", &order),
    )
    .await?;
    let order = orders::get(&mut *tx, order.id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the order just cancelled is missing"))?;
    tx.commit().await?;
    Ok(AppJson(order))
}

/// A payment event's change: what it paid, as the session says.
pub(crate) fn paid(object: &serde_json::Value) -> EventChange {
    EventChange::Paid {
        payment_intent: object["payment_intent"].as_str().map(str::to_string),
        amount_total: object["amount_total"].as_i64(),
        currency: object["currency"].as_str().map(str::to_string),
    }
}
