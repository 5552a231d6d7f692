//! Every operation of the OpenAPI document, called with hostile values where
//! its parameters and body fields go: instants at the edges of what a
//! timestamp holds, integers past every width, floats, huge and control-laden
//! strings, look-alike Unicode, wrong types. No input may panic a handler
//! (release builds abort on a panic: one request would end the process) or
//! make it answer 500; every refusal is problem+json.

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use serde_json::{Value, json};

use crate::harness::TestApp;

/// Percent-encodes a query value or path segment.
fn encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Values a hostile client puts where a string goes.
fn hostile_strings() -> Vec<String> {
    vec![
        String::new(),
        " ".into(),
        "-262143-01-01T00:00:00Z".into(),
        "+262142-12-31T23:59:59Z".into(),
        "1970-01-01T00:00:00Z".into(),
        "9999-12-31T23:59:59.999999999+14:00".into(),
        "00000000-0000-0000-0000-000000000000".into(),
        "ffffffff-ffff-ffff-ffff-ffffffffffff".into(),
        "-9223372036854775808".into(),
        "18446744073709551616".into(),
        "1e308".into(),
        "NaN".into(),
        "İ".repeat(300),
        "a".repeat(70_000),
        "\u{0000}\r\n\t%00%".into(),
        "../../etc/passwd".into(),
        "x' OR '1'='1".into(),
        "\u{202e}\u{feff}\u{1F600}".into(),
    ]
}

/// Values a hostile client puts where any JSON value goes.
fn hostile_json() -> Vec<Value> {
    let mut values: Vec<Value> = hostile_strings().into_iter().map(Value::from).collect();
    values.extend([
        json!(i64::MIN),
        json!(i64::MAX),
        json!(u64::MAX),
        json!(-1),
        json!(0),
        json!(1e300),
        json!(-1e300),
        json!(0.5),
        json!(true),
        json!(null),
        json!([]),
        json!({}),
    ]);
    // Deep nesting, within what the JSON parser accepts.
    values.push((0..100).fold(json!(1), |inner, _| json!([inner])));
    values
}

/// The properties of a request body's schema, `$ref`s into components followed.
fn properties(document: &Value, schema: &Value) -> Vec<String> {
    let schema = match schema["$ref"].as_str() {
        Some(reference) => document
            .pointer(reference.trim_start_matches('#'))
            .cloned()
            .unwrap_or(Value::Null),
        None => schema.clone(),
    };
    let mut names: Vec<String> = schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        names.extend(properties(document, part));
    }
    names
}

/// The query of one round: round `i < params × values` sets parameter
/// `i / values` alone to value `i % values`; later rounds mix at random.
fn query_for(
    round: usize,
    params: &[String],
    values: &[String],
    rng: &mut fastrand::Rng,
) -> Vec<String> {
    if round < params.len() * values.len() {
        let (name, value) = (&params[round / values.len()], &values[round % values.len()]);
        return vec![format!("{name}={}", encode(value))];
    }
    let mut query = Vec::new();
    for name in params {
        if rng.bool() {
            let value = &values[rng.usize(..values.len())];
            query.push(format!("{name}={}", encode(value)));
        }
    }
    query
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hostile_value_in_any_parameter_or_field_panics_or_answers_500() {
    // The development user is an administrator: the admin routes run their handlers too.
    let app = TestApp::builder("hostile").console().build().await;
    let client = app.client().ip("203.0.113.250");
    let document = serde_json::to_value(local::openapi()).unwrap();

    let mut rng = fastrand::Rng::with_seed(0x6b75_6265);
    let strings = hostile_strings();
    let values = hostile_json();
    let mut calls = 0;
    for (template, operations) in document["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            let path_params: Vec<String> = template
                .split('{')
                .skip(1)
                .filter_map(|p| p.split_once('}').map(|(name, _)| name.to_string()))
                .collect();
            let query_params: Vec<String> = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["name"].as_str())
                .filter(|name| !path_params.iter().any(|p| p == name))
                .map(str::to_string)
                .collect();
            let fields = operation
                .pointer("/requestBody/content/application~1json/schema")
                .map(|schema| properties(&document, schema))
                .unwrap_or_default();
            // Every parameter alone with every hostile value, then random mixes.
            // (with well-formed path parameters, so the query is what is read).
            let systematic = query_params.len() * strings.len();
            let rounds = systematic + 24;
            for round in 0..rounds {
                let mut path = template.clone();
                for name in &path_params {
                    let value = if round < systematic || round % 3 == 0 {
                        uuid::Uuid::new_v4().to_string()
                    } else {
                        strings[rng.usize(..strings.len())].clone()
                    };
                    path = path.replace(&format!("{{{name}}}"), &encode(&value));
                }
                let query = query_for(round, &query_params, &strings, &mut rng);
                if !query.is_empty() {
                    path = format!("{path}?{}", query.join("&"));
                }
                let mut body = serde_json::Map::new();
                for field in &fields {
                    if rng.u8(..4) > 0 {
                        body.insert(field.clone(), values[rng.usize(..values.len())].clone());
                    }
                }
                let mut request = Request::builder()
                    .method(method.to_uppercase().as_str())
                    .uri(&path);
                let body = if fields.is_empty() && operation.get("requestBody").is_none() {
                    Body::empty()
                } else {
                    request = request.header(header::CONTENT_TYPE, "application/json");
                    Body::from(Value::Object(body).to_string())
                };
                // A URI past what the HTTP layer takes never reaches a handler.
                let Ok(request) = request.body(body) else {
                    continue;
                };
                let reply = client.raw(request).await;
                calls += 1;
                assert_ne!(
                    reply.status,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "{method} {path} answered 500: {}",
                    reply.body
                );
                if reply.status.is_client_error() && !template.starts_with("/join") {
                    let status = reply.status;
                    assert_eq!(
                        reply.content_type(),
                        "application/problem+json",
                        "{method} {path} answered {status} without problem+json"
                    );
                }
            }
        }
    }
    assert!(calls > 500, "{calls} calls");
}
