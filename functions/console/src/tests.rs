use axum::{
    Router,
    body::Body,
    http::{Method, Request, StatusCode, header},
};
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::{Asset, CONTENT_SECURITY_POLICY, routes};

static SITE: &[Asset] = &[
    Asset {
        path: "/index.html",
        content_type: "text/html; charset=utf-8",
        etag: "\"index-1\"",
        body: b"<!doctype html><script type=module src=/assets/app-1.js></script>",
        gzip: Some(b"gz:index"),
        brotli: Some(b"br:index"),
    },
    Asset {
        path: "/assets/app-1.js",
        content_type: "text/javascript; charset=utf-8",
        etag: "\"app-1\"",
        body: b"console.log(1)",
        gzip: Some(b"gz:app"),
        brotli: Some(b"br:app"),
    },
    Asset {
        path: "/favicon.svg",
        content_type: "image/svg+xml",
        etag: "\"icon\"",
        body: b"<svg/>",
        gzip: None,
        brotli: None,
    },
];

async fn get(
    router: &Router,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body.to_vec())
}

fn header(headers: &axum::http::HeaderMap, name: header::HeaderName) -> &str {
    headers
        .get(&name)
        .map_or("", |v| v.to_str().unwrap_or_default())
}

#[tokio::test]
async fn client_routes_get_index_revalidated_each_load() {
    let router = routes::<()>(SITE);
    for path in [
        "/",
        "/sign-in",
        "/clusters",
        "/clusters/0b6a2f0e-0000-4000-8000-000000000000",
        "/clusters/x/nodes/y",
        "/admin/jobs",
        "/account",
    ] {
        let (status, headers, body) = get(&router, Method::GET, path, &[]).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(body.starts_with(b"<!doctype html>"), "{path}");
        assert_eq!(
            header(&headers, header::CACHE_CONTROL),
            "no-cache",
            "{path}"
        );
        assert_eq!(header(&headers, header::ETAG), "\"index-1\"");
        assert_eq!(
            header(&headers, header::CONTENT_SECURITY_POLICY),
            CONTENT_SECURITY_POLICY
        );
    }
    // Revalidation: the same ETag answers 304 with no body.
    let (status, headers, body) = get(
        &router,
        Method::GET,
        "/clusters",
        &[("if-none-match", "\"other\", \"index-1\"")],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_eq!(header(&headers, header::ETAG), "\"index-1\"");
    let (status, _, _) = get(
        &router,
        Method::GET,
        "/clusters",
        &[("if-none-match", "\"index-0\"")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "a stale ETag gets the new page");
}

#[tokio::test]
async fn hashed_assets_are_immutable_and_compressed_as_the_client_accepts() {
    let router = routes::<()>(SITE);
    let cases: &[(&str, &[u8], &str)] = &[
        ("br, gzip", b"br:app", "br"),
        ("gzip, deflate", b"gz:app", "gzip"),
        ("br;q=0, gzip", b"gz:app", "gzip"),
        ("*", b"br:app", "br"),
        ("br;q=0, *", b"gz:app", "gzip"),
        ("identity", b"console.log(1)", ""),
        ("gzip;q=0", b"console.log(1)", ""),
    ];
    for (accept, body, encoding) in cases {
        let (status, headers, got) = get(
            &router,
            Method::GET,
            "/assets/app-1.js",
            &[("accept-encoding", accept)],
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(&got, body, "Accept-Encoding: {accept}");
        assert_eq!(
            header(&headers, header::CONTENT_ENCODING),
            *encoding,
            "{accept}"
        );
        assert_eq!(header(&headers, header::VARY), "accept-encoding");
        assert_eq!(
            header(&headers, header::CACHE_CONTROL),
            "public, max-age=31536000, immutable"
        );
        assert_eq!(
            header(&headers, header::CONTENT_TYPE),
            "text/javascript; charset=utf-8"
        );
    }
    let (status, headers, _) = get(
        &router,
        Method::GET,
        "/favicon.svg",
        &[("accept-encoding", "br")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        header(&headers, header::CONTENT_ENCODING),
        "",
        "no twin, no encoding"
    );
    assert_eq!(header(&headers, header::CACHE_CONTROL), "no-cache");
    let (status, headers, body) = get(&router, Method::HEAD, "/assets/app-1.js", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.is_empty());
    assert_eq!(header(&headers, header::ETAG), "\"app-1\"");
}

#[tokio::test]
async fn unknown_paths_are_not_the_console() {
    let router = routes::<()>(SITE);
    for path in [
        "/assets/app-2.js",
        "/assets/../index.html",
        "/index.html.br",
        "/clusters.json",
        "/api/console/clusters",
        "/join",
    ] {
        let (status, headers, _) = get(&router, Method::GET, path, &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        if path.starts_with("/assets/") {
            assert_eq!(
                header(&headers, header::CONTENT_SECURITY_POLICY),
                CONTENT_SECURITY_POLICY
            );
        }
    }
    let (status, _, _) = get(&router, Method::POST, "/clusters", &[]).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn a_binary_built_without_the_console_says_how_to_build_it() {
    let router = routes::<()>(&[]);
    let (status, headers, body) = get(&router, Method::GET, "/clusters", &[]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&headers, header::CACHE_CONTROL), "no-store");
    assert!(
        String::from_utf8(body)
            .unwrap()
            .contains("npm ci &amp;&amp; npm run build")
    );
}

#[test]
fn the_policy_allows_no_inline_script_or_style() {
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    assert!(CONTENT_SECURITY_POLICY.contains("script-src 'self'"));
    assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
}
