use sqlx::{Connection, Executor, PgConnection, PgPool};
use uuid::Uuid;

/// The server the tests use: `DATABASE_URL` pointing at any database of it
/// (default: the local server's `postgres` database).
pub fn server_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn with_database(url: &str, database: &str) -> String {
    let (base, _) = url
        .rsplit_once('/')
        .expect("DATABASE_URL has a database path");
    format!("{base}/{database}")
}

/// A fresh, migrated database, dropped when the test ends.
pub struct TestDb {
    pub pool: PgPool,
    pub url: String,
    name: String,
}

impl TestDb {
    pub async fn new() -> Self {
        Self::create(true).await
    }

    /// An empty database without migrations.
    pub async fn empty() -> Self {
        Self::create(false).await
    }

    async fn create(migrate: bool) -> Self {
        let name = format!("kbtest_{}", Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&server_url())
            .await
            .unwrap_or_else(|err| refused("PostgreSQL is reachable at DATABASE_URL", err));
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .expect("create test database");
        let url = with_database(&server_url(), &name);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(8)
            .connect(&url)
            .await
            .unwrap_or_else(|err| refused("connect to test database", err));
        if migrate {
            shared::MIGRATOR.run(&pool).await.expect("migrations apply");
        }
        Self { pool, url, name }
    }
}

/// The peak of the suite's connections to the server, measured by sampling
/// `pg_stat_activity` over a whole run (README.md, "Test it").
pub const SUITE_PEAK_CONNECTIONS: u32 = 70;

/// Fails the test with what went wrong; when the server refused for want
/// of connections (SQLSTATE 53300, "too many clients already"), says so and
/// what the suite needs.
fn refused(what: &str, err: sqlx::Error) -> ! {
    let full = err
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "53300");
    if full {
        panic!(
            "{what}: PostgreSQL has no connection left ({err}). The suite holds up to about \
             {SUITE_PEAK_CONNECTIONS} at once: stop other clients of the server (another `local`, \
             a leftover test process) or raise its max_connections"
        );
    }
    panic!("{what}: {err}");
}

impl Drop for TestDb {
    /// Drops the database from a thread of its own (the test's runtime may be
    /// shutting down); `FORCE` ends the pool's connections server-side.
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async move {
                let mut admin = PgConnection::connect(&server_url()).await.ok()?;
                admin
                    .execute(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .await
                    .ok()
            })
        })
        .join();
    }
}
