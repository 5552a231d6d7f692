//! The admission webhook's answer time, beside the floor: the `admission`
//! router (with the common layers every function has, and the default HTTP
//! pool of 10 connections) served by axum on loopback, for a cluster that
//! `sync-nodes` observed running `--pods` pods (default 1,000), answering a
//! mix of recorded reviews (a Pod CREATE, which reserves, and a Deployment
//! UPDATE) each with a fresh uid; and a minimal axum handler that parses the
//! review and echoes its uid, alone and with one `SELECT 1` on a pool of the
//! same size (a review that reads anything from PostgreSQL costs at least
//! that). Also the webhook on Deployment UPDATEs alone (one read, no
//! reservation). Each at 1 and 64 concurrent reviews, the
//! client keeping its connections alive as an API server does. Checked:
//! every answer echoes its uid and allows.
//!
//! Usage: `bench-admission [--pods N] [--reviews N] [--connections N]` (the
//! pools' size, default 10); prints one JSON line.
//! Needs `DATABASE_URL`.

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]

use std::{sync::Arc, time::Instant};

use axum::{Json, Router, extract::State, routing::post};
use secrecy::SecretString;
use serde_json::{Value, json};
use shared::{
    admission::{demand::Requests, store},
    config::Settings,
    db::{Workload, lazy_pool},
    http::{AppState, Identity, with_common_layers},
};

fn fixture(name: &str) -> anyhow::Result<Value> {
    let path = format!(
        "{}/../fixtures/admission/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

async fn serve(app: Router) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// `reviews` reviews over `concurrency` connections: latencies and rate.
async fn run(
    url: &str,
    token: &str,
    reviews: &[Value],
    total: usize,
    concurrency: usize,
) -> anyhow::Result<Value> {
    // As an API server sends it, to every server alike (the floors ignore it).
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse()?,
    );
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .default_headers(headers)
        .build()?;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, next, url, reviews) = (
            client.clone(),
            next.clone(),
            url.to_string(),
            reviews.to_vec(),
        );
        tasks.push(tokio::spawn(async move {
            let mut took = Vec::new();
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= total {
                    return anyhow::Ok(took);
                }
                let mut review = reviews[n % reviews.len()].clone();
                let uid = uuid::Uuid::new_v4().to_string();
                review["request"]["uid"] = uid.clone().into();
                let body = review.to_string();
                let begun = Instant::now();
                let answer: Value = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await?
                    .json()
                    .await?;
                took.push(begun.elapsed().as_secs_f64() * 1000.0);
                anyhow::ensure!(
                    answer["response"]["uid"] == uid.as_str()
                        && answer["response"]["allowed"] == true,
                    "{answer}"
                );
            }
        }));
    }
    let mut took = Vec::new();
    for task in tasks {
        took.extend(task.await??);
    }
    let seconds = started.elapsed().as_secs_f64();
    took.sort_by(f64::total_cmp);
    Ok(json!({
        "concurrency": concurrency,
        "reviews": total,
        "p50_ms": bench::percentile(&took, 0.5),
        "p99_ms": bench::percentile(&took, 0.99),
        "per_second": (total as f64 / seconds).round(),
    }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pods = bench::arg(&args, "--pods", 1000)?;
    let total = bench::arg(&args, "--reviews", 5000)?;
    // DATABASE_MAX_CONNECTIONS' default.
    let connections = bench::arg(&args, "--connections", 10)?;

    let db = tests::database::TestDb::new().await;
    let id = tests::handlers::seed_cluster(&db.pool).await;
    let owner: uuid::Uuid = sqlx::query_scalar(
        "UPDATE clusters SET workload_cpu_limit_milli_cores = 2000000000,
                             workload_memory_limit_mib = 2000000000, status = 'ready'
         WHERE id = $1 RETURNING owner_user_id",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await?;
    let token = store::issue_authorizer_token(&db.pool, id, "127.0.0.1:443").await?;
    store::ensure_reserved(&db.pool, id).await?;
    store::record_usage(
        &db.pool,
        id,
        &store::Observed {
            requests: Requests {
                cpu_milli_cores: 250,
                memory_mib: 256,
            }
            .times(pods as i64),
            pods: pods as i64,
            nodes: 20,
            at: chrono::Utc::now(),
        },
    )
    .await?;
    let url: SecretString = db.url.clone().into();
    let state = AppState {
        pool: lazy_pool(&url, connections, Workload::Requests)?,
        publisher: Arc::new(bench::Dropping),
        settings: Arc::new(Settings::from_source(&std::collections::HashMap::<
            &str,
            &str,
        >::new())?),
        identity: Identity::Development(owner),
        host: None,
    };
    let platform = serve(with_common_layers(admission::router(), state)).await?;
    let platform = format!("{platform}/api/admission/{id}");
    let floor = serve(Router::new().route(
        "/review",
        post(|Json(review): Json<Value>| async move {
            Json(json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": { "uid": review["request"]["uid"], "allowed": true },
            }))
        }),
    ))
    .await?;
    let floor = format!("{floor}/review");
    // The same, with one `SELECT 1` on a pool like the webhook's: what a
    // review costs that reads anything from PostgreSQL.
    let select = lazy_pool(&url, connections, Workload::Requests)?;
    let floor_db = serve(
        Router::new()
            .route(
                "/review",
                post(
                    |State(pool): State<sqlx::PgPool>, Json(review): Json<Value>| async move {
                        let one: i32 = sqlx::query_scalar("SELECT 1")
                            .fetch_one(&pool)
                            .await
                            .unwrap_or_default();
                        Json(json!({
                            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                            "response": { "uid": review["request"]["uid"], "allowed": one == 1 },
                        }))
                    },
                ),
            )
            .with_state(select),
    )
    .await?;
    let floor_db = format!("{floor_db}/review");
    let pod = fixture("pod-create.json")?;
    let scale = fixture("deployment-update.json")?;
    let mixed = [pod, scale.clone()];
    let workloads = [scale];

    let mut results = Vec::new();
    for concurrency in [1, 64] {
        // Warm: connections made, statements prepared.
        for url in [&platform, &floor, &floor_db] {
            run(url, &token, &mixed, 200, concurrency).await?;
        }
        let webhook = run(&platform, &token, &mixed, total, concurrency).await?;
        let workloads_only = run(&platform, &token, &workloads, total, concurrency).await?;
        let minimal = run(&floor, &token, &mixed, total, concurrency).await?;
        let minimal_db = run(&floor_db, &token, &mixed, total, concurrency).await?;
        let share = |of: &Value| {
            let r = of["per_second"].as_f64().unwrap_or(0.0)
                / minimal["per_second"].as_f64().unwrap_or(1.0);
            (r * 1000.0).round() / 1000.0
        };
        results.push(json!({
            "concurrency": concurrency,
            "webhook": webhook,
            "webhook_workloads_only": workloads_only,
            "floor": minimal,
            "floor_one_select": minimal_db,
            "throughput_of_floor": share(&webhook),
            "floor_one_select_of_floor": share(&minimal_db),
        }));
    }
    let reserved: i64 =
        sqlx::query_scalar("SELECT count(*) FROM admission_reservations WHERE cluster_id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await?;
    println!(
        "{}",
        json!({ "bench": "admission", "pods_observed": pods, "connections": connections, "reservations_at_end": reserved, "runs": results })
    );
    Ok(())
}
