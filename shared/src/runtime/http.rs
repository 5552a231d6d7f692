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
        // Each invocation's spans are sent before the instance may be frozen.
        let service = tower::service_fn(move |request: lambda_http::Request| {
            let router = router.clone();
            async move {
                let response = tower::ServiceExt::oneshot(router, request).await;
                crate::telemetry::trace::flush().await;
                response
            }
        });
        return lambda_http::run(service)
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
