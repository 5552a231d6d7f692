//! The single `system_settings` row. Secrets are stored sealed
//! ([`crate::secretbox`]) and leave this module only as "set or not", or
//! opened for the code that uses them.

use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize};
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;

use crate::secretbox::{SealError, SecretBox};

/// Everything but the secrets.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SettingsFields {
    pub public_base_url: Option<String>,
    pub join_base_url: Option<String>,
    pub managed_workload_ingress_base_domain: Option<String>,
    /// `route53` or absent.
    #[schema(pattern = "^route53$")]
    pub managed_workload_ingress_dns_provider: Option<String>,
    pub managed_workload_ingress_dns_zone_id: Option<String>,
    pub managed_workload_ingress_dns_endpoint: Option<String>,
    pub managed_workload_ingress_dns_access_key_id: Option<String>,
    /// 1–172800 seconds.
    #[schema(minimum = 1, maximum = 172_800)]
    pub managed_workload_ingress_dns_record_ttl: i32,
    #[schema(value_type = crate::domain::PublicAccessMode)]
    pub default_cluster_public_access_mode: String,
    pub github_oauth_client_id: Option<String>,
    pub google_oauth_client_id: Option<String>,
    pub captcha_enabled: bool,
    /// The provider's verify endpoint (Turnstile, hCaptcha).
    pub captcha_verify_url: Option<String>,
    pub captcha_site_key: Option<String>,
    pub smtp_host: Option<String>,
    #[schema(minimum = 1, maximum = 65_535)]
    pub smtp_port: Option<i32>,
    pub smtp_username: Option<String>,
    pub smtp_from: Option<String>,
    /// `none`, `starttls` or `tls`.
    #[schema(pattern = "^(none|starttls|tls)$")]
    pub smtp_tls: String,
    pub outbound_webhook_url: Option<String>,
    /// Where cluster CNAMEs point: the hostname of the platform's ingress edge.
    pub managed_workload_ingress_edge_target: Option<String>,
}

/// Which secrets are set; their values are never returned.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct SecretsSet {
    pub managed_workload_ingress_dns_secret: bool,
    pub github_oauth_client_secret: bool,
    pub google_oauth_client_secret: bool,
    pub captcha_secret: bool,
    pub smtp_password: bool,
    pub outbound_webhook_secret: bool,
}

/// New secret values: absent keeps a secret, `null` clears it, a string sets it.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretChanges {
    #[serde(default, deserialize_with = "present")]
    pub managed_workload_ingress_dns_secret: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub github_oauth_client_secret: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub google_oauth_client_secret: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub captcha_secret: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub smtp_password: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub outbound_webhook_secret: Option<Option<String>>,
}

/// A field that is present (even as `null`) becomes `Some`: a secret's
/// change (`deserialize_with`), absent keeping it.
pub fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

impl SecretChanges {
    pub fn any_set(&self) -> bool {
        [
            &self.managed_workload_ingress_dns_secret,
            &self.github_oauth_client_secret,
            &self.google_oauth_client_secret,
            &self.captcha_secret,
            &self.smtp_password,
            &self.outbound_webhook_secret,
        ]
        .iter()
        .any(|c| matches!(c, Some(Some(_))))
    }
}

/// The row as read, secrets still sealed.
#[derive(Debug, Clone)]
pub struct Stored {
    pub fields: SettingsFields,
    pub dns_secret: Option<Vec<u8>>,
    pub github_secret: Option<Vec<u8>>,
    pub google_secret: Option<Vec<u8>>,
    pub captcha_secret: Option<Vec<u8>>,
    pub smtp_password: Option<Vec<u8>>,
    pub webhook_secret: Option<Vec<u8>>,
    pub updated_at: DateTime<Utc>,
}

impl Stored {
    pub fn secrets_set(&self) -> SecretsSet {
        SecretsSet {
            managed_workload_ingress_dns_secret: self.dns_secret.is_some(),
            github_oauth_client_secret: self.github_secret.is_some(),
            google_oauth_client_secret: self.google_secret.is_some(),
            captcha_secret: self.captcha_secret.is_some(),
            smtp_password: self.smtp_password.is_some(),
            outbound_webhook_secret: self.webhook_secret.is_some(),
        }
    }
}

/// Column names: also the associated data each secret is sealed with.
pub mod column {
    pub const DNS_SECRET: &str = "managed_workload_ingress_dns_secret_encrypted";
    pub const GITHUB_SECRET: &str = "github_oauth_client_secret_encrypted";
    pub const GOOGLE_SECRET: &str = "google_oauth_client_secret_encrypted";
    pub const CAPTCHA_SECRET: &str = "captcha_secret_encrypted";
    pub const SMTP_PASSWORD: &str = "smtp_password_encrypted";
    pub const WEBHOOK_SECRET: &str = "outbound_webhook_secret_encrypted";
}

