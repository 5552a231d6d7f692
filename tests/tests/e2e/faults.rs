//! Fault injection. The platform as deployed, one process per function
//! (`api-clusters`, `job-cluster-create`, `job-cluster-delete`, `sweep`), on a
//! private PostgreSQL, with jobs through RabbitMQ and the simulator as host,
//! under a steady load of cluster creates and deletes through the HTTP API.
//! One after another: PostgreSQL stopped with an immediate shutdown and
//! started again, RabbitMQ cut, the job workers killed with SIGKILL, the host
//! API down. Then the load stops and the platform is left to finish.
//!
//! What must hold: no answer but 2xx, 4xx and 503 (no other 5xx, no hung or
//! refused request); no job lost (every one ends `succeeded`); no effect
//! applied twice (a trigger counts every write that finishes a job or moves a
//! cluster to `ready` or `deleted`: one each); and the end state consistent
//! (every cluster `ready` or `deleted`, one namespace per live cluster, no
//! namespace without one). The figures are printed; `docs/benchmarks.md`
//! keeps a run's.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use local::EmbeddedPostgres;
use serde_json::{Value, json};
use sqlx::PgPool;
use tests::{broker::TestBroker, free_port, proxy::TcpProxy, workspace_binary};
use tokio::process::{Child, Command};
use uuid::Uuid;

use crate::harness::Client;

/// How long each fault lasts.
const OUTAGE: Duration = Duration::from_secs(3);
/// Concurrent API clients.
const CLIENTS: usize = 3;
/// How long the platform has to finish once the load stops.
const SETTLE: Duration = Duration::from_secs(120);

/// Counts every write that finishes a job or moves a cluster to `ready` or
/// `deleted`; a job finished twice, or a cluster made ready twice, shows as a
/// second row.
const COUNT_EFFECTS: &str = r#"
CREATE TABLE fault_effects (kind text NOT NULL, id uuid NOT NULL, status text NOT NULL);
CREATE FUNCTION fault_record_effect() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fault_effects VALUES (TG_TABLE_NAME, NEW.id, NEW.status::text);
    RETURN NEW;
END $$;
CREATE TRIGGER fault_job_finished AFTER UPDATE ON cluster_jobs FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled')) EXECUTE FUNCTION fault_record_effect();
CREATE TRIGGER fault_cluster_settled AFTER UPDATE ON clusters FOR EACH ROW
    WHEN (NEW.status IN ('ready', 'deleted') AND NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION fault_record_effect();
"#;

/// What the API clients saw.
#[derive(Default, Debug)]
struct Answers {
    by_status: BTreeMap<u16, u64>,
    /// Requests with no answer within the client's timeout, or refused.
    unanswered: u64,
    /// Clusters whose create was accepted.
    created: Vec<Uuid>,
    deletes_accepted: u64,
    /// The first few answers other than 202, to tell what was refused.
    refusals: Vec<String>,
}

impl Answers {
    fn count(&self, class: impl Fn(u16) -> bool) -> u64 {
        self.by_status
            .iter()
            .filter(|(status, _)| class(**status))
            .map(|(_, n)| n)
            .sum()
    }
}

/// The platform as deployed: one process per function.
struct Deployment {
    env: Vec<(String, String)>,
    _api: Child,
    workers: Vec<Child>,
    _sweep: Child,
    base: String,
}

fn spawn(name: &str, env: &[(String, String)]) -> Child {
    Command::new(workspace_binary(name))
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| panic!("{name} starts: {err}"))
}

