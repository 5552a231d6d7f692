//! The back office's plans: list, create, read, replace, delete. A plan that
//! orders refer to cannot be deleted; it is deactivated instead.

use axum::{extract::State, http::StatusCode};
use serde::Deserialize;
use shared::{
    audit::{self, AuditEvent},
    billing::{self, Plan, PlanDeletion, PlanFields},
    error::{ApiError, FieldError, unique_violation},
    extract::{AppJson, AppPath},
    http::{AdminCaller, AppState},
};
use utoipa::ToSchema;
use uuid::Uuid;

const MAX_CLUSTERS: i32 = 100_000;
const MAX_NODES: i32 = 1_000_000;
const MAX_CPU_MILLI_CORES: i32 = 100_000_000;
const MAX_MEMORY_MIB: i32 = 1_000_000_000;
const MAX_HOSTNAMES: i32 = 1_000_000;
const MAX_DATABASES: i32 = 1_000_000;
const MAX_PRICE_MINOR_UNITS: i64 = 100_000_000_000;

/// A plan as an administrator writes it (the whole plan: a `PUT` replaces it).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// 1–100 characters, no control characters, not only spaces; unique.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = "^[^\\x00-\\x1f\\x7f]*[^\\x00-\\x20\\x7f][^\\x00-\\x1f\\x7f]*$"
    )]
    pub name: String,
    #[schema(minimum = 0, maximum = 100_000)]
    pub max_clusters: i32,
    #[schema(minimum = 0, maximum = 1_000_000)]
    pub max_nodes: i32,
    /// The sum of the clusters' workload CPU limits.
    #[schema(minimum = 0, maximum = 100_000_000)]
    pub max_cpu_milli_cores: i32,
    /// The sum of the clusters' workload memory limits.
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    pub max_memory_mib: i32,
    #[schema(minimum = 0, maximum = 1_000_000)]
    pub max_hostnames: i32,
    /// Tenant databases over all the organisation's clusters. Absent: 0 for
    /// a new plan, unchanged when a plan is replaced.
    #[schema(minimum = 0, maximum = 1_000_000)]
    pub max_databases: Option<i32>,
    /// In the currency's minor units (cents); 0 for a free plan.
    #[schema(minimum = 0, maximum = 100_000_000_000i64)]
    pub price_minor_units: i64,
    /// ISO 4217, lower case (`usd`, `eur`).
    #[schema(pattern = "^[a-z]{3}$")]
    pub currency: String,
    /// A Price of the platform's Stripe account to charge; without one, the
    /// plan's own amount is charged.
    #[schema(pattern = "^price_[A-Za-z0-9]{1,200}$")]
    pub stripe_price_id: Option<String>,
    /// Default true; only active plans can be chosen for new orders.
    pub active: Option<bool>,
}

impl PlanRequest {
    /// Every invalid field at once.
    fn validate(self) -> Result<PlanFields, ApiError> {
        let mut errors = Vec::new();
        let mut error = |field: &str, message: &str| errors.push(FieldError::new(field, message));
        let control = |c: char| c <= '\u{1f}' || c == '\u{7f}';
        if !(1..=100).contains(&self.name.chars().count())
            || self.name.chars().any(control)
            || self.name.chars().all(|c| c == ' ')
        {
            error(
                "name",
                "must be 1 to 100 characters, without control characters, not only spaces",
            );
        }
        for (field, value, max) in [
            ("max_clusters", self.max_clusters, MAX_CLUSTERS),
            ("max_nodes", self.max_nodes, MAX_NODES),
            (
                "max_cpu_milli_cores",
                self.max_cpu_milli_cores,
                MAX_CPU_MILLI_CORES,
            ),
            ("max_memory_mib", self.max_memory_mib, MAX_MEMORY_MIB),
            ("max_hostnames", self.max_hostnames, MAX_HOSTNAMES),
            (
                "max_databases",
                self.max_databases.unwrap_or_default(),
                MAX_DATABASES,
            ),
        ] {
            if !(0..=max).contains(&value) {
                error(field, &format!("must be 0 to {max}"));
            }
        }
        if !(0..=MAX_PRICE_MINOR_UNITS).contains(&self.price_minor_units) {
            error(
                "price_minor_units",
                &format!("must be 0 to {MAX_PRICE_MINOR_UNITS}"),
            );
        }
        if !(self.currency.len() == 3 && self.currency.bytes().all(|b| b.is_ascii_lowercase())) {
            error(
                "currency",
                "must be an ISO 4217 code in lower case, like usd",
            );
        }
        if let Some(price) = &self.stripe_price_id {
            let id = price.strip_prefix("price_").unwrap_or_default();
            if !((1..=200).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())) {
                error("stripe_price_id", "must be a Stripe Price id (price_…)");
            }
        }
        if !errors.is_empty() {
            return Err(ApiError::Validation(errors));
        }
        Ok(PlanFields {
            name: self.name.trim_matches(' ').to_string(),
            max_clusters: self.max_clusters,
            max_nodes: self.max_nodes,
            max_cpu_milli_cores: self.max_cpu_milli_cores,
            max_memory_mib: self.max_memory_mib,
            max_hostnames: self.max_hostnames,
            max_databases: self.max_databases,
            price_minor_units: self.price_minor_units,
            currency: self.currency,
            stripe_price_id: self.stripe_price_id,
            active: self.active.unwrap_or(true),
        })
    }
}

fn name_taken(err: sqlx::Error, name: &str) -> ApiError {
    match unique_violation(&err) {
        Some("plans_name_key") => ApiError::Conflict {
            code: "plan_name_taken",
            detail: format!("a plan named {name:?} exists"),
        },
        _ => err.into(),
    }
}

