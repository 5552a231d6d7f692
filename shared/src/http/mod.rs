//! What every HTTP function shares: its state and the caller identity
//! ([`caller`]), `Idempotency-Key` ([`idempotency`]), request spans, and the
//! health routes.

pub mod caller;
pub mod idempotency;
pub mod operations;
pub mod organization;
pub mod owned;
pub mod plan;

pub use caller::{AdminCaller, AppState, Caller, Identity, KeyOrganization};
pub use organization::InOrganization;
pub use owned::OwnedCluster;

use crate::error::ApiError;
use axum::{
    Router,
    extract::{FromRequestParts, MatchedPath, Request, State},
    http::{Method, StatusCode, request::Parts},
    middleware::Next,
    response::{IntoResponse, Response},
    routing::get,
};

/// The problem codes the shared modules answer with, which any function
/// serving them may send: with those each function names
/// (`openapi::answering`), the OpenAPI document's `ProblemCode`.
pub fn problem_codes() -> impl Iterator<Item = &'static str> {
    crate::app::capabilities::problem_codes().chain(idempotency::PROBLEM_CODES.iter().copied())
}

/// Wraps a function's routes with one span per request, and adds the health
/// routes outside it: probes come every few seconds and would only fill the
/// logs (and cost a span each). Around everything but `/livez`: an
/// `x-request-id` (the caller's, or a new UUID) echoed on the answer, the
/// security headers, a bound on requests in flight (past it, 503 at once
/// rather than a queue), a time limit, and a handler's panic answered 500.
/// API answers are never cached (they carry sessions' data, kubeconfigs,
/// one-time secrets) unless a handler says otherwise.
///
/// `/livez`, the liveness probe's, sits outside all of it and touches no
/// database: a process whose requests fill every slot, or whose database is
/// slow, is alive, and restarting it would only make the outage worse.
/// `/healthz` (the same answer, inside the limits) stays for load balancers
/// that shed with the process; `/readyz` checks the database.
pub fn with_common_layers(routes: Router<AppState>, state: AppState) -> Router {
    use axum::http::{HeaderName, HeaderValue, header};
    use tower::ServiceBuilder;
    use tower_http::{
        request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
        set_header::SetResponseHeaderLayer,
    };
    let header = |name: HeaderName, value: &'static str| {
        SetResponseHeaderLayer::if_not_present(name, HeaderValue::from_static(value))
    };
    let hsts = state
        .settings
        .public_base_url
        .starts_with("https://")
        .then(|| {
            header(
                header::STRICT_TRANSPORT_SECURITY,
                "max-age=31536000; includeSubDomains",
            )
        });
    let around = ServiceBuilder::new()
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(header(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(header(header::X_FRAME_OPTIONS, "DENY"))
        .layer(header(
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ))
        .layer(header(header::REFERRER_POLICY, "no-referrer"))
        .layer(header(header::CACHE_CONTROL, "no-store"))
        .option_layer(hsts)
        .layer(axum::error_handling::HandleErrorLayer::new(
            |err: tower::BoxError| async move {
                if err.is::<tower::load_shed::error::Overloaded>() {
                    ApiError::Overloaded
                } else if err.is::<tower::timeout::error::Elapsed>() {
                    ApiError::TimedOut
                } else {
                    ApiError::Internal(anyhow::anyhow!(err))
                }
            },
        ))
        .load_shed()
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
            state.settings.max_concurrent_requests,
        ))
        .timeout(state.settings.request_timeout)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked));
    routes
        .fallback(|| async { ApiError::NotFound { what: "route" } })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            idempotency::guard,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::extract::MAX_BODY_BYTES,
        ))
        .layer(axum::middleware::from_fn(count_request))
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(request_finished)
                .on_body_chunk(())
                .on_eos(())
                .on_failure(()),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readiness))
        .layer(around)
        .route("/livez", get(|| async { "ok" }))
        .with_state(state)
}

/// A handler that panicked: logged, answered 500 `internal_error`, and the
/// process serves on (release builds unwind: docs/decisions/2026-12-05-panics-unwind.md).
fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<&str>()
        .map(|m| m.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    ApiError::Internal(anyhow::anyhow!("a handler panicked: {message}")).into_response()
}

async fn readiness(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    crate::db::ping(&state.pool).await.map_err(|err| {
        tracing::warn!(error = %err, "readiness check failed");
        ApiError::Unavailable
    })?;
    Ok("ready")
}

/// One `request` span per request: method, matched route, request id and
/// (once answered) status.
fn request_span(request: &Request) -> tracing::Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    // The caller's id when it sent one: bounded before it is logged.
    let request_id: String = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .chars()
        .take(64)
        .collect();
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("{} {route}", request.method()),
        otel.kind = "server",
        method = %request.method(),
        route,
        request_id,
        status = tracing::field::Empty,
    );
    // A caller's W3C trace context (a gateway's, a client's) is continued.
    if let Some(parent) = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
    {
        crate::telemetry::trace::continue_trace(&span, parent);
    }
    span
}

