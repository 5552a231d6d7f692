//! The back office's PostgreSQL instances: register, list, read, replace,
//! delete. Every save connects to the server first, as the admin role, and
//! keeps what it found (the server's version, whether the role may create
//! roles and databases); a server that does not answer, or whose
//! certificate the CA bundle does not verify, is refused and nothing is
//! written. The admin password is sealed with the settings key and never
//! shown again. Audited.

use axum::{extract::State, http::StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use shared::{
    audit::{self, AuditEvent},
    databases::instances::{self, Check, Deletion, Instance, InstanceFields, InstanceTlsMode},
    error::{ApiError, FieldError, unique_violation},
    extract::{AppJson, AppPath},
    http::{AdminCaller, AppState},
};
use utoipa::ToSchema;
use uuid::Uuid;

/// The variable that allows instances without TLS.
pub const ALLOW_PLAINTEXT: &str = "KUBEBYON_DATABASES_ALLOW_PLAINTEXT";

/// An instance as an administrator writes it (a `PUT` replaces it; its
/// password may then be left out to keep the one stored).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InstanceRequest {
    /// 1–63 lower-case letters, digits and `-`; unique.
    #[schema(pattern = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
    pub name: String,
    /// The server's DNS name, which its certificate must name for
    /// `verify-full`.
    #[schema(min_length = 1, max_length = 253)]
    pub host: String,
    /// An IP address for clients to connect to without a DNS lookup
    /// (projected into databases' Secrets; the platform connects by `host`).
    pub hostaddr: Option<String>,
    #[schema(minimum = 1, maximum = 65535)]
    pub port: Option<i32>,
    /// Default `postgres`: where the platform connects as the admin role,
    /// and where its ownership registry lives.
    #[schema(min_length = 1, max_length = 63)]
    pub admin_database: Option<String>,
    pub tls_mode: InstanceTlsMode,
    /// PEM: the CA(s) the server's certificate is checked with; required
    /// for `verify-full`.
    #[schema(max_length = 65536)]
    pub ca_bundle: Option<String>,
    #[schema(min_length = 1, max_length = 63)]
    pub admin_role: String,
    /// Write-only; required on create.
    #[schema(min_length = 1, max_length = 1024)]
    pub admin_password: Option<String>,
    /// Default true: databases can be made on it.
    pub enabled: Option<bool>,
    /// Default false: databases asked for without an instance go to it (one
    /// instance at most is the default).
    pub default: Option<bool>,
}

fn plain_text(text: &str) -> bool {
    !text.is_empty() && !text.chars().any(|c| c.is_control())
}

impl InstanceRequest {
    /// Every invalid field at once.
    fn validate(self, creating: bool) -> Result<(InstanceFields, Option<SecretString>), ApiError> {
        let mut errors = Vec::new();
        let mut error = |field: &str, message: &str| errors.push(FieldError::new(field, message));
        let name_ok = {
            let b = self.name.as_bytes();
            (1..=63).contains(&b.len())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b.first() != Some(&b'-')
                && b.last() != Some(&b'-')
        };
        if !name_ok {
            error(
                "name",
                "must be 1 to 63 lower-case letters, digits and -, not starting or ending with -",
            );
        }
        let host_ok = (1..=253).contains(&self.host.len())
            && self
                .host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        if !host_ok {
            error("host", "must be a DNS name or an address, in ASCII");
        }
        if let Some(addr) = &self.hostaddr
            && addr.parse::<std::net::IpAddr>().is_err()
        {
            error("hostaddr", "must be an IP address");
        }
        let port = self.port.unwrap_or(5432);
        if !(1..=65535).contains(&port) {
            error("port", "must be 1 to 65535");
        }
        let admin_database = self.admin_database.unwrap_or_else(|| "postgres".into());
        if !(plain_text(&admin_database) && admin_database.len() <= 63) {
            error(
                "admin_database",
                "must be 1 to 63 characters without control characters",
            );
        }
        if !(plain_text(&self.admin_role) && self.admin_role.len() <= 63) {
            error(
                "admin_role",
                "must be 1 to 63 characters without control characters",
            );
        }
        let ca_bundle = self.ca_bundle.filter(|ca| !ca.trim().is_empty());
        match (&ca_bundle, self.tls_mode) {
            (None, InstanceTlsMode::VerifyFull) => error(
                "ca_bundle",
                "is required for verify-full: the CA(s) that sign the server's certificate",
            ),
            (Some(ca), _) if ca.len() > 65536 || !ca.contains("-----BEGIN CERTIFICATE-----") => {
                error("ca_bundle", "must be PEM certificates, at most 64 KiB")
            }
            _ => {}
        }
        let allow_plaintext = std::env::var(ALLOW_PLAINTEXT).is_ok_and(|v| v == "true");
        if self.tls_mode == InstanceTlsMode::Disable && !allow_plaintext {
            error(
                "tls_mode",
                "disable is not allowed on this platform (KUBEBYON_DATABASES_ALLOW_PLAINTEXT): credentials would cross the network in the clear",
            );
        }
        let password = match self.admin_password {
            Some(p) if p.is_empty() || p.len() > 1024 || p.chars().any(|c| c.is_control()) => {
                error(
                    "admin_password",
                    "must be 1 to 1024 characters without control characters",
                );
                None
            }
            Some(p) => Some(SecretString::from(p)),
            None if creating => {
                error("admin_password", "is required");
                None
            }
            None => None,
        };
        if !errors.is_empty() {
            return Err(ApiError::Validation(errors));
        }
        Ok((
            InstanceFields {
                name: self.name,
                host: self.host,
                hostaddr: self.hostaddr,
                port,
                admin_database,
                tls_mode: self.tls_mode,
                ca_bundle,
                admin_role: self.admin_role,
                enabled: self.enabled.unwrap_or(true),
                is_default: self.default.unwrap_or(false),
            },
            password,
        ))
    }
}

