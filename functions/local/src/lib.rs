//! `local`: the whole platform in one process. Every HTTP function's router is
//! mounted under its route prefix, every job handler runs, and `sweep` runs on
//! its interval. With `AMQP_URL` the jobs travel through RabbitMQ; without it
//! they are dispatched in-process through the same claim/lease/finish code.
//! Without `DATABASE_URL` a private PostgreSQL is started from the installed
//! server binaries.
//!
//! Commands: `local` (run), `local migrate` (apply migrations and exit),
//! `local reseal-settings` (re-seal the stored secrets under the current
//! `KUBEBYON_SETTINGS_KEY`, opening them with `KUBEBYON_SETTINGS_KEY_PREVIOUS`),
//! `local openapi` (print the OpenAPI document). `--development` makes every
//! console request act as one development user; it binds to loopback only,
//! answers loopback host names only and refuses cross-site writes. Nothing
//! else switches that identity on: without the flag, callers authenticate.

mod postgres;
mod registry;

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use axum::Router;
use queues::{AmqpPublisher, Consumer, Topology, inprocess, runtime::ScheduleContext};
use secrecy::SecretString;
use shared::{
    accounts::AdminUpsert,
    config::Settings,
    db,
    host::HostCluster,
    http::{AppState, Identity, loopback_only, with_common_layers},
    jobs::{self, JobPublisher, Worker},
    runtime::{report_failed_run, serve_http_on},
    telemetry,
};
use tokio::sync::watch;

pub use postgres::{EmbeddedPostgres, run_as};
pub use registry::{ROUTERS, handlers, schedules};

/// The OpenAPI document of every HTTP function, with every stage a job
/// records as the `JobStage` enum.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut document =
        shared::openapi::document(registry::documents(), shared::http::problem_codes());
    let stages = handlers(None, None)
        .iter()
        .flat_map(|h| h.stages())
        .collect::<Vec<_>>();
    jobs::stage::document(&mut document, stages);
    shared::http::owned::document(&mut document);
    document
}

/// Every HTTP function's routes, as the API gateway would mount them: the
/// API under `/api`, the join endpoints, and the console at `/`.
pub fn routes() -> Router<AppState> {
    ROUTERS
        .iter()
        .fold(Router::new(), |all, (_, router)| all.merge(router()))
}

/// Keeps a simulated host running while it is held (empty for a real host),
/// with the HTTPS front its clusters call the admission webhook through.
#[derive(Default)]
pub struct SimulatedHost {
    #[cfg(feature = "simulator")]
    _simulator: Option<Arc<kube_sim::Simulator>>,
    #[cfg(feature = "simulator")]
    _admission_front: Option<kube_sim::TlsFront>,
}

/// The host cluster: the one `KUBEBYON_HOST_KUBECONFIG` names, or else (in
/// builds with the `simulator` feature, the default) a Kubernetes API
/// simulator started in this process playing a k3s host (a demo and test
/// tool: its control planes are simulated, not real). Deployment images are
/// built without it. `port` is where this process serves its API.
pub async fn host(port: u16) -> anyhow::Result<(Arc<HostCluster>, SimulatedHost)> {
    if let Some(host) = shared::host::from_env().await? {
        return Ok((host, SimulatedHost::default()));
    }
    simulated_host(port).await
}

#[cfg(not(feature = "simulator"))]
async fn simulated_host(_port: u16) -> anyhow::Result<(Arc<HostCluster>, SimulatedHost)> {
    anyhow::bail!(
        "KUBEBYON_HOST_KUBECONFIG must name the host cluster's kubeconfig: this build of local has no simulator (feature `simulator`)"
    )
}

