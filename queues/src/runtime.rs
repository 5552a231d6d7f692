//! The three entry points every function's `main` calls. Each reads the typed
//! settings once, sets up tracing and the database pool, and picks its runtime:
//! Lambda when `AWS_LAMBDA_RUNTIME_API` is set, a long-running process otherwise.

use std::{future::Future, pin::Pin, sync::Arc};

use anyhow::Context;
use aws_lambda_events::event::rabbitmq::RabbitMqEvent;
use axum::Router;
use lambda_runtime::{LambdaEvent, service_fn};
use shared::{
    config::{Millis, Settings},
    db,
    host::HostCluster,
    http::{AppState, Identity, with_common_layers},
    jobs::{self, JobHandler, JobPublisher, Worker},
    runtime::{ScheduleMode, run_schedule, serve_http, shutdown_signal, under_lambda},
    telemetry::{self, metrics::RunResult},
};
use sqlx::PgPool;
use tracing::Instrument;

use crate::{AmqpPublisher, Consumer, Topology, lambda::handle_batch};

/// What a standalone function has to work with.
#[derive(Clone)]
pub struct Platform {
    pub settings: Arc<Settings>,
    pub pool: PgPool,
    publisher: Arc<std::sync::OnceLock<Arc<dyn JobPublisher>>>,
}

impl Platform {
    pub async fn from_env(workload: db::Workload) -> anyhow::Result<Self> {
        shared::config::fetch_secrets().await?;
        let settings = Settings::from_env()?;
        shared::app::config::check(&settings)?;
        telemetry::init(settings.log_format, settings.traces.as_ref());
        let pool = db::lazy_pool_with(
            settings.require_database_url()?,
            settings.database_max_connections,
            workload,
            settings.database_session_settings,
        )
        .context("DATABASE_URL")?;
        Ok(Self {
            settings: Arc::new(settings),
            pool,
            publisher: Arc::default(),
        })
    }

    pub fn topology(&self) -> Topology {
        Topology::new(self.settings.amqp_exchange.clone())
    }

    /// The RabbitMQ publisher, made on first use; publishing functions need `AMQP_URL`.
    pub fn publisher(&self) -> anyhow::Result<Arc<dyn JobPublisher>> {
        if let Some(publisher) = self.publisher.get() {
            return Ok(publisher.clone());
        }
        let url = self
            .settings
            .amqp_url
            .clone()
            .context("environment variable AMQP_URL is required")?;
        let publisher: Arc<dyn JobPublisher> = Arc::new(AmqpPublisher::new(url, self.topology()));
        Ok(self.publisher.get_or_init(|| publisher).clone())
    }
}

/// Serves `GET /metrics` (OpenMetrics text, which Prometheus scrapes) on
/// `METRICS_PORT` when it is set, on `ip`, in the background: every figure
/// of this process, and the job backlog read from PostgreSQL at each scrape.
/// A port that cannot be bound stops the start with a message naming it.
/// Not served under Lambda (no listener there).
pub async fn serve_metrics(
    settings: &Settings,
    pool: PgPool,
    ip: std::net::IpAddr,
) -> anyhow::Result<()> {
    use axum::{http::header, routing::get};
    let Some(port) = settings.metrics_port.filter(|_| !under_lambda()) else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind((ip, port))
        .await
        .with_context(|| format!("cannot listen on port {port} (METRICS_PORT)"))?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics");
    // `/livez`, the liveness probe's, reads nothing: a process whose database
    // is slow is alive (`/metrics` waits for the job backlog's query).
    let router = Router::new().route("/livez", get(|| async { "ok" })).route(
        "/metrics",
        get(move || {
            let pool = pool.clone();
            async move {
                let metrics = shared::telemetry::metrics::metrics();
                match jobs::backlog(&pool).await {
                    Ok(backlog) => {
                        metrics.set_backlog(&shared::app::capabilities::job_kinds(), &backlog)
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "the job backlog cannot be read; its figures are the last read")
                    }
                }
                (
                    [(header::CONTENT_TYPE, shared::telemetry::metrics::CONTENT_TYPE)],
                    metrics.encode(),
                )
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown_signal())
            .await
        {
            tracing::error!(error = %err, "the metrics server stopped");
        }
    });
    Ok(())
}

/// An HTTP function: its routes behind API Gateway or on `PORT`.
pub async fn http_function(routes: fn() -> Router<AppState>) -> anyhow::Result<()> {
    let platform = Platform::from_env(db::Workload::Requests).await?;
    let publisher = platform.publisher()?;
    // A long-lived server connects now; a Lambda instance at its first
    // publish, so functions that never publish open no broker connection.
    if !under_lambda() {
        jobs::connect_in_background(&publisher);
    }
    serve_metrics(&platform.settings, platform.pool.clone(), ANY).await?;
    let state = AppState {
        publisher,
        identity: Identity::Accounts,
        pool: platform.pool.clone(),
        settings: platform.settings.clone(),
        host: shared::host::from_env().await?,
    };
    let served = serve_http(with_common_layers(routes(), state), platform.settings.port).await;
    telemetry::trace::shutdown().await;
    served
}

