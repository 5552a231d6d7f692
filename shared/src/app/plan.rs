//! The plan check, the one rule every addition to a limited resource goes
//! through wherever it is asked for — an API write (`http::plan`), a join
//! (`functions/join`), a Node registration (`functions/admission`) — and the
//! notice of a plan already passed (`functions/sync-clusters`):
//!
//! - the owner's entitlement lock is taken first, in the caller's
//!   transaction, so two additions at the last free slot are decided one
//!   after the other;
//! - a request that would pass a limit is refused, and the refusal enqueues
//!   a `plan_limit_reached` notification in the same transaction (at most
//!   one a day per user and resource), which the caller commits whether it
//!   goes on or not.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    billing::entitlements::{self, Entitlement, PlanLimit, Request},
    notifications,
};

/// A user's entitlement, read under their lock (held until the
/// transaction it was taken in ends).
#[derive(Debug)]
pub struct Locked {
    pub user_id: Uuid,
    pub entitlement: Entitlement,
}

/// Takes `user_id`'s entitlement lock in `tx`. `None` when there is no such
/// user.
pub async fn lock(tx: &mut PgConnection, user_id: Uuid) -> Result<Option<Locked>, sqlx::Error> {
    Ok(entitlements::lock(tx, user_id)
        .await?
        .map(|entitlement| Locked {
            user_id,
            entitlement,
        }))
}

/// [`lock`] for the owner of `cluster_id`. `None` when there is no such
/// cluster.
pub async fn lock_for_cluster(
    tx: &mut PgConnection,
    cluster_id: Uuid,
) -> Result<Option<Locked>, sqlx::Error> {
    Ok(entitlements::lock_for_cluster(tx, cluster_id)
        .await?
        .map(|(user_id, entitlement)| Locked {
            user_id,
            entitlement,
        }))
}

impl Locked {
    /// The limit `request` would pass, if any; then its notification is
    /// enqueued in `tx`.
    pub async fn refuse(
        &self,
        tx: &mut PgConnection,
        request: &Request,
        public_base_url: &str,
    ) -> Result<Option<PlanLimit>, sqlx::Error> {
        let upgrade_url = entitlements::upgrade_url(public_base_url);
        let Some(limit) = self.entitlement.exceeded(request, &upgrade_url) else {
            return Ok(None);
        };
        notify(tx, self.user_id, &limit).await?;
        Ok(Some(limit))
    }
}

/// Reads `user_id`'s entitlement and notifies each limit they are past
/// already (a request of nothing more, `requested` 0). Says how many.
pub async fn notify_passed(
    db: &mut PgConnection,
    user_id: Uuid,
    public_base_url: &str,
) -> Result<usize, sqlx::Error> {
    let upgrade_url = entitlements::upgrade_url(public_base_url);
    let passed = entitlements::read(db, user_id).await?.passed(&upgrade_url);
    for limit in &passed {
        notify(db, user_id, limit).await?;
    }
    Ok(passed.len())
}

async fn notify(
    db: &mut PgConnection,
    user_id: Uuid,
    limit: &PlanLimit,
) -> Result<(), sqlx::Error> {
    let payload = serde_json::to_value(limit).unwrap_or_default();
    notifications::enqueue_limit_reached(db, user_id, payload).await
}