/// Unless `KUBEBYON_ADMISSION_URL` says otherwise, the simulated clusters
/// call the admission webhook through an HTTPS front of this process's own
/// (a CA made at start, given to them as `caBundle`), as API servers call
/// webhooks over HTTPS only: the limits are enforced inside them here too.
#[cfg(feature = "simulator")]
async fn simulated_host(port: u16) -> anyhow::Result<(Arc<HostCluster>, SimulatedHost)> {
    let simulator = kube_sim::Simulator::start(kube_sim::Options::host()).await?;
    tracing::warn!(url = %simulator.url(), "KUBEBYON_HOST_KUBECONFIG not set: using the Kubernetes API simulator as the host cluster");
    let mut settings = shared::host::HostSettings::from_source(&shared::config::ProcessEnv)?;
    settings.node_address = "127.0.0.1".into();
    settings.poll_interval = settings
        .poll_interval
        .min(std::time::Duration::from_millis(200));
    let admission_front = if settings.admission_url.is_none() {
        let upstream = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
        let front = kube_sim::TlsFront::start(upstream).await?;
        tracing::info!(url = %front.url, "the simulated clusters call the admission webhook over HTTPS here");
        settings.admission_url = Some(front.url.clone());
        settings.admission_ca_pem = Some(front.ca_pem.clone());
        Some(front)
    } else {
        None
    };
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&simulator.kubeconfig(None))?;
    let host = HostCluster::from_kubeconfig(kubeconfig, settings).await?;
    Ok((
        Arc::new(host),
        SimulatedHost {
            _simulator: Some(simulator),
            _admission_front: admission_front,
        },
    ))
}

