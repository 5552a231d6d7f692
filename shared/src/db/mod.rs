//! PostgreSQL access: the pool, the one migrator, and one module per table family.
//! Repository functions take an executor so callers choose the transaction.

pub mod accounts;
pub mod audit;
pub mod clusters;
pub mod dns;
pub mod jobs;
pub mod metrics;
pub mod nodes;
pub mod settings;
pub mod tokens;
pub mod users;

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

/// Every migration of the workspace, embedded once here.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// A pool that connects on first use, so a cold start does not wait for the database.
pub fn lazy_pool(url: &SecretString, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = url.expose_secret().parse()?;
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(options.application_name("kubebyon")))
}

/// Readiness: the database answers a trivial query.
pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query_scalar!("SELECT 1 AS \"one!\"")
        .fetch_one(pool)
        .await
        .map(|_| ())
}
