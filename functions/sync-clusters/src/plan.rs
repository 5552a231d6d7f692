//! Organisations past their plan: a plan lowered, or an order cancelled
//! back to the default plan, leaves an organisation with more than the plan
//! allows. Its clusters keep running and nothing of its is deleted; what
//! would add to a limit it is past is refused where it is asked for (a
//! join, a Node registration, a create), and each cycle tells its owners,
//! through a `plan_limit_reached` notification for a request of nothing
//! more — at most one a day per resource, as for refusals.

use serde::Serialize;
use sqlx::PgPool;

use shared::{app::plan, billing::entitlements};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlanReport {
    /// Organisations whose kept usage passes their plan, or that have a
    /// join under way, whose entitlement was read.
    pub organizations_checked: u64,
    /// Organisations past at least one limit of their plan.
    pub organizations_past_plan: u64,
}

/// Reads the entitlement of every organisation that may be past its plan
/// (found by one statement over the kept usage), on one connection, and
/// notifies each limit it is past.
pub async fn notify_organizations_past_their_plan(
    pool: &PgPool,
    public_base_url: &str,
) -> Result<PlanReport, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let mut report = PlanReport::default();
    for organization in entitlements::maybe_past_their_plan(&mut conn).await? {
        report.organizations_checked += 1;
        if plan::notify_passed(&mut conn, organization, public_base_url).await? > 0 {
            report.organizations_past_plan += 1;
        }
    }
    Ok(report)
}
