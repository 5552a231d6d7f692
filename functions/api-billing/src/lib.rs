//! `api-billing`: the plans a user can choose, their orders paid through
//! Stripe Checkout, and Stripe's webhook, which settles them.

use axum::{Router, extract::State};
use shared::{
    billing::{self, Plan},
    error::ApiError,
    extract::AppJson,
    http::{AppState, Caller},
};
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

mod user_orders;
mod webhook;

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(shared::openapi::answering(ApiDoc::openapi(), PROBLEM_CODES))
        .routes(routes!(plans))
        .routes(routes!(user_orders::list, user_orders::create))
        .routes(routes!(user_orders::read))
        .routes(routes!(user_orders::cancel))
        .routes(routes!(webhook::webhook))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(
    tags((name = "billing", description = "Plans, orders and Stripe payments"))
)]
struct ApiDoc;

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

/// The problem codes of this function's own refusals (the platform's and
/// its capabilities' come with `shared::http::problem_codes`).
const PROBLEM_CODES: &[&str] = &[
    "invalid_event",
    "invalid_signature",
    "order_not_pending",
    "order_pending",
];
