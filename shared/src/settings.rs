//! The single `system_settings` row: the platform's own part of it (its
//! public URLs, the default public access mode and the mail server) and the
//! helpers every capability that keeps a part of the row, or a row of its own,
//! seals and re-seals its secrets with. A capability reads and writes only its
//! own columns of the row (its `settings` module); this one names none of
//! them. Secrets are stored sealed ([`crate::secretbox`]) and leave a part
//! only as "set or not", or opened for the code that uses them.

use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize};
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;

use crate::{
    error::FieldError,
    secretbox::{SealError, SecretBox},
};

/// The platform's settings but the secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct PlatformFields {
    pub public_base_url: Option<String>,
    pub join_base_url: Option<String>,
    #[schema(value_type = crate::domain::PublicAccessMode)]
    pub default_cluster_public_access_mode: String,
    pub smtp_host: Option<String>,
    #[schema(minimum = 1, maximum = 65_535)]
    pub smtp_port: Option<i32>,
    pub smtp_username: Option<String>,
    pub smtp_from: Option<String>,
    /// `none`, `starttls` or `tls`.
    #[schema(pattern = "^(none|starttls|tls)$")]
    pub smtp_tls: String,
}

/// Whether the platform's secret is set; its value is never returned.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PlatformSecretsSet {
    pub smtp_password: bool,
}

/// A new value of the platform's secret: absent keeps it, `null` clears it,
/// a string sets it.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct PlatformSecretChanges {
    #[serde(default, deserialize_with = "present")]
    pub smtp_password: Option<Option<String>>,
}

