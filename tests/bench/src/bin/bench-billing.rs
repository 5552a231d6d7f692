//! Benchmarks of billing and notifications:
//! - `notify` delivering N queued webhooks (default 10,000) to a receiver on
//!   loopback that answers 204 at once: deliveries per second, and every one
//!   received exactly once;
//! - the entitlement check of a cluster create (the organization's lock, its usage,
//!   the comparison) in its own transaction, beside the whole create through
//!   the `api-clusters` router, for a user who already has `--clusters`
//!   clusters (default 100): p50/p99 of each over `--creates` runs.
//!
//! Usage: `bench-billing [--webhooks N] [--clusters N] [--creates N]`; prints
//! one JSON line. Needs `DATABASE_URL`.

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use anyhow::Context;
use axum::{
    Router,
    body::Body,
    extract::State,
    http::{HeaderMap, Request, StatusCode},
    routing::post,
};
use base64::Engine;
use serde_json::json;
use shared::{
    billing::entitlements::{self, Amounts},
    config::Settings,
    http::{AppState, Identity, with_common_layers},
};
use tower::ServiceExt;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let webhooks = bench::arg(&args, "--webhooks", 10_000)?;
    let clusters = bench::arg(&args, "--clusters", 100)?;
    let creates = bench::arg(&args, "--creates", 200)?;
    let delivery = deliver(webhooks).await?;
    let check = entitlement_check(clusters, creates).await?;
    println!(
        "{}",
        json!({ "bench": "billing", "delivery": delivery, "entitlement_check": check })
    );
    Ok(())
}

async fn deliver(webhooks: i64) -> anyhow::Result<serde_json::Value> {
    let db = tests::database::TestDb::new().await;
    let pool = &db.pool;
    let user = shared::accounts::users::ensure_development_user(pool).await?;
    let received: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let app = Router::new()
        .route(
            "/hook",
            post(
                |State(seen): State<Arc<Mutex<HashMap<String, u32>>>>, headers: HeaderMap| async move {
                    let id = headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or_default();
                    *seen.lock().unwrap().entry(id.to_string()).or_default() += 1;
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(received.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let settings = Arc::new(Settings::from_source(&HashMap::from([
        ("KUBEBYON_SETTINGS_KEY", KEY),
        ("KUBEBYON_ALLOW_PRIVATE_OUTBOUND", "true"),
    ]))?);
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([42u8; 32])
    );
    let sealed = settings.secret_box().context("key")?.seal(
        shared::notifications::settings::column::WEBHOOK_SECRET,
        &secret,
    );
    sqlx::query("UPDATE system_settings SET outbound_webhook_url = $1, outbound_webhook_secret_encrypted = $2")
        .bind(&url)
        .bind(sealed)
        .execute(pool)
        .await?;
    sqlx::query("INSERT INTO notification_settings (user_id, email_enabled, webhook_enabled) VALUES ($1, false, true)")
        .bind(user)
        .execute(pool)
        .await?;
    sqlx::query(
        "INSERT INTO notification_outbox (user_id, kind, payload)
         SELECT $1, 'order_paid', jsonb_build_object('order_id', n, 'plan', 'Pro') FROM generate_series(1, $2) AS n",
    )
    .bind(user)
    .bind(webhooks)
    .execute(pool)
    .await?;
    let ctx = queues::runtime::ScheduleContext::new(pool.clone(), settings, None, None);
    let started = Instant::now();
    let mut runs = 0;
    let mut delivered = 0;
    while delivered < webhooks as u64 {
        delivered += notify::run(&ctx).await?.delivered;
        runs += 1;
        anyhow::ensure!(runs < 100, "deliveries stalled at {delivered}");
    }
    let seconds = started.elapsed().as_secs_f64();
    let seen = received.lock().unwrap();
    let twice = seen.values().filter(|n| **n > 1).count();
    anyhow::ensure!(
        seen.len() as i64 == webhooks && twice == 0,
        "{} ids, {twice} twice",
        seen.len()
    );
    Ok(json!({
        "webhooks": webhooks,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "per_second": (webhooks as f64 / seconds).round(),
        "runs": runs,
        "received_once": seen.len(),
    }))
}

async fn entitlement_check(clusters: i64, creates: i64) -> anyhow::Result<serde_json::Value> {
    let db = tests::database::TestDb::new().await;
    let pool = &db.pool;
    let user = shared::accounts::users::ensure_development_user(pool).await?;
    let plan: (uuid::Uuid,) = sqlx::query_as(
        "INSERT INTO plans (name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib,
                            max_hostnames, price_minor_units, currency)
         VALUES ('Big', 100000, 100000, 100000000, 100000000, 100000, 0, 'usd') RETURNING id",
    )
    .fetch_one(pool)
    .await?;
    sqlx::query("UPDATE billing_settings SET default_plan_id = $1")
        .bind(plan.0)
        .execute(pool)
        .await?;
    sqlx::query(
        "INSERT INTO clusters (owner_user_id, name, vcluster_name, namespace, kubernetes_version,
                               workload_cpu_limit_milli_cores, workload_memory_limit_mib,
                               control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
                               public_access_mode, status)
         SELECT $1, 'c' || n, 'c' || n, 'kb-c' || n, '1.33', 1000, 1024, 500, 1024, 'nodeport', 'ready'
         FROM generate_series(1, $2) AS n",
    )
    .bind(user)
    .bind(clusters)
    .execute(pool)
    .await?;
    let one = Amounts {
        clusters: 1,
        cpu_milli_cores: 100,
        memory_mib: 128,
        ..Amounts::default()
    };
    let organization = shared::organizations::personal(pool, user)
        .await?
        .context("the user's personal organization")?;
    let mut check = Vec::new();
    for _ in 0..creates {
        let started = Instant::now();
        let mut tx = pool.begin().await?;
        let entitlement = entitlements::lock(&mut tx, organization)
            .await?
            .context("organization")?;
        anyhow::ensure!(entitlement.exceeded(&one, "u").is_none());
        tx.rollback().await?;
        check.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let state = AppState {
        pool: pool.clone(),
        publisher: Arc::new(bench::Dropping),
        settings: Arc::new(Settings::from_source(&HashMap::<&str, &str>::new())?),
        identity: Identity::Development(user),
        host: None,
    };
    let router = with_common_layers(api_clusters::router(), state);
    let mut create = Vec::new();
    for i in 0..creates {
        let body = json!({
            "name": format!("bench-{i}"), "workload_cpu_limit_milli_cores": 100,
            "workload_memory_limit_mib": 128, "public_access_mode": "nodeport",
        });
        let request = Request::post("/api/console/clusters")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))?;
        let started = Instant::now();
        let response = router.clone().oneshot(request).await?;
        create.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(
            response.status() == StatusCode::ACCEPTED,
            "{}",
            response.status()
        );
    }
    check.sort_by(f64::total_cmp);
    create.sort_by(f64::total_cmp);
    Ok(json!({
        "clusters_owned": clusters,
        "runs": creates,
        "check_ms": { "p50": bench::percentile(&check, 0.5), "p99": bench::percentile(&check, 0.99) },
        "create_ms": { "p50": bench::percentile(&create, 0.5), "p99": bench::percentile(&create, 0.99) },
    }))
}