fn plan_event<'a>(admin: &AdminCaller, action: &'a str, plan: &Plan) -> AuditEvent<'a> {
    AuditEvent {
        actor_user_id: Some(admin.user_id),
        actor_kind: "admin",
        action,
        target_kind: "plan",
        target_id: plan.id.to_string(),
        cluster_id: None,
        metadata: serde_json::to_value(plan).unwrap_or_default(),
    }
}

/// Plans
///
/// Cheapest first.
#[utoipa::path(get, path = "/api/console/admin/plans", tag = "admin",
    responses((status = 200, body = Vec<Plan>), (status = 403, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(state): State<AppState>,
    _admin: AdminCaller,
) -> Result<AppJson<Vec<Plan>>, ApiError> {
    Ok(AppJson(billing::list_plans(&state.pool).await?))
}

/// Create a plan
#[utoipa::path(post, path = "/api/console/admin/plans", tag = "admin", request_body = PlanRequest,
    responses((status = 201, body = Plan), (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "Another plan has the name (`plan_name_taken`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppJson(body): AppJson<PlanRequest>,
) -> Result<(StatusCode, AppJson<Plan>), ApiError> {
    let fields = body.validate()?;
    let mut tx = state.pool.begin().await?;
    let plan = billing::insert_plan(&mut *tx, &fields)
        .await
        .map_err(|err| name_taken(err, &fields.name))?;
    audit::record(&mut *tx, plan_event(&admin, "admin.plan.create", &plan)).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, AppJson(plan)))
}

/// A plan
#[utoipa::path(get, path = "/api/console/admin/plans/{plan_id}", tag = "admin", params(("plan_id" = Uuid, Path)),
    responses((status = 200, body = Plan), (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(state): State<AppState>,
    _admin: AdminCaller,
    AppPath(plan_id): AppPath<Uuid>,
) -> Result<AppJson<Plan>, ApiError> {
    billing::get_plan(&state.pool, plan_id)
        .await?
        .map(AppJson)
        .ok_or(ApiError::NotFound { what: "plan" })
}

/// Replace a plan
///
/// Users on it get the new limits at once; deactivating it only stops new
/// orders for it.
#[utoipa::path(put, path = "/api/console/admin/plans/{plan_id}", tag = "admin", params(("plan_id" = Uuid, Path)), request_body = PlanRequest,
    responses((status = 200, body = Plan), (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "Another plan has the name (`plan_name_taken`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn put(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppPath(plan_id): AppPath<Uuid>,
    AppJson(body): AppJson<PlanRequest>,
) -> Result<AppJson<Plan>, ApiError> {
    let fields = body.validate()?;
    let mut tx = state.pool.begin().await?;
    let plan = billing::update_plan(&mut *tx, plan_id, &fields)
        .await
        .map_err(|err| name_taken(err, &fields.name))?
        .ok_or(ApiError::NotFound { what: "plan" })?;
    audit::record(&mut *tx, plan_event(&admin, "admin.plan.update", &plan)).await?;
    tx.commit().await?;
    Ok(AppJson(plan))
}

/// Delete a plan
///
/// Only a plan no order refers to (409 `plan_in_use`: deactivate it instead).
#[utoipa::path(delete, path = "/api/console/admin/plans/{plan_id}", tag = "admin", params(("plan_id" = Uuid, Path)),
    responses((status = 204, description = "Deleted"), (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "Orders refer to the plan (`plan_in_use`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppPath(plan_id): AppPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    let mut tx = state.pool.begin().await?;
    let plan = match billing::delete_plan(&mut tx, plan_id).await? {
        PlanDeletion::Deleted(plan) => plan,
        PlanDeletion::NotFound => return Err(ApiError::NotFound { what: "plan" }),
        PlanDeletion::InUse { orders, default } => {
            let detail = if default {
                "it is the default plan of the settings; name another default_plan_id first".into()
            } else {
                format!(
                    "{orders} order(s) refer to this plan; deactivate it (active: false) instead"
                )
            };
            return Err(ApiError::Conflict {
                code: "plan_in_use",
                detail,
            });
        }
    };
    audit::record(&mut *tx, plan_event(&admin, "admin.plan.delete", &plan)).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: serde_json::Value) -> PlanRequest {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn every_invalid_field_is_reported_at_once() {
        let err = request(serde_json::json!({
            "name": "   ", "max_clusters": -1, "max_nodes": 1_000_001, "max_cpu_milli_cores": 0,
            "max_memory_mib": 0, "max_hostnames": 0, "max_databases": -1, "price_minor_units": -5,
            "currency": "USD", "stripe_price_id": "prod_123",
        }))
        .validate()
        .unwrap_err();
        let ApiError::Validation(errors) = err else {
            panic!("{err:?}")
        };
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "name",
                "max_clusters",
                "max_nodes",
                "max_databases",
                "price_minor_units",
                "currency",
                "stripe_price_id"
            ]
        );
    }

    #[test]
    fn names_are_refused_with_control_characters_and_kept_without_edge_spaces() {
        let plan = |name: &str| {
            request(serde_json::json!({
                "name": name, "max_clusters": 1, "max_nodes": 1, "max_cpu_milli_cores": 1,
                "max_memory_mib": 1, "max_hostnames": 1, "price_minor_units": 0, "currency": "eur",
            }))
            .validate()
        };
        assert!(plan("Pro\nPlan").is_err());
        assert!(plan("Pro\u{7f}").is_err());
        assert_eq!(plan("  Pro  ").unwrap().name, "Pro");
        assert_eq!(plan("Pro 東京").unwrap().name, "Pro 東京");
        assert!(plan(&"x".repeat(101)).is_err());
        assert!(plan(&"é".repeat(100)).is_ok(), "characters, not bytes");
    }
}
