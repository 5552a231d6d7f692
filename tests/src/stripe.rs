//! A loopback stand-in for the part of Stripe's API the platform calls:
//! `POST /v1/customers` and `POST /v1/checkout/sessions`, form-encoded, with
//! a secret key as bearer credential and an `Idempotency-Key` (a repeated
//! key answers the first answer again, as Stripe does for 24 hours), and
//! expiring and reading a session (`POST …/{id}/expire` refuses a session
//! that is not open, as Stripe does). As Stripe does, a session names at
//! most one of `customer` and `customer_email`, and a `customer` must exist.
//! It records every request, and can be told to fail the next session
//! requests with 500 or to take a session as paid.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};

/// One request as Stripe received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub idempotency_key: Option<String>,
    pub authorization: Option<String>,
    pub form: Vec<(String, String)>,
}

impl Recorded {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.form
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Inner {
    /// Checkout Session requests.
    requests: Vec<Recorded>,
    /// Customer requests.
    customer_requests: Vec<Recorded>,
    /// Customers made, in order.
    customers: Vec<String>,
    by_key: HashMap<String, serde_json::Value>,
    sessions: u32,
    fail_next: u32,
    /// Each session's status: `open`, `complete` or `expired`.
    status: HashMap<String, String>,
    /// Sessions asked to expire, in order.
    expired: Vec<String>,
}

#[derive(Clone, Default)]
pub struct StripeStub {
    inner: Arc<Mutex<Inner>>,
    pub base_url: String,
}

impl StripeStub {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stub = Self {
            inner: Arc::default(),
            base_url: format!("http://{}", listener.local_addr().unwrap()),
        };
        let app = Router::new()
            .route("/v1/customers", post(create_customer))
            .route("/v1/checkout/sessions", post(create_session))
            .route(
                "/v1/checkout/sessions/{id}",
                axum::routing::get(read_session),
            )
            .route("/v1/checkout/sessions/{id}/expire", post(expire_session))
            .with_state(stub.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        stub
    }

    /// The Checkout Session requests.
    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// The customer requests.
    pub fn customer_requests(&self) -> Vec<Recorded> {
        self.inner.lock().unwrap().customer_requests.clone()
    }

    /// Customers made (a replayed key makes none).
    pub fn customers(&self) -> Vec<String> {
        self.inner.lock().unwrap().customers.clone()
    }

    /// Sessions made (a replayed key makes none).
    pub fn sessions(&self) -> u32 {
        self.inner.lock().unwrap().sessions
    }

    pub fn fail_next(&self, n: u32) {
        self.inner.lock().unwrap().fail_next = n;
    }

    /// The customer paid this session.
    pub fn complete(&self, session: &str) {
        self.inner
            .lock()
            .unwrap()
            .status
            .insert(session.into(), "complete".into());
    }

    /// The session can be paid again.
    pub fn reopen(&self, session: &str) {
        self.inner
            .lock()
            .unwrap()
            .status
            .insert(session.into(), "open".into());
    }

    /// The sessions the platform asked to expire.
    pub fn expired(&self) -> Vec<String> {
        self.inner.lock().unwrap().expired.clone()
    }
}

fn authorized(headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.starts_with("Bearer sk_test_"))
}

fn session(id: &str, status: &str) -> serde_json::Value {
    serde_json::json!({ "id": id, "object": "checkout.session", "status": status })
}

async fn read_session(
    State(stub): State<StripeStub>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Invalid API Key provided",
        );
    }
    match stub.inner.lock().unwrap().status.get(&id) {
        Some(status) => axum::Json(session(&id, status)).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "No such checkout.session",
        ),
    }
}

async fn expire_session(
    State(stub): State<StripeStub>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Invalid API Key provided",
        );
    }
    let mut inner = stub.inner.lock().unwrap();
    inner.expired.push(id.clone());
    match inner.status.get(&id).cloned().as_deref() {
        Some("open") => {
            inner.status.insert(id.clone(), "expired".into());
            axum::Json(session(&id, "expired")).into_response()
        }
        Some(status) => error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &format!(
                "Only Checkout Sessions with a status in [\"open\"] can be expired. This Checkout Session has a status of `{status}`."
            ),
        ),
        None => error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "No such checkout.session",
        ),
    }
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": { "type": kind, "message": message } })),
    )
        .into_response()
}

