//! The deployments' route tables against the routers: every operation of the
//! OpenAPI document, sent where a deployment sends it, reaches a router that
//! serves it.
//!
//! - Kubernetes: the Helm chart rendered with `helm template` (from
//!   `target/tools/bin`, installed by `scripts/test.sh`), its HTTPRoute's
//!   rules matched as the Gateway API orders them: Exact, then
//!   RegularExpression (the chart requires an implementation that prefers
//!   them, as Envoy Gateway does), then the longest PathPrefix.
//! - The chart's optional Ingress, as ingress-nginx reads regular-expression
//!   paths.
//! - AWS: the SAM template's HttpApi events, matched as API Gateway HTTP APIs
//!   select routes: a route without a greedy variable first (the method
//!   itself before `ANY`), then the longest `{proxy+}` route.

use std::{path::Path, process::Command};

use axum::{Router, body::Body, http::Request};
use http_body_util::BodyExt;
use regex::Regex;
use serde_json::Value;
use shared::http::AppState;
use tower::ServiceExt;

use crate::harness::TestApp;

pub(crate) enum PathMatch {
    Exact(String),
    Regex(Regex),
    Prefix(String),
}

impl PathMatch {
    fn matches(&self, path: &str) -> bool {
        match self {
            Self::Exact(exact) => path == exact,
            Self::Regex(regex) => regex.is_match(path),
            // Gateway API prefixes match whole path segments.
            Self::Prefix(prefix) => {
                let prefix = prefix.trim_end_matches('/');
                path == prefix || path.starts_with(&format!("{prefix}/"))
            }
        }
    }
}

/// The chart's manifests for a cluster that serves the Gateway API, with
/// public URLs (which the chart requires) and then `set` values.
pub(crate) fn rendered(set: &[&str]) -> Vec<Value> {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/helm/kubebyon");
    let urls = [
        "config.KUBEBYON_PUBLIC_BASE_URL=https://kubebyon.example.com",
        "config.KUBEBYON_JOIN_BASE_URL=https://kubebyon.example.com",
    ];
    let output = Command::new("helm")
        .args(["template", "kb"])
        .arg(&chart)
        .args(["--api-versions", "gateway.networking.k8s.io/v1/HTTPRoute"])
        .args(urls.iter().chain(set).flat_map(|value| ["--set", value]))
        .output()
        .expect("helm runs (scripts/test.sh installs it into target/tools/bin)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_saphyr::from_multiple(std::str::from_utf8(&output.stdout).unwrap()).unwrap()
}

/// The function behind a Service of the chart rendered as release `kb`:
/// every object is named `<release>-<function>`.
pub(crate) fn function_of(service: &str) -> &str {
    service
        .strip_prefix("kb-")
        .unwrap_or_else(|| panic!("{service} is named after the release"))
}

/// The HTTPRoute rules of a rendering as (match, backend Service).
pub(crate) fn httproute_rules(documents: &[Value]) -> Vec<(PathMatch, String)> {
    let routes: Vec<&Value> = documents
        .iter()
        .filter(|d| d["kind"] == "HTTPRoute")
        .collect();
    assert_eq!(routes.len(), 1, "one HTTPRoute");
    let mut rules = Vec::new();
    for rule in routes[0]["spec"]["rules"].as_array().unwrap() {
        let backends = rule["backendRefs"].as_array().unwrap();
        assert_eq!(backends.len(), 1, "one function per rule: {rule}");
        let backend = backends[0]["name"].as_str().unwrap().to_string();
        for m in rule["matches"].as_array().unwrap() {
            let value = m["path"]["value"].as_str().unwrap().to_string();
            let path_match = match m["path"]["type"].as_str().unwrap() {
                "Exact" => PathMatch::Exact(value),
                // Matched against the whole path.
                "RegularExpression" => PathMatch::Regex(Regex::new(&format!("^{value}$")).unwrap()),
                "PathPrefix" => PathMatch::Prefix(value),
                other => panic!("unexpected path match type {other}"),
            };
            rules.push((path_match, backend.clone()));
        }
    }
    rules
}

/// The Service a request for `path` reaches, by the Gateway API's precedence.
pub(crate) fn backend_of<'a>(rules: &'a [(PathMatch, String)], path: &str) -> Option<&'a str> {
    let exact = rules
        .iter()
        .find(|(m, _)| matches!(m, PathMatch::Exact(_)) && m.matches(path));
    let regex = || {
        rules
            .iter()
            .find(|(m, _)| matches!(m, PathMatch::Regex(_)) && m.matches(path))
    };
    let prefix = || {
        rules
            .iter()
            .filter(|(m, _)| m.matches(path))
            .filter_map(|(m, backend)| match m {
                PathMatch::Prefix(p) => Some((p.len(), backend)),
                _ => None,
            })
            .max_by_key(|(len, _)| *len)
            .map(|(_, backend)| backend)
    };
    exact
        .or_else(regex)
        .map(|(_, backend)| backend)
        .or_else(prefix)
        .map(String::as_str)
}

