//! `POST /api/billing/stripe/webhook`: Stripe's events, verified by their
//! signature, settle the orders.

use crate::user_orders::paid;
use axum::{body::Bytes, extract::State, http::HeaderMap};
use chrono::Utc;
use serde::Serialize;
use shared::{
    audit::{self, AuditEvent},
    billing::{
        self,
        orders::{self, EventChange, EventOutcome as OrderEvent, OrderStatus},
        stripe::{self, SignatureError},
    },
    error::ApiError,
    extract::AppJson,
    http::AppState,
    settings,
};
use utoipa::ToSchema;
use uuid::Uuid;

/// What the webhook answers Stripe.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookReceipt {
    pub received: bool,
    /// `applied`, `no_change`, `ignored` or `replayed`.
    pub outcome: String,
}

/// The body the webhook reads; larger events are refused.
pub(crate) const WEBHOOK_BODY_LIMIT: usize = 256 * 1024;

/// Stripe's events
///
/// Verifies `Stripe-Signature` (HMAC-SHA256 of `t.payload` under the
/// endpoint secret, any of several v1 values, 5 minutes' tolerance), then
/// records the event by id and applies it once:
/// `checkout.session.completed` with `payment_status` `paid` (or
/// `no_payment_required`) and `checkout.session.async_payment_succeeded`
/// mark the order paid; `checkout.session.expired` cancels a pending one. A
/// replay, a second delivery or an event after a payment changes nothing
/// and answers 200; other types are acknowledged and ignored.
#[utoipa::path(post, path = "/api/billing/stripe/webhook", tag = "billing",
    params(("Stripe-Signature" = String, Header, description = "`t=<unix>,v1=<hex>`")),
    request_body(content = serde_json::Value, content_type = "application/json"),
    responses((status = 200, body = WebhookReceipt),
              (status = 400, description = "A bad or stale signature (`invalid_signature`) or a body that is not an event (`invalid_event`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 413, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "No webhook secret is configured (`billing_not_configured`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn webhook(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<AppJson<WebhookReceipt>, ApiError> {
    if body.len() > WEBHOOK_BODY_LIMIT {
        return Err(ApiError::PayloadTooLarge {
            limit_bytes: WEBHOOK_BODY_LIMIT,
        });
    }
    let signature = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::BadRequest {
            code: "invalid_signature",
            detail: SignatureError::Malformed.to_string(),
        })?;
    let stored = billing::settings::load(&state.pool).await?;
    let secret = settings::open(
        state.settings.secret_box().as_ref(),
        billing::settings::column::STRIPE_WEBHOOK_SECRET,
        stored.stripe_webhook_secret.as_deref(),
    )
    .map_err(|err| anyhow::anyhow!("the Stripe webhook secret cannot be opened: {err}"))?
    .ok_or_else(|| ApiError::NotConfigured {
        code: "billing_not_configured",
        detail: "no Stripe webhook secret is configured".into(),
    })?;
    stripe::verify_signature(signature, &body, &secret, Utc::now().timestamp()).map_err(|err| {
        tracing::warn!(error = %err, "a Stripe webhook was refused");
        ApiError::BadRequest {
            code: "invalid_signature",
            detail: err.to_string(),
        }
    })?;
    let event: stripe::Event =
        serde_json::from_slice(&body).map_err(|err| ApiError::BadRequest {
            code: "invalid_event",
            detail: format!("the body is not a Stripe event: {err}"),
        })?;
    if !event.id.starts_with("evt_") || event.id.len() > 204 {
        return Err(ApiError::BadRequest {
            code: "invalid_event",
            detail: "the event id is not a Stripe event id".into(),
        });
    }
    let object = &event.data.object;
    let change = match event.kind.as_str() {
        "checkout.session.completed" => match object["payment_status"].as_str() {
            Some("paid" | "no_payment_required") => paid(object),
            // Paid later (a bank transfer): async_payment_succeeded follows.
            _ => EventChange::Nothing,
        },
        "checkout.session.async_payment_succeeded" => paid(object),
        "checkout.session.expired" => EventChange::Expired,
        _ => EventChange::Nothing,
    };
    let order_id = object["client_reference_id"]
        .as_str()
        .and_then(|id| id.parse::<Uuid>().ok());
    let session_id = object["id"].as_str().filter(|id| id.starts_with("cs_"));
    let mut tx = state.pool.begin().await?;
    let (outcome, order) = orders::apply_event(
        &mut tx,
        &event.id,
        &event.kind,
        order_id,
        session_id,
        &change,
    )
    .await?;
    if let Some(order) = &order {
        let action = match outcome {
            // Stripe took money the platform does not count: for a refund.
            OrderEvent::PaidAfterCancel => "billing.order.payment_after_cancel",
            OrderEvent::WrongAmount => "billing.order.payment_wrong_amount",
            _ if order.status == OrderStatus::Paid => "billing.order.paid",
            _ => "billing.order.expired",
        };
        if action != "billing.order.paid" && action != "billing.order.expired" {
            tracing::warn!(event_id = %event.id, order_id = %order.id, action, "a Stripe payment was not applied");
        }
        audit::record(
            &mut *tx,
            AuditEvent {
                actor_user_id: None,
                actor_kind: "system",
                action,
                target_kind: "order",
                target_id: order.id.to_string(),
                cluster_id: None,
                metadata: serde_json::json!({ "stripe_event_id": event.id, "organization_id": order.organization_id, "plan_id": order.plan_id }),
            },
        )
        .await?;
        if outcome == OrderEvent::Applied && order.status == OrderStatus::Paid {
            let organization = shared::organizations::name(&mut *tx, order.organization_id).await?;
            shared::notifications::enqueue(
                &mut *tx,
                order.user_id,
                "order_paid",
                None,
                serde_json::json!({ "order_id": order.id, "plan": order.plan_name, "amount": order.amount, "currency": order.currency, "organization": organization }),
            )
            .await?;
        }
    }
    tx.commit().await?;
    tracing::info!(event_id = %event.id, kind = %event.kind, ?outcome, "Stripe event received");
    Ok(AppJson(WebhookReceipt {
        received: true,
        outcome: outcome.as_str().into(),
    }))
}
