//! The system settings: the platform's part of the one row and the parts of
//! the capabilities that keep theirs there (accounts, the ingress,
//! notifications), shown and replaced together; secrets sealed at rest and
//! never returned.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::{
    accounts::settings::{
        self as accounts, AccountsFields, AccountsSecretChanges, AccountsSecretsSet,
    },
    audit::{self, AuditEvent},
    error::ApiError,
    extract::AppJson,
    http::{AdminCaller, AppState},
    ingress::settings::{self as ingress, IngressFields, IngressSecretChanges, IngressSecretsSet},
    notifications::settings::{
        self as notifications, NotificationsFields, NotificationsSecretChanges,
        NotificationsSecretsSet,
    },
    settings::{self as platform, PlatformFields, PlatformSecretChanges, PlatformSecretsSet},
};
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{ObjectBuilder, Ref, RefOr, schema::Schema},
};

/// Every part's fields, as one object.
#[derive(Debug, Clone, Serialize)]
pub struct SettingsFields {
    #[serde(flatten)]
    pub platform: PlatformFields,
    #[serde(flatten)]
    pub accounts: AccountsFields,
    #[serde(flatten)]
    pub ingress: IngressFields,
    #[serde(flatten)]
    pub notifications: NotificationsFields,
}

/// Which secrets are set; their values are never returned.
#[derive(Debug, Serialize, ToSchema)]
pub struct SecretsSet {
    #[serde(flatten)]
    pub platform: PlatformSecretsSet,
    #[serde(flatten)]
    pub accounts: AccountsSecretsSet,
    #[serde(flatten)]
    pub ingress: IngressSecretsSet,
    #[serde(flatten)]
    pub notifications: NotificationsSecretsSet,
}

/// New secret values: absent keeps a secret, `null` clears it, a string sets it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretChanges {
    #[serde(flatten)]
    pub platform: PlatformSecretChanges,
    #[serde(flatten)]
    pub accounts: AccountsSecretChanges,
    #[serde(flatten)]
    pub ingress: IngressSecretChanges,
    #[serde(flatten)]
    pub notifications: NotificationsSecretChanges,
}

// Their schemas by hand: one closed object each, as serde reads them (utoipa
// would write an open `allOf` of the parts).
impl PartialSchema for SettingsFields {
    fn schema() -> RefOr<Schema> {
        shared::openapi::closed_union(
            "Every part's fields, as one object.",
            [
                PlatformFields::schema(),
                AccountsFields::schema(),
                IngressFields::schema(),
                NotificationsFields::schema(),
            ],
        )
    }
}

impl ToSchema for SettingsFields {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        PlatformFields::schemas(schemas);
        AccountsFields::schemas(schemas);
        IngressFields::schemas(schemas);
        NotificationsFields::schemas(schemas);
    }
}

impl PartialSchema for SecretChanges {
    fn schema() -> RefOr<Schema> {
        shared::openapi::closed_union(
            "New secret values: absent keeps a secret, `null` clears it, a string sets it.",
            [
                PlatformSecretChanges::schema(),
                AccountsSecretChanges::schema(),
                IngressSecretChanges::schema(),
                NotificationsSecretChanges::schema(),
            ],
        )
    }
}

impl ToSchema for SecretChanges {}

impl SecretChanges {
    /// Each secret's change under its name.
    fn named(&self) -> Vec<(&'static str, &Option<Option<String>>)> {
        let mut named = self.platform.named().to_vec();
        named.extend(self.accounts.named());
        named.extend(self.ingress.named());
        named.extend(self.notifications.named());
        named
    }
}

/// The settings as the back office sees them.
#[derive(Debug, Serialize, ToSchema)]
pub struct SettingsView {
    #[serde(flatten)]
    pub fields: SettingsFields,
    /// Which secrets are set; their values are never returned.
    pub secrets: SecretsSet,
    pub updated_at: DateTime<Utc>,
}

/// New settings: every field, and the secrets to change. The parts are
/// flattened here, not through [`SettingsFields`]: serde refuses unknown
/// fields of one level of flattened structs only.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsUpdate {
    #[serde(flatten)]
    pub platform: PlatformFields,
    #[serde(flatten)]
    pub accounts: AccountsFields,
    #[serde(flatten)]
    pub ingress: IngressFields,
    #[serde(flatten)]
    pub notifications: NotificationsFields,
    #[serde(default, deserialize_with = "shared::extract::json_object")]
    pub secrets: SecretChanges,
}

impl PartialSchema for SettingsUpdate {
    fn schema() -> RefOr<Schema> {
        let mut secrets = Ref::from_schema_name(SecretChanges::name());
        secrets.description = "Absent: kept; `null`: cleared; a string: set.".into();
        let secrets = ObjectBuilder::new().property("secrets", secrets);
        shared::openapi::closed_union(
            "New settings: every field, and the secrets to change.",
            [SettingsFields::schema(), secrets.into()],
        )
    }
}

impl ToSchema for SettingsUpdate {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        SettingsFields::schemas(schemas);
        schemas.push((SecretChanges::name().into(), SecretChanges::schema()));
    }
}

/// Every part as stored, read in one repeatable-read transaction so the
/// parts are of one version of the row.
struct Stored {
    platform: platform::Stored,
    accounts: accounts::Stored,
    ingress: ingress::Stored,
    notifications: notifications::Stored,
}