fn recorded(headers: &HeaderMap, body: &str) -> Recorded {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    Recorded {
        idempotency_key: header("idempotency-key"),
        authorization: header("authorization"),
        form: url::form_urlencoded::parse(body.as_bytes())
            .into_owned()
            .collect(),
    }
}

/// What every create checks first, as Stripe does: the key, the encoding.
fn refused(recorded: &Recorded, headers: &HeaderMap) -> Option<Response> {
    if !recorded
        .authorization
        .as_deref()
        .is_some_and(|a| a.starts_with("Bearer sk_test_"))
    {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Invalid API Key provided",
        ));
    }
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok());
    (content_type != Some("application/x-www-form-urlencoded")).then(|| {
        error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "the body must be form-encoded",
        )
    })
}

/// The first answer to a request with the same idempotency key, as Stripe
/// gives it again.
fn replayed(inner: &Inner, recorded: &Recorded) -> Option<Response> {
    let answer = inner.by_key.get(recorded.idempotency_key.as_ref()?)?;
    Some((StatusCode::OK, axum::Json(answer.clone())).into_response())
}

/// Answers `answer`, kept for a retry with the same idempotency key.
fn remembered(inner: &mut Inner, recorded: Recorded, answer: serde_json::Value) -> Response {
    if let Some(key) = recorded.idempotency_key {
        inner.by_key.insert(key, answer.clone());
    }
    (StatusCode::OK, axum::Json(answer)).into_response()
}

async fn create_customer(
    State(stub): State<StripeStub>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let recorded = recorded(&headers, &body);
    let mut inner = stub.inner.lock().unwrap();
    inner.customer_requests.push(recorded.clone());
    if let Some(refusal) = refused(&recorded, &headers) {
        return refusal;
    }
    if let Some(replayed) = replayed(&inner, &recorded) {
        return replayed;
    }
    let id = format!("cus_Test{:06}", inner.customers.len() + 1);
    inner.customers.push(id.clone());
    let answer = serde_json::json!({
        "id": id,
        "object": "customer",
        "name": recorded.field("name"),
        "email": recorded.field("email"),
        "metadata": { "organization_id": recorded.field("metadata[organization_id]") },
    });
    remembered(&mut inner, recorded, answer)
}

async fn create_session(
    State(stub): State<StripeStub>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let recorded = recorded(&headers, &body);
    let mut inner = stub.inner.lock().unwrap();
    inner.requests.push(recorded.clone());
    if inner.fail_next > 0 {
        inner.fail_next -= 1;
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "something went wrong",
        );
    }
    if let Some(refusal) = refused(&recorded, &headers) {
        return refusal;
    }
    if recorded.field("customer").is_some() && recorded.field("customer_email").is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "You may only specify one of these parameters: customer, customer_email.",
        );
    }
    if let Some(customer) = recorded.field("customer")
        && !inner.customers.iter().any(|c| c == customer)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &format!("No such customer: '{customer}'"),
        );
    }
    for required in ["mode", "success_url", "line_items[0][quantity]"] {
        if recorded.field(required).is_none() {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("Missing required param: {required}."),
            );
        }
    }
    if let Some(replayed) = replayed(&inner, &recorded) {
        return replayed;
    }
    inner.sessions += 1;
    let id = format!("cs_test_a1{:06}", inner.sessions);
    inner.status.insert(id.clone(), "open".into());
    let answer = serde_json::json!({
        "id": id,
        "object": "checkout.session",
        "mode": recorded.field("mode"),
        "client_reference_id": recorded.field("client_reference_id"),
        "customer": recorded.field("customer"),
        "customer_email": recorded.field("customer_email"),
        "payment_status": "unpaid",
        "status": "open",
        "url": format!("https://checkout.stripe.com/c/pay/{id}"),
    });
    remembered(&mut inner, recorded, answer)
}