/// Opens one sealed secret with the platform's key.
pub fn open(
    key: Option<&SecretBox>,
    column: &str,
    sealed: Option<&[u8]>,
) -> Result<Option<SecretString>, SealError> {
    match (sealed, key) {
        (None, _) => Ok(None),
        (Some(_), None) => Err(SealError::BadKey),
        (Some(sealed), Some(key)) => key.open(column, sealed).map(Some),
    }
}

pub async fn load(db: impl PgExecutor<'_>) -> Result<Stored, sqlx::Error> {
    let r = sqlx::query!(
        "SELECT public_base_url, join_base_url, managed_workload_ingress_base_domain,
                managed_workload_ingress_dns_provider, managed_workload_ingress_dns_zone_id,
                managed_workload_ingress_dns_endpoint, managed_workload_ingress_dns_access_key_id,
                managed_workload_ingress_dns_record_ttl, default_cluster_public_access_mode,
                github_oauth_client_id, google_oauth_client_id, captcha_enabled, captcha_verify_url,
                captcha_site_key, smtp_host, smtp_port, smtp_username, smtp_from, smtp_tls, outbound_webhook_url,
                managed_workload_ingress_edge_target,
                managed_workload_ingress_dns_secret_encrypted, github_oauth_client_secret_encrypted,
                google_oauth_client_secret_encrypted, captcha_secret_encrypted, smtp_password_encrypted,
                outbound_webhook_secret_encrypted, updated_at
         FROM system_settings WHERE id"
    )
    .fetch_one(db)
    .await?;
    Ok(Stored {
        fields: SettingsFields {
            public_base_url: r.public_base_url,
            join_base_url: r.join_base_url,
            managed_workload_ingress_base_domain: r.managed_workload_ingress_base_domain,
            managed_workload_ingress_dns_provider: r.managed_workload_ingress_dns_provider,
            managed_workload_ingress_dns_zone_id: r.managed_workload_ingress_dns_zone_id,
            managed_workload_ingress_dns_endpoint: r.managed_workload_ingress_dns_endpoint,
            managed_workload_ingress_dns_access_key_id: r
                .managed_workload_ingress_dns_access_key_id,
            managed_workload_ingress_dns_record_ttl: r.managed_workload_ingress_dns_record_ttl,
            default_cluster_public_access_mode: r.default_cluster_public_access_mode,
            github_oauth_client_id: r.github_oauth_client_id,
            google_oauth_client_id: r.google_oauth_client_id,
            captcha_enabled: r.captcha_enabled,
            captcha_verify_url: r.captcha_verify_url,
            captcha_site_key: r.captcha_site_key,
            smtp_host: r.smtp_host,
            smtp_port: r.smtp_port,
            smtp_username: r.smtp_username,
            smtp_from: r.smtp_from,
            smtp_tls: r.smtp_tls,
            outbound_webhook_url: r.outbound_webhook_url,
            managed_workload_ingress_edge_target: r.managed_workload_ingress_edge_target,
        },
        dns_secret: r.managed_workload_ingress_dns_secret_encrypted,
        github_secret: r.github_oauth_client_secret_encrypted,
        google_secret: r.google_oauth_client_secret_encrypted,
        captcha_secret: r.captcha_secret_encrypted,
        smtp_password: r.smtp_password_encrypted,
        webhook_secret: r.outbound_webhook_secret_encrypted,
        updated_at: r.updated_at,
    })
}

/// A secret column's next value: kept (`keep`), or the new sealed value / NULL.
pub struct Next {
    pub keep: bool,
    pub value: Option<Vec<u8>>,
}

/// What `change` (absent, `null` or a value) makes of the secret in `column`.
pub fn next(key: Option<&SecretBox>, column: &str, change: &Option<Option<String>>) -> Next {
    match change {
        None => Next {
            keep: true,
            value: None,
        },
        Some(None) => Next {
            keep: false,
            value: None,
        },
        Some(Some(plain)) => Next {
            keep: false,
            value: key.map(|k| k.seal(column, plain)),
        },
    }
}

