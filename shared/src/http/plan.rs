//! The plan check every write that adds to a limited resource makes, in its
//! own transaction: the user's entitlement lock, the check, and on a refusal
//! a `plan_limit_reached` notification.
//!
//! The check comes first in the transaction, before anything is written: a
//! refusal commits the notification alone. It is written on the request's
//! own connection: a second one taken while holding the user's lock would
//! let a burst of requests, each holding a connection while it waits for
//! the lock, exhaust the pool and stall the lock's holder.

use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use super::AppState;
use crate::{
    billing::entitlements::{self, Request},
    error::ApiError,
    notifications,
};

/// Takes `user_id`'s entitlement lock in `tx` (held until it ends, so two
/// requests at the last free slot are served one after the other) and, when
/// the request would pass a limit of their plan, refuses it: the
/// transaction, which must not have written anything yet, then commits the
/// notification alone.
pub async fn require(
    state: &AppState,
    mut tx: Transaction<'static, Postgres>,
    user_id: Uuid,
    request: &Request,
) -> Result<Transaction<'static, Postgres>, ApiError> {
    let entitlement = entitlements::lock(&mut tx, user_id)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
    let upgrade_url = entitlements::upgrade_url(&state.settings.public_base_url);
    let Some(limit) = entitlement.exceeded(request, &upgrade_url) else {
        return Ok(tx);
    };
    notify(&mut tx, user_id, &limit).await?;
    tx.commit().await?;
    Err(ApiError::PlanLimitExceeded(Box::new(limit)))
}

async fn notify(
    tx: &mut PgConnection,
    user_id: Uuid,
    limit: &crate::error::PlanLimit,
) -> Result<(), sqlx::Error> {
    let payload = serde_json::to_value(limit).unwrap_or_default();
    notifications::enqueue_limit_reached(tx, user_id, payload).await
}
