//! The managed workload ingress's part of the `system_settings` row: the
//! base domain cluster names are published under, where their records point,
//! and the DNS provider with its credentials (the secret sealed with the
//! platform's key, [`crate::secretbox`]).

use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;

use crate::{
    error::FieldError,
    secretbox::SecretBox,
    settings::{ResealError, Resealed, Resealer, lock, next, present},
};

/// The ingress's settings but the secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct IngressFields {
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
    /// Where cluster CNAMEs point: the hostname of the platform's ingress edge.
    pub managed_workload_ingress_edge_target: Option<String>,
}

/// Whether the DNS secret is set; its value is never returned.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IngressSecretsSet {
    pub managed_workload_ingress_dns_secret: bool,
}

/// A new DNS secret: absent keeps it, `null` clears it, a string sets it.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct IngressSecretChanges {
    #[serde(default, deserialize_with = "present")]
    pub managed_workload_ingress_dns_secret: Option<Option<String>>,
}

impl IngressSecretChanges {
    /// Each secret's change under its name.
    pub fn named(&self) -> [(&'static str, &Option<Option<String>>); 1] {
        [(
            "managed_workload_ingress_dns_secret",
            &self.managed_workload_ingress_dns_secret,
        )]
    }
}

/// The ingress's part of the row as read, the secret still sealed.
#[derive(Debug, Clone)]
pub struct Stored {
    pub fields: IngressFields,
    pub dns_secret: Option<Vec<u8>>,
}

impl Stored {
    pub fn secrets_set(&self) -> IngressSecretsSet {
        IngressSecretsSet {
            managed_workload_ingress_dns_secret: self.dns_secret.is_some(),
        }
    }
}

/// Column names: also the associated data each secret is sealed with.
pub mod column {
    pub const DNS_SECRET: &str = "managed_workload_ingress_dns_secret_encrypted";
}

pub async fn load(db: impl PgExecutor<'_>) -> Result<Stored, sqlx::Error> {
    let r = sqlx::query!(
        "SELECT managed_workload_ingress_base_domain, managed_workload_ingress_dns_provider,
                managed_workload_ingress_dns_zone_id, managed_workload_ingress_dns_endpoint,
                managed_workload_ingress_dns_access_key_id, managed_workload_ingress_dns_record_ttl,
                managed_workload_ingress_edge_target,
                managed_workload_ingress_dns_secret_encrypted
         FROM system_settings WHERE id"
    )
    .fetch_one(db)
    .await?;
    Ok(Stored {
        fields: IngressFields {
            managed_workload_ingress_base_domain: r.managed_workload_ingress_base_domain,
            managed_workload_ingress_dns_provider: r.managed_workload_ingress_dns_provider,
            managed_workload_ingress_dns_zone_id: r.managed_workload_ingress_dns_zone_id,
            managed_workload_ingress_dns_endpoint: r.managed_workload_ingress_dns_endpoint,
            managed_workload_ingress_dns_access_key_id: r
                .managed_workload_ingress_dns_access_key_id,
            managed_workload_ingress_dns_record_ttl: r.managed_workload_ingress_dns_record_ttl,
            managed_workload_ingress_edge_target: r.managed_workload_ingress_edge_target,
        },
        dns_secret: r.managed_workload_ingress_dns_secret_encrypted,
    })
}

/// Replaces the ingress's fields and applies the secret's change. Setting
/// the secret needs the key (the caller checks that it is there).
pub async fn save(
    db: impl PgExecutor<'_>,
    key: Option<&SecretBox>,
    f: &IngressFields,
    secrets: &IngressSecretChanges,
) -> Result<(), sqlx::Error> {
    let dns = next(
        key,
        column::DNS_SECRET,
        &secrets.managed_workload_ingress_dns_secret,
    );
    sqlx::query!(
        "UPDATE system_settings SET
             managed_workload_ingress_base_domain = $1, managed_workload_ingress_dns_provider = $2,
             managed_workload_ingress_dns_zone_id = $3, managed_workload_ingress_dns_endpoint = $4,
             managed_workload_ingress_dns_access_key_id = $5,
             managed_workload_ingress_dns_record_ttl = $6,
             managed_workload_ingress_edge_target = $7,
             managed_workload_ingress_dns_secret_encrypted =
                 CASE WHEN $8 THEN managed_workload_ingress_dns_secret_encrypted ELSE $9 END
         WHERE id",
        f.managed_workload_ingress_base_domain,
        f.managed_workload_ingress_dns_provider,
        f.managed_workload_ingress_dns_zone_id,
        f.managed_workload_ingress_dns_endpoint,
        f.managed_workload_ingress_dns_access_key_id,
        f.managed_workload_ingress_dns_record_ttl,
        f.managed_workload_ingress_edge_target,
        dns.keep,
        dns.value,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The problems of the ingress's fields, each under its name.
pub async fn validate(f: &IngressFields, allow_private: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    // It receives the DNS credentials.
    if let Some(url) = f.managed_workload_ingress_dns_endpoint.as_deref()
        && let Err(reason) = crate::outbound::check_resolved(url, allow_private).await
    {
        errors.push(FieldError::new(
            "managed_workload_ingress_dns_endpoint",
            &reason,
        ));
    }
    if !(1..=172_800).contains(&f.managed_workload_ingress_dns_record_ttl) {
        errors.push(FieldError::new(
            "managed_workload_ingress_dns_record_ttl",
            "must be between 1 and 172800",
        ));
    }
    if f.managed_workload_ingress_dns_provider
        .as_deref()
        .is_some_and(|p| p != "route53")
    {
        errors.push(FieldError::new(
            "managed_workload_ingress_dns_provider",
            "must be route53 or absent",
        ));
    }
    errors
}

/// Re-seals the DNS secret under `key`'s current key, in the caller's
/// transaction (the row is locked). A secret that opens under none of the
/// keys stops it with nothing changed.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    lock(&mut *tx).await?;
    let stored = load(&mut *tx).await?;
    let mut resealer = Resealer::new(key);
    let dns = resealer.again(column::DNS_SECRET, stored.dns_secret)?;
    sqlx::query!(
        "UPDATE system_settings SET managed_workload_ingress_dns_secret_encrypted = $1 WHERE id",
        dns,
    )
    .execute(&mut *tx)
    .await?;
    Ok(resealer.done)
}
