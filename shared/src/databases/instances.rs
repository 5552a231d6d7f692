//! The external PostgreSQL servers databases are made on, as an
//! administrator registers them: where to reach the server, how to check
//! its certificate, and the admin role the platform acts as (its password
//! sealed like the settings' secrets, never shown again). Each save runs a
//! connection check ([`check`]) and keeps what it found.

use std::time::Duration;

use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sqlx::{
    Connection, PgConnection, PgExecutor,
    postgres::{PgConnectOptions, PgSslMode},
};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{
    secretbox::{SealError, SecretBox},
    settings::{ResealError, Resealed, Resealer},
};

/// The column the admin password is sealed for.
pub const PASSWORD_COLUMN: &str = "database_instances.admin_password";

/// How long a connection to an instance may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How the platform, and the credentials it projects, check the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum InstanceTlsMode {
    /// TLS, the server's certificate signed by the instance's CA bundle and
    /// naming its host.
    #[serde(rename = "verify-full")]
    VerifyFull,
    /// TLS, the certificate not checked.
    #[serde(rename = "require")]
    Require,
    /// No TLS: only where `KUBEBYON_DATABASES_ALLOW_PLAINTEXT` allows it.
    #[serde(rename = "disable")]
    Disable,
}

impl InstanceTlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::VerifyFull => "verify-full",
            Self::Require => "require",
            Self::Disable => "disable",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::VerifyFull, Self::Require, Self::Disable]
            .into_iter()
            .find(|mode| mode.as_str() == text)
    }
}

/// A registered instance as the back office shows it (never its password).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Instance {
    pub id: Uuid,
    pub name: String,
    /// The DNS name the server's certificate is checked against.
    pub host: String,
    /// The address clients connect to without a DNS lookup, when given.
    pub hostaddr: Option<String>,
    pub port: i32,
    pub admin_database: String,
    pub tls_mode: InstanceTlsMode,
    /// The PEM of the CA(s) the server's certificate is checked with.
    pub ca_bundle: Option<String>,
    pub admin_role: String,
    pub enabled: bool,
    /// Databases asked for without an instance are made on it.
    pub is_default: bool,
    /// What the last connection check found.
    pub server_version: Option<String>,
    pub can_create_role: Option<bool>,
    pub can_create_database: Option<bool>,
    pub checked_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An instance's fields as written (the password apart).
#[derive(Debug, Clone)]
pub struct InstanceFields {
    pub name: String,
    pub host: String,
    pub hostaddr: Option<String>,
    pub port: i32,
    pub admin_database: String,
    pub tls_mode: InstanceTlsMode,
    pub ca_bundle: Option<String>,
    pub admin_role: String,
    pub enabled: bool,
    pub is_default: bool,
}

/// What a connection check found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Check {
    pub server_version: String,
    /// Whether the admin role may create roles (`CREATEROLE`, or superuser).
    pub can_create_role: bool,
    /// Whether it may create databases (`CREATEDB`, or superuser).
    pub can_create_database: bool,
}

/// How to connect to the instance as `role` with `password`, to `database`,
/// with its TLS mode: verify-full trusts only its CA bundle.
pub fn connect_options(
    instance: &InstanceFields,
    role: &str,
    password: &SecretString,
    database: &str,
) -> PgConnectOptions {
    let options = PgConnectOptions::new_without_pgpass()
        .host(&instance.host)
        .port(u16::try_from(instance.port).unwrap_or(5432))
        .username(role)
        .password(password.expose_secret())
        .database(database)
        .application_name("kubebyon");
    match instance.tls_mode {
        InstanceTlsMode::VerifyFull => options
            .ssl_mode(PgSslMode::VerifyFull)
            .ssl_root_cert_from_pem(instance.ca_bundle.clone().unwrap_or_default().into_bytes()),
        InstanceTlsMode::Require => options.ssl_mode(PgSslMode::Require),
        InstanceTlsMode::Disable => options.ssl_mode(PgSslMode::Disable),
    }
}

