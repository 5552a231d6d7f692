//! The stored settings, all parts at once: the platform's part of the
//! `system_settings` row and each capability's (its own columns of the row,
//! or a row of its own).

use sqlx::PgConnection;

use crate::{
    accounts, billing, databases, ingress, notifications,
    secretbox::SecretBox,
    settings::{self, ResealError, Resealed},
};

/// Re-seals every stored secret under `key`'s current key, in the caller's
/// transaction: all of them or, when one opens under none of the keys, none.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    Ok(settings::reseal(tx, key).await?
        + accounts::settings::reseal(tx, key).await?
        + ingress::settings::reseal(tx, key).await?
        + notifications::settings::reseal(tx, key).await?
        + billing::settings::reseal(tx, key).await?
        + databases::reseal(tx, key).await?)
}
