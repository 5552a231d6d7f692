//! Support for the end-to-end tests: a fresh database per test, an isolated
//! RabbitMQ topology per test, a TCP proxy that can take the broker away, a
//! loopback Lambda Runtime API, handlers whose behaviour the test chooses, and
//! a real SMTP sink, a loopback OAuth provider, a Route53-compatible server,
//! and a loopback Stripe API.

pub mod broker;
pub mod database;
pub mod dnsserver;
pub mod edgeproxy;
pub mod handlers;
pub mod lambda_runtime_api;
pub mod logs;
pub mod machine;
pub mod moto;
pub mod oauth;
pub mod pgtls;
pub mod podman;
pub mod proxy;
pub mod smtp;
pub mod stripe;

use std::path::PathBuf;

/// A binary of the workspace, built by `cargo build --workspace` beforehand.
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace binaries first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// A port on the loopback interface that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `seconds`.
pub async fn eventually<T, F, Fut>(seconds: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Sends SIGINT to a child process, as Ctrl-C would.
pub fn interrupt(pid: u32) {
    use nix::{sys::signal, unistd::Pid};
    signal::kill(Pid::from_raw(pid as i32), signal::Signal::SIGINT).expect("signal the process");
}

/// A write-scoped API key of the development user (an administrator),
/// valid for a day: what the tests that run deployed functions, which
/// authenticate every caller, present as `Authorization: Bearer`.
pub async fn development_api_key(pool: &sqlx::PgPool, name: &str) -> String {
    let user_id = shared::accounts::users::ensure_development_user(pool)
        .await
        .expect("development user");
    api_key(pool, user_id, name).await
}

/// A write-scoped API key of `user_id`, valid for a day.
pub async fn api_key(pool: &sqlx::PgPool, user_id: uuid::Uuid, name: &str) -> String {
    let (key, prefix) = shared::accounts::auth::new_api_key();
    shared::accounts::insert_api_key(
        pool,
        &shared::accounts::NewApiKey {
            user_id,
            organization: None,
            name,
            prefix: &prefix,
            token_hash: &shared::accounts::auth::hash_secret(&key),
            scope: shared::accounts::KeyScope::Write,
            lifetime: chrono::TimeDelta::days(1),
        },
    )
    .await
    .expect("API key");
    key
}