/// Opens a connection with `options`, within [`CONNECT_TIMEOUT`]; the
/// failure in words.
pub async fn connect(options: &PgConnectOptions) -> Result<PgConnection, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(options)).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())),
    }
}

/// Connects as the admin role, reads the server's version and what the
/// role may do, and makes the ownership registry where it is missing.
pub async fn check(instance: &InstanceFields, password: &SecretString) -> Result<Check, String> {
    let options = connect_options(
        instance,
        &instance.admin_role,
        password,
        &instance.admin_database,
    );
    let mut connection = connect(&options).await?;
    let server_version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&mut connection)
        .await
        .map_err(|e| e.to_string())?;
    let (create_role, create_database, superuser): (bool, bool, bool) = sqlx::query_as(
        "SELECT rolcreaterole, rolcreatedb, rolsuper FROM pg_roles WHERE rolname = current_user",
    )
    .fetch_one(&mut connection)
    .await
    .map_err(|e| e.to_string())?;
    // The ownership registry: made now, so an instance it cannot be made
    // on is refused here rather than at its first database.
    super::server::ensure_registry(&mut connection)
        .await
        .map_err(|e| {
            format!(
                "could not make the ownership registry (schema {}) in {}: {e}; grant CREATE on that database to {}, or make the schema for it",
                super::server::REGISTRY,
                instance.admin_database,
                instance.admin_role
            )
        })?;
    let _ = connection.close().await;
    Ok(Check {
        server_version,
        can_create_role: create_role || superuser,
        can_create_database: create_database || superuser,
    })
}

macro_rules! instance_query {
    ($head:literal, $tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Row,
            $head + r#" id, name, host, host(hostaddr) AS hostaddr, port, admin_database, tls_mode,
               ca_bundle, admin_role, enabled, is_default, server_version, can_create_role,
               can_create_database, checked_at, created_at, updated_at "# + $tail,
            $($arg),*
        )
    };
}

