//! Plans: what a user may have (clusters, nodes, CPU, memory, hostnames) and
//! what it costs. Administrators define them; orders refer to them; the
//! entitlements say which one a user has.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;
use uuid::Uuid;

pub mod entitlements;
pub mod orders;
pub mod settings;
pub mod stripe;

/// A plan as the back office shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Plan {
    pub id: Uuid,
    pub name: String,
    pub max_clusters: i32,
    pub max_nodes: i32,
    pub max_cpu_milli_cores: i32,
    pub max_memory_mib: i32,
    pub max_hostnames: i32,
    /// Tenant databases, over all the organisation's clusters.
    pub max_databases: i32,
    /// In the currency's minor units (cents).
    pub price_minor_units: i64,
    /// ISO 4217, lower case (`usd`).
    pub currency: String,
    /// The Stripe Price charged for it; without one, `price_minor_units`.
    pub stripe_price_id: Option<String>,
    /// Only active plans can be chosen for new orders.
    pub active: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A plan's fields, validated by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanFields {
    pub name: String,
    pub max_clusters: i32,
    pub max_nodes: i32,
    pub max_cpu_milli_cores: i32,
    pub max_memory_mib: i32,
    pub max_hostnames: i32,
    /// `None`: 0 for a new plan, unchanged for a replaced one.
    pub max_databases: Option<i32>,
    pub price_minor_units: i64,
    pub currency: String,
    pub stripe_price_id: Option<String>,
    pub active: bool,
}

pub async fn list_plans(db: impl PgExecutor<'_>) -> Result<Vec<Plan>, sqlx::Error> {
    sqlx::query_as!(
        Plan,
        "SELECT id, name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib,
                max_hostnames, max_databases, price_minor_units, currency, stripe_price_id,
                active, created_at, updated_at
         FROM plans ORDER BY price_minor_units, name"
    )
    .fetch_all(db)
    .await
}

pub async fn get_plan(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Plan>, sqlx::Error> {
    sqlx::query_as!(
        Plan,
        "SELECT id, name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib,
                max_hostnames, max_databases, price_minor_units, currency, stripe_price_id,
                active, created_at, updated_at
         FROM plans WHERE id = $1",
        id
    )
    .fetch_optional(db)
    .await
}

/// Fails with the unique violation `plans_name_key` when the name is taken.
pub async fn insert_plan(db: impl PgExecutor<'_>, plan: &PlanFields) -> Result<Plan, sqlx::Error> {
    sqlx::query_as!(
        Plan,
        "INSERT INTO plans (name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib,
                            max_hostnames, price_minor_units, currency, stripe_price_id, active,
                            max_databases)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, coalesce($11, 0))
         RETURNING id, name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib,
                   max_hostnames, max_databases, price_minor_units, currency, stripe_price_id,
                   active, created_at, updated_at",
        plan.name,
        plan.max_clusters,
        plan.max_nodes,
        plan.max_cpu_milli_cores,
        plan.max_memory_mib,
        plan.max_hostnames,
        plan.price_minor_units,
        plan.currency,
        plan.stripe_price_id,
        plan.active,
        plan.max_databases,
    )
    .fetch_one(db)
    .await
}

/// Replaces the plan's fields; `None` when there is no such plan. Fails with
/// `plans_name_key` when another plan has the name.
pub async fn update_plan(
    db: impl PgExecutor<'_>,
    id: Uuid,
    plan: &PlanFields,
) -> Result<Option<Plan>, sqlx::Error> {
    sqlx::query_as!(
        Plan,
        "UPDATE plans SET name = $2, max_clusters = $3, max_nodes = $4, max_cpu_milli_cores = $5,
                max_memory_mib = $6, max_hostnames = $7, price_minor_units = $8, currency = $9,
                stripe_price_id = $10, active = $11, max_databases = coalesce($12, max_databases),
                updated_at = now()
         WHERE id = $1
         RETURNING id, name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib,
                   max_hostnames, max_databases, price_minor_units, currency, stripe_price_id,
                   active, created_at, updated_at",
        id,
        plan.name,
        plan.max_clusters,
        plan.max_nodes,
        plan.max_cpu_milli_cores,
        plan.max_memory_mib,
        plan.max_hostnames,
        plan.price_minor_units,
        plan.currency,
        plan.stripe_price_id,
        plan.active,
        plan.max_databases,
    )
    .fetch_optional(db)
    .await
}

/// What deleting a plan did.
#[derive(Debug)]
pub enum PlanDeletion {
    Deleted(Plan),
    NotFound,
    /// Orders refer to it: it can be deactivated, not deleted.
    InUse {
        orders: i64,
        /// It is the settings' default plan.
        default: bool,
    },
}

/// Deletes a plan no order refers to. The plan row is locked first, so an
/// order written meanwhile either waits (and then fails on the missing
/// plan) or is counted.
pub async fn delete_plan(tx: &mut PgConnection, id: Uuid) -> Result<PlanDeletion, sqlx::Error> {
    let Some(plan) = sqlx::query_as!(
        Plan,
        "SELECT id, name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib,
                max_hostnames, max_databases, price_minor_units, currency, stripe_price_id,
                active, created_at, updated_at
         FROM plans WHERE id = $1 FOR UPDATE",
        id
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(PlanDeletion::NotFound);
    };
    let orders = sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM orders WHERE plan_id = $1"#,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    let default = sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM billing_settings WHERE default_plan_id = $1"#,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    if orders > 0 || default > 0 {
        return Ok(PlanDeletion::InUse {
            orders,
            default: default > 0,
        });
    }
    sqlx::query!("DELETE FROM plans WHERE id = $1", id)
        .execute(&mut *tx)
        .await?;
    Ok(PlanDeletion::Deleted(plan))
}

/// What billing brings to the platform: its refusals' problem codes and its payment provider's sealed secrets.
pub const CAPABILITY: crate::capability::Capability = crate::capability::Capability {
    // A plan's limit reached (`entitlements`); Stripe unset, refusing or
    // unreachable, or an order it has taken payment for (`stripe`).
    problem_codes: &[
        "plan_limit_exceeded",
        "billing_not_configured",
        "order_paid_in_stripe",
        "stripe_refused",
        "stripe_unavailable",
    ],
    reseal: Some(|tx, key| Box::pin(settings::reseal(tx, key))),
    organization_key_routes: &[
        "/api/console/account/entitlements",
        "/api/console/billing/plans",
        "/api/console/billing/orders",
    ],
    ..crate::capability::Capability::named("billing")
};
