//! `console`: the web console's built assets (its TypeScript source is in
//! `app/`; docs/console.md). Hashed files under `/assets/` are cached for a
//! year; `index.html`, served for every client route the console answers,
//! is revalidated on each load, so a new release is picked up at once. Every
//! answer carries a Content-Security-Policy that allows scripts, styles and
//! API calls from the console's own origin only (no inline script).
//!
//! The assets are embedded at build time (build.rs); a binary built before
//! `npm run build` serves a page that says how to build them.

use axum::{
    Router,
    body::Body,
    extract::Request,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};

/// One built file, with its precompressed twins.
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub etag: &'static str,
    pub body: &'static [u8],
    pub gzip: Option<&'static [u8]>,
    pub brotli: Option<&'static [u8]>,
}

include!(concat!(env!("OUT_DIR"), "/assets.rs"));

mod pages;
pub use pages::CLIENT_ROUTES;

/// The console's Content-Security-Policy: its own origin only; images may
/// also be `data:` URLs (the chart library's); nothing may frame it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The console's routes over the embedded assets.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    routes(ASSETS)
}

/// The console's routes over `assets` (tests pass their own).
pub fn routes<S: Clone + Send + Sync + 'static>(assets: &'static [Asset]) -> Router<S> {
    let index = move |request: Request| async move { serve_index(assets, request.headers()) };
    let mut router = Router::new();
    for route in CLIENT_ROUTES {
        router = router.route(route, get(index));
    }
    // Top-level files (favicon.svg) and the hashed bundle.
    for asset in assets.iter().filter(|a| a.path != "/index.html") {
        router = router.route(
            asset.path,
            get(move |request: Request| async move { serve(asset, request.headers()) }),
        );
    }
    router.route(
        "/assets/{*rest}",
        get(|| async { with_policy(StatusCode::NOT_FOUND.into_response()) }),
    )
}

fn serve_index(assets: &'static [Asset], headers: &HeaderMap) -> Response {
    match assets.iter().find(|a| a.path == "/index.html") {
        Some(index) => serve(index, headers),
        None => with_policy(
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [
                    (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                    (header::CACHE_CONTROL, "no-store"),
                ],
                NOT_BUILT,
            )
                .into_response(),
        ),
    }
}

const NOT_BUILT: &str = "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\"><title>KubeBYON</title><h1>The console is not built into this binary</h1><p>Run <code>npm ci &amp;&amp; npm run build</code> in <code>functions/console/app</code>, then build again (<code>./infra/local/run.sh</code> does both). The API is at <code>/api</code>.</p></html>";

fn serve(asset: &'static Asset, headers: &HeaderMap) -> Response {
    let cache = if asset.path.starts_with("/assets/") {
        // Content-hashed names: a changed file has a new name.
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .any(|tag| tag.trim() == asset.etag || tag.trim() == "*")
        });
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let (body, encoding) = match (accepts(headers, "br"), accepts(headers, "gzip")) {
            (true, _) if asset.brotli.is_some() => (asset.brotli.unwrap(), Some("br")),
            (_, true) if asset.gzip.is_some() => (asset.gzip.unwrap(), Some("gzip")),
            _ => (asset.body, None),
        };
        let mut response = Response::new(Body::from(body));
        let h = response.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        if let Some(encoding) = encoding {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(encoding));
        }
        response
    };
    let h = response.headers_mut();
    h.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if asset.gzip.is_some() || asset.brotli.is_some() {
        h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    with_policy(response)
}

fn with_policy(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    response
}

/// Whether `Accept-Encoding` allows `coding` with q > 0: its own entry
/// decides, else `*`'s.
fn accepts(headers: &HeaderMap, coding: &str) -> bool {
    let mut wildcard = None;
    for item in headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if name.eq_ignore_ascii_case(coding) {
            return q > 0.0;
        }
        if name == "*" {
            wildcard = Some(q > 0.0);
        }
    }
    wildcard.unwrap_or(false)
}

#[cfg(test)]
mod tests;