/// A job function: Amazon MQ event batches under Lambda, or a RabbitMQ consumer.
pub async fn job_function(handler: Arc<dyn JobHandler>) -> anyhow::Result<()> {
    let platform = Platform::from_env(db::Workload::Jobs).await?;
    let worker = Worker::new(
        platform.pool.clone(),
        platform.settings.jobs.clone(),
        platform.settings.worker_id.clone(),
        vec![handler],
    );
    match platform.publisher() {
        Ok(publisher) => worker.publish_follow_ups_with(publisher),
        Err(err) => {
            tracing::info!(error = %err, "follow-up jobs are published by sweep only");
        }
    }
    if under_lambda() {
        return lambda_runtime::run(service_fn(move |event: LambdaEvent<RabbitMqEvent>| {
            let worker = worker.clone();
            async move {
                let response = handle_batch(&worker, event.payload).await;
                telemetry::trace::flush().await;
                Ok::<_, lambda_runtime::Error>(response)
            }
        }))
        .await
        .map_err(|err| anyhow::anyhow!("lambda runtime: {err}"));
    }
    serve_metrics(&platform.settings, platform.pool.clone(), ANY).await?;
    let url = platform
        .settings
        .amqp_url
        .clone()
        .context("environment variable AMQP_URL is required")?;
    Consumer::new(url, platform.topology(), worker)
        .run(shutdown_signal())
        .await;
    telemetry::trace::shutdown().await;
    Ok(())
}

/// Every address: the metrics port of a deployed process.
const ANY: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

const HOST_REQUIRED: &str = "environment variable KUBEBYON_HOST_KUBECONFIG is required";

/// What one run of a schedule works with: the same in a schedule function
/// and inside `local`.
#[derive(Clone)]
pub struct ScheduleContext {
    pub pool: PgPool,
    pub settings: Arc<Settings>,
    host: Option<Arc<HostCluster>>,
    publisher: Option<Arc<dyn JobPublisher>>,
}

impl ScheduleContext {
    pub fn new(
        pool: PgPool,
        settings: Arc<Settings>,
        host: Option<Arc<HostCluster>>,
        publisher: Option<Arc<dyn JobPublisher>>,
    ) -> Self {
        Self {
            pool,
            settings,
            host,
            publisher,
        }
    }

    /// The host cluster, for schedules that declare they need it.
    pub fn host(&self) -> anyhow::Result<&HostCluster> {
        self.host.as_deref().context(HOST_REQUIRED)
    }

    /// The job publisher, for schedules that declare they need it.
    pub fn publisher(&self) -> anyhow::Result<&dyn JobPublisher> {
        self.publisher
            .as_deref()
            .context("environment variable AMQP_URL is required")
    }
}

/// One run of a schedule, answering its JSON summary.
pub type ScheduleRun =
    fn(ScheduleContext) -> Pin<Box<dyn Future<Output = anyhow::Result<serde_json::Value>> + Send>>;

/// A schedule function as data: `main` hands it to [`schedule_function`], and
/// `local` runs every one of them on its interval.
pub struct Schedule {
    pub name: &'static str,
    /// How often it runs when it loops: its variable and default
    /// (functions.toml's `interval_env` and `interval_ms`).
    pub interval: Millis,
    /// Whether it acts on the host cluster (then `KUBEBYON_HOST_KUBECONFIG` is required).
    pub needs_host: bool,
    /// Whether it publishes jobs (then `AMQP_URL` is required).
    pub needs_publisher: bool,
    pub run: ScheduleRun,
}

impl Schedule {
    /// One run, unless another run of this schedule (anywhere: another
    /// process, a CronJob still going, an overlapping Lambda invocation)
    /// holds its advisory lock; then this one steps aside at once and its
    /// summary says so.
    pub async fn run_exclusively(
        &self,
        context: ScheduleContext,
    ) -> anyhow::Result<serde_json::Value> {
        let span = tracing::info_span!(
            "schedule",
            otel.name = %format_args!("schedule {}", self.name),
            schedule = self.name,
        );
        self.run_locked(context).instrument(span).await
    }

    async fn run_locked(&self, context: ScheduleContext) -> anyhow::Result<serde_json::Value> {
        let metrics = shared::telemetry::metrics::metrics();
        let started = std::time::Instant::now();
        let lock = db::try_advisory_lock(&context.pool, &format!("schedule:{}", self.name))
            .await
            .context("taking the schedule's lock");
        let result = match lock {
            Ok(Some(lock)) => {
                let result = (self.run)(context).await;
                lock.release().await;
                result
            }
            Ok(None) => {
                tracing::info!(
                    schedule = self.name,
                    "another run of this schedule is in progress: this one steps aside"
                );
                metrics.schedule_run(self.name, RunResult::Skipped, started.elapsed());
                return Ok(serde_json::json!({ "skipped": "another run is in progress" }));
            }
            // The database cannot be reached, say: a failed run like any other.
            Err(err) => Err(err),
        };
        let outcome = if result.is_ok() {
            RunResult::Succeeded
        } else {
            RunResult::Failed
        };
        metrics.schedule_run(self.name, outcome, started.elapsed());
        result
    }
}

/// A schedule function: EventBridge under Lambda, `--once`, or a loop every
/// `interval`.
pub async fn schedule_function(schedule: &'static Schedule) -> anyhow::Result<()> {
    let platform = Platform::from_env(db::Workload::Requests).await?;
    let host = if schedule.needs_host {
        Some(shared::host::from_env().await?.context(HOST_REQUIRED)?)
    } else {
        None
    };
    let publisher = if schedule.needs_publisher {
        Some(platform.publisher()?)
    } else {
        None
    };
    let context = ScheduleContext::new(
        platform.pool.clone(),
        platform.settings.clone(),
        host,
        publisher,
    );
    let mode = ScheduleMode::from_process(schedule.interval.read(&platform.settings.environment)?);
    if matches!(mode, ScheduleMode::Loop(_)) {
        serve_metrics(&platform.settings, platform.pool.clone(), ANY).await?;
    }
    let ran = run_schedule(schedule.name, mode, move || {
        schedule.run_exclusively(context.clone())
    })
    .await;
    telemetry::trace::shutdown().await;
    ran
}
