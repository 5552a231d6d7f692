//! Billing's settings: the default plan, Stripe's API base and the Stripe
//! secrets, in billing's own row, the secrets sealed at rest and never
//! returned.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::{
    audit::{self, AuditEvent},
    billing::settings::{self, BillingFields, BillingSecretChanges, BillingSecretsSet},
    error::{ApiError, FieldError},
    extract::AppJson,
    http::{AdminCaller, AppState},
};
use utoipa::ToSchema;

/// Billing's settings as the back office sees them.
#[derive(Debug, Serialize, ToSchema)]
pub struct BillingSettingsView {
    #[serde(flatten)]
    pub fields: BillingFields,
    /// Which secrets are set; their values are never returned.
    pub secrets: BillingSecretsSet,
    pub updated_at: DateTime<Utc>,
}

/// New billing settings: every field, and the secrets to change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BillingSettingsUpdate {
    #[serde(flatten)]
    pub fields: BillingFields,
    /// Absent: kept; `null`: cleared; a string: set.
    #[serde(default, deserialize_with = "shared::extract::json_object")]
    pub secrets: BillingSecretChanges,
}

async fn view(state: &AppState) -> Result<BillingSettingsView, ApiError> {
    let stored = settings::load(&state.pool).await?;
    Ok(BillingSettingsView {
        secrets: stored.secrets_set(),
        fields: stored.fields,
        updated_at: stored.updated_at,
    })
}

/// Billing's settings
#[utoipa::path(get, path = "/api/console/admin/billing-settings", tag = "admin",
    responses((status = 200, body = BillingSettingsView), (status = 403, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(state): State<AppState>,
    _admin: AdminCaller,
) -> Result<AppJson<BillingSettingsView>, ApiError> {
    Ok(AppJson(view(&state).await?))
}

async fn validate(
    f: &BillingFields,
    secrets: &BillingSecretChanges,
    allow_private: bool,
) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    let mut bad = |field: &str, message: &str| errors.push(FieldError::new(field, message));
    if !shared::outbound::is_http_url(&f.stripe_api_base_url) {
        bad("stripe_api_base_url", "must be an http:// or https:// URL");
    } else if let Some(url) = f.stripe_api_base_url.as_deref()
        // It receives the Stripe secret key.
        && let Err(reason) = shared::outbound::check_resolved(url, allow_private).await
    {
        bad("stripe_api_base_url", &reason);
    }
    for (field, change, prefixes) in [
        (
            "secrets.stripe_secret_key",
            &secrets.stripe_secret_key,
            &["sk_", "rk_"][..],
        ),
        (
            "secrets.stripe_webhook_secret",
            &secrets.stripe_webhook_secret,
            &["whsec_"][..],
        ),
    ] {
        if let Some(Some(value)) = change
            && (!prefixes.iter().any(|p| value.starts_with(p))
                || value.len() > 500
                || !value.bytes().all(|b| b.is_ascii_graphic()))
        {
            bad(field, &format!("must start with {}", prefixes.join(" or ")));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Validation(errors))
    }
}

/// Replace billing's settings
///
/// Every field is replaced; secrets change only where given (`null` clears
/// one). Setting a secret needs `KUBEBYON_SETTINGS_KEY` on the platform (503
/// `settings_key_missing` otherwise). Audited, without values.
#[utoipa::path(put, path = "/api/console/admin/billing-settings", tag = "admin", request_body = BillingSettingsUpdate,
    responses((status = 200, body = BillingSettingsView), (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "A field is invalid, or `default_plan_id` names no plan", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn put(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppJson(body): AppJson<BillingSettingsUpdate>,
) -> Result<AppJson<BillingSettingsView>, ApiError> {
    validate(
        &body.fields,
        &body.secrets,
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
    settings::save(&mut *tx, key.as_ref(), &body.fields, &body.secrets)
        .await
        .map_err(|err| match &err {
            sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
                ApiError::invalid("default_plan_id", "no plan has this id")
            }
            _ => err.into(),
        })?;
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(admin.user_id),
            actor_kind: "admin",
            action: "admin.billing_settings.update",
            target_kind: "billing_settings",
            target_id: "billing".into(),
            cluster_id: None,
            metadata: serde_json::json!({ "fields": body.fields, "secrets_changed": body.secrets.changed() }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(AppJson(view(&state).await?))
}
