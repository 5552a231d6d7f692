//! PostgreSQL access: the pool, the one migrator, and the checks every function's pool shares.
//! Repository functions take an executor so callers choose the transaction.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use sqlx::{
    Connection, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

/// Every migration of the workspace, embedded once here.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// What a pool's connections run, which decides how PostgreSQL plans their
/// prepared statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// HTTP routes and schedules: some statements have optional filters
    /// (`$1 IS NULL OR ...`) that a plan made for the actual parameters
    /// prunes, so PostgreSQL chooses per execution as it does by default.
    Requests,
    /// Job workers: the claim, the completions and the handlers' keyed
    /// statements, run with their cached generic plan
    /// (`plan_cache_mode = force_generic_plan`). By default, once
    /// `cluster_jobs` holds thousands of rows, the claim would be planned
    /// again for every batch of a few wake-ups: a generic plan counts 100
    /// rows for the `unnest` of the wake-up ids, which looks dearer than a
    /// plan for the actual array. A generic plan is made once, at a
    /// statement's first execution, maybe while the tables are nearly empty,
    /// when scanning a whole table looks cheapest; kept, that plan would scan
    /// the table ever after. So sequential scans are priced out
    /// (`enable_seqscan = off`: still taken where no index serves).
    Jobs,
}

/// A connection idle in the pool for less than this is handed out without a
/// round trip to test it: sqlx tested it when it was given back, so only a
/// server that dropped it in between (a restart, a terminated backend) could
/// have broken it, and that statement fails as any statement on a connection
/// lost mid-use does. Idle longer (between bursts, a Lambda instance thawed),
/// it is tested first and replaced when the test fails.
pub const TEST_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// A pool that connects on first use, so a cold start does not wait for the database.
pub fn lazy_pool(
    url: &SecretString,
    max_connections: u32,
    workload: Workload,
) -> Result<PgPool, sqlx::Error> {
    lazy_pool_with(url, max_connections, workload, true)
}

/// [`lazy_pool`], saying whether the job workload's planner settings are sent
/// (`DATABASE_SESSION_SETTINGS`). They travel as the `options` startup
/// parameter, which PostgreSQL and RDS take but a pooler may refuse
/// (PgBouncer: `unsupported startup parameter: options`) or drop
/// (`ignore_startup_parameters = options`). Without them the job statements
/// are planned as PostgreSQL plans by default: slower claims, the same
/// results. Sent, each new connection checks they arrived and warns when a
/// pooler dropped them.
pub fn lazy_pool_with(
    url: &SecretString,
    max_connections: u32,
    workload: Workload,
    session_settings: bool,
) -> Result<PgPool, sqlx::Error> {
    let mut options: PgConnectOptions = url.expose_secret().parse()?;
    // No `extra_float_digits` startup parameter: PostgreSQL 12 and later
    // write floats exactly by default, and poolers refuse parameters they do
    // not know (PgBouncer: `unsupported startup parameter`).
    options = options
        .application_name("kubebyon")
        .extra_float_digits(None);
    let sent = workload == Workload::Jobs && session_settings;
    if sent {
        options = options.options([
            ("plan_cache_mode", "force_generic_plan"),
            ("enable_seqscan", "off"),
        ]);
    }
    let mut pool = PgPoolOptions::new();
    if sent {
        pool = pool.after_connect(|conn, _| {
            Box::pin(async move {
                let mode = sqlx::query_scalar!(
                    r#"SELECT current_setting('plan_cache_mode') AS "mode!""#
                )
                .fetch_one(conn)
                .await?;
                if mode != "force_generic_plan" {
                    tracing::warn!(
                        plan_cache_mode = mode,
                        "the job workload's planner settings did not reach PostgreSQL: something between (a pooler ignoring the options startup parameter) dropped them; set DATABASE_SESSION_SETTINGS=false to stop sending them"
                    );
                }
                Ok(())
            })
        });
    }
    Ok(pool
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= TEST_IF_IDLE_FOR {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_lazy_with(options))
}

/// A pool for requests on a database brought to the current schema: every
/// migration not yet applied is, first (the release step, and `local`).
pub async fn migrated_pool(url: &SecretString, max_connections: u32) -> anyhow::Result<PgPool> {
    use anyhow::Context;
    let pool = lazy_pool(url, max_connections, Workload::Requests)?;
    MIGRATOR.run(&pool).await.context("applying migrations")?;
    tracing::info!("migrations applied");
    Ok(pool)
}

/// Readiness: the database answers a trivial query.
pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query_scalar!("SELECT 1 AS \"one!\"")
        .fetch_one(pool)
        .await
        .map(|_| ())
}

/// The first key of every advisory lock the platform takes ("KB"), so its
/// locks cannot collide with another application's on the same database.
const ADVISORY_LOCK_SPACE: i32 = 0x4b42;

/// An advisory lock on a name, held until this value is dropped.
///
/// It is a transaction-level lock taken in a transaction kept open for as
/// long as the holder runs, so it ends with that transaction however the
/// holder ends: returned, cancelled, panicked or cut off from the server.
/// That also keeps it working through a pooler in transaction mode, where a
/// session-level lock could be left on a server connection someone else gets
/// next. The open transaction takes one connection from the pool for the
/// duration, holds no snapshot between statements and so no vacuum back.
pub struct AdvisoryLock {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
}

impl AdvisoryLock {
    /// Ends the transaction, and the lock with it, before answering. A lock
    /// merely dropped is released too, but only once the pool gets round to
    /// rolling its connection back: a holder that is done releases it.
    pub async fn release(self) {
        if let Err(err) = self.tx.rollback().await {
            // The connection is gone, and the lock with its session.
            tracing::warn!(error = %err, "releasing an advisory lock");
        }
    }
}

/// Takes the advisory lock on `name` in `tx`, waiting for another holder
/// to end its transaction; held until `tx` ends.
pub async fn advisory_xact_lock(
    tx: &mut sqlx::PgConnection,
    name: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        ADVISORY_LOCK_SPACE,
        name
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Takes the advisory lock on `name` unless another holder has it: `None`
/// then, at once, without waiting.
pub async fn try_advisory_lock(
    pool: &PgPool,
    name: &str,
) -> Result<Option<AdvisoryLock>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let held = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_xact_lock($1, hashtext($2)) AS "held!""#,
        ADVISORY_LOCK_SPACE,
        name
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(held.then_some(AdvisoryLock { tx }))
}
