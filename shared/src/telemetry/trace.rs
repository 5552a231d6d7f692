//! Traces: the `tracing` spans exported as OpenTelemetry spans over
//! OTLP/HTTP (protobuf) when an endpoint is configured, and the W3C trace
//! context that carries a trace from the request that enqueued a job to
//! every attempt of it.
//!
//! The context travels with the job's row (`cluster_jobs.trace_parent`), not
//! only in its wake-up: a job claimed after the sweep republished it, after a
//! retry, or from an Amazon MQ batch under Lambda continues the same trace.
//! Wake-ups carry the publishing span's context in their `traceparent`
//! header too, for whatever else reads the broker.

use std::{collections::HashMap, sync::OnceLock};

use opentelemetry::{
    Context,
    propagation::TextMapPropagator,
    trace::{TraceContextExt, TracerProvider as _},
};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::{Resource, propagation::TraceContextPropagator, trace::SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{Layer, registry::LookupSpan};

use crate::config::TraceExport;

/// The W3C header and the longest value of it read: a version-00
/// `traceparent` is 55 characters; a future version may append fields.
const TRACEPARENT: &str = "traceparent";
const MAX_TRACEPARENT: usize = 128;

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The layer that turns spans into OpenTelemetry spans for `export`, or the
/// reason it cannot be built. Spans are batched and sent by a thread of the
/// SDK's; under Lambda each invocation ends with [`flush`], before the
/// instance may be frozen.
pub(super) fn layer<S>(export: &TraceExport) -> Result<impl Layer<S> + use<S>, String>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(export.endpoint.clone())
        .build()
        .map_err(|err| err.to_string())?;
    let provider = SdkTracerProvider::builder()
        .with_resource(
            Resource::builder()
                .with_service_name(export.service_name.clone())
                .build(),
        )
        .with_batch_exporter(exporter)
        .build();
    let tracer = provider.tracer("kubebyon");
    PROVIDER
        .set(provider)
        .map_err(|_| "traces are already set up".to_string())?;
    Ok(tracing_opentelemetry::layer().with_tracer(tracer))
}

/// Whether spans are being exported.
fn exporting() -> bool {
    PROVIDER.get().is_some()
}

/// The `traceparent` naming the current span, when spans are exported.
pub fn current_traceparent() -> Option<String> {
    if !exporting() {
        return None;
    }
    let context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes `span` (not yet entered) a child of the span `traceparent` names.
/// A value that is not a valid trace context — it may come from any HTTP
/// client — is ignored and the span starts a trace of its own.
pub fn continue_trace(span: &tracing::Span, traceparent: &str) {
    if !exporting() || traceparent.len() > MAX_TRACEPARENT {
        return;
    }
    let carrier = HashMap::from([(TRACEPARENT.to_string(), traceparent.to_string())]);
    let context: Context = TraceContextPropagator::new().extract(&carrier);
    if context.span().span_context().is_valid() {
        let _ = span.set_parent(context);
    }
}

/// Sends every finished span now (the end of a Lambda invocation).
pub async fn flush() {
    if let Some(provider) = PROVIDER.get().cloned() {
        let _ = tokio::task::spawn_blocking(move || provider.force_flush()).await;
    }
}

/// Sends what is left and stops exporting (the end of the process).
pub async fn shutdown() {
    if let Some(provider) = PROVIDER.get().cloned() {
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }
}
