//! Tracing setup: JSON lines when deployed, readable lines on a terminal, and
//! spans exported over OTLP where an endpoint is configured.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::{LogFormat, TraceExport};

pub mod metrics;
pub mod trace;

/// Installs the global subscriber once; later calls are ignored. With
/// `traces`, spans are exported too; an exporter that cannot be built is
/// logged and the process goes on without it.
pub fn init(format: LogFormat, traces: Option<&TraceExport>) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,lapin=warn,amq_protocol=warn"));
    let (otel, otel_error) = match traces.map(trace::layer) {
        Some(Ok(layer)) => (Some(layer), None),
        Some(Err(err)) => (None, Some(err)),
        None => (None, None),
    };
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let installed = match format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false),
            )
            .try_init(),
        LogFormat::Pretty => registry.with(fmt::layer().compact()).try_init(),
    };
    if installed.is_ok() {
        match (traces, otel_error) {
            (Some(export), None) => tracing::info!(
                endpoint = %without_credentials(&export.endpoint),
                service = %export.service_name,
                "exporting traces over OTLP"
            ),
            (Some(_), Some(err)) => {
                tracing::warn!(error = %err, "traces cannot be exported; going on without them")
            }
            _ => {}
        }
    }
}

/// A URL as it may be logged: any user name and password left out.
fn without_credentials(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        }
        Err(_) => "(unparseable)".into(),
    }
}
