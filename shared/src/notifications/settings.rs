//! Notifications' part of the `system_settings` row: the platform's outbound
//! webhook, its signing secret sealed with the platform's key
//! ([`crate::secretbox`]). Mail goes through the platform's mail server
//! ([`crate::settings`]).

use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;

use super::webhook::Signer;
use crate::{
    error::FieldError,
    secretbox::SecretBox,
    settings::{ResealError, Resealed, Resealer, lock, next, present},
};

/// Notifications' settings but the secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct NotificationsFields {
    pub outbound_webhook_url: Option<String>,
}

/// Whether the webhook's secret is set; its value is never returned.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NotificationsSecretsSet {
    pub outbound_webhook_secret: bool,
}

/// A new webhook secret: absent keeps it, `null` clears it, a string sets it.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct NotificationsSecretChanges {
    #[serde(default, deserialize_with = "present")]
    pub outbound_webhook_secret: Option<Option<String>>,
}

impl NotificationsSecretChanges {
    /// Each secret's change under its name.
    pub fn named(&self) -> [(&'static str, &Option<Option<String>>); 1] {
        [("outbound_webhook_secret", &self.outbound_webhook_secret)]
    }
}

/// Notifications' part of the row as read, the secret still sealed.
#[derive(Debug, Clone)]
pub struct Stored {
    pub fields: NotificationsFields,
    pub webhook_secret: Option<Vec<u8>>,
}

impl Stored {
    pub fn secrets_set(&self) -> NotificationsSecretsSet {
        NotificationsSecretsSet {
            outbound_webhook_secret: self.webhook_secret.is_some(),
        }
    }
}

/// Column names: also the associated data each secret is sealed with.
pub mod column {
    pub const WEBHOOK_SECRET: &str = "outbound_webhook_secret_encrypted";
}

pub async fn load(db: impl PgExecutor<'_>) -> Result<Stored, sqlx::Error> {
    let r = sqlx::query!(
        "SELECT outbound_webhook_url, outbound_webhook_secret_encrypted
         FROM system_settings WHERE id"
    )
    .fetch_one(db)
    .await?;
    Ok(Stored {
        fields: NotificationsFields {
            outbound_webhook_url: r.outbound_webhook_url,
        },
        webhook_secret: r.outbound_webhook_secret_encrypted,
    })
}

/// Replaces notifications' fields and applies the secret's change. Setting
/// the secret needs the key (the caller checks that it is there).
pub async fn save(
    db: impl PgExecutor<'_>,
    key: Option<&SecretBox>,
    f: &NotificationsFields,
    secrets: &NotificationsSecretChanges,
) -> Result<(), sqlx::Error> {
    let webhook = next(
        key,
        column::WEBHOOK_SECRET,
        &secrets.outbound_webhook_secret,
    );
    sqlx::query!(
        "UPDATE system_settings SET outbound_webhook_url = $1,
             outbound_webhook_secret_encrypted = CASE WHEN $2 THEN outbound_webhook_secret_encrypted ELSE $3 END
         WHERE id",
        f.outbound_webhook_url,
        webhook.keep,
        webhook.value,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The problems of notifications' fields, each under its name.
pub async fn validate(
    f: &NotificationsFields,
    secrets: &NotificationsSecretChanges,
    allow_private: bool,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    // It receives the signed events.
    if let Some(url) = f.outbound_webhook_url.as_deref()
        && let Err(reason) = crate::outbound::check_resolved(url, allow_private).await
    {
        errors.push(FieldError::new("outbound_webhook_url", &reason));
    }
    // Receivers verify with Standard Webhooks libraries, which take only
    // `whsec_` and base64.
    if let Some(Some(secret)) = &secrets.outbound_webhook_secret
        && Signer::from_secret(&secrecy::SecretString::from(secret.clone())).is_none()
    {
        errors.push(FieldError::new(
            "secrets.outbound_webhook_secret",
            "must be whsec_ followed by 16–128 bytes in base64 (Standard Webhooks)",
        ));
    }
    errors
}

/// Re-seals the webhook's secret under `key`'s current key, in the caller's
/// transaction (the row is locked). A secret that opens under none of the
/// keys stops it with nothing changed.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    lock(&mut *tx).await?;
    let stored = load(&mut *tx).await?;
    let mut resealer = Resealer::new(key);
    let webhook = resealer.again(column::WEBHOOK_SECRET, stored.webhook_secret)?;
    sqlx::query!(
        "UPDATE system_settings SET outbound_webhook_secret_encrypted = $1 WHERE id",
        webhook,
    )
    .execute(&mut *tx)
    .await?;
    Ok(resealer.done)
}
