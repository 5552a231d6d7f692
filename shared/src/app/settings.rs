//! The stored settings, all parts at once: the platform's part of the
//! `system_settings` row and each capability's (its own columns of the row,
//! or a row of its own).

use sqlx::PgConnection;

use crate::{
    secretbox::SecretBox,
    settings::{self, ResealError, Resealed},
};

/// Re-seals every stored secret under `key`'s current key, in the caller's
/// transaction: the platform's part, then each capability's (its
/// declaration's `reseal`); all of them or, when one opens under none of
/// the keys, none.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    let mut resealed = settings::reseal(tx, key).await?;
    for reseal in super::capabilities::ALL.iter().filter_map(|c| c.reseal) {
        resealed = resealed + reseal(tx, key).await?;
    }
    Ok(resealed)
}
