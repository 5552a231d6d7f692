//! Liveness does not follow the database or the load (docs/runbooks/deploy.md,
//! "Probes"): a kubelet that restarts pods whose PostgreSQL is slow, or whose
//! requests queue, turns a database failover or a burst into a restart loop.
//! With PostgreSQL paused for 20 s (a proxy that stops carrying bytes, as a
//! server stopped by SIGSTOP does) and 256 requests held in flight (the
//! default concurrency limit, full), `/livez` of an HTTP function and of a
//! job process's metrics port answers every probe within the kubelet's 1 s,
//! while the probes they replace (`/healthz` behind the concurrency limit,
//! `/metrics` reading the job backlog) do not. And a handler's panic is one
//! request's 500, not the process's end.

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::http::StatusCode;
use shared::{
    config::Settings,
    http::{AppState, Identity, with_common_layers},
    jobs::{JobMessage, JobPublisher, PublishError},
};
use tests::proxy::TcpProxy;

/// How long PostgreSQL stays paused: two periods of the chart's liveness
/// probe.
const PAUSE: Duration = Duration::from_secs(20);
/// The kubelet's probe timeout (`timeoutSeconds: 1`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The requests held: the default `KUBEBYON_MAX_CONCURRENT_REQUESTS`.
const HELD: usize = 256;

struct NoJobs;

#[async_trait::async_trait]
impl JobPublisher for NoJobs {
    async fn publish(&self, _: &[JobMessage]) -> Result<(), PublishError> {
        Ok(())
    }
}

/// The status of a probe the kubelet's way: `None` when no answer came in
/// time.
async fn probe(http: &reqwest::Client, url: &str) -> Option<StatusCode> {
    let answer = http.get(url).timeout(PROBE_TIMEOUT).send().await.ok()?;
    Some(StatusCode::from_u16(answer.status().as_u16()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn liveness_answers_while_postgres_is_paused_and_every_request_slot_is_taken() {
    let db = tests::database::TestDb::new().await;
    let user = shared::accounts::users::ensure_development_user(&db.pool)
        .await
        .unwrap();
    let upstream = db
        .url
        .split_once('@')
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(host, _)| host.to_string())
        .unwrap();
    let proxy = TcpProxy::start(
        tokio::net::lookup_host(&upstream)
            .await
            .unwrap()
            .next()
            .unwrap(),
    )
    .await;
    let proxied = db.url.replacen(&upstream, &proxy.addr.to_string(), 1);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(60))
        .connect(&proxied)
        .await
        .unwrap();
    let metrics_port = tests::free_port();
    let port = metrics_port.to_string();
    // The held requests wait for the whole pause: a time limit above it.
    let settings = Arc::new(
        Settings::from_source(&HashMap::from([
            ("METRICS_PORT", port.as_str()),
            ("KUBEBYON_REQUEST_TIMEOUT_MS", "90000"),
        ]))
        .unwrap(),
    );
    // An HTTP function, and a job process's metrics port, on the proxied
    // database.
    let state = AppState {
        pool: pool.clone(),
        publisher: Arc::new(NoJobs),
        settings: settings.clone(),
        identity: Identity::Development(user),
        host: None,
    };
    let app = with_common_layers(api_clusters::router(), state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    queues::runtime::serve_metrics(
        &settings,
        pool.clone(),
        std::net::Ipv4Addr::LOCALHOST.into(),
    )
    .await
    .unwrap();
    let metrics = format!("http://127.0.0.1:{metrics_port}");
    let http = reqwest::Client::new();
    for url in [
        format!("{base}/livez"),
        format!("{base}/healthz"),
        format!("{metrics}/livez"),
    ] {
        tests::eventually(10, "the servers to answer", || {
            let (http, url) = (http.clone(), url.clone());
            async move { (probe(&http, &url).await == Some(StatusCode::OK)).then_some(()) }
        })
        .await;
    }
    let answer = http
        .get(format!("{base}/api/console/clusters"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);

    proxy.pause();
    let paused = tokio::time::Instant::now();
    let held: Vec<_> = (0..HELD)
        .map(|_| {
            let http = http.clone();
            let url = format!("{base}/api/console/clusters");
            tokio::spawn(async move {
                http.get(url)
                    .timeout(Duration::from_secs(90))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    // Every slot taken: the old liveness path is shed.
    tests::eventually(15, "every request slot to be taken", || {
        let (http, url) = (http.clone(), format!("{base}/healthz"));
        async move {
            (probe(&http, &url).await == Some(StatusCode::SERVICE_UNAVAILABLE)).then_some(())
        }
    })
    .await;
    assert_ne!(
        probe(&http, &format!("{metrics}/metrics")).await,
        Some(StatusCode::OK),
        "the job backlog is read from the paused database"
    );
    // The kubelet probes all along the pause: every one answered at once.
    let mut probes = 0;
    while paused.elapsed() < PAUSE {
        for url in [format!("{base}/livez"), format!("{metrics}/livez")] {
            assert_eq!(
                probe(&http, &url).await,
                Some(StatusCode::OK),
                "{url} after {:?} of the pause",
                paused.elapsed()
            );
            probes += 1;
        }
        assert_ne!(
            probe(&http, &format!("{base}/readyz")).await,
            Some(StatusCode::OK),
            "not ready while the database is paused"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(probes >= 18, "{probes} probes");
    proxy.resume();

    // The held requests are answered once the database is back.
    for request in held {
        assert_eq!(request.await.unwrap().unwrap(), 200);
    }
    assert_eq!(
        probe(&http, &format!("{base}/readyz")).await,
        Some(StatusCode::OK)
    );
    eprintln!(
        "{probes} liveness probes during a {PAUSE:?} pause with {HELD} requests held: all 200 within {PROBE_TIMEOUT:?}"
    );
}

#[tokio::test]
async fn a_handler_that_panics_answers_500_and_the_process_serves_on() {
    let db = tests::database::TestDb::new().await;
    let user = shared::accounts::users::ensure_development_user(&db.pool)
        .await
        .unwrap();
    let state = AppState {
        pool: db.pool.clone(),
        publisher: Arc::new(NoJobs),
        settings: Arc::new(Settings::from_source(&HashMap::<&str, &str>::new()).unwrap()),
        identity: Identity::Development(user),
        host: None,
    };
    let routes = axum::Router::new()
        .route(
            "/api/console/boom",
            axum::routing::get(|| async {
                panic!("a bug in a handler");
                #[allow(unreachable_code)]
                ""
            }),
        )
        .merge(api_clusters::router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, with_common_layers(routes, state)).await });
    let http = reqwest::Client::new();
    for _ in 0..3 {
        let answer = http
            .get(format!("{base}/api/console/boom"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 500);
        assert!(answer.headers().contains_key("x-request-id"));
        let problem: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(problem["code"], "internal_error", "{problem}");
        assert!(
            !problem.to_string().contains("a bug in a handler"),
            "the panic's message stays in the logs: {problem}"
        );
        let answer = http
            .get(format!("{base}/api/console/clusters"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 200);
    } // Release builds unwind too: an abort would end every request in flight.
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml")).unwrap();
    assert!(
        !manifest.contains("panic = \"abort\""),
        "a profile aborts on panic"
    );
}
