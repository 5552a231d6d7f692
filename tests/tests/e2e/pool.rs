//! The connection pool every function builds (`db::lazy_pool`): when it tests
//! a connection before handing it out, and what a pooler in front of
//! PostgreSQL does to its connections.

use std::time::Duration;

use shared::db::{self, TEST_IF_IDLE_FOR};
use sqlx::PgPool;
use tests::database::TestDb;

async fn backend_pid(pool: &PgPool) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(pool)
        .await
}

/// Ends the backend of `pid` and waits until it is gone.
async fn terminate(db: &TestDb, pid: i32) {
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(pid)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(ended);
}

/// One idle connection, given back and tested by the pool.
async fn pool_with_one_idle_connection(db: &TestDb) -> (PgPool, i32) {
    let url = secrecy::SecretString::from(db.url.clone());
    let pool = db::lazy_pool(&url, 1, db::Workload::Requests).unwrap();
    let pid = backend_pid(&pool).await.unwrap();
    while pool.num_idle() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (pool, pid)
}

#[tokio::test]
async fn a_connection_lost_while_idle_for_a_while_is_replaced_before_use() {
    let db = TestDb::new().await;
    let (pool, first) = pool_with_one_idle_connection(&db).await;
    terminate(&db, first).await;
    tokio::time::sleep(TEST_IF_IDLE_FOR + Duration::from_millis(100)).await;

    let second = backend_pid(&pool).await.expect("a tested connection");
    assert_ne!(second, first);
}

/// Under load a connection is back in the pool for microseconds: it is handed
/// out without a round trip, so a statement on one the server dropped in that
/// moment fails once, and the pool replaces it.
#[tokio::test]
async fn a_connection_idle_for_less_than_a_second_is_handed_out_untested() {
    let db = TestDb::new().await;
    let (pool, first) = pool_with_one_idle_connection(&db).await;
    terminate(&db, first).await;

    assert!(backend_pid(&pool).await.is_err());
    let replaced = backend_pid(&pool).await.expect("a new connection");
    assert_ne!(replaced, first);
}

/// A real PgBouncer in front of the tests' PostgreSQL (`scripts/test.sh`
/// installs it), for what a pooler does to the platform's connections.
struct PgBouncer {
    _child: tokio::process::Child,
    dir: std::path::PathBuf,
    port: u16,
    /// Where the server the tests use listens, and who logs in to it.
    upstream: (String, String, Option<String>),
}

/// `postgres://user[:password]@host:port/...` → (host:port, user, password).
fn upstream(url: &str) -> (String, String, Option<String>) {
    let rest = url.split_once("://").expect("a URL").1;
    let (credentials, rest) = rest.split_once('@').expect("a user in DATABASE_URL");
    let host_port = rest.split('/').next().unwrap().to_string();
    let (user, password) = match credentials.split_once(':') {
        Some((user, password)) => (user.to_string(), Some(password.to_string())),
        None => (credentials.to_string(), None),
    };
    (host_port, user, password)
}

impl PgBouncer {
    /// Starts PgBouncer on a free loopback port with `settings` added to its
    /// `[pgbouncer]` section; clients log in without a password.
    async fn start(settings: &str) -> Self {
        let upstream = upstream(&tests::database::server_url());
        let (host, port) = upstream.0.rsplit_once(':').unwrap_or((&upstream.0, "5432"));
        let dir = std::env::temp_dir().join(format!("kbpgb-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let listen = tests::free_port();
        let password = upstream
            .2
            .as_deref()
            .map(|p| format!(" password={p}"))
            .unwrap_or_default();
        std::fs::write(
            dir.join("pgbouncer.ini"),
            format!(
                "[databases]\n* = host={host} port={port} user={user}{password}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {listen}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {auth}\n\
                 pool_mode = session\n{settings}\n",
                user = upstream.1,
                auth = dir.join("users.txt").display(),
            ),
        )
        .unwrap();
        std::fs::write(dir.join("users.txt"), format!("\"{}\" \"\"\n", upstream.1)).unwrap();
        // PgBouncer refuses to run as root: as root, it runs as postgres.
        let mut command = std::process::Command::new("pgbouncer");
        if let Some((uid, gid)) = local::run_as().unwrap() {
            for file in ["", "pgbouncer.ini", "users.txt"] {
                std::os::unix::fs::chown(dir.join(file), Some(uid), Some(gid)).unwrap();
            }
            std::os::unix::process::CommandExt::uid(&mut command, uid);
            std::os::unix::process::CommandExt::gid(&mut command, gid);
        }
        let child = tokio::process::Command::from(command)
            .arg(dir.join("pgbouncer.ini"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("pgbouncer runs (scripts/test.sh installs it)");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", listen))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        Self {
            _child: child,
            dir,
            port: listen,
            upstream,
        }
    }

    /// A URL for `database` through the pooler.
    fn url(&self, database: &str) -> String {
        format!(
            "postgres://{}@127.0.0.1:{}/{database}",
            self.upstream.1, self.port
        )
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Behind PgBouncer: the job workload's planner settings (the `options`
/// startup parameter) are refused by default, and dropped with
/// `ignore_startup_parameters = options`, which each new connection notices
/// and says; `DATABASE_SESSION_SETTINGS=false` stops sending them.
#[tokio::test(flavor = "current_thread")]
async fn behind_pgbouncer_the_job_workloads_settings_are_refused_dropped_and_noticed_or_not_sent() {
    let db = TestDb::new().await;
    let database = db.url.rsplit('/').next().unwrap().to_string();
    let plan_cache_mode = |pool: sqlx::PgPool| async move {
        let mode = sqlx::query_scalar::<_, String>("SELECT current_setting('plan_cache_mode')")
            .fetch_one(&pool)
            .await;
        pool.close().await;
        mode
    };
    let pool = |url: String, sent: bool| {
        db::lazy_pool_with(&url.into(), 1, db::Workload::Jobs, sent).unwrap()
    };

    let refusing = PgBouncer::start("").await;
    let refused = plan_cache_mode(pool(refusing.url(&database), true))
        .await
        .expect_err("PgBouncer refuses the options startup parameter");
    assert!(
        refused
            .to_string()
            .contains("unsupported startup parameter: options"),
        "{refused}"
    );
    assert_eq!(
        plan_cache_mode(pool(refusing.url(&database), false))
            .await
            .unwrap(),
        "auto",
        "not sent: PostgreSQL's default planning"
    );
    let requests =
        db::lazy_pool(&refusing.url(&database).into(), 1, db::Workload::Requests).unwrap();
    assert_eq!(
        plan_cache_mode(requests).await.unwrap(),
        "auto",
        "the request workload sends nothing a pooler refuses"
    );

    let dropping = PgBouncer::start("ignore_startup_parameters = options").await;
    let (logs, _guard) = tests::logs::capture();
    assert_eq!(
        plan_cache_mode(pool(dropping.url(&database), true))
            .await
            .unwrap(),
        "auto",
        "dropped on the way"
    );
    assert!(
        logs.text()
            .contains("the job workload's planner settings did not reach PostgreSQL"),
        "{}",
        logs.text()
    );
    // Straight to PostgreSQL they arrive, and nothing is said.
    let (logs, _guard) = tests::logs::capture();
    assert_eq!(
        plan_cache_mode(pool(db.url.clone(), true)).await.unwrap(),
        "force_generic_plan"
    );
    assert!(!logs.text().contains("did not reach"), "{}", logs.text());
}