/// A field that is present (even as `null`) becomes `Some`: a secret's
/// change (`deserialize_with`), absent keeping it.
pub fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// Of named secret changes: whether one sets a value (which needs the key).
pub fn any_set(changes: &[(&'static str, &Option<Option<String>>)]) -> bool {
    changes.iter().any(|(_, c)| matches!(c, Some(Some(_))))
}

/// Of named secret changes: the names of those that change (set or
/// cleared), for the audit.
pub fn changed(changes: &[(&'static str, &Option<Option<String>>)]) -> Vec<&'static str> {
    changes
        .iter()
        .filter(|(_, change)| change.is_some())
        .map(|(name, _)| *name)
        .collect()
}

impl PlatformSecretChanges {
    /// Each secret's change under its name.
    pub fn named(&self) -> [(&'static str, &Option<Option<String>>); 1] {
        [("smtp_password", &self.smtp_password)]
    }
}

/// The platform's part of the row as read, the secret still sealed.
#[derive(Debug, Clone)]
pub struct Stored {
    pub fields: PlatformFields,
    pub smtp_password: Option<Vec<u8>>,
    pub updated_at: DateTime<Utc>,
}

impl Stored {
    pub fn secrets_set(&self) -> PlatformSecretsSet {
        PlatformSecretsSet {
            smtp_password: self.smtp_password.is_some(),
        }
    }
}

/// Column names: also the associated data each secret is sealed with.
pub mod column {
    pub const SMTP_PASSWORD: &str = "smtp_password_encrypted";
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
        "SELECT public_base_url, join_base_url, default_cluster_public_access_mode,
                smtp_host, smtp_port, smtp_username, smtp_from, smtp_tls,
                smtp_password_encrypted, updated_at
         FROM system_settings WHERE id"
    )
    .fetch_one(db)
    .await?;
    Ok(Stored {
        fields: PlatformFields {
            public_base_url: r.public_base_url,
            join_base_url: r.join_base_url,
            default_cluster_public_access_mode: r.default_cluster_public_access_mode,
            smtp_host: r.smtp_host,
            smtp_port: r.smtp_port,
            smtp_username: r.smtp_username,
            smtp_from: r.smtp_from,
            smtp_tls: r.smtp_tls,
        },
        smtp_password: r.smtp_password_encrypted,
        updated_at: r.updated_at,
    })
}

/// What to store for one secret given its change: `keep` the stored value,
/// or write `value` (`None` clears it).
pub struct Next {
    pub keep: bool,
    pub value: Option<Vec<u8>>,
}

/// The secret `change` asks for, sealed for `column`. Setting a secret needs
/// the key (the caller checks that it is there).
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

/// Replaces the platform's fields and applies the secret's change, in the
/// caller's transaction; bumps the row's `updated_at`.
pub async fn save(
    db: impl PgExecutor<'_>,
    key: Option<&SecretBox>,
    f: &PlatformFields,
    secrets: &PlatformSecretChanges,
) -> Result<(), sqlx::Error> {
    let smtp = next(key, column::SMTP_PASSWORD, &secrets.smtp_password);
    sqlx::query!(
        "UPDATE system_settings SET
             public_base_url = $1, join_base_url = $2, default_cluster_public_access_mode = $3,
             smtp_host = $4, smtp_port = $5, smtp_username = $6, smtp_from = $7, smtp_tls = $8,
             smtp_password_encrypted = CASE WHEN $9 THEN smtp_password_encrypted ELSE $10 END
         WHERE id",
        f.public_base_url,
        f.join_base_url,
        f.default_cluster_public_access_mode,
        f.smtp_host,
        f.smtp_port,
        f.smtp_username,
        f.smtp_from,
        f.smtp_tls,
        smtp.keep,
        smtp.value,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The problems of the platform's fields, each under its name.
pub async fn validate(f: &PlatformFields, allow_private: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut bad = |field: &str, message: &str| errors.push(FieldError::new(field, message));
    if !crate::outbound::is_http_url(&f.public_base_url) {
        bad("public_base_url", "must be an http:// or https:// URL");
    }
    if let Some(Err(reason)) = f
        .join_base_url
        .as_deref()
        .map(|u| crate::outbound::check_join_base(u, allow_private))
    {
        bad("join_base_url", &reason);
    }
    if !matches!(
        f.default_cluster_public_access_mode.as_str(),
        "nodeport" | "loadbalancer"
    ) {
        bad(
            "default_cluster_public_access_mode",
            "must be nodeport or loadbalancer",
        );
    }
    if f.smtp_port.is_some_and(|p| !(1..=65_535).contains(&p)) {
        bad("smtp_port", "must be between 1 and 65535");
    }
    if !matches!(f.smtp_tls.as_str(), "none" | "starttls" | "tls") {
        bad("smtp_tls", "must be none, starttls or tls");
    } else if f.smtp_tls == "none" && f.smtp_username.is_some() {
        bad(
            "smtp_tls",
            "must be starttls or tls when a username is set: the password is never sent in clear",
        );
    }
    if f.smtp_from
        .as_deref()
        .is_some_and(|from| from.parse::<lettre::message::Mailbox>().is_err())
    {
        bad(
            "smtp_from",
            "must be a mailbox such as `KubeBYON <noreply@example.com>`",
        );
    }
    errors
}

/// What a re-seal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resealed {
    /// Secrets that were sealed under a previous key and now are under the current one.
    pub resealed: u32,
    /// Secrets already sealed under the current key, left as they were.
    pub current: u32,
}

impl std::ops::Add for Resealed {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            resealed: self.resealed + other.resealed,
            current: self.current + other.current,
        }
    }
}

/// Re-seals the platform's secret under `key`'s current key, in the
/// caller's transaction (the row is locked). A secret that opens under none
/// of the keys stops it with nothing changed.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    lock(&mut *tx).await?;
    let stored = load(&mut *tx).await?;
    let mut resealer = Resealer::new(key);
    let smtp = resealer.again(column::SMTP_PASSWORD, stored.smtp_password)?;
    sqlx::query!(
        "UPDATE system_settings SET smtp_password_encrypted = $1 WHERE id",
        smtp,
    )
    .execute(&mut *tx)
    .await?;
    Ok(resealer.done)
}

/// Locks the row for the rest of the caller's transaction, so the parts a
/// change or a re-seal writes one after another are never interleaved with
/// another's.
pub async fn lock(tx: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT id FROM system_settings WHERE id FOR UPDATE")
        .fetch_one(tx)
        .await?;
    Ok(())
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