async fn load(state: &AppState) -> Result<Stored, ApiError> {
    let mut tx = state.pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    let stored = Stored {
        platform: platform::load(&mut *tx).await?,
        accounts: accounts::load(&mut *tx).await?,
        ingress: ingress::load(&mut *tx).await?,
        notifications: notifications::load(&mut *tx).await?,
    };
    tx.commit().await?;
    Ok(stored)
}

async fn view(state: &AppState) -> Result<SettingsView, ApiError> {
    let stored = load(state).await?;
    Ok(SettingsView {
        secrets: SecretsSet {
            platform: stored.platform.secrets_set(),
            accounts: stored.accounts.secrets_set(),
            ingress: stored.ingress.secrets_set(),
            notifications: stored.notifications.secrets_set(),
        },
        updated_at: stored.platform.updated_at,
        fields: SettingsFields {
            platform: stored.platform.fields,
            accounts: stored.accounts.fields,
            ingress: stored.ingress.fields,
            notifications: stored.notifications.fields,
        },
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
    let SettingsUpdate {
        platform,
        accounts,
        ingress,
        notifications,
        secrets,
    } = body;
    let fields = SettingsFields {
        platform,
        accounts,
        ingress,
        notifications,
    };
    let (f, secrets) = (&fields, &secrets);
    let allow_private = state.settings.allow_private_outbound;
    let before = accounts::load(&state.pool).await?;
    let mut errors = platform::validate(&f.platform, allow_private).await;
    errors.extend(accounts::validate(&f.accounts, &secrets.accounts, &before, allow_private).await);
    errors.extend(ingress::validate(&f.ingress, allow_private).await);
    errors.extend(
        notifications::validate(&f.notifications, &secrets.notifications, allow_private).await,
    );
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let key = state.settings.secret_box();
    if platform::any_set(&secrets.named()) && key.is_none() {
        return Err(ApiError::NotConfigured {
            code: "settings_key_missing",
            detail:
                "secrets cannot be stored: KUBEBYON_SETTINGS_KEY is not configured on the platform"
                    .into(),
        });
    }
    let key = key.as_ref();
    let mut tx = state.pool.begin().await?;
    platform::lock(&mut tx).await?;
    platform::save(&mut *tx, key, &f.platform, &secrets.platform).await?;
    accounts::save(&mut *tx, key, &f.accounts, &secrets.accounts).await?;
    ingress::save(&mut *tx, key, &f.ingress, &secrets.ingress).await?;
    notifications::save(&mut *tx, key, &f.notifications, &secrets.notifications).await?;
    let changed_secrets = platform::changed(&secrets.named());
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(admin.user_id),
            actor_kind: "admin",
            action: "admin.settings.update",
            target_kind: "system_settings",
            target_id: "system".into(),
            cluster_id: None,
            metadata: serde_json::json!({ "fields": fields, "secrets_changed": changed_secrets }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(AppJson(view(&state).await?))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::SettingsUpdate;

    fn body() -> Value {
        json!({
            "public_base_url": "https://kubebyon.example.com", "join_base_url": null,
            "default_cluster_public_access_mode": "nodeport", "smtp_host": null, "smtp_port": null,
            "smtp_username": null, "smtp_from": null, "smtp_tls": "starttls",
            "github_oauth_client_id": "gh", "google_oauth_client_id": null, "captcha_enabled": false,
            "captcha_verify_url": null, "captcha_site_key": null,
            "managed_workload_ingress_base_domain": "apps.example.com",
            "managed_workload_ingress_dns_provider": null, "managed_workload_ingress_dns_zone_id": null,
            "managed_workload_ingress_dns_endpoint": null,
            "managed_workload_ingress_dns_access_key_id": null,
            "managed_workload_ingress_dns_record_ttl": 60,
            "managed_workload_ingress_edge_target": null, "outbound_webhook_url": null,
            "secrets": { "smtp_password": "a", "captcha_secret": null,
                         "managed_workload_ingress_dns_secret": "b" },
        })
    }

    #[test]
    fn every_part_reads_its_own_fields_from_the_one_object() {
        let update: SettingsUpdate = serde_json::from_value(body()).unwrap();
        assert_eq!(
            update.accounts.github_oauth_client_id.as_deref(),
            Some("gh")
        );
        assert_eq!(update.ingress.managed_workload_ingress_dns_record_ttl, 60);
        assert_eq!(update.platform.smtp_tls, "starttls");
        assert_eq!(
            update.secrets.platform.smtp_password,
            Some(Some("a".into()))
        );
        assert_eq!(update.secrets.accounts.captcha_secret, Some(None));
        assert_eq!(update.secrets.accounts.github_oauth_client_secret, None);
        assert_eq!(
            update.secrets.ingress.managed_workload_ingress_dns_secret,
            Some(Some("b".into()))
        );
    }

    #[test]
    fn a_field_no_part_knows_is_refused() {
        for (path, name) in [
            ("", "smtp_password_plain"),
            ("secrets", "stripe_secret_key"),
        ] {
            let mut body = body();
            let target = if path.is_empty() {
                &mut body
            } else {
                &mut body[path]
            };
            target[name] = json!("x");
            let err = serde_json::from_value::<SettingsUpdate>(body).unwrap_err();
            assert!(err.to_string().contains(name), "{name}: {err}");
        }
    }
}
