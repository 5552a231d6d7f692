use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;

/// Serves the router: through `lambda_http` under Lambda (API Gateway HTTP API,
/// payload v2), otherwise on `0.0.0.0:port` with graceful shutdown.
pub async fn serve_http(router: Router, port: u16) -> anyhow::Result<()> {
    serve_http_on(router, std::net::Ipv4Addr::UNSPECIFIED.into(), port).await
}

/// [`serve_http`] on one address only (loopback, for `local --development`).
pub async fn serve_http_on(router: Router, ip: std::net::IpAddr, port: u16) -> anyhow::Result<()> {
    if super::under_lambda() {
        return lambda_http::run(router)
            .await
            .map_err(|err| anyhow::anyhow!("lambda runtime: {err}"));
    }
    let listener = TcpListener::bind((ip, port))
        .await
        .with_context(|| format!("cannot listen on port {port} (PORT)"))?;
    tracing::info!(addr = %listener.local_addr()?, "listening");
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(super::shutdown_signal())
    .await
    .context("http server")
}