/// Replaces the fields and applies the secret changes. Setting a secret needs
/// the key (the caller checks that it is there).
pub async fn save(
    db: impl PgExecutor<'_>,
    key: Option<&SecretBox>,
    f: &SettingsFields,
    secrets: &SecretChanges,
) -> Result<(), sqlx::Error> {
    let dns = next(
        key,
        column::DNS_SECRET,
        &secrets.managed_workload_ingress_dns_secret,
    );
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
    let smtp = next(key, column::SMTP_PASSWORD, &secrets.smtp_password);
    let webhook = next(
        key,
        column::WEBHOOK_SECRET,
        &secrets.outbound_webhook_secret,
    );
    sqlx::query!(
        "UPDATE system_settings SET
             public_base_url = $1, join_base_url = $2, managed_workload_ingress_base_domain = $3,
             managed_workload_ingress_dns_provider = $4, managed_workload_ingress_dns_zone_id = $5,
             managed_workload_ingress_dns_endpoint = $6, managed_workload_ingress_dns_access_key_id = $7,
             managed_workload_ingress_dns_record_ttl = $8, default_cluster_public_access_mode = $9,
             github_oauth_client_id = $10, google_oauth_client_id = $11, captcha_enabled = $12,
             captcha_verify_url = $13, captcha_site_key = $14, smtp_host = $15, smtp_port = $16,
             smtp_username = $17, smtp_from = $18, smtp_tls = $19, outbound_webhook_url = $20,
             managed_workload_ingress_dns_secret_encrypted = CASE WHEN $21 THEN managed_workload_ingress_dns_secret_encrypted ELSE $22 END,
             github_oauth_client_secret_encrypted = CASE WHEN $23 THEN github_oauth_client_secret_encrypted ELSE $24 END,
             google_oauth_client_secret_encrypted = CASE WHEN $25 THEN google_oauth_client_secret_encrypted ELSE $26 END,
             captcha_secret_encrypted = CASE WHEN $27 THEN captcha_secret_encrypted ELSE $28 END,
             smtp_password_encrypted = CASE WHEN $29 THEN smtp_password_encrypted ELSE $30 END,
             outbound_webhook_secret_encrypted = CASE WHEN $31 THEN outbound_webhook_secret_encrypted ELSE $32 END,
             managed_workload_ingress_edge_target = $33
         WHERE id",
        f.public_base_url,
        f.join_base_url,
        f.managed_workload_ingress_base_domain,
        f.managed_workload_ingress_dns_provider,
        f.managed_workload_ingress_dns_zone_id,
        f.managed_workload_ingress_dns_endpoint,
        f.managed_workload_ingress_dns_access_key_id,
        f.managed_workload_ingress_dns_record_ttl,
        f.default_cluster_public_access_mode,
        f.github_oauth_client_id,
        f.google_oauth_client_id,
        f.captcha_enabled,
        f.captcha_verify_url,
        f.captcha_site_key,
        f.smtp_host,
        f.smtp_port,
        f.smtp_username,
        f.smtp_from,
        f.smtp_tls,
        f.outbound_webhook_url,
        dns.keep,
        dns.value,
        github.keep,
        github.value,
        google.keep,
        google.value,
        captcha.keep,
        captcha.value,
        smtp.keep,
        smtp.value,
        webhook.keep,
        webhook.value,
        f.managed_workload_ingress_edge_target,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// What a re-seal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resealed {
    /// Secrets that were sealed under a previous key and now are under the current one.
    pub resealed: u32,
    /// Secrets already sealed under the current key, left as they were.
    pub current: u32,
}

/// Re-seals every stored secret under `key`'s current key, in the caller's
/// transaction (the row is locked). A secret that opens under none of the
/// keys stops it with nothing changed.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    sqlx::query!("SELECT id FROM system_settings WHERE id FOR UPDATE")
        .fetch_one(&mut *tx)
        .await?;
    let stored = load(&mut *tx).await?;
    let mut resealer = Resealer::new(key);
    let mut again = |column, sealed| resealer.again(column, sealed);
    let dns = again(column::DNS_SECRET, stored.dns_secret)?;
    let github = again(column::GITHUB_SECRET, stored.github_secret)?;
    let google = again(column::GOOGLE_SECRET, stored.google_secret)?;
    let captcha = again(column::CAPTCHA_SECRET, stored.captcha_secret)?;
    let smtp = again(column::SMTP_PASSWORD, stored.smtp_password)?;
    let webhook = again(column::WEBHOOK_SECRET, stored.webhook_secret)?;
    sqlx::query!(
        "UPDATE system_settings SET
             managed_workload_ingress_dns_secret_encrypted = $1,
             github_oauth_client_secret_encrypted = $2,
             google_oauth_client_secret_encrypted = $3,
             captcha_secret_encrypted = $4,
             smtp_password_encrypted = $5,
             outbound_webhook_secret_encrypted = $6
         WHERE id",
        dns,
        github,
        google,
        captcha,
        smtp,
        webhook,
    )
    .execute(&mut *tx)
    .await?;
    Ok(resealer.done)
}

/// Re-seals secrets one at a time under a key's current key, counting.
pub struct Resealer<'a> {
    key: &'a SecretBox,
    pub done: Resealed,
}

impl<'a> Resealer<'a> {
    pub fn new(key: &'a SecretBox) -> Self {
        Self {
            key,
            done: Resealed::default(),
        }
    }

    /// `sealed` (of `column`) sealed under the current key: as it is when it
    /// already is, else opened and sealed again. One that opens under no key
    /// is an error naming its column.
    pub fn again(
        &mut self,
        column: &'static str,
        sealed: Option<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>, ResealError> {
        let Some(sealed) = sealed else {
            return Ok(None);
        };
        let (plain, current) = self
            .key
            .open_with_current(column, &sealed)
            .map_err(|_| ResealError::Unreadable(column))?;
        if current {
            self.done.current += 1;
            return Ok(Some(sealed));
        }
        self.done.resealed += 1;
        Ok(Some(self.key.seal(column, plain.expose_secret())))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ResealError {
    #[error(
        "{0} opens under neither the current key nor a previous one (KUBEBYON_SETTINGS_KEY_PREVIOUS)"
    )]
    Unreadable(&'static str),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}