/// A request method as a metrics label: the standard ones by name, any
/// other (a client may send any token) as `other`, so no caller can grow
/// the number of series.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Counts the answer in the process's metrics, by route template.
async fn count_request(request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let route = request.extensions().get::<MatchedPath>().cloned();
    let method = method_label(request.method());
    let response = next.run(request).await;
    crate::telemetry::metrics::metrics().http_request(
        route.as_ref().map_or("unmatched", MatchedPath::as_str),
        method,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// A server error is logged at `warn`, every other answer at `debug`.
fn request_finished(response: &Response, latency: std::time::Duration, span: &tracing::Span) {
    let status = response.status();
    span.record("status", status.as_u16());
    let elapsed_ms = latency.as_secs_f64() * 1000.0;
    if status.is_server_error() {
        tracing::warn!(elapsed_ms, "request finished");
    } else {
        tracing::debug!(elapsed_ms, "request finished");
    }
}

/// The address a request came from. Behind API Gateway, the source address
/// it saw (its request context; headers are the client's to forge). Else,
/// with `trusted_hops` proxies in front (`KUBEBYON_TRUSTED_PROXY_HOPS`), the
/// entry of `X-Forwarded-For` the outermost trusted proxy appended; with none,
/// the peer address, and `X-Forwarded-For` is ignored. A header with fewer
/// entries than trusted hops did not come through them: the peer address.
pub fn client_ip(
    headers: &axum::http::HeaderMap,
    extensions: &axum::http::Extensions,
    trusted_hops: u8,
) -> Option<String> {
    if let Some(lambda_http::request::RequestContext::ApiGatewayV2(context)) =
        extensions.get::<lambda_http::request::RequestContext>()
    {
        return context.http.source_ip.clone();
    }
    let peer = || {
        extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip().to_string())
    };
    if trusted_hops == 0 {
        return peer();
    }
    // Every proxy appends; the same header may come as several lines.
    let entries: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let hops = usize::from(trusted_hops);
    if entries.len() < hops {
        return peer();
    }
    entries[entries.len() - hops]
        .parse::<std::net::IpAddr>()
        .ok()
        .map(|ip| ip.to_string())
        .or_else(peer)
}

/// Where a request came from, for rate limits and records.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub ip: Option<String>,
    pub user_agent: Option<String>,
}

impl FromRequestParts<AppState> for Origin {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self {
            ip: client_ip(
                &parts.headers,
                &parts.extensions,
                state.settings.trusted_proxy_hops,
            ),
            user_agent: parts
                .headers
                .get(axum::http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        })
    }
}

/// 202 Accepted with a JSON body.
pub fn accepted<T: serde::Serialize>(body: T) -> Response {
    (StatusCode::ACCEPTED, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_that_is_no_address_falls_back_to_the_peer() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("x-forwarded-for", "not an address".parse().unwrap());
        assert_eq!(client_ip(&headers, &axum::http::Extensions::new(), 1), None);
    }
}

/// Whether a `Host` (or an origin's host) names this machine's loopback.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().map(|h| format!("[{h}]")),
        None => host.split(':').next().map(str::to_string),
    };
    matches!(
        name.as_deref().map(str::to_ascii_lowercase).as_deref(),
        Some("localhost" | "127.0.0.1" | "[::1]")
    )
}

/// What `local --development` puts in front of its routes, where every
/// request acts as one user: only requests addressed to a loopback name are
/// answered (a DNS-rebinding page reaches it under its own host name), and a
/// write that a page of another origin sends (`Origin` other than its own
/// scheme, host and port, or `Sec-Fetch-Site: cross-site`) is refused,
/// bodiless or not.
pub async fn loopback_only(request: Request, next: Next) -> Response {
    if let Err(refused) = loopback_request(&request) {
        return refused.into_response();
    }
    next.run(request).await
}

fn loopback_request(request: &Request) -> Result<(), ApiError> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    if !is_loopback_host(header("host")) {
        return Err(ApiError::Forbidden(
            "the development identity answers requests to localhost only".into(),
        ));
    }
    if !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        let cross_site = matches!(header("sec-fetch-site"), "cross-site" | "same-site");
        // A page's origin is its scheme, host and port: a page of another
        // local server (`http://localhost:3000`) is another site too, even
        // when the browser sends no `Sec-Fetch-Site`.
        let origin = header("origin");
        let own_origin = origin.split_once("://").is_some_and(|(scheme, host)| {
            matches!(scheme, "http" | "https") && host.eq_ignore_ascii_case(header("host"))
        });
        let foreign_origin = !origin.is_empty() && !own_origin;
        if cross_site || foreign_origin {
            return Err(ApiError::Forbidden(
                "a page of another site cannot write through the development identity".into(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod loopback_tests {
    use super::{client_ip, is_loopback_host};

    #[test]
    fn the_client_address_comes_from_trusted_hops_only() {
        let mut headers = axum::http::HeaderMap::new();
        headers.append("x-forwarded-for", "6.6.6.6, 198.51.100.9".parse().unwrap());
        headers.append("x-forwarded-for", "203.0.113.5".parse().unwrap());
        let mut extensions = axum::http::Extensions::new();
        extensions.insert(axum::extract::ConnectInfo(std::net::SocketAddr::from((
            [192, 0, 2, 1],
            40000,
        ))));
        let ip = |hops| client_ip(&headers, &extensions, hops);
        assert_eq!(ip(0).as_deref(), Some("192.0.2.1"), "no proxy: the peer");
        assert_eq!(ip(1).as_deref(), Some("203.0.113.5"));
        assert_eq!(ip(2).as_deref(), Some("198.51.100.9"));
        assert_eq!(
            ip(4).as_deref(),
            Some("192.0.2.1"),
            "fewer entries than hops"
        );
        // Under API Gateway its request context decides, whatever the headers say.
        let mut context = aws_lambda_events::apigw::ApiGatewayV2httpRequestContext::default();
        context.http.source_ip = Some("198.51.100.200".into());
        extensions.insert(lambda_http::request::RequestContext::ApiGatewayV2(context));
        for hops in [0, 1] {
            assert_eq!(
                client_ip(&headers, &extensions, hops).as_deref(),
                Some("198.51.100.200")
            );
        }
    }

    #[test]
    fn only_loopback_names_pass() {
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:8080",
            "LOCALHOST",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "[::2]:80",
            "0.0.0.0:8080",
            "10.0.0.1",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