fn sealing_key(state: &AppState) -> Result<shared::secretbox::SecretBox, ApiError> {
    state.settings.secret_box().ok_or(ApiError::NotConfigured {
        code: "settings_key_missing",
        detail: "KUBEBYON_SETTINGS_KEY is not set: the admin password would be stored in the clear"
            .into(),
    })
}

/// The check, or 422 `database_instance_unreachable` in words: the host
/// first as the outbound policy has it (a public address, or a private one
/// where `KUBEBYON_ALLOW_PRIVATE_OUTBOUND` allows it; never link-local,
/// where a cloud's metadata endpoint is), then a connection.
async fn checked(
    state: &AppState,
    fields: &InstanceFields,
    password: &SecretString,
) -> Result<Check, ApiError> {
    let unreachable = |reason: String| ApiError::Unprocessable {
        code: "database_instance_unreachable",
        detail: reason,
    };
    let port = u16::try_from(fields.port).unwrap_or(5432);
    for host in std::iter::once(fields.host.as_str()).chain(fields.hostaddr.as_deref()) {
        shared::outbound::check_server(host, port, state.settings.allow_private_outbound)
            .await
            .map_err(unreachable)?;
    }
    instances::check(fields, password)
        .await
        .map_err(|reason| ApiError::Unprocessable {
            code: "database_instance_unreachable",
            detail: format!(
                "could not connect to {}:{} as {} ({}): {reason}",
                fields.host,
                fields.port,
                fields.admin_role,
                fields.tls_mode.as_str()
            ),
        })
}

fn name_taken(err: sqlx::Error, name: &str) -> ApiError {
    match unique_violation(&err) {
        Some("database_instances_name_key") => ApiError::Conflict {
            code: "database_instance_name_taken",
            detail: format!("an instance named {name:?} exists"),
        },
        _ => err.into(),
    }
}

fn event<'a>(admin: &AdminCaller, action: &'a str, instance: &Instance) -> AuditEvent<'a> {
    AuditEvent {
        actor_user_id: Some(admin.user_id),
        actor_kind: "admin",
        action,
        target_kind: "database_instance",
        target_id: instance.id.to_string(),
        cluster_id: None,
        // The instance as shown: no password.
        metadata: serde_json::to_value(instance).unwrap_or_default(),
    }
}

