//! A loopback OAuth 2.0 provider speaking GitHub's and Google's protocol: the
//! authorization endpoint (approves at once, as a user would, and redirects
//! back with a code), the token endpoint (checks the client, the code, the
//! redirect URI and the PKCE S256 verifier), and the profile endpoints
//! (GitHub's `/user` and `/user/emails`, OpenID Connect's `/userinfo`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    Form, Json, Router,
    extract::{Query, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Who logs in next, as the provider knows them.
#[derive(Debug, Clone)]
pub struct Person {
    pub subject: String,
    pub email: String,
    pub email_verified: bool,
    pub name: String,
}

#[derive(Default)]
struct Inner {
    person: Option<Person>,
    /// code → (challenge, client_id, redirect_uri, person)
    codes: HashMap<String, (String, String, String, Person)>,
    tokens: HashMap<String, Person>,
}

#[derive(Clone)]
pub struct OAuthProvider {
    pub url: String,
    client_id: String,
    client_secret: String,
    inner: Arc<Mutex<Inner>>,
}

impl OAuthProvider {
    pub async fn start(client_id: &str, client_secret: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let provider = Self {
            url: format!("http://{}", listener.local_addr().expect("addr")),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            inner: Arc::default(),
        };
        let app = Router::new()
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .route("/user", get(github_user))
            .route("/user/emails", get(github_emails))
            .route("/userinfo", get(userinfo))
            .with_state(provider.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        provider
    }

    /// The person the next authorization approves.
    pub fn log_in_as(&self, person: Person) {
        self.inner.lock().expect("lock").person = Some(person);
    }
}

async fn authorize(
    State(p): State<OAuthProvider>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let person = p.inner.lock().expect("lock").person.clone();
    let (Some(person), Some(redirect), Some(state), Some(challenge)) = (
        person,
        q.get("redirect_uri"),
        q.get("state"),
        q.get("code_challenge"),
    ) else {
        return (StatusCode::BAD_REQUEST, "missing parameters").into_response();
    };
    if q.get("code_challenge_method").map(String::as_str) != Some("S256")
        || q.get("client_id") != Some(&p.client_id)
    {
        return (StatusCode::BAD_REQUEST, "bad client or PKCE method").into_response();
    }
    let code = uuid::Uuid::new_v4().simple().to_string();
    p.inner.lock().expect("lock").codes.insert(
        code.clone(),
        (
            challenge.clone(),
            p.client_id.clone(),
            redirect.clone(),
            person,
        ),
    );
    let location = format!("{redirect}?code={code}&state={state}");
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

async fn token(
    State(p): State<OAuthProvider>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let refuse =
        |error: &str| (StatusCode::BAD_REQUEST, Json(json!({ "error": error }))).into_response();
    if form.get("client_id") != Some(&p.client_id)
        || form.get("client_secret") != Some(&p.client_secret)
    {
        return refuse("invalid_client");
    }
    let Some((challenge, _, redirect, person)) = form
        .get("code")
        .and_then(|c| p.inner.lock().expect("lock").codes.remove(c))
    else {
        return refuse("invalid_grant");
    };
    let verifier = form.get("code_verifier").cloned().unwrap_or_default();
    let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    if computed != challenge || form.get("redirect_uri") != Some(&redirect) {
        return refuse("invalid_grant");
    }
    let access = uuid::Uuid::new_v4().simple().to_string();
    p.inner
        .lock()
        .expect("lock")
        .tokens
        .insert(access.clone(), person);
    Json(json!({ "access_token": access, "token_type": "bearer" })).into_response()
}

fn bearer(p: &OAuthProvider, headers: &HeaderMap) -> Option<Person> {
    let token = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?;
    p.inner.lock().expect("lock").tokens.get(token).cloned()
}

async fn github_user(State(p): State<OAuthProvider>, headers: HeaderMap) -> Response {
    match bearer(&p, &headers) {
        Some(person) => Json(json!({ "id": person.subject.parse::<u64>().map(Value::from).unwrap_or(Value::from(person.subject.clone())), "login": person.name.to_lowercase(), "name": person.name })).into_response(),
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

async fn github_emails(State(p): State<OAuthProvider>, headers: HeaderMap) -> Response {
    match bearer(&p, &headers) {
        Some(person) => Json(json!([
            { "email": format!("{}@users.noreply.github.com", person.subject), "primary": false, "verified": true },
            { "email": person.email, "primary": true, "verified": person.email_verified },
        ]))
        .into_response(),
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

async fn userinfo(State(p): State<OAuthProvider>, headers: HeaderMap) -> Response {
    match bearer(&p, &headers) {
        Some(person) => Json(json!({ "sub": person.subject, "email": person.email, "email_verified": person.email_verified, "name": person.name })).into_response(),
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}
