//! The HTTP functions while PostgreSQL cannot be reached: every request gets
//! 503 `database_unavailable` with `Retry-After` within a bounded time (the
//! pool's acquire timeout), never a 500 or a hang, nothing half-written; and
//! once the database is back they answer again without a restart.

use std::time::{Duration, Instant};

use axum::http::{StatusCode, header};
use serde_json::json;
use shared::{
    db::{self, Workload},
    http::AppState,
};
use tests::proxy::TcpProxy;

use crate::harness::TestApp;

/// `url` with its `host:port` replaced by `addr`.
fn through(url: &str, addr: std::net::SocketAddr) -> String {
    let (scheme_and_user, rest) = url.split_once('@').expect("a URL with a user");
    let (_, path) = rest.split_once('/').expect("a URL with a database");
    format!("{scheme_and_user}@{addr}/{path}")
}

fn upstream(url: &str) -> std::net::SocketAddr {
    let rest = url.split_once('@').unwrap().1;
    let host_port = rest.split_once('/').unwrap().0;
    let host_port = if host_port.contains(':') {
        host_port.to_string()
    } else {
        format!("{host_port}:5432")
    };
    std::net::ToSocketAddrs::to_socket_addrs(&host_port)
        .unwrap()
        .next()
        .unwrap()
}

#[tokio::test]
async fn while_the_database_is_unreachable_requests_get_503_and_then_recover() {
    let base = TestApp::builder("outage").build().await;
    let proxy = TcpProxy::start(upstream(&base.db.url)).await;
    let url = secrecy::SecretString::from(through(&base.db.url, proxy.addr));
    let state = AppState {
        pool: db::lazy_pool(&url, 4, Workload::Requests).unwrap(),
        ..base.state.clone()
    };
    let client = base.client_serving(state);
    let create = |name: &str| {
        json!({ "name": name, "workload_cpu_limit_milli_cores": 2000, "workload_memory_limit_mib": 4096,
                "public_access_mode": "nodeport" })
    };

    let answer = client.send("GET", "/api/console/clusters", None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);

    // Down: open connections cut, new ones refused.
    proxy.down();
    for (method, path, body) in [
        ("GET", "/api/console/clusters", None),
        ("POST", "/api/console/clusters", Some(create("during"))),
        ("GET", "/api/console/clusters", None),
    ] {
        let started = Instant::now();
        let answer = client.send(method, path, body).await;
        assert_eq!(
            (answer.status, answer.body["code"].as_str()),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("database_unavailable")
            ),
            "{method} {path}: {}",
            answer.body
        );
        assert_eq!(
            answer
                .headers
                .get(header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap()),
            Some("5")
        );
        assert!(
            answer.body["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("/database_unavailable")),
            "problem+json: {}",
            answer.body
        );
        // Bounded by the pool's acquire timeout (10 s), well inside the request timeout.
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{method} {path} answered after {:?}",
            started.elapsed()
        );
    }

    // Back: the same pool and router answer again; nothing of the refused create was kept.
    proxy.up();
    let answer = client.send("GET", "/api/console/clusters", None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let during: i64 = sqlx::query_scalar("SELECT count(*) FROM clusters WHERE name = 'during'")
        .fetch_one(&base.db.pool)
        .await
        .unwrap();
    assert_eq!(during, 0);
    let answer = client
        .send("POST", "/api/console/clusters", Some(create("after")))
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
}
