//! The plan check, the one rule every addition to a limited resource goes
//! through wherever it is asked for — an API write (`http::plan`), a join
//! (`functions/join`), a Node registration (`functions/admission`) — and the
//! notice of a plan already passed (`functions/sync-clusters`):
//!
//! - the organisation's entitlement lock is taken first, in the caller's
//!   transaction, so two additions at the last free slot — by the same
//!   member or by two — are decided one after the other;
//! - a request that would pass a limit is refused, and the refusal enqueues
//!   a `plan_limit_reached` notification for each owner of the organisation
//!   (they choose its plan) in the same transaction (at most one a day per
//!   owner, organisation and resource), which the caller commits whether it
//!   goes on or not.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    billing::entitlements::{self, Entitlement, PlanLimit, Request},
    notifications, organizations,
};

/// An organisation's entitlement, read under its lock (held until the
/// transaction it was taken in ends).
#[derive(Debug)]
pub struct Locked {
    pub organization_id: Uuid,
    pub entitlement: Entitlement,
}

/// Takes `organization_id`'s entitlement lock in `tx`. `None` when there is
/// no such organisation.
pub async fn lock(
    tx: &mut PgConnection,
    organization_id: Uuid,
) -> Result<Option<Locked>, sqlx::Error> {
    Ok(entitlements::lock(tx, organization_id)
        .await?
        .map(|entitlement| Locked {
            organization_id,
            entitlement,
        }))
}

/// [`lock`] for the organisation of `cluster_id`. `None` when there is no
/// such cluster.
pub async fn lock_for_cluster(
    tx: &mut PgConnection,
    cluster_id: Uuid,
) -> Result<Option<Locked>, sqlx::Error> {
    Ok(entitlements::lock_for_cluster(tx, cluster_id).await?.map(
        |(organization_id, entitlement)| Locked {
            organization_id,
            entitlement,
        },
    ))
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
        notify(tx, self.organization_id, &limit).await?;
        Ok(Some(limit))
    }
}

/// Reads `organization_id`'s entitlement and notifies each limit it is
/// past already (a request of nothing more, `requested` 0). Says how many.
pub async fn notify_passed(
    db: &mut PgConnection,
    organization_id: Uuid,
    public_base_url: &str,
) -> Result<usize, sqlx::Error> {
    let upgrade_url = entitlements::upgrade_url(public_base_url);
    let passed = entitlements::read(db, organization_id)
        .await?
        .passed(&upgrade_url);
    for limit in &passed {
        notify(db, organization_id, limit).await?;
    }
    Ok(passed.len())
}

/// One notification per owner of the organisation, naming it.
async fn notify(
    db: &mut PgConnection,
    organization_id: Uuid,
    limit: &PlanLimit,
) -> Result<(), sqlx::Error> {
    let name = organizations::name(&mut *db, organization_id).await?;
    let mut payload = serde_json::to_value(limit).unwrap_or_default();
    payload["organization_id"] = organization_id.to_string().into();
    payload["organization"] = name.unwrap_or_default().into();
    for owner in organizations::owner_ids(&mut *db, organization_id).await? {
        notifications::enqueue_limit_reached(&mut *db, owner, payload.clone()).await?;
    }
    Ok(())
}
