//! The system settings: one row, its secrets sealed at rest and never returned.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::{
    audit::{self, AuditEvent},
    error::{ApiError, FieldError},
    extract::AppJson,
    http::{AdminCaller, AppState},
    settings::{self, SecretChanges, SecretsSet, SettingsFields},
};
use utoipa::ToSchema;

/// The settings as the back office sees them.
#[derive(Debug, Serialize, ToSchema)]
pub struct SettingsView {
    #[serde(flatten)]
    pub fields: SettingsFields,
    /// Which secrets are set; their values are never returned.
    pub secrets: SecretsSet,
    pub updated_at: DateTime<Utc>,
}

/// New settings: every field, and the secrets to change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsUpdate {
    #[serde(flatten)]
    pub fields: SettingsFields,
    /// Absent: kept; `null`: cleared; a string: set.
    #[serde(default, deserialize_with = "shared::extract::json_object")]
    pub secrets: SecretChanges,
}

async fn view(state: &AppState) -> Result<SettingsView, ApiError> {
    let stored = settings::load(&state.pool).await?;
    Ok(SettingsView {
        secrets: stored.secrets_set(),
        fields: stored.fields,
        updated_at: stored.updated_at,
    })
}

/// The system settings
#[utoipa::path(get, path = "/api/console/admin/settings", tag = "admin",
    responses((status = 200, body = SettingsView), (status = 403, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(state): State<AppState>,
    _admin: AdminCaller,
) -> Result<AppJson<SettingsView>, ApiError> {
    Ok(AppJson(view(&state).await?))
}

pub(crate) fn url_ok(value: &Option<String>) -> bool {
    value.as_deref().is_none_or(|u| {
        (u.starts_with("https://") || u.starts_with("http://"))
            && u.len() <= 2000
            && !u.contains(char::is_whitespace)
    })
}

async fn validate(
    f: &SettingsFields,
    secrets: &SecretChanges,
    captcha_secret_set: bool,
    allow_private: bool,
) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    let mut bad = |field: &str, message: &str| {
        errors.push(FieldError {
            field: field.into(),
            message: message.into(),
        })
    };
    if !url_ok(&f.public_base_url) {
        bad("public_base_url", "must be an http:// or https:// URL");
    }
    if let Some(Err(reason)) = f
        .join_base_url
        .as_deref()
        .map(|u| shared::outbound::check_join_base(u, allow_private))
    {
        bad("join_base_url", &reason);
    }
    // These receive secrets (the captcha secret, DNS credentials, signed events).
    for (field, value) in [
        (
            "managed_workload_ingress_dns_endpoint",
            &f.managed_workload_ingress_dns_endpoint,
        ),
        ("captcha_verify_url", &f.captcha_verify_url),
        ("outbound_webhook_url", &f.outbound_webhook_url),
    ] {
        if let Some(url) = value.as_deref()
            && let Err(reason) = shared::outbound::check_resolved(url, allow_private).await
        {
            bad(field, &reason);
        }
    }
    if !(1..=172_800).contains(&f.managed_workload_ingress_dns_record_ttl) {
        bad(
            "managed_workload_ingress_dns_record_ttl",
            "must be between 1 and 172800",
        );
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
    if f.managed_workload_ingress_dns_provider
        .as_deref()
        .is_some_and(|p| p != "route53")
    {
        bad(
            "managed_workload_ingress_dns_provider",
            "must be route53 or absent",
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
    // Receivers verify with Standard Webhooks libraries, which take only
    // `whsec_` and base64.
    if let Some(Some(secret)) = &secrets.outbound_webhook_secret
        && shared::notifications::webhook::Signer::from_secret(&secrecy::SecretString::from(
            secret.clone(),
        ))
        .is_none()
    {
        bad(
            "secrets.outbound_webhook_secret",
            "must be whsec_ followed by 16–128 bytes in base64 (Standard Webhooks)",
        );
    }
    let captcha_secret = match &secrets.captcha_secret {
        None => captcha_secret_set,
        Some(change) => change.is_some(),
    };
    if f.captcha_enabled && (f.captcha_verify_url.is_none() || !captcha_secret) {
        bad(
            "captcha_enabled",
            "needs captcha_verify_url and the captcha secret",
        );
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Validation(errors))
    }
}

/// Replace the system settings
///
/// Every field is replaced; secrets change only where given (`null` clears
/// one). Setting a secret needs `KUBEBYON_SETTINGS_KEY` on the platform (503
/// `settings_key_missing` otherwise). Audited, without values.
#[utoipa::path(put, path = "/api/console/admin/settings", tag = "admin", request_body = SettingsUpdate,
    responses((status = 200, body = SettingsView), (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn put(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppJson(body): AppJson<SettingsUpdate>,
) -> Result<AppJson<SettingsView>, ApiError> {
    let before = settings::load(&state.pool).await?;
    validate(
        &body.fields,
        &body.secrets,
        before.captcha_secret.is_some(),
        state.settings.allow_private_outbound,
    )
    .await?;
    let key = state.settings.secret_box();
    if body.secrets.any_set() && key.is_none() {
        return Err(ApiError::NotConfigured {
            code: "settings_key_missing",
            detail:
                "secrets cannot be stored: KUBEBYON_SETTINGS_KEY is not configured on the platform"
                    .into(),
        });
    }
    let mut tx = state.pool.begin().await?;
    settings::save(&mut *tx, key.as_ref(), &body.fields, &body.secrets).await?;
    let changed_secrets: Vec<&str> = [
        (
            "managed_workload_ingress_dns_secret",
            &body.secrets.managed_workload_ingress_dns_secret,
        ),
        (
            "github_oauth_client_secret",
            &body.secrets.github_oauth_client_secret,
        ),
        (
            "google_oauth_client_secret",
            &body.secrets.google_oauth_client_secret,
        ),
        ("captcha_secret", &body.secrets.captcha_secret),
        ("smtp_password", &body.secrets.smtp_password),
        (
            "outbound_webhook_secret",
            &body.secrets.outbound_webhook_secret,
        ),
    ]
    .into_iter()
    .filter(|(_, change)| change.is_some())
    .map(|(name, _)| name)
    .collect();
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(admin.user_id),
            actor_kind: "admin",
            action: "admin.settings.update",
            target_kind: "system_settings",
            target_id: "system".into(),
            cluster_id: None,
            metadata: serde_json::json!({ "fields": body.fields, "secrets_changed": changed_secrets }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(AppJson(view(&state).await?))
}
