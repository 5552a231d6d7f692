//! The floor for the HTTP benchmarks: the smallest axum server answering
//! `GET /healthz` with "ok" on `PORT`, on the same runtime and axum features
//! as the functions, with none of their layers.

use axum::{Router, routing::get};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let port: u16 = std::env::var("PORT")
        .unwrap_or_else(|_| "8080".into())
        .parse()?;
    let app = Router::new().route("/healthz", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
