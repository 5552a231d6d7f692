//! Owners past their plan: a plan lowered, or an order cancelled back to
//! the default plan, leaves an owner with more than the plan allows. Their
//! clusters keep running and nothing of theirs is deleted; what would add to
//! a limit they are past is refused where it is asked for (a join, a Node
//! registration, a create), and each cycle tells them, through a
//! `plan_limit_reached` notification for a request of nothing more — at
//! most one a day per resource, as for refusals.

use serde::Serialize;
use sqlx::PgPool;

use shared::{app::plan, billing::entitlements};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlanReport {
    /// Owners of live clusters whose plan was read.
    pub owners_checked: u64,
    /// Owners past at least one limit of their plan.
    pub owners_past_plan: u64,
}

/// Reads every cluster owner's entitlement, on one connection, and
/// notifies each limit they are past.
pub async fn notify_owners_past_their_plan(
    pool: &PgPool,
    public_base_url: &str,
) -> Result<PlanReport, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let mut report = PlanReport::default();
    for owner in entitlements::cluster_owners(&mut conn).await? {
        report.owners_checked += 1;
        if plan::notify_passed(&mut conn, owner, public_base_url).await? > 0 {
            report.owners_past_plan += 1;
        }
    }
    Ok(report)
}