/// PostgreSQL instances
#[utoipa::path(get, path = "/api/console/admin/database-instances", tag = "databases",
    responses((status = 200, body = Vec<Instance>), (status = 403, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(state): State<AppState>,
    _admin: AdminCaller,
) -> Result<AppJson<Vec<Instance>>, ApiError> {
    Ok(AppJson(instances::list(&state.pool).await?))
}

/// Register a PostgreSQL instance
///
/// Connects to it as the admin role first (within 10 s); answers the
/// instance with what the check found. Nothing is written when it cannot
/// connect.
#[utoipa::path(post, path = "/api/console/admin/database-instances", tag = "databases", request_body = InstanceRequest,
    responses((status = 201, body = Instance),
              (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "Another instance has the name (`database_instance_name_taken`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "Invalid fields, or the server could not be reached as given (`database_instance_unreachable`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "No settings key to seal the password with (`settings_key_missing`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppJson(body): AppJson<InstanceRequest>,
) -> Result<(StatusCode, AppJson<Instance>), ApiError> {
    let (fields, password) = body.validate(true)?;
    let password = password.ok_or(ApiError::Internal(anyhow::anyhow!("checked above")))?;
    let key = sealing_key(&state)?;
    let check = checked(&state, &fields, &password).await?;
    let sealed = key.seal(instances::PASSWORD_COLUMN, password.expose_secret());
    let mut tx = state.pool.begin().await?;
    let instance = instances::insert(&mut tx, &fields, &sealed, &check)
        .await
        .map_err(|err| name_taken(err, &fields.name))?;
    audit::record(
        &mut *tx,
        event(&admin, "admin.database_instance.create", &instance),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, AppJson(instance)))
}

/// A PostgreSQL instance
#[utoipa::path(get, path = "/api/console/admin/database-instances/{instance_id}", tag = "databases", params(("instance_id" = Uuid, Path)),
    responses((status = 200, body = Instance), (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(state): State<AppState>,
    _admin: AdminCaller,
    AppPath(id): AppPath<Uuid>,
) -> Result<AppJson<Instance>, ApiError> {
    instances::get(&state.pool, id)
        .await?
        .map(AppJson)
        .ok_or(ApiError::NotFound {
            what: "database instance",
        })
}

/// Replace a PostgreSQL instance
///
/// Checked as a new one is, with the password given or the one stored; the
/// stored one only while the host, address, port, TLS mode and CA bundle
/// stay as they were (422 on `admin_password` otherwise: it is never sent
/// to a server it was not checked with).
#[utoipa::path(put, path = "/api/console/admin/database-instances/{instance_id}", tag = "databases", params(("instance_id" = Uuid, Path)), request_body = InstanceRequest,
    responses((status = 200, body = Instance), (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "Another instance has the name (`database_instance_name_taken`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "Invalid fields, or the server could not be reached as given (`database_instance_unreachable`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "No settings key (`settings_key_missing`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn put(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppPath(id): AppPath<Uuid>,
    AppJson(body): AppJson<InstanceRequest>,
) -> Result<AppJson<Instance>, ApiError> {
    let (fields, new_password) = body.validate(false)?;
    let Some(stored) = instances::get(&state.pool, id).await? else {
        return Err(ApiError::NotFound {
            what: "database instance",
        });
    };
    // The stored password goes only where it was checked: another server,
    // or a weaker check of it, needs the password again.
    let moved = stored.host != fields.host
        || stored.hostaddr != fields.hostaddr
        || stored.port != fields.port
        || stored.tls_mode != fields.tls_mode
        || stored.ca_bundle != fields.ca_bundle;
    if moved && new_password.is_none() {
        return Err(ApiError::Validation(vec![FieldError::new(
            "admin_password",
            "is required again when the host, address, port, TLS mode or CA bundle change: the stored one goes only to the server it was checked with",
        )]));
    }
    let key = sealing_key(&state)?;
    let password = match &new_password {
        Some(password) => password.clone(),
        None => instances::admin_password(&state.pool, &key, id)
            .await
            .map_err(|e| ApiError::Internal(e.into()))?
            .ok_or(ApiError::NotFound {
                what: "database instance",
            })?,
    };
    let check = checked(&state, &fields, &password).await?;
    let sealed = new_password.map(|p| key.seal(instances::PASSWORD_COLUMN, p.expose_secret()));
    let mut tx = state.pool.begin().await?;
    let instance = instances::update(&mut tx, id, &fields, sealed.as_deref(), &check)
        .await
        .map_err(|err| name_taken(err, &fields.name))?
        .ok_or(ApiError::NotFound {
            what: "database instance",
        })?;
    audit::record(
        &mut *tx,
        event(&admin, "admin.database_instance.update", &instance),
    )
    .await?;
    tx.commit().await?;
    Ok(AppJson(instance))
}

/// Delete a PostgreSQL instance
///
/// Only one no database is on (409 `database_instance_in_use`: disable it
/// instead, or remove its databases).
#[utoipa::path(delete, path = "/api/console/admin/database-instances/{instance_id}", tag = "databases", params(("instance_id" = Uuid, Path)),
    responses((status = 204, description = "Deleted"), (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "Databases are on it (`database_instance_in_use`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppPath(id): AppPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    let mut tx = state.pool.begin().await?;
    let instance = match instances::delete(&mut tx, id).await? {
        Deletion::Deleted(instance) => instance,
        Deletion::NotFound => {
            return Err(ApiError::NotFound {
                what: "database instance",
            });
        }
        Deletion::InUse(count) => {
            return Err(ApiError::Conflict {
                code: "database_instance_in_use",
                detail: format!(
                    "{count} database(s) are on this instance; disable it (enabled: false) or remove them first"
                ),
            });
        }
    };
    audit::record(
        &mut *tx,
        event(&admin, "admin.database_instance.delete", &instance),
    )
    .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
