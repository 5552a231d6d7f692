//! Benchmark of tenant databases: `local` (the platform in one process,
//! jobs through RabbitMQ) against a simulated host with a ready cluster,
//! and a PostgreSQL server of its own over TLS (a private CA, SCRAM
//! passwords) registered as the default instance with `verify-full`.
//!
//! 1. One at a time, N times: the time from `POST …/databases` until the
//!    database reads `ready` (the request, the job's enqueue and delivery,
//!    the credential, role, database, the Secret projected into the
//!    cluster, and the credential's first login over TLS).
//! 2. M asked for at once (concurrent requests): the time until every one
//!    reads `ready`, then a count on the server: each role and database
//!    once, one registry row of each, nothing else of the platform's.
//!
//! Usage: `bench-databases [--sequential N] [--burst M]` (defaults 10 and
//! 50); needs the workspace binaries built, PostgreSQL at DATABASE_URL's
//! server, RabbitMQ at AMQP_URL, and PostgreSQL's binaries for the
//! instance (Debian's `postgresql`). Prints one JSON line.

#![allow(clippy::print_stdout)]

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use bench::{Process, arg, percentile, until};
use serde_json::{Value, json};
use sqlx::{Connection, postgres::PgConnectOptions};

fn round(ms: f64) -> f64 {
    (ms * 10.0).round() / 10.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let sequential: usize = arg(&args, "--sequential", 10)?;
    let burst: usize = arg(&args, "--burst", 50)?;

    // The instance.
    let run = uuid::Uuid::new_v4().simple().to_string();
    let dir = std::env::temp_dir().join(format!("kb-bench-db-{run}"));
    let pg_dir = dir.join("instance");
    let pg_port = tests::free_port();
    let _pg = local::EmbeddedPostgres::start(&pg_dir, pg_port).await?;
    let pg_dir = pg_dir.canonicalize()?;
    let ca_pem = tests::pgtls::serve_tls_with_passwords(&pg_dir);
    let superuser = || {
        PgConnectOptions::new()
            .socket(&pg_dir)
            .port(pg_port)
            .username("postgres")
            .database("postgres")
    };
    let mut su = sqlx::PgConnection::connect_with(&superuser()).await?;
    for statement in [
        "ALTER SYSTEM SET ssl = on",
        "CREATE ROLE kbadmin LOGIN CREATEROLE CREATEDB PASSWORD 'admin-secret-1'",
        "GRANT CREATE ON DATABASE postgres TO kbadmin",
        "SELECT pg_reload_conf()",
    ] {
        sqlx::query(statement).execute(&mut su).await?;
    }

    // The platform.
    let host = kube_sim::Simulator::start(kube_sim::Options::host()).await?;
    let db = tests::database::TestDb::new().await;
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("host.kubeconfig");
    std::fs::write(&kubeconfig, host.kubeconfig(None))?;
    let port = tests::free_port();
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/local");
    let _local = Process(
        Command::new(&binary)
            .arg("--development")
            .env("DATABASE_URL", &db.url)
            .env("AMQP_URL", tests::broker::amqp_url())
            .env("AMQP_EXCHANGE", format!("kbbench.{run}"))
            .env("PORT", port.to_string())
            .env("METRICS_PORT", tests::free_port().to_string())
            .env("KUBEBYON_HOST_KUBECONFIG", &kubeconfig)
            .env("KUBEBYON_HOST_NODE_ADDRESS", "localhost")
            .env(
                "KUBEBYON_SETTINGS_KEY",
                "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
            )
            .env("RUST_LOG", "warn")
            .spawn()
            .with_context(|| format!("{} (cargo build --workspace --bins)", binary.display()))?,
    );
    let api = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    until(Duration::from_secs(60), "local answers", async || {
        let reply = http.get(format!("{api}/healthz")).send().await.ok()?;
        reply.status().is_success().then_some(())
    })
    .await?;
    let registered = http
        .post(format!("{api}/api/console/admin/database-instances"))
        .json(&json!({
            "name": "main", "host": "localhost", "port": pg_port, "tls_mode": "verify-full",
            "ca_bundle": ca_pem, "admin_role": "kbadmin", "admin_password": "admin-secret-1",
            "default": true,
        }))
        .send()
        .await?;
    ensure!(
        registered.status().is_success(),
        "registering the instance: {}",
        registered.text().await?
    );
    let created: Value = http
        .post(format!("{api}/api/console/clusters"))
        .json(&json!({
            "name": "shop", "workload_cpu_limit_milli_cores": 2000, "workload_memory_limit_mib": 4096,
            "public_access_mode": "nodeport",
        }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = created["cluster"]["id"]
        .as_str()
        .context("the cluster's id")?
        .to_string();
    let databases = format!("{api}/api/console/clusters/{id}/databases");
    until(
        Duration::from_secs(120),
        "the cluster is ready",
        async || {
            let body: Value = http
                .get(format!("{api}/api/console/clusters/{id}"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let cluster = body.get("cluster").unwrap_or(&body);
            (cluster["status"] == "ready").then_some(())
        },
    )
    .await?;
    // The cluster's create job ends as it turns ready: wait until nothing
    // runs for it, so the first request enqueues its own job.
    until(Duration::from_secs(30), "the cluster is idle", async || {
        let ops: Value = http
            .get(format!("{api}/api/console/clusters/{id}/operations"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let items = ops.get("items").unwrap_or(&ops).as_array()?.clone();
        items
            .iter()
            .all(|o| o["status"] == "succeeded" || o["status"] == "failed")
            .then_some(())
    })
    .await?;
    let ready = async |names: &[String]| -> Option<()> {
        let list: Value = http.get(&databases).send().await.ok()?.json().await.ok()?;
        let list = list.as_array()?;
        names
            .iter()
            .all(|name| {
                list.iter()
                    .any(|d| d["name"] == name.as_str() && d["phase"] == "ready")
            })
            .then_some(())
    };
    let failed = async || -> Option<String> {
        let list: Value = http.get(&databases).send().await.ok()?.json().await.ok()?;
        list.as_array()?
            .iter()
            .find(|d| d["phase"] == "failed" || d["phase"] == "conflict")
            .map(|d| d.to_string())
    };

    // Until every one of `names` reads `ready`; a database that stops ends
    // the run.
    let all_ready = async |names: &[String], limit: Duration| -> anyhow::Result<()> {
        let outcome = until(limit, "every database ready", async || {
            if let Some(stopped) = failed().await {
                return Some(Err(stopped));
            }
            ready(names).await.map(Ok)
        })
        .await?;
        outcome.map_err(|stopped| anyhow::anyhow!("a database stopped: {stopped}"))
    };

    let mut times = Vec::new();
    for n in 0..sequential {
        let name = format!("seq{n}");
        let started = Instant::now();
        http.post(&databases)
            .json(&json!({ "name": name }))
            .send()
            .await?
            .error_for_status()?;
        all_ready(&[name], Duration::from_secs(60)).await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);

    let names: Vec<String> = (0..burst).map(|n| format!("burst{n}")).collect();
    let started = Instant::now();
    let replies = futures_util::future::join_all(
        names
            .iter()
            .map(|name| http.post(&databases).json(&json!({ "name": name })).send()),
    )
    .await;
    for reply in replies {
        reply?.error_for_status()?;
    }
    let accepted_ms = started.elapsed().as_secs_f64() * 1000.0;
    all_ready(&names, Duration::from_secs(600)).await?;
    let burst_ms = started.elapsed().as_secs_f64() * 1000.0;

    // Each once on the server, and in the registry.
    let total = i64::try_from(sequential + burst)?;
    let (roles, dbs, distinct_roles, distinct_dbs): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_roles WHERE rolname LIKE 'kb\\_%'),
                (SELECT count(*) FROM pg_database WHERE datname LIKE 'kb\\_%'),
                (SELECT count(DISTINCT name) FROM kubebyon_registry.objects WHERE kind = 'role'),
                (SELECT count(DISTINCT name) FROM kubebyon_registry.objects WHERE kind = 'database')",
    )
    .fetch_one(&mut su)
    .await?;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM kubebyon_registry.objects")
        .fetch_one(&mut su)
        .await?;
    ensure!(
        (roles, dbs, distinct_roles, distinct_dbs, rows) == (total, total, total, total, 2 * total),
        "roles {roles}, databases {dbs}, registered roles {distinct_roles}, registered databases {distinct_dbs}, registry rows {rows}: expected {total} each and {} rows",
        2 * total
    );
    let jobs: i64 =
        sqlx::query_scalar("SELECT count(*) FROM cluster_jobs WHERE type = 'database_converge'")
            .fetch_one(&db.pool)
            .await?;

    println!(
        "{}",
        json!({
            "sequential": {
                "databases": sequential,
                "p50_ms": round(percentile(&times, 0.5)),
                "p90_ms": round(percentile(&times, 0.9)),
                "max_ms": round(times[times.len() - 1]),
            },
            "burst": {
                "databases": burst,
                "accepted_ms": round(accepted_ms),
                "all_ready_ms": round(burst_ms),
                "per_database_ms": round(burst_ms / burst as f64),
            },
            "converge_jobs": jobs,
            "roles": roles, "databases": dbs, "registry_rows": rows,
        })
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