/// Each function's own router, by the name of its Service.
fn router_of(function: &str) -> Option<Router<AppState>> {
    local::ROUTERS
        .iter()
        .find(|(name, _)| *name == function)
        .map(|(_, router)| router())
}

/// Whether the router has a route for the request: its handler answered,
/// not the bare router's empty 404 (no such path) or 405 (no such method).
async fn serves(router: Router, method: &str, path: &str) -> bool {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    !(status == 405 || (status == 404 && body.is_empty()))
}

/// A concrete path for a templated one.
fn example(template: &str) -> String {
    let id = uuid::Uuid::new_v4().to_string();
    Regex::new(r"\{([a-z_]+)\}")
        .unwrap()
        .replace_all(template, |c: &regex::Captures| match &c[1] {
            "token" => "abcdef.0123456789abcdef".to_string(),
            _ => id.clone(),
        })
        .into_owned()
}

/// Every operation of the OpenAPI document, sent to the function `route`
/// picks for it: the ones that reach no router serving them.
async fn misrouted(state: &AppState, route: impl Fn(&str, &str) -> Option<String>) -> Vec<String> {
    let document = serde_json::to_value(local::openapi()).unwrap();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (template, operations) in document["paths"].as_object().unwrap() {
        let path = example(template);
        for method in operations.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            let Some(backend) = route(&method, &path) else {
                wrong.push(format!("{method} {template}: no rule"));
                continue;
            };
            let Some(router) = router_of(&backend) else {
                wrong.push(format!(
                    "{method} {template}: {backend} is no HTTP function"
                ));
                continue;
            };
            if !serves(router.with_state(state.clone()), &method, &path).await {
                wrong.push(format!(
                    "{method} {template}: sent to {backend}, which does not serve it"
                ));
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} operations checked");
    // The document itself, which is not among its own paths.
    let document_path = "/api/openapi.json";
    let served = match route("GET", document_path).and_then(|backend| router_of(&backend)) {
        Some(router) => serves(router.with_state(state.clone()), "GET", document_path).await,
        None => false,
    };
    if !served {
        wrong.push(format!("GET {document_path}: not served"));
    }
    // The console's pages: every path the API does not claim.
    let id = uuid::Uuid::new_v4();
    for page in [
        "/".to_string(),
        "/sign-in".to_string(),
        "/clusters".to_string(),
        format!("/clusters/{id}"),
        format!("/clusters/{id}/nodes/{id}"),
        "/account".to_string(),
        "/admin/jobs".to_string(),
    ] {
        match route("GET", &page) {
            Some(backend) if backend == "console" => {
                if !serves(console::router().with_state(state.clone()), "GET", &page).await {
                    wrong.push(format!("GET {page}: the console does not serve it"));
                }
            }
            other => wrong.push(format!("GET {page}: sent to {other:?}, not the console")),
        }
    }
    wrong
}

#[tokio::test]
async fn the_helm_route_table_sends_every_operation_to_the_function_that_serves_it() {
    let rules = httproute_rules(&rendered(&[]));
    let state = TestApp::builder("routing").build().await.state;
    let wrong = misrouted(&state, |_, path| {
        backend_of(&rules, path).map(|service| function_of(service).to_string())
    })
    .await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // The table decides: a path sent to the wrong function is caught.
    let tokens = example("/api/console/clusters/{cluster_id}/tokens");
    assert_eq!(backend_of(&rules, &tokens), Some("kb-api-nodes"));
    assert!(
        !serves(api_clusters::router().with_state(state), "GET", &tokens).await,
        "api-clusters does not serve a cluster's tokens"
    );
}

/// The Ingress's paths as ingress-nginx with `use-regex` reads them: regular
/// expressions matched from the start of the path, case-insensitively
/// (`location ~*`), the longest path first.
fn ingress_paths() -> Vec<(Regex, String)> {
    let documents = rendered(&["ingress.enabled=true", "ingress.hosts={api.example.com}"]);
    let ingresses: Vec<&Value> = documents
        .iter()
        .filter(|d| d["kind"] == "Ingress")
        .collect();
    assert_eq!(ingresses.len(), 1, "one Ingress");
    assert_eq!(
        ingresses[0]["metadata"]["annotations"]["nginx.ingress.kubernetes.io/use-regex"],
        "true"
    );
    let rules = ingresses[0]["spec"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["host"], "api.example.com");
    let mut paths: Vec<(String, String)> = rules[0]["http"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            assert_eq!(p["pathType"], "ImplementationSpecific", "{p}");
            assert_eq!(p["backend"]["service"]["port"]["number"], 80, "{p}");
            (
                p["path"].as_str().unwrap().to_string(),
                p["backend"]["service"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    paths.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
    paths
        .into_iter()
        .map(|(path, backend)| (Regex::new(&format!("(?i)^{path}")).unwrap(), backend))
        .collect()
}

#[tokio::test]
async fn the_helm_ingress_sends_every_operation_to_the_function_that_serves_it() {
    let paths = ingress_paths();
    let backend = |path: &str| {
        paths
            .iter()
            .find(|(regex, _)| regex.is_match(path))
            .map(|(_, backend)| function_of(backend).to_string())
    };
    let state = TestApp::builder("routing").build().await.state;
    let wrong = misrouted(&state, |_, path| backend(path)).await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The split the prefixes alone cannot make.
    let cluster = "/api/console/clusters/0b7e0a52-5a43-4b8e-a0a4-0c4d9f3f2a61";
    for (path, expected) in [
        (format!("{cluster}/tokens"), "api-nodes"),
        (format!("{cluster}/nodes/n1"), "api-nodes"),
        (format!("{cluster}/hostnames"), "api-ingress"),
        (format!("{cluster}/kubeconfigs"), "api-clusters"),
        (cluster.to_string(), "api-clusters"),
        (format!("{cluster}/tokensmith"), "api-clusters"),
    ] {
        assert_eq!(backend(&path).as_deref(), Some(expected), "{path}");
    }
}

/// One `HttpApi` event of the SAM template: method (or `ANY`), path
/// segments, and the function (the binary cargo-lambda builds for it).
pub(crate) struct ApiRoute {
    method: String,
    segments: Vec<String>,
    function: String,
}

impl ApiRoute {
    fn greedy(&self) -> bool {
        self.segments.last().is_some_and(|s| s.ends_with("+}"))
    }

    /// Whether the route's path takes `path`; for a greedy route, the
    /// segments before `{proxy+}` must match and at least one must follow.
    fn takes(&self, path: &[&str]) -> bool {
        let fixed = if self.greedy() {
            &self.segments[..self.segments.len() - 1]
        } else {
            &self.segments[..]
        };
        let length_fits = if self.greedy() {
            path.len() > fixed.len()
        } else {
            path.len() == fixed.len()
        };
        length_fits
            && fixed
                .iter()
                .zip(path)
                .all(|(s, p)| s == p || (s.starts_with('{') && !p.is_empty()))
    }
}

/// The SAM template with its CloudFormation tags (`!Ref`, `!Sub`, …)
/// dropped: `!Ref X` reads as `X`, `!If [C, a, b]` as `[C, a, b]`.
pub(crate) fn sam_template() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/aws/template.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let text = Regex::new(r"!(Ref|Sub|GetAtt|If|Equals|Not|And|Or|Select|Join|Split|FindInMap|ImportValue|Base64|Cidr|GetAZs|Condition)\b")
        .unwrap()
        .replace_all(&text, "");
    serde_saphyr::from_str(&text).unwrap()
}

/// The SAM template's HTTP API routes (they hold no tags).
pub(crate) fn sam_routes(template: &Value) -> Vec<ApiRoute> {
    let mut routes = Vec::new();
    for resource in template["Resources"].as_object().unwrap().values() {
        let Some(function) = resource["Metadata"]["BuildProperties"]["Binary"].as_str() else {
            continue;
        };
        let function = function.to_string();
        let Some(events) = resource["Properties"]["Events"].as_object() else {
            continue;
        };
        for event in events.values().filter(|e| e["Type"] == "HttpApi") {
            routes.push(ApiRoute {
                method: event["Properties"]["Method"]
                    .as_str()
                    .unwrap()
                    .to_uppercase(),
                segments: event["Properties"]["Path"]
                    .as_str()
                    .unwrap()
                    .split('/')
                    .skip(1)
                    .map(String::from)
                    .collect(),
                function: function.clone(),
            });
        }
    }
    routes
}

/// The function API Gateway sends `method path` to.
pub(crate) fn sam_backend(routes: &[ApiRoute], method: &str, path: &str) -> Option<String> {
    let path: Vec<&str> = path.split('/').skip(1).collect();
    let for_method = |r: &&ApiRoute| r.method == method || r.method == "ANY";
    let exact = routes
        .iter()
        .filter(for_method)
        .filter(|r| !r.greedy() && r.takes(&path))
        // The method itself before ANY, then the most literal segments.
        .max_by_key(|r| {
            (
                r.method == method,
                r.segments.iter().filter(|s| !s.starts_with('{')).count(),
            )
        });
    let greedy = || {
        routes
            .iter()
            .filter(for_method)
            .filter(|r| r.greedy() && r.takes(&path))
            .max_by_key(|r| (r.segments.len(), r.method == method))
    };
    exact.or_else(greedy).map(|r| r.function.clone())
}

#[tokio::test]
async fn the_sam_route_table_sends_every_operation_to_the_function_that_serves_it() {
    let routes = sam_routes(&sam_template());
    let state = TestApp::builder("routing").build().await.state;
    let wrong = misrouted(&state, |method, path| sam_backend(&routes, method, path)).await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The matching decides: tokens go past api-clusters' greedy route.
    let tokens = example("/api/console/clusters/{cluster_id}/tokens");
    assert_eq!(
        sam_backend(&routes, "POST", &tokens).as_deref(),
        Some("api-nodes")
    );
    assert_eq!(
        sam_backend(
            &routes,
            "GET",
            &example("/api/console/clusters/{cluster_id}")
        )
        .as_deref(),
        Some("api-clusters")
    );
}
