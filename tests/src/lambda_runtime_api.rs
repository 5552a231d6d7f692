//! A loopback server speaking the AWS Lambda Runtime API (2018-06-01), so a
//! function binary runs under its real Lambda adapter in a test.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Router,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, StatusCode},
    response::IntoResponse,
    routing::{get, post},
};
use tokio::sync::{Notify, mpsc};

#[derive(Debug)]
pub enum Invocation {
    Response(serde_json::Value),
    Error(String),
}

#[derive(Default)]
struct Shared {
    events: Mutex<VecDeque<(String, serde_json::Value)>>,
    queued: Notify,
}

pub struct RuntimeApi {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    results: tokio::sync::Mutex<mpsc::UnboundedReceiver<(String, Invocation)>>,
    server: tokio::task::AbortHandle,
}

type AppState = (Arc<Shared>, mpsc::UnboundedSender<(String, Invocation)>);

impl RuntimeApi {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let (tx, rx) = mpsc::unbounded_channel();
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state((shared.clone(), tx));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        })
        .abort_handle();
        Self {
            addr,
            shared,
            results: tokio::sync::Mutex::new(rx),
            server,
        }
    }

    /// Queues one event and waits (up to 60 s) for the function's answer to it.
    pub async fn invoke(&self, event: serde_json::Value) -> Invocation {
        let request_id = uuid::Uuid::new_v4().to_string();
        self.shared
            .events
            .lock()
            .expect("lock")
            .push_back((request_id.clone(), event));
        self.shared.queued.notify_one();
        let mut results = self.results.lock().await;
        loop {
            let (id, result) =
                tokio::time::timeout(std::time::Duration::from_secs(60), results.recv())
                    .await
                    .expect("the function answered within 60 s")
                    .expect("runtime API is running");
            if id == request_id || id == "init" {
                return result;
            }
        }
    }

    /// Environment a function needs to run under this runtime API.
    pub fn env(&self, function_name: &str) -> Vec<(String, String)> {
        [
            ("AWS_LAMBDA_RUNTIME_API", self.addr.to_string()),
            ("AWS_LAMBDA_FUNCTION_NAME", function_name.to_string()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "test".into()),
            ("AWS_LAMBDA_LOG_GROUP_NAME", "test".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn next(State((shared, _)): State<AppState>) -> impl IntoResponse {
    loop {
        if let Some((id, event)) = shared.events.lock().expect("lock").pop_front() {
            let mut headers = HeaderMap::new();
            let deadline = chrono_ms() + 30_000;
            headers.insert(
                "lambda-runtime-aws-request-id",
                HeaderValue::from_str(&id).expect("id"),
            );
            headers.insert("lambda-runtime-deadline-ms", HeaderValue::from(deadline));
            headers.insert(
                "lambda-runtime-invoked-function-arn",
                HeaderValue::from_static("arn:aws:lambda:us-east-1:123456789012:function:test"),
            );
            headers.insert(
                "lambda-runtime-trace-id",
                HeaderValue::from_static("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"),
            );
            return (StatusCode::OK, headers, event.to_string());
        }
        shared.queued.notified().await;
    }
}

fn chrono_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn response(
    State((_, tx)): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> StatusCode {
    let value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    let _ = tx.send((id, Invocation::Response(value)));
    StatusCode::ACCEPTED
}

async fn error(State((_, tx)): State<AppState>, Path(id): Path<String>, body: Bytes) -> StatusCode {
    let _ = tx.send((
        id,
        Invocation::Error(String::from_utf8_lossy(&body).into_owned()),
    ));
    StatusCode::ACCEPTED
}

async fn init_error(State((_, tx)): State<AppState>, body: Bytes) -> StatusCode {
    let _ = tx.send((
        "init".into(),
        Invocation::Error(String::from_utf8_lossy(&body).into_owned()),
    ));
    StatusCode::ACCEPTED
}
