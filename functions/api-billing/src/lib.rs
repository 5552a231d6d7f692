//! `api-billing`: the plans a user can choose, their orders paid through
//! Stripe Checkout, and Stripe's webhook, which settles them.

use axum::{
    Router,
    extract::State,
    routing::{get, post},
};
use shared::{
    billing::{self, Plan},
    error::ApiError,
    extract::AppJson,
    http::{AppState, Caller},
};
use utoipa::OpenApi;

mod user_orders;
mod webhook;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/console/billing/plans", get(plans))
        .route(
            "/api/console/billing/orders",
            get(user_orders::list).post(user_orders::create),
        )
        .route(
            "/api/console/billing/orders/{order_id}",
            get(user_orders::read),
        )
        .route(
            "/api/console/billing/orders/{order_id}/cancel",
            post(user_orders::cancel),
        )
        .route("/api/billing/stripe/webhook", post(webhook::webhook))
}

#[derive(OpenApi)]
#[openapi(
    paths(plans, user_orders::list, user_orders::create, user_orders::read, user_orders::cancel, webhook::webhook),
    tags((name = "billing", description = "Plans, orders and Stripe payments"))
)]
pub struct ApiDoc;

/// Plans a user can choose
///
/// The active plans, cheapest first.
#[utoipa::path(get, path = "/api/console/billing/plans", tag = "billing",
    responses((status = 200, body = [Plan]),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn plans(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<AppJson<Vec<Plan>>, ApiError> {
    let plans = billing::list_plans(&state.pool).await?;
    Ok(AppJson(plans.into_iter().filter(|p| p.active).collect()))
}
