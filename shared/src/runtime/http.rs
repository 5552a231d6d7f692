use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;

/// Serves the router: through `lambda_http` under Lambda (API Gateway HTTP API,
/// payload v2), otherwise on `0.0.0.0:port` with graceful shutdown.
pub async fn serve_http(router: Router, port: u16) -> anyhow::Result<()> {
    if super::under_lambda() {
        return lambda_http::run(router)
            .await
            .map_err(|err| anyhow::anyhow!("lambda runtime: {err}"));
    }
    let listener = TcpListener::bind(("0.0.0.0", port))
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