struct Row {
    id: Uuid,
    name: String,
    host: String,
    hostaddr: Option<String>,
    port: i32,
    admin_database: String,
    tls_mode: String,
    ca_bundle: Option<String>,
    admin_role: String,
    enabled: bool,
    is_default: bool,
    server_version: Option<String>,
    can_create_role: Option<bool>,
    can_create_database: Option<bool>,
    checked_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<Row> for Instance {
    fn from(r: Row) -> Self {
        Self {
            id: r.id,
            name: r.name,
            host: r.host,
            hostaddr: r.hostaddr,
            port: r.port,
            admin_database: r.admin_database,
            tls_mode: InstanceTlsMode::parse(&r.tls_mode).unwrap_or(InstanceTlsMode::VerifyFull),
            ca_bundle: r.ca_bundle,
            admin_role: r.admin_role,
            enabled: r.enabled,
            is_default: r.is_default,
            server_version: r.server_version,
            can_create_role: r.can_create_role,
            can_create_database: r.can_create_database,
            checked_at: r.checked_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

impl Instance {
    /// Its fields, to connect with.
    pub fn fields(&self) -> InstanceFields {
        InstanceFields {
            name: self.name.clone(),
            host: self.host.clone(),
            hostaddr: self.hostaddr.clone(),
            port: self.port,
            admin_database: self.admin_database.clone(),
            tls_mode: self.tls_mode,
            ca_bundle: self.ca_bundle.clone(),
            admin_role: self.admin_role.clone(),
            enabled: self.enabled,
            is_default: self.is_default,
        }
    }
}

/// Writes a new instance with its sealed password and its check. With
/// `is_default`, the former default stops being it.
pub async fn insert(
    tx: &mut PgConnection,
    fields: &InstanceFields,
    sealed_password: &[u8],
    check: &Check,
) -> Result<Instance, sqlx::Error> {
    if fields.is_default {
        clear_default(&mut *tx).await?;
    }
    let row = instance_query!(
        "INSERT INTO database_instances (name, host, hostaddr, port, admin_database, tls_mode,
             ca_bundle, admin_role, admin_password_encrypted, enabled, is_default,
             server_version, can_create_role, can_create_database, checked_at)
         VALUES ($1, $2, $3::text::inet, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, now())
         RETURNING",
        "",
        fields.name,
        fields.host,
        fields.hostaddr,
        fields.port,
        fields.admin_database,
        fields.tls_mode.as_str(),
        fields.ca_bundle,
        fields.admin_role,
        sealed_password,
        fields.enabled,
        fields.is_default,
        check.server_version,
        check.can_create_role,
        check.can_create_database,
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(row.into())
}

/// Replaces an instance's fields (and its password, when given) with a
/// fresh check; `None` when there is none.
pub async fn update(
    tx: &mut PgConnection,
    id: Uuid,
    fields: &InstanceFields,
    sealed_password: Option<&[u8]>,
    check: &Check,
) -> Result<Option<Instance>, sqlx::Error> {
    if fields.is_default {
        clear_default(&mut *tx).await?;
    }
    let row = instance_query!(
        "UPDATE database_instances
         SET name = $2, host = $3, hostaddr = $4::text::inet, port = $5, admin_database = $6,
             tls_mode = $7, ca_bundle = $8, admin_role = $9,
             admin_password_encrypted = coalesce($10, admin_password_encrypted),
             enabled = $11, is_default = $12, server_version = $13, can_create_role = $14,
             can_create_database = $15, checked_at = now(), updated_at = now()
         WHERE id = $1
         RETURNING",
        "",
        id,
        fields.name,
        fields.host,
        fields.hostaddr,
        fields.port,
        fields.admin_database,
        fields.tls_mode.as_str(),
        fields.ca_bundle,
        fields.admin_role,
        sealed_password,
        fields.enabled,
        fields.is_default,
        check.server_version,
        check.can_create_role,
        check.can_create_database,
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(Into::into))
}

async fn clear_default(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("UPDATE database_instances SET is_default = false WHERE is_default")
        .execute(db)
        .await?;
    Ok(())
}

pub async fn list(db: impl PgExecutor<'_>) -> Result<Vec<Instance>, sqlx::Error> {
    let rows = instance_query!("SELECT", "FROM database_instances ORDER BY name")
        .fetch_all(db)
        .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub async fn get(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Instance>, sqlx::Error> {
    let row = instance_query!("SELECT", "FROM database_instances WHERE id = $1", id)
        .fetch_optional(db)
        .await?;
    Ok(row.map(Into::into))
}

/// The instance a database asked for without one is made on: the enabled
/// default.
pub async fn default(db: impl PgExecutor<'_>) -> Result<Option<Instance>, sqlx::Error> {
    let row = instance_query!(
        "SELECT",
        "FROM database_instances WHERE is_default AND enabled"
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(Into::into))
}

/// The admin role's password, opened.
pub async fn admin_password(
    db: impl PgExecutor<'_>,
    key: &SecretBox,
    id: Uuid,
) -> Result<Option<SecretString>, PasswordError> {
    let sealed = sqlx::query_scalar!(
        "SELECT admin_password_encrypted FROM database_instances WHERE id = $1",
        id
    )
    .fetch_optional(db)
    .await?;
    sealed
        .map(|sealed| key.open(PASSWORD_COLUMN, &sealed))
        .transpose()
        .map_err(PasswordError::Sealed)
}

/// An instance and the platform's admin connection to it.
pub struct AdminConnection {
    pub instance: Instance,
    pub connection: PgConnection,
}

/// The platform's admin connections to instances during one run of the
/// database job or schedule: one an instance, made (its ownership registry
/// with it) for the first record on the instance and kept for the others.
pub struct AdminConnections<'a> {
    pool: &'a sqlx::PgPool,
    key: &'a SecretBox,
    open: std::collections::HashMap<Uuid, AdminConnection>,
}

impl<'a> AdminConnections<'a> {
    pub fn new(pool: &'a sqlx::PgPool, key: &'a SecretBox) -> Self {
        Self {
            pool,
            key,
            open: std::collections::HashMap::new(),
        }
    }

    /// The instance's connection, made on first use; the reason in words
    /// when it cannot be had.
    pub async fn get(&mut self, id: Uuid) -> Result<&mut AdminConnection, String> {
        match self.open.entry(id) {
            std::collections::hash_map::Entry::Occupied(held) => Ok(held.into_mut()),
            std::collections::hash_map::Entry::Vacant(free) => {
                Ok(free.insert(connect_admin(self.pool, self.key, id).await?))
            }
        }
    }

    /// Closes the instance's connection after an error on it: the next
    /// record on the instance makes another.
    pub async fn reset(&mut self, id: Uuid) {
        if let Some(admin) = self.open.remove(&id) {
            let _ = admin.connection.close().await;
        }
    }

    /// Closes every connection, as a client should (the server logs one
    /// dropped without a goodbye).
    pub async fn close(self) {
        for (_, admin) in self.open {
            let _ = admin.connection.close().await;
        }
    }
}

async fn connect_admin(
    pool: &sqlx::PgPool,
    key: &SecretBox,
    id: Uuid,
) -> Result<AdminConnection, String> {
    let gone = || "its instance is gone".to_string();
    let instance = get(pool, id)
        .await
        .map_err(|e| format!("reading the instance: {e}"))?
        .ok_or_else(gone)?;
    let password = admin_password(pool, key, id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(gone)?;
    let fields = instance.fields();
    let options = connect_options(
        &fields,
        &fields.admin_role,
        &password,
        &fields.admin_database,
    );
    let mut connection = connect(&options).await.map_err(|e| {
        format!(
            "could not connect to the instance {} as {}: {e}",
            instance.name, instance.admin_role
        )
    })?;
    super::server::ensure_registry(&mut connection)
        .await
        .map_err(|e| format!("making the ownership registry: {e}"))?;
    Ok(AdminConnection {
        instance,
        connection,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("the admin password does not open with the settings key: {0}")]
    Sealed(SealError),
}

/// How deleting an instance ended.
pub enum Deletion {
    Deleted(Box<Instance>),
    NotFound,
    /// Databases live on it.
    InUse(i64),
}

/// Deletes the instance, unless a database of a live cluster that is not
/// forgotten is on it.
pub async fn delete(tx: &mut PgConnection, id: Uuid) -> Result<Deletion, sqlx::Error> {
    let Some(instance) = get(&mut *tx, id).await? else {
        return Ok(Deletion::NotFound);
    };
    // Locked: a database asked for meanwhile waits, then sees it gone.
    sqlx::query!(
        "SELECT id FROM database_instances WHERE id = $1 FOR UPDATE",
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    // A deleted cluster's databases hold it no more: their roles and
    // databases stay on the server, as `retain` leaves them.
    let in_use = sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM tenant_databases t
           JOIN clusters c ON c.id = t.cluster_id AND c.deleted_at IS NULL
           WHERE t.instance_id = $1 AND t.deleted_at IS NULL"#,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    if in_use > 0 {
        return Ok(Deletion::InUse(in_use));
    }
    sqlx::query!("DELETE FROM database_instances WHERE id = $1", id)
        .execute(&mut *tx)
        .await?;
    Ok(Deletion::Deleted(Box::new(instance)))
}

/// Re-seals every instance's admin password under `key`'s current key.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    let rows = sqlx::query!(
        "SELECT id, admin_password_encrypted FROM database_instances ORDER BY id FOR UPDATE"
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut resealer = Resealer::new(key);
    for row in rows {
        let again = resealer.again(PASSWORD_COLUMN, Some(row.admin_password_encrypted))?;
        sqlx::query!(
            "UPDATE database_instances SET admin_password_encrypted = $2 WHERE id = $1",
            row.id,
            again
        )
        .execute(&mut *tx)
        .await?;
    }
    Ok(resealer.done)
}
