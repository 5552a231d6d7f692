//! The plan check ([`crate::app::plan`]) as the API's writes make it, in
//! their own transaction: the organisation's entitlement lock, the check,
//! and on a refusal the `plan_limit_reached` notification and a 403.
//!
//! The check comes first in the transaction, before anything is written: a
//! refusal commits the notification alone. It is written on the request's
//! own connection: a second one taken while holding the organisation's lock would
//! let a burst of requests, each holding a connection while it waits for
//! the lock, exhaust the pool and stall the lock's holder.

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::AppState;
use crate::{app::plan, billing::entitlements::Request, error::ApiError};

/// Takes `organization_id`'s entitlement lock in `tx` (held until it ends,
/// so two requests at the last free slot are served one after the other)
/// and, when the request would pass a limit of its plan, refuses it: the
/// transaction, which must not have written anything yet, then commits the
/// notification alone.
pub async fn require(
    state: &AppState,
    mut tx: Transaction<'static, Postgres>,
    organization_id: Uuid,
    request: &Request,
) -> Result<Transaction<'static, Postgres>, ApiError> {
    let locked = plan::lock(&mut tx, organization_id)
        .await?
        .ok_or(ApiError::NotFound {
            what: "organization",
        })?;
    let Some(limit) = locked
        .refuse(&mut tx, request, &state.settings.public_base_url)
        .await?
    else {
        return Ok(tx);
    };
    tx.commit().await?;
    Err(limit.into())
}
