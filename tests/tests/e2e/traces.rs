//! Traces exported over OTLP/HTTP to a collector stand-in that decodes the
//! protobuf requests the way a collector does: one trace from the HTTP request
//! that creates a cluster, through RabbitMQ, to the job that builds it.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{Router, body::Bytes, extract::State, http::HeaderMap, routing::post};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    common::v1::{AnyValue, any_value},
};
use prost::Message;
use tests::{broker::TestBroker, database::TestDb, eventually};

use crate::local_process::Local;

/// A span as the collector received it.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) service: String,
    pub(crate) name: String,
    pub(crate) trace_id: String,
    span_id: String,
    parent_span_id: String,
    pub(crate) attributes: HashMap<String, String>,
}

pub(crate) type Spans = Arc<Mutex<Vec<Received>>>;

/// `POST /v1/traces` with `application/x-protobuf` bodies, answered as
/// OTLP/HTTP says: 200 with an `ExportTraceServiceResponse`.
pub(crate) async fn collector() -> (String, Spans) {
    let spans = Spans::default();
    let router = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (endpoint, spans)
}

async fn receive(
    State(spans): State<Spans>,
    headers: HeaderMap,
    body: Bytes,
) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    assert_eq!(headers["content-type"], "application/x-protobuf");
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf request");
    let mut received = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .map(|a| text(a.value.as_ref()))
            .unwrap_or_default();
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            received.push(Received {
                service: service.clone(),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                attributes: span
                    .attributes
                    .iter()
                    .map(|a| (a.key.clone(), text(a.value.as_ref())))
                    .collect(),
            });
        }
    }
    (
        [("content-type", "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn one_trace_runs_from_the_request_through_rabbitmq_to_the_job() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let amqp_url = tests::broker::amqp_url();
    let (endpoint, spans) = collector().await;
    let local = Local::start(&[
        ("DATABASE_URL", &db.url),
        ("AMQP_URL", &amqp_url),
        ("AMQP_EXCHANGE", &broker.topology.exchange),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ])
    .await;

    // The caller (a gateway, a client) names its own trace.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let (status, accepted) = local
        .client
        .clone()
        .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01"))
        .call(
            "POST",
            "/api/console/clusters",
            Some(serde_json::json!({
                "name": "traced",
                "workload_cpu_limit_milli_cores": 1000,
                "workload_memory_limit_mib": 1024,
            })),
        )
        .await;
    assert_eq!(status, 202);
    let cluster_id: uuid::Uuid = accepted["cluster"]["id"].as_str().unwrap().parse().unwrap();
    let (job_id, trace_parent): (uuid::Uuid, Option<String>) =
        sqlx::query_as("SELECT id, trace_parent FROM cluster_jobs WHERE cluster_id = $1")
            .bind(cluster_id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let trace_parent = trace_parent.expect("the job row keeps the request's trace context");
    assert!(
        trace_parent.starts_with(&format!("00-{trace_id}-")) && trace_parent.ends_with("-01"),
        "{trace_parent}"
    );

    let job_id = job_id.to_string();
    let (request, job) = eventually(30, "the request's and the job's spans", || {
        let spans = spans.lock().unwrap().clone();
        let job_id = job_id.clone();
        async move {
            let request = spans
                .iter()
                .find(|s| s.name == "POST /api/console/clusters")?
                .clone();
            let job = spans
                .iter()
                .find(|s| {
                    s.name == "job cluster_create" && s.attributes.get("job_id") == Some(&job_id)
                })?
                .clone();
            Some((request, job))
        }
    })
    .await;
    assert_eq!(request.service, "local");
    assert_eq!(request.trace_id, trace_id);
    assert_eq!(
        request.parent_span_id, "00f067aa0ba902b7",
        "the request continues the caller's span"
    );
    assert_eq!(
        job.trace_id, trace_id,
        "the job continues the request's trace"
    );
    // The job's parent is a span of the request's (the one that enqueued it).
    let exported = spans.lock().unwrap().clone();
    let parent = exported
        .iter()
        .find(|s| s.span_id == job.parent_span_id)
        .expect("the job's parent span was exported");
    assert_eq!(parent.trace_id, trace_id);
    assert_eq!(format!("00-{trace_id}-{}-01", parent.span_id), trace_parent);

    // A caller's malformed or all-zero context is ignored: the request starts
    // a trace of its own and is still answered.
    for hostile in [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01".to_string(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01".to_string(),
        format!("00-{}-00f067aa0ba902b7-01", "f".repeat(4096)),
        "garbage".to_string(),
    ] {
        let (status, _) = local
            .client
            .clone()
            .header("traceparent", &hostile)
            .call("GET", "/api/console/clusters", None)
            .await;
        assert_eq!(status, 200, "{hostile}");
    }
    let lists = eventually(30, "the four list requests' spans", || {
        let spans = spans.lock().unwrap().clone();
        async move {
            let lists: Vec<_> = spans
                .into_iter()
                .filter(|s| s.name == "GET /api/console/clusters")
                .collect();
            (lists.len() == 4).then_some(lists)
        }
    })
    .await;
    for list in &lists {
        assert_ne!(list.trace_id, trace_id);
        assert_ne!(list.trace_id, "0".repeat(32));
        assert_eq!(list.parent_span_id, "", "a root span: {list:?}");
    }
    local.stop().await;
}
