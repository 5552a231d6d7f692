//! Billing's own settings, one `billing_settings` row: the default plan,
//! Stripe's API base and the two Stripe secrets, sealed with the platform's
//! settings key ([`crate::secretbox`]) and leaving this module only as "set
//! or not", or opened for the code that uses them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{
    secretbox::SecretBox,
    settings::{ResealError, Resealed, Resealer, any_set, changed, next, present},
};

/// Everything but the secrets.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BillingFields {
    /// The plan of users without a paid order; absent: they are not limited.
    pub default_plan_id: Option<Uuid>,
    /// Stripe's API base (default `https://api.stripe.com`): an http(s)
    /// URL that resolves to public addresses only (it receives the key).
    #[schema(pattern = "^https?://[^\\s]+$", max_length = 2000)]
    pub stripe_api_base_url: Option<String>,
}

/// Which secrets are set; their values are never returned.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct BillingSecretsSet {
    pub stripe_secret_key: bool,
    pub stripe_webhook_secret: bool,
}

/// New secret values: absent keeps a secret, `null` clears it, a string sets it.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BillingSecretChanges {
    /// `sk_…` or `rk_…`: the key Checkout Sessions are made with.
    #[serde(default, deserialize_with = "present")]
    pub stripe_secret_key: Option<Option<String>>,
    /// `whsec_…`: the signing secret of the platform's Stripe webhook endpoint.
    #[serde(default, deserialize_with = "present")]
    pub stripe_webhook_secret: Option<Option<String>>,
}

impl BillingSecretChanges {
    /// Each secret's change under its name.
    fn named(&self) -> [(&'static str, &Option<Option<String>>); 2] {
        [
            ("stripe_secret_key", &self.stripe_secret_key),
            ("stripe_webhook_secret", &self.stripe_webhook_secret),
        ]
    }

    pub fn any_set(&self) -> bool {
        any_set(&self.named())
    }

    /// The names of the secrets this changes (set or cleared), for the audit.
    pub fn changed(&self) -> Vec<&'static str> {
        changed(&self.named())
    }
}

/// The row as read, secrets still sealed.
#[derive(Debug, Clone)]
pub struct Stored {
    pub fields: BillingFields,
    pub stripe_secret_key: Option<Vec<u8>>,
    pub stripe_webhook_secret: Option<Vec<u8>>,
    pub updated_at: DateTime<Utc>,
}

impl Stored {
    pub fn secrets_set(&self) -> BillingSecretsSet {
        BillingSecretsSet {
            stripe_secret_key: self.stripe_secret_key.is_some(),
            stripe_webhook_secret: self.stripe_webhook_secret.is_some(),
        }
    }
}

/// Column names: also the associated data each secret is sealed with.
pub mod column {
    pub const STRIPE_SECRET_KEY: &str = "stripe_secret_key_encrypted";
    pub const STRIPE_WEBHOOK_SECRET: &str = "stripe_webhook_secret_encrypted";
}

pub async fn load(db: impl PgExecutor<'_>) -> Result<Stored, sqlx::Error> {
    let r = sqlx::query!(
        "SELECT default_plan_id, stripe_api_base_url, stripe_secret_key_encrypted,
                stripe_webhook_secret_encrypted, updated_at
         FROM billing_settings WHERE id"
    )
    .fetch_one(db)
    .await?;
    Ok(Stored {
        fields: BillingFields {
            default_plan_id: r.default_plan_id,
            stripe_api_base_url: r.stripe_api_base_url,
        },
        stripe_secret_key: r.stripe_secret_key_encrypted,
        stripe_webhook_secret: r.stripe_webhook_secret_encrypted,
        updated_at: r.updated_at,
    })
}

/// Replaces the fields and applies the secret changes. Setting a secret needs
/// the key (the caller checks that it is there).
pub async fn save(
    db: impl PgExecutor<'_>,
    key: Option<&SecretBox>,
    f: &BillingFields,
    secrets: &BillingSecretChanges,
) -> Result<(), sqlx::Error> {
    let stripe_key = next(key, column::STRIPE_SECRET_KEY, &secrets.stripe_secret_key);
    let stripe_webhook = next(
        key,
        column::STRIPE_WEBHOOK_SECRET,
        &secrets.stripe_webhook_secret,
    );
    sqlx::query!(
        "UPDATE billing_settings SET
             default_plan_id = $1, stripe_api_base_url = $2,
             stripe_secret_key_encrypted = CASE WHEN $3 THEN stripe_secret_key_encrypted ELSE $4 END,
             stripe_webhook_secret_encrypted = CASE WHEN $5 THEN stripe_webhook_secret_encrypted ELSE $6 END
         WHERE id",
        f.default_plan_id,
        f.stripe_api_base_url,
        stripe_key.keep,
        stripe_key.value,
        stripe_webhook.keep,
        stripe_webhook.value,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Re-seals billing's secrets under `key`'s current key, in the caller's
/// transaction (the row is locked). A secret that opens under none of the
/// keys stops it with nothing changed.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    sqlx::query!("SELECT id FROM billing_settings WHERE id FOR UPDATE")
        .fetch_one(&mut *tx)
        .await?;
    let stored = load(&mut *tx).await?;
    let mut resealer = Resealer::new(key);
    let stripe_key = resealer.again(column::STRIPE_SECRET_KEY, stored.stripe_secret_key)?;
    let stripe_webhook =
        resealer.again(column::STRIPE_WEBHOOK_SECRET, stored.stripe_webhook_secret)?;
    sqlx::query!(
        "UPDATE billing_settings SET
             stripe_secret_key_encrypted = $1, stripe_webhook_secret_encrypted = $2
         WHERE id",
        stripe_key,
        stripe_webhook,
    )
    .execute(&mut *tx)
    .await?;
    Ok(resealer.done)
}