impl Deployment {
    fn start(env: Vec<(String, String)>, port: u16) -> Self {
        let mut api_env = env.clone();
        api_env.push(("PORT".into(), port.to_string()));
        let api = spawn("api-clusters", &api_env);
        let workers = Self::spawn_workers(&env);
        let sweep = spawn("sweep", &env);
        Self {
            env,
            _api: api,
            workers,
            _sweep: sweep,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    fn spawn_workers(env: &[(String, String)]) -> Vec<Child> {
        ["job-cluster-create", "job-cluster-delete"]
            .into_iter()
            .map(|name| spawn(name, env))
            .collect()
    }

    /// SIGKILL to every job worker, then new ones.
    async fn kill_workers(&mut self) {
        for worker in &mut self.workers {
            worker.kill().await.expect("SIGKILL a worker");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.workers = Self::spawn_workers(&self.env);
    }
}

/// A create (of a cluster with a new name) or a delete; `None` when no
/// answer came.
async fn call(client: &Client, method: &str, path: &str) -> Option<(u16, Value)> {
    let body = (method == "POST").then(|| {
        json!({
            "name": format!("f-{}", &Uuid::new_v4().simple().to_string()[..12]),
            "workload_cpu_limit_milli_cores": 1000,
            "workload_memory_limit_mib": 1024,
            "public_access_mode": "nodeport",
        })
    });
    let reply = client.try_send(method, path, body).await?;
    Some((reply.status.as_u16(), reply.body))
}

/// One API client: creates a cluster, and deletes the one it created two
/// rounds ago, until `stop`.
async fn load(
    client: Client,
    answers: Arc<Mutex<Answers>>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut mine: Vec<Uuid> = Vec::new();
    while !*stop.borrow() {
        let answer = call(&client, "POST", "/api/console/clusters").await;
        if let Some(body) = record(&answers, answer) {
            let id: Uuid = body["cluster"]["id"]
                .as_str()
                .expect("cluster id")
                .parse()
                .expect("uuid");
            answers.lock().expect("lock").created.push(id);
            mine.push(id);
        }
        if mine.len() > 2 {
            let id = mine[0];
            let answer = call(&client, "DELETE", &format!("/api/console/clusters/{id}")).await;
            if record(&answers, answer).is_some() {
                answers.lock().expect("lock").deletes_accepted += 1;
                mine.remove(0);
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Counts an answer; the body of a 202.
fn record(answers: &Mutex<Answers>, answer: Option<(u16, Value)>) -> Option<Value> {
    let mut seen = answers.lock().expect("lock");
    match answer {
        Some((status, body)) => {
            *seen.by_status.entry(status).or_default() += 1;
            if status != 202 && seen.refusals.len() < 5 {
                seen.refusals.push(format!("{status} {}", body["code"]));
            }
            (status == 202).then_some(body)
        }
        None => {
            seen.unanswered += 1;
            None
        }
    }
}

/// Seconds until `check` holds, polled every 100 ms (at most `limit`).
async fn seconds_until<F, Fut>(limit: Duration, mut check: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "did not recover within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start.elapsed().as_secs_f64()
}

async fn jobs_succeeded(pool: &PgPool) -> Option<i64> {
    sqlx::query_scalar("SELECT count(*) FROM cluster_jobs WHERE status = 'succeeded'")
        .fetch_one(pool)
        .await
        .ok()
}

/// Seconds from now until a job finishes that had not finished before.
async fn until_jobs_progress(pool: &PgPool) -> f64 {
    let before = loop {
        if let Some(n) = jobs_succeeded(pool).await {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    seconds_until(Duration::from_secs(60), || async {
        jobs_succeeded(pool).await.is_some_and(|n| n > before)
    })
    .await
}

/// How long after `fault` ended the API answered and jobs progressed again;
/// then two quiet seconds before the next fault.
async fn recovered<F, Fut>(
    fault: &'static str,
    api_answers: F,
    pool: &PgPool,
) -> (&'static str, f64, f64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let api = seconds_until(Duration::from_secs(30), api_answers).await;
    let jobs = until_jobs_progress(pool).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    (fault, api, jobs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_platform_survives_its_dependencies_failing_under_load() {
    // A private PostgreSQL the test may crash.
    let pg_dir: PathBuf = std::env::temp_dir().join(format!("kbfault-{}", Uuid::new_v4().simple()));
    let pg_port = free_port();
    let mut pg = Some(
        EmbeddedPostgres::start(&pg_dir, pg_port)
            .await
            .expect("private PostgreSQL starts"),
    );
    let database_url = pg.as_ref().expect("running").url();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&database_url)
        .await
        .expect("connect");
    shared::MIGRATOR.run(&pool).await.expect("migrations apply");
    sqlx::raw_sql(sqlx::AssertSqlSafe(COUNT_EFFECTS))
        .execute(&pool)
        .await
        .expect("effect counter");

    let key = tests::development_api_key(&pool, "faults").await;

    // The host, and RabbitMQ behind a proxy the test can cut.
    let host = kube_sim::Simulator::start(kube_sim::Options::host())
        .await
        .expect("simulator");
    let kubeconfig = pg_dir.with_extension("kubeconfig");
    std::fs::write(&kubeconfig, host.kubeconfig(None)).expect("write kubeconfig");
    let broker = TestBroker::new();
    let proxy = TcpProxy::start(tests::broker::addr()).await;

    let env: Vec<(String, String)> = [
        ("DATABASE_URL", database_url.as_str()),
        ("AMQP_URL", &proxy.amqp_url()),
        ("AMQP_EXCHANGE", &broker.topology.exchange),
        (
            "KUBEBYON_HOST_KUBECONFIG",
            kubeconfig.to_str().expect("utf-8 path"),
        ),
        ("KUBEBYON_HOST_POLL_MS", "100"),
        ("JOB_LEASE_MS", "3000"),
        ("JOB_RETRY_BASE_MS", "200"),
        ("JOB_RETRY_MAX_MS", "1000"),
        ("JOB_MAX_ATTEMPTS", "30"),
        ("JOB_REPUBLISH_AFTER_MS", "2000"),
        ("SWEEP_INTERVAL_MS", "300"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut platform = Deployment::start(env, free_port());
    // Each API client its own connections, giving up on an answer after 15 s.
    let base = platform.base.clone();
    let api = || Client::http(&base, Duration::from_secs(15)).bearer(&key);
    let probe = api();
    let succeeds = |path: &'static str| {
        let probe = probe.clone();
        async move {
            probe
                .try_send("GET", path, None)
                .await
                .is_some_and(|r| r.status.is_success())
        }
    };
    seconds_until(Duration::from_secs(30), || succeeds("/healthz")).await;

    let answers = Arc::new(Mutex::new(Answers::default()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| tokio::spawn(load(api(), answers.clone(), stop_rx.clone())))
        .collect();
    let api_answers = || succeeds("/api/console/clusters");
    let mut recovery: Vec<(&str, f64, f64)> = Vec::new();
    tokio::time::sleep(Duration::from_secs(3)).await;

    // (a) PostgreSQL: immediate shutdown, down for OUTAGE, started again.
    pg.take().expect("running").stop_immediately().await;
    tokio::time::sleep(OUTAGE).await;
    pg = Some(
        EmbeddedPostgres::start(&pg_dir, pg_port)
            .await
            .expect("PostgreSQL restarts"),
    );
    recovery.push(recovered("PostgreSQL restarted (immediate)", &api_answers, &pool).await);

    // (b) RabbitMQ: every connection cut, none accepted, for OUTAGE.
    proxy.down();
    tokio::time::sleep(OUTAGE).await;
    proxy.up();
    recovery.push(recovered("RabbitMQ cut", &api_answers, &pool).await);

    // (c) Job workers: SIGKILL in the middle of their jobs, new ones a second later.
    platform.kill_workers().await;
    recovery.push(recovered("job workers killed (SIGKILL)", &api_answers, &pool).await);

    // (d) The host API: down for OUTAGE.
    host.set_faults(kube_sim::Faults {
        api_down: true,
        ..Default::default()
    });
    tokio::time::sleep(OUTAGE).await;
    host.set_faults(kube_sim::Faults::default());
    recovery.push(recovered("host API down", &api_answers, &pool).await);

    let _ = stop_tx.send(true);
    for client in clients {
        client.await.expect("client task");
    }

    // Left alone, every job ends, and so does every operation queued behind
    // another (the sweep makes its job once the cluster's job is done).
    let settled = seconds_until(SETTLE, || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT (SELECT count(*) FROM cluster_jobs WHERE status NOT IN ('succeeded', 'failed', 'cancelled'))
                  + (SELECT count(*) FROM cluster_operations o WHERE o.status = 'pending'
                     AND NOT EXISTS (SELECT 1 FROM cluster_jobs j WHERE j.operation_id = o.id))",
        )
        .fetch_one(&pool)
        .await
        .is_ok_and(|open| open == 0)
    })
    .await;

    let answers = std::mem::take(&mut *answers.lock().expect("lock"));
    let jobs: Vec<(String, String, i32, Option<String>)> = sqlx::query_as(
        "SELECT type::text, status::text, attempt_count, last_error FROM cluster_jobs ORDER BY created_at",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let clusters: Vec<(Uuid, String, String)> =
        sqlx::query_as("SELECT id, status::text, namespace FROM clusters ORDER BY created_at")
            .fetch_all(&pool)
            .await
            .unwrap();
    let doubled: Vec<(String, Uuid, i64)> = sqlx::query_as(
        "SELECT kind, id, count(*) FROM fault_effects GROUP BY kind, id, status HAVING count(*) > 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&host.kubeconfig(None)).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    let namespaces: Vec<String> = Api::<Namespace>::all(client)
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=kubebyon"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|ns| ns.metadata.deletion_timestamp.is_none())
        .filter_map(|ns| ns.metadata.name)
        .collect();

    let rerun = jobs
        .iter()
        .filter(|(_, _, attempts, _)| *attempts > 1)
        .count();
    eprintln!("fault injection: {CLIENTS} clients, {OUTAGE:?} per fault");
    eprintln!(
        "  answers by status: {:?}; unanswered: {}; refusals seen first: {:?}",
        answers.by_status, answers.unanswered, answers.refusals
    );
    eprintln!(
        "  clusters created: {}, deletes accepted: {}; jobs: {} ({} run more than once); settled {settled:.1} s after the load",
        answers.created.len(),
        answers.deletes_accepted,
        jobs.len(),
        rerun,
    );
    for (fault, api, jobs) in &recovery {
        eprintln!("  {fault}: API answers again after {api:.1} s, jobs progress after {jobs:.1} s");
    }

    assert_eq!(answers.unanswered, 0, "every request was answered");
    assert_eq!(
        answers.count(|s| s >= 500 && s != 503),
        0,
        "no 5xx but 503: {:?}",
        answers.by_status
    );
    assert!(
        answers.count(|s| s == 202) > 10,
        "the load ran: {:?}",
        answers.by_status
    );
    assert!(
        answers.count(|s| s == 503) > 0,
        "the database outage was seen as 503"
    );
    let unfinished: Vec<_> = jobs
        .iter()
        .filter(|(_, status, _, _)| status != "succeeded")
        .collect();
    assert!(
        unfinished.is_empty(),
        "no job lost or failed: {unfinished:?}"
    );
    assert!(doubled.is_empty(), "no effect applied twice: {doubled:?}");
    for id in &answers.created {
        assert!(
            clusters.iter().any(|(c, _, _)| c == id),
            "accepted cluster {id} exists"
        );
    }
    for (id, status, namespace) in &clusters {
        match status.as_str() {
            "ready" => assert!(
                namespaces.contains(namespace),
                "live cluster {id} has its namespace"
            ),
            "deleted" => assert!(
                !namespaces.contains(namespace),
                "deleted cluster {id} left its namespace"
            ),
            other => panic!("cluster {id} ended {other}"),
        }
    }
    let live = clusters.iter().filter(|(_, s, _)| s == "ready").count();
    assert_eq!(
        namespaces.len(),
        live,
        "one namespace per live cluster, no orphan"
    );

    drop(platform);
    pool.close().await;
    if let Some(pg) = pg {
        pg.stop().await;
    }
    let _ = std::fs::remove_dir_all(&pg_dir);
    let _ = std::fs::remove_file(&kubeconfig);
}
