//! `migrate`: applies the database migrations and declares the RabbitMQ
//! topology (the exchange and one queue per job type), once per release,
//! before the release's functions start. Both are idempotent.
//!
//! As a process (the Helm chart's pre-install/pre-upgrade hook) it runs once
//! and exits. Under Lambda it is a CloudFormation custom resource: a
//! `Create` or `Update` applies both and answers `SUCCESS` (or `FAILED` with
//! the reason, which rolls the stack back) to the request's presigned
//! `ResponseURL`; a `Delete` changes nothing, since a stack's removal must
//! never drop the platform's data. The Lambda runtime starts before anything
//! that can fail: a secret that cannot be fetched or a setting that does not
//! parse is a `FAILED` answer naming it, and the `Delete` of the rollback
//! that follows is still answered `SUCCESS`, so a broken deployment never
//! leaves CloudFormation waiting for an answer.

use lambda_runtime::{LambdaEvent, service_fn};
use serde::{Deserialize, Serialize};
use shared::{
    config::{LogFormat, Settings},
    db,
    runtime::under_lambda,
    telemetry,
};
use tokio::sync::OnceCell;

/// The physical id of the one migration resource a stack holds.
const PHYSICAL_ID: &str = "kubebyon-migration";

pub async fn run() -> anyhow::Result<()> {
    if !under_lambda() {
        let settings = load().await?;
        telemetry::init(settings.log_format, None);
        return apply(&settings).await;
    }
    telemetry::init(LogFormat::Json, None);
    // Read at the first Create or Update, kept for the instance's life.
    let settings = OnceCell::new();
    lambda_runtime::run(service_fn(|event: LambdaEvent<CustomResourceRequest>| {
        let settings = &settings;
        async move { Ok::<_, lambda_runtime::Error>(handle(settings, event.payload).await) }
    }))
    .await
    .map_err(|err| anyhow::anyhow!("lambda runtime: {err}"))
}

/// The secrets, then the settings.
async fn load() -> anyhow::Result<Settings> {
    shared::config::fetch_secrets().await?;
    Ok(Settings::from_env()?)
}

/// Migrations, then the topology when `AMQP_URL` is set.
pub async fn apply(settings: &Settings) -> anyhow::Result<()> {
    db::migrated_pool(
        settings.require_database_url()?,
        settings.database_max_connections,
    )
    .await?
    .close()
    .await;
    match &settings.amqp_url {
        Some(url) => {
            queues::Topology::new(settings.amqp_exchange.clone())
                .declare_at(url)
                .await
                .map_err(|err| anyhow::anyhow!("declaring the RabbitMQ topology: {err}"))?;
            tracing::info!(
                exchange = settings.amqp_exchange,
                "RabbitMQ topology declared"
            );
        }
        None => tracing::info!("AMQP_URL not set: no RabbitMQ topology declared"),
    }
    Ok(())
}

/// What CloudFormation sends a custom resource's function.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CustomResourceRequest {
    pub request_type: String,
    #[serde(rename = "ResponseURL")]
    pub response_url: String,
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
}

/// What it expects back at the `ResponseURL`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct CustomResourceResponse<'a> {
    status: &'static str,
    reason: String,
    physical_resource_id: &'static str,
    stack_id: &'a str,
    request_id: &'a str,
    logical_resource_id: &'a str,
}

/// Handles one request and answers it at its `ResponseURL`; the
/// invocation's own result says what was answered.
async fn handle(
    settings: &OnceCell<Result<Settings, String>>,
    request: CustomResourceRequest,
) -> serde_json::Value {
    let outcome = match request.request_type.as_str() {
        "Create" | "Update" => {
            let loaded = settings
                .get_or_init(|| async { load().await.map_err(|err| format!("{err:#}")) })
                .await;
            match loaded {
                Ok(settings) => apply(settings).await,
                Err(err) => Err(anyhow::anyhow!("migrate cannot start: {err}")),
            }
        }
        "Delete" => Ok(()),
        other => Err(anyhow::anyhow!("unknown request type {other:?}")),
    };
    let (status, reason) = match &outcome {
        Ok(()) => ("SUCCESS", format!("{} done", request.request_type)),
        Err(err) => {
            tracing::error!(error = format!("{err:#}"), "migration failed");
            ("FAILED", format!("{err:#}"))
        }
    };
    let response = CustomResourceResponse {
        status,
        reason,
        physical_resource_id: PHYSICAL_ID,
        stack_id: &request.stack_id,
        request_id: &request.request_id,
        logical_resource_id: &request.logical_resource_id,
    };
    let body = serde_json::to_string(&response).expect("a response serializes");
    // The presigned URL signs no content type: send none.
    let sent = reqwest::Client::new()
        .put(&request.response_url)
        .body(body)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status);
    if let Err(err) = &sent {
        tracing::error!(error = %err, "the answer to CloudFormation could not be delivered");
    }
    serde_json::json!({ "status": status, "delivered": sent.is_ok() })
}
