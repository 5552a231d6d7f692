//! Accounts' part of the `system_settings` row: the OAuth apps users sign in
//! with and the captcha that guards sign-up and sign-in, their secrets sealed
//! with the platform's key ([`crate::secretbox`]).

use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;

use crate::{
    error::FieldError,
    secretbox::SecretBox,
    settings::{ResealError, Resealed, Resealer, lock, next, present},
};

/// Accounts' settings but the secrets.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct AccountsFields {
    pub github_oauth_client_id: Option<String>,
    pub google_oauth_client_id: Option<String>,
    pub captcha_enabled: bool,
    /// The provider's verify endpoint (Turnstile, hCaptcha).
    pub captcha_verify_url: Option<String>,
    pub captcha_site_key: Option<String>,
}

/// Which secrets are set; their values are never returned.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AccountsSecretsSet {
    pub github_oauth_client_secret: bool,
    pub google_oauth_client_secret: bool,
    pub captcha_secret: bool,
}

/// New secret values: absent keeps a secret, `null` clears it, a string sets it.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct AccountsSecretChanges {
    #[serde(default, deserialize_with = "present")]
    pub github_oauth_client_secret: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub google_oauth_client_secret: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub captcha_secret: Option<Option<String>>,
}

impl AccountsSecretChanges {
    /// Each secret's change under its name.
    pub fn named(&self) -> [(&'static str, &Option<Option<String>>); 3] {
        [
            (
                "github_oauth_client_secret",
                &self.github_oauth_client_secret,
            ),
            (
                "google_oauth_client_secret",
                &self.google_oauth_client_secret,
            ),
            ("captcha_secret", &self.captcha_secret),
        ]
    }
}

/// Accounts' part of the row as read, secrets still sealed.
#[derive(Debug, Clone)]
pub struct Stored {
    pub fields: AccountsFields,
    pub github_secret: Option<Vec<u8>>,
    pub google_secret: Option<Vec<u8>>,
    pub captcha_secret: Option<Vec<u8>>,
}

impl Stored {
    pub fn secrets_set(&self) -> AccountsSecretsSet {
        AccountsSecretsSet {
            github_oauth_client_secret: self.github_secret.is_some(),
            google_oauth_client_secret: self.google_secret.is_some(),
            captcha_secret: self.captcha_secret.is_some(),
        }
    }
}

/// Column names: also the associated data each secret is sealed with.
pub mod column {
    pub const GITHUB_SECRET: &str = "github_oauth_client_secret_encrypted";
    pub const GOOGLE_SECRET: &str = "google_oauth_client_secret_encrypted";
    pub const CAPTCHA_SECRET: &str = "captcha_secret_encrypted";
}

pub async fn load(db: impl PgExecutor<'_>) -> Result<Stored, sqlx::Error> {
    let r = sqlx::query!(
        "SELECT github_oauth_client_id, google_oauth_client_id, captcha_enabled,
                captcha_verify_url, captcha_site_key, github_oauth_client_secret_encrypted,
                google_oauth_client_secret_encrypted, captcha_secret_encrypted
         FROM system_settings WHERE id"
    )
    .fetch_one(db)
    .await?;
    Ok(Stored {
        fields: AccountsFields {
            github_oauth_client_id: r.github_oauth_client_id,
            google_oauth_client_id: r.google_oauth_client_id,
            captcha_enabled: r.captcha_enabled,
            captcha_verify_url: r.captcha_verify_url,
            captcha_site_key: r.captcha_site_key,
        },
        github_secret: r.github_oauth_client_secret_encrypted,
        google_secret: r.google_oauth_client_secret_encrypted,
        captcha_secret: r.captcha_secret_encrypted,
    })
}

/// Replaces accounts' fields and applies the secret changes. Setting a
/// secret needs the key (the caller checks that it is there).
pub async fn save(
    db: impl PgExecutor<'_>,
    key: Option<&SecretBox>,
    f: &AccountsFields,
    secrets: &AccountsSecretChanges,
) -> Result<(), sqlx::Error> {
    let github = next(
        key,
        column::GITHUB_SECRET,
        &secrets.github_oauth_client_secret,
    );
    let google = next(
        key,
        column::GOOGLE_SECRET,
        &secrets.google_oauth_client_secret,
    );
    let captcha = next(key, column::CAPTCHA_SECRET, &secrets.captcha_secret);
    sqlx::query!(
        "UPDATE system_settings SET
             github_oauth_client_id = $1, google_oauth_client_id = $2, captcha_enabled = $3,
             captcha_verify_url = $4, captcha_site_key = $5,
             github_oauth_client_secret_encrypted = CASE WHEN $6 THEN github_oauth_client_secret_encrypted ELSE $7 END,
             google_oauth_client_secret_encrypted = CASE WHEN $8 THEN google_oauth_client_secret_encrypted ELSE $9 END,
             captcha_secret_encrypted = CASE WHEN $10 THEN captcha_secret_encrypted ELSE $11 END
         WHERE id",
        f.github_oauth_client_id,
        f.google_oauth_client_id,
        f.captcha_enabled,
        f.captcha_verify_url,
        f.captcha_site_key,
        github.keep,
        github.value,
        google.keep,
        google.value,
        captcha.keep,
        captcha.value,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The problems of accounts' fields, each under its name; `before` is the
/// part as stored (a captcha can be enabled with the secret already set).
pub async fn validate(
    f: &AccountsFields,
    secrets: &AccountsSecretChanges,
    before: &Stored,
    allow_private: bool,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    // It receives the captcha secret.
    if let Some(url) = f.captcha_verify_url.as_deref()
        && let Err(reason) = crate::outbound::check_resolved(url, allow_private).await
    {
        errors.push(FieldError::new("captcha_verify_url", &reason));
    }
    let captcha_secret = match &secrets.captcha_secret {
        None => before.captcha_secret.is_some(),
        Some(change) => change.is_some(),
    };
    if f.captcha_enabled && (f.captcha_verify_url.is_none() || !captcha_secret) {
        errors.push(FieldError::new(
            "captcha_enabled",
            "needs captcha_verify_url and the captcha secret",
        ));
    }
    errors
}

/// Re-seals accounts' secrets under `key`'s current key, in the caller's
/// transaction (the row is locked). A secret that opens under none of the
/// keys stops it with nothing changed.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    lock(&mut *tx).await?;
    let stored = load(&mut *tx).await?;
    let mut resealer = Resealer::new(key);
    let github = resealer.again(column::GITHUB_SECRET, stored.github_secret)?;
    let google = resealer.again(column::GOOGLE_SECRET, stored.google_secret)?;
    let captcha = resealer.again(column::CAPTCHA_SECRET, stored.captcha_secret)?;
    sqlx::query!(
        "UPDATE system_settings SET github_oauth_client_secret_encrypted = $1,
             google_oauth_client_secret_encrypted = $2, captcha_secret_encrypted = $3
         WHERE id",
        github,
        google,
        captcha,
    )
    .execute(&mut *tx)
    .await?;
    Ok(resealer.done)
}