pub async fn run(args: Vec<String>) -> anyhow::Result<()> {
    let development = args.iter().any(|a| a == "--development");
    let args: Vec<&String> = args.iter().filter(|a| *a != "--development").collect();
    if let Some(unknown) = args.iter().find(|a| a.starts_with('-')) {
        anyhow::bail!("unknown option {unknown:?}; the only option is --development");
    }
    let command = args.first().map(|a| a.as_str()).unwrap_or("run");
    if command == "openapi" {
        #[allow(clippy::print_stdout)]
        {
            println!("{}", openapi().to_pretty_json()?);
        }
        return Ok(());
    }
    // Neither needs the platform's settings or a database.
    match command {
        "check-url" => return check_urls(&args[1..]).await,
        "doctor" => return doctor().await,
        _ => {}
    }
    let settings = Settings::from_env()?;
    shared::app::config::check(&settings)?;
    telemetry::init(settings.log_format, settings.traces.as_ref());
    let (database_url, embedded) = match &settings.database_url {
        Some(url) => (url.clone(), None),
        None => {
            let data_dir = std::env::var_os("KUBEBYON_DATA_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(".kubebyon"));
            let port = std::env::var("KUBEBYON_EMBEDDED_PG_PORT")
                .ok()
                .map(|p| {
                    p.parse()
                        .context("KUBEBYON_EMBEDDED_PG_PORT must be a port number")
                })
                .transpose()?
                .unwrap_or(55432);
            let pg = EmbeddedPostgres::start(&data_dir.join("postgres"), port).await?;
            (SecretString::from(pg.url()), Some(pg))
        }
    };
    let result = match command {
        "run" => serve(settings, database_url, development).await,
        "migrate" => db::migrated_pool(&database_url, settings.database_max_connections)
            .await
            .map(|_| ()),
        "reseal-settings" => reseal_settings(&settings, &database_url).await,
        "create-admin" => match args.get(1) {
            Some(email) if args.len() == 2 => create_admin(&settings, &database_url, email).await,
            _ => Err(anyhow::anyhow!(
                "usage: local create-admin EMAIL (the password is read from standard input)"
            )),
        },
        other => Err(anyhow::anyhow!(
            "unknown command {other:?}; expected run, migrate, create-admin, reseal-settings, doctor, openapi or check-url"
        )),
    };
    if let Some(pg) = embedded {
        pg.stop().await;
    }
    result
}

/// `local doctor`: checks the host cluster `KUBEBYON_HOST_KUBECONFIG` names
/// against the platform's prerequisites and the host settings, one line a
/// check; fails when one is not met.
async fn doctor() -> anyhow::Result<()> {
    let host = shared::host::from_env()
        .await?
        .context("KUBEBYON_HOST_KUBECONFIG is not set: name the host cluster's kubeconfig")?;
    let findings = host.doctor().await;
    for finding in &findings {
        #[allow(clippy::print_stdout)]
        {
            let mark = if finding.ok { "ok  " } else { "FAIL" };
            println!("{mark} {}: {}", finding.check, finding.detail);
        }
    }
    let failed = findings.iter().filter(|f| !f.ok).count();
    anyhow::ensure!(failed == 0, "{failed} of the host's prerequisites not met");
    Ok(())
}

/// `local check-url URL…`: GETs each URL and fails unless every one answers
/// 200 within 10 s, naming those that did not. The chart's `helm test` runs
/// it, as the image has no shell or curl.
async fn check_urls(urls: &[&String]) -> anyhow::Result<()> {
    anyhow::ensure!(!urls.is_empty(), "usage: local check-url URL…");
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    let mut failed = Vec::new();
    for url in urls {
        match http.get(url.as_str()).send().await {
            Ok(reply) if reply.status() == reqwest::StatusCode::OK => {
                #[allow(clippy::print_stdout)]
                {
                    println!("{url}: 200");
                }
            }
            Ok(reply) => failed.push(format!("{url}: {}", reply.status())),
            Err(error) => failed.push(format!("{url}: {error}")),
        }
    }
    anyhow::ensure!(failed.is_empty(), "{}", failed.join("; "));
    Ok(())
}

/// Makes `email` an administrator with the password on standard input
/// (one line; a trailing newline is not part of it), creating the account
/// when there is none: the first admin, without mail. An existing account is
/// promoted, its password replaced and, as after a password reset, its
/// sessions end and its API keys and kubeconfigs are revoked. Audited.
async fn create_admin(
    settings: &Settings,
    database_url: &SecretString,
    email: &str,
) -> anyhow::Result<()> {
    use std::io::Read;

    let email = shared::domain::EmailAddress::parse(email)
        .map_err(|reason| anyhow::anyhow!("EMAIL {reason}"))?;
    let mut password = String::new();
    std::io::stdin()
        .take(4096)
        .read_to_string(&mut password)
        .context("reading the password from standard input")?;
    let password = password
        .strip_suffix('\n')
        .map(|p| p.strip_suffix('\r').unwrap_or(p))
        .unwrap_or(&password)
        .to_string();
    shared::accounts::auth::check_password_policy(&password, email.as_str())
        .map_err(|reason| anyhow::anyhow!("the password {reason}"))?;
    let hash = shared::accounts::auth::hash_password(password)
        .await
        .map_err(|err| anyhow::anyhow!("hashing the password: {err}"))?;
    let pool = db::migrated_pool(database_url, settings.database_max_connections).await?;
    let display_name = email.as_str().split('@').next().unwrap_or("admin");
    let mut tx = pool.begin().await?;
    let (user_id, action, metadata) =
        match shared::accounts::upsert_admin(&mut tx, email.as_str(), display_name, &hash).await? {
            AdminUpsert::Created(id) => (id, "user.admin_created", serde_json::json!({})),
            AdminUpsert::Promoted(id) => {
                use shared::app::credentials::{self, Why};
                let why = Why::PasswordChanged { keep: None };
                let ended = credentials::end(&mut tx, id, id, why).await?;
                (id, "user.admin_promoted", ended.audit())
            }
            AdminUpsert::Deleted => anyhow::bail!(
                "the account of {} was deleted; it cannot be made an admin",
                email.as_str()
            ),
        };
    shared::audit::record(
        &mut *tx,
        shared::audit::AuditEvent {
            actor_user_id: None,
            actor_kind: "system",
            action,
            target_kind: "user",
            target_id: user_id.to_string(),
            cluster_id: None,
            metadata,
        },
    )
    .await?;
    tx.commit().await?;
    tracing::info!(%user_id, email = email.as_str(), action, "administrator ready: sign in with this address and password");
    Ok(())
}

/// Re-seals every stored secret under the current settings key, audited.
async fn reseal_settings(settings: &Settings, database_url: &SecretString) -> anyhow::Result<()> {
    let key = settings
        .secret_box()
        .context("KUBEBYON_SETTINGS_KEY must be set to the new key")?;
    let pool = db::migrated_pool(database_url, settings.database_max_connections).await?;
    let mut tx = pool.begin().await?;
    let done = shared::app::settings::reseal(&mut tx, &key).await?;
    shared::audit::record(
        &mut *tx,
        shared::audit::AuditEvent {
            actor_user_id: None,
            actor_kind: "system",
            action: "system.settings.resealed",
            target_kind: "system_settings",
            target_id: "system".into(),
            cluster_id: None,
            metadata: serde_json::json!({ "resealed": done.resealed, "already_current": done.current }),
        },
    )
    .await?;
    tx.commit().await?;
    tracing::info!(
        resealed = done.resealed,
        already_current = done.current,
        "every stored secret is sealed under the current key: KUBEBYON_SETTINGS_KEY_PREVIOUS can go"
    );
    Ok(())
}

async fn serve(
    settings: Settings,
    database_url: SecretString,
    development: bool,
) -> anyhow::Result<()> {
    let pool = db::migrated_pool(&database_url, settings.database_max_connections).await?;
    let settings = Arc::new(settings);
    let (host, _simulator) = host(settings.port).await?;
    let worker = Worker::new(
        pool.clone(),
        settings.jobs.clone(),
        settings.worker_id.clone(),
        handlers(Some(host.clone()), settings.secret_box().map(Arc::new)),
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let mut background = tokio::task::JoinSet::new();

    let publisher: Arc<dyn JobPublisher> = match &settings.amqp_url {
        Some(url) => {
            let topology = Topology::new(settings.amqp_exchange.clone());
            tracing::info!(exchange = %topology.exchange, "jobs travel through RabbitMQ");
            let publisher: Arc<dyn JobPublisher> =
                Arc::new(AmqpPublisher::new(url.clone(), topology.clone()));
            jobs::connect_in_background(&publisher);
            worker.publish_follow_ups_with(publisher.clone());
            let consumer = Consumer::new(url.clone(), topology, worker);
            background.spawn(consumer.run(stopped()));
            publisher
        }
        None => {
            tracing::info!("AMQP_URL not set: jobs are dispatched in-process");
            let (dispatcher, runner) = inprocess::channel(worker, settings.jobs.prefetch as usize);
            background.spawn(Arc::new(runner).run(stopped()));
            Arc::new(dispatcher)
        }
    };

    let context = ScheduleContext::new(
        pool.clone(),
        settings.clone(),
        Some(host.clone()),
        Some(publisher.clone()),
    );
    for schedule in schedules() {
        let context = context.clone();
        background.spawn(every(
            schedule.interval.read(&settings.environment)?,
            stopped(),
            move || {
                let context = context.clone();
                async move {
                    if let Err(err) = schedule.run_exclusively(context).await {
                        report_failed_run(schedule.name, &err);
                    }
                }
            },
        ));
    }

    let identity = if development {
        let user_id = shared::accounts::users::ensure_development_user(&pool)
            .await
            .context("creating the development user")?;
        tracing::warn!(
            "--development: every console request acts as {}, on 127.0.0.1 only",
            shared::accounts::users::DEVELOPMENT_EMAIL
        );
        Identity::Development(user_id)
    } else {
        Identity::Accounts
    };
    let ip: std::net::IpAddr = if development {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    };
    queues::runtime::serve_metrics(&settings, pool.clone(), ip).await?;
    let state = AppState {
        identity,
        pool,
        publisher,
        settings: settings.clone(),
        host: Some(host),
    };
    let router = with_common_layers(routes(), state);
    let router = if development {
        router.layer(axum::middleware::from_fn(loopback_only))
    } else {
        router
    };
    let served = serve_http_on(router, ip, settings.port).await;
    let _ = stop_tx.send(true);
    background.join_all().await;
    tracing::info!("stopped");
    shared::telemetry::trace::shutdown().await;
    served
}

/// Runs `task` every `interval` until `stop` resolves.
async fn every<F, Fut>(
    interval: std::time::Duration,
    stop: impl std::future::Future<Output = ()>,
    task: F,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = ticker.tick() => task().await,
        }
    }
}
