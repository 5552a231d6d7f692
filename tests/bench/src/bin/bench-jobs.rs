//! The platform's side of the job backbone benchmark (`tests/bench/backbone.py`
//! drives it beside graphile-worker and Celery). Every job goes through the
//! production code: `jobs::enqueue` in a transaction, commit, the RabbitMQ
//! publisher with confirms, `published_at`; the production `Consumer` and
//! `Worker` (claim with a lease, the handler, the fenced completion, the ack).
//! Only the handler is the benchmark's: it appends `<job id> <µs since the
//! epoch>` to a log, then completes the job with nothing else to write
//! (`JobContext::complete_alone`, the grouped completion).
//!
//! Usage:
//! - `bench-jobs prepare --clusters N`: migrates the database at DATABASE_URL
//!   (a fresh one), adds N clusters (one active job per cluster is the rule)
//!   and purges the benchmark's queues.
//! - `bench-jobs enqueue --jobs N [--concurrency C] [--log FILE]`: N jobs as
//!   fast as C tasks can, one transaction each.
//! - `bench-jobs enqueue --rate R --seconds S --log FILE`: open loop, R jobs a
//!   second for S seconds, each on its own task at its due time.
//! - `bench-jobs work --log FILE`: a worker process until SIGTERM.
//! - `bench-jobs wake-receive --via amqp|notify --log FILE` and
//!   `bench-jobs wake-send --via amqp|notify|sql --rate R --seconds S --sent FILE
//!   --log FILE`: the floor of a wake-up, no job involved. `amqp`: the
//!   production publisher (persistent message, confirm) to a bare consumer
//!   of the benchmark's queue (prefetch, manual ack); `notify`: `pg_notify`
//!   on a held connection to a `LISTEN`ing one, graphile-worker's trigger;
//!   `sql`: `SELECT 1` on a held connection, answered in the sender (no
//!   receiver). The sender logs each wake-up before sending it, the receiver
//!   on its arrival.
//!
//! `--log` of `enqueue` records each job's commit time, that of `work` each
//! handler start. The exchange is `AMQP_EXCHANGE` (the harness sets its own).

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]

use std::{
    io::Write,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use async_trait::async_trait;
use futures_util::StreamExt;
use lapin::{
    options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueuePurgeOptions},
    types::FieldTable,
};
use queues::{AmqpPublisher, Consumer, Topology};
use secrecy::ExposeSecret;
use serde_json::json;
use shared::{
    clusters::ClusterChanges,
    config::Settings,
    db,
    domain::{JobKind, JobPayload},
    jobs::{
        self, Finished, JobContext, JobError, JobHandler, JobMessage, JobPublisher, NewJob, Stage,
        Worker, publish_after_commit,
    },
};
use sqlx::{PgPool, Postgres, pool::PoolConnection, postgres::PgListener};
use uuid::Uuid;

/// The kind of job the benchmark's jobs are (their handler reads no payload).
const KIND: JobKind = ClusterChanges::KIND;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let settings = Settings::from_env()?;
    let url = settings.require_database_url()?.clone();
    // The worker's pool is a job function's; the enqueuer stands for the HTTP functions.
    let workload = match args.first().map(String::as_str) {
        Some("work") => db::Workload::Jobs,
        _ => db::Workload::Requests,
    };
    let pool = db::lazy_pool(&url, settings.database_max_connections, workload)?;
    let topology = Topology::new(settings.amqp_exchange.clone());
    let amqp = settings.amqp_url.clone().context("AMQP_URL is required")?;
    match args.first().map(String::as_str) {
        Some("prepare") => prepare(&pool, &amqp, &topology, number(&args, "--clusters")?).await,
        Some("enqueue") => {
            let publisher: Arc<dyn JobPublisher> = Arc::new(AmqpPublisher::new(amqp, topology));
            // As an HTTP function that has been up a moment: its broker
            // connection was opened in the background at start.
            publisher.connect().await?;
            let log = args_value(&args, "--log").map(Log::create).transpose()?;
            match args_value(&args, "--rate") {
                Some(_) => {
                    open_loop(
                        &pool,
                        &publisher,
                        number(&args, "--rate")?,
                        number(&args, "--seconds")?,
                        log,
                    )
                    .await
                }
                None => {
                    closed_loop(
                        &pool,
                        &publisher,
                        number(&args, "--jobs")?,
                        args_value(&args, "--concurrency")
                            .map(str::parse)
                            .transpose()?
                            .unwrap_or(16),
                        log,
                    )
                    .await
                }
            }
        }
        Some("work") => {
            let log = Log::create(args_value(&args, "--log").context("--log FILE")?)?;
            let handler: Arc<dyn JobHandler> = Arc::new(NoOp { log });
            let worker = Worker::new(
                pool,
                settings.jobs.clone(),
                settings.worker_id,
                vec![handler],
            );
            Consumer::new(amqp, topology, worker)
                .run(shared::runtime::shutdown_signal())
                .await;
            Ok(())
        }
        Some("wake-receive") => {
            let log = Log::create(args_value(&args, "--log").context("--log FILE")?)?;
            let via = args_value(&args, "--via")
                .context("--via amqp|notify")?
                .to_owned();
            // On a task of the runtime, as the production consumer runs.
            let receiver = tokio::spawn(async move {
                match via.as_str() {
                    "amqp" => receive_amqp(&amqp, &topology, &log).await,
                    "notify" => receive_notify(&pool, &log).await,
                    other => anyhow::bail!("--via {other}: amqp or notify"),
                }
            });
            tokio::select! {
                () = shared::runtime::shutdown_signal() => Ok(()),
                result = receiver => result?,
            }
        }
        Some("wake-send") => {
            // Connections opened before the first wake-up.
            let wake = match args_value(&args, "--via") {
                Some("amqp") => {
                    let publisher = AmqpPublisher::new(amqp, topology);
                    publisher.connect().await?;
                    Wake::Amqp(Box::new(publisher))
                }
                Some("notify") => Wake::Notify(pool.acquire().await?),
                Some("sql") => Wake::RoundTrip(
                    pool.acquire().await?,
                    Log::create(args_value(&args, "--log").context("--log FILE")?)?,
                ),
                _ => anyhow::bail!("--via amqp|notify|sql"),
            };
            let sent = Log::create(args_value(&args, "--sent").context("--sent FILE")?)?;
            wake_send(
                wake,
                number(&args, "--rate")?,
                number(&args, "--seconds")?,
                &sent,
            )
            .await
        }
        _ => anyhow::bail!(
            "usage: bench-jobs prepare|enqueue|work|wake-receive|wake-send (see the source's header)"
        ),
    }
}

fn args_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).map(String::as_str)
}

fn number(args: &[String], name: &str) -> anyhow::Result<usize> {
    args_value(args, name)
        .with_context(|| format!("{name} N"))?
        .parse()
        .with_context(|| format!("{name} takes a number"))
}

fn now_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// A line-per-event log written with one `write` each, so a killed process
/// leaves every line it wrote.
#[derive(Clone)]
struct Log(Arc<Mutex<std::fs::File>>);

impl Log {
    fn create(path: &str) -> anyhow::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {path}"))?;
        Ok(Self(Arc::new(Mutex::new(file))))
    }

    fn record(&self, job_id: Uuid) {
        let line = format!("{job_id} {}\n", now_micros());
        let mut file = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(err) = file.write_all(line.as_bytes()) {
            tracing::error!(error = %err, "cannot write the benchmark log");
        }
    }
}

struct NoOp {
    log: Log,
}

#[async_trait]
impl JobHandler for NoOp {
    fn kind(&self) -> JobKind {
        KIND
    }

    fn stages(&self) -> Vec<Stage> {
        Vec::new()
    }

    async fn handle(&self, ctx: &JobContext) -> Result<Finished, JobError> {
        self.log.record(ctx.job.id);
        ctx.complete_alone().await
    }
}

async fn prepare(
    pool: &PgPool,
    amqp: &secrecy::SecretString,
    topology: &Topology,
    clusters: usize,
) -> anyhow::Result<()> {
    db::MIGRATOR.run(pool).await?;
    bench::seed_clusters(pool, "bench@example.com", clusters).await?;
    let connection =
        lapin::Connection::connect(amqp.expose_secret(), lapin::ConnectionProperties::default())
            .await?;
    let channel = connection.create_channel().await?;
    topology.declare(&channel).await?;
    channel
        .queue_purge(
            topology.queue(KIND.job_type).as_str().into(),
            QueuePurgeOptions::default(),
        )
        .await?;
    connection.close(200, "done".into()).await?;
    Ok(())
}

/// The enqueue path of the HTTP functions: the job in a transaction, commit,
/// then the wake-up published with a confirm and `published_at` stamped.
async fn enqueue_one(
    pool: &PgPool,
    publisher: &dyn JobPublisher,
    cluster_id: Uuid,
    log: Option<&Log>,
) -> anyhow::Result<()> {
    let payload = json!({});
    let mut tx = pool.begin().await?;
    let enqueued = jobs::enqueue(
        &mut tx,
        NewJob {
            cluster_id,
            kind: KIND,
            requested_by: None,
            payload: &payload,
            max_attempts: 5,
        },
    )
    .await?;
    tx.commit().await?;
    if let Some(log) = log {
        log.record(enqueued.job.job_id);
    }
    publish_after_commit(pool, publisher, enqueued.job).await;
    Ok(())
}

async fn idle_clusters(pool: &PgPool) -> anyhow::Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar(
        "SELECT c.id FROM clusters c
         WHERE NOT EXISTS (SELECT 1 FROM cluster_jobs j WHERE j.cluster_id = c.id)
         ORDER BY c.name",
    )
    .fetch_all(pool)
    .await?)
}

async fn closed_loop(
    pool: &PgPool,
    publisher: &Arc<dyn JobPublisher>,
    jobs: usize,
    concurrency: usize,
    log: Option<Log>,
) -> anyhow::Result<()> {
    let clusters = Arc::new(idle_clusters(pool).await?);
    anyhow::ensure!(clusters.len() >= jobs, "prepare at least {jobs} clusters");
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let tasks = (0..concurrency).map(|_| async {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= jobs {
                return Ok::<_, anyhow::Error>(());
            }
            enqueue_one(pool, publisher.as_ref(), clusters[i], log.as_ref()).await?;
        }
    });
    futures_util::future::try_join_all(tasks).await?;
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"enqueued": jobs, "seconds": elapsed, "per_second": jobs as f64 / elapsed})
    );
    Ok(())
}

async fn open_loop(
    pool: &PgPool,
    publisher: &Arc<dyn JobPublisher>,
    rate: usize,
    seconds: usize,
    log: Option<Log>,
) -> anyhow::Result<()> {
    let jobs = rate * seconds;
    let clusters = idle_clusters(pool).await?;
    anyhow::ensure!(clusters.len() >= jobs, "prepare at least {jobs} clusters");
    let interval = Duration::from_secs(1) / u32::try_from(rate)?;
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut late = 0usize;
    for (i, cluster_id) in clusters.into_iter().take(jobs).enumerate() {
        let due = started + interval * u32::try_from(i)?;
        if tokio::time::Instant::now() > due + Duration::from_millis(1) {
            late += 1;
        }
        tokio::time::sleep_until(due).await;
        let (pool, publisher, log) = (pool.clone(), publisher.clone(), log.clone());
        tasks.spawn(async move {
            enqueue_one(&pool, publisher.as_ref(), cluster_id, log.as_ref()).await
        });
    }
    // A saturated machine shows as failed enqueues (say, no connection free in
    // time), counted rather than ending the run.
    let mut failed = 0usize;
    while let Some(result) = tasks.join_next().await {
        if let Err(err) = result? {
            failed += 1;
            tracing::warn!(error = %err, "enqueue failed");
        }
    }
    println!(
        "{}",
        json!({"enqueued": jobs - failed, "failed": failed, "rate": rate, "seconds": seconds,
               "sent_late_over_1ms": late})
    );
    Ok(())
}

/// The channel of the `notify` wake-ups.
const WAKE_CHANNEL: &str = "bench_wake";

/// How `wake-send` wakes its receiver, and on what.
enum Wake {
    Amqp(Box<AmqpPublisher>),
    Notify(PoolConnection<Postgres>),
    /// No receiver: the answer is logged in the second field.
    RoundTrip(PoolConnection<Postgres>, Log),
}

/// Open loop: one wake-up every 1/`rate` s for `seconds`, each logged just
/// before it is sent. Sent one after another: at the rates this is for,
/// each is answered long before the next is due.
async fn wake_send(mut wake: Wake, rate: usize, seconds: usize, sent: &Log) -> anyhow::Result<()> {
    let interval = Duration::from_secs(1) / u32::try_from(rate)?;
    let started = tokio::time::Instant::now();
    let count = rate * seconds;
    for i in 0..count {
        tokio::time::sleep_until(started + interval * u32::try_from(i)?).await;
        let id = Uuid::new_v4();
        sent.record(id);
        match &mut wake {
            Wake::Amqp(publisher) => {
                let message = JobMessage {
                    job_id: id,
                    job_type: KIND.job_type,
                };
                publisher.publish(&[message]).await?;
            }
            Wake::Notify(conn) => {
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(WAKE_CHANNEL)
                    .bind(id.to_string())
                    .execute(&mut **conn)
                    .await?;
            }
            Wake::RoundTrip(conn, answered) => {
                sqlx::query("SELECT 1").execute(&mut **conn).await?;
                answered.record(id);
            }
        }
    }
    println!(
        "{}",
        json!({"sent": count, "rate": rate, "seconds": seconds})
    );
    Ok(())
}

/// A bare consumer of the benchmark's queue: logs each wake-up, acks it.
async fn receive_amqp(
    amqp: &secrecy::SecretString,
    topology: &Topology,
    log: &Log,
) -> anyhow::Result<()> {
    let connection =
        lapin::Connection::connect(amqp.expose_secret(), lapin::ConnectionProperties::default())
            .await?;
    let channel = connection.create_channel().await?;
    topology.declare(&channel).await?;
    channel.basic_qos(16, BasicQosOptions::default()).await?;
    let mut consumer = channel
        .basic_consume(
            topology.queue(KIND.job_type).as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    while let Some(delivery) = consumer.next().await {
        let delivery = delivery?;
        let message: JobMessage = serde_json::from_slice(&delivery.data)?;
        log.record(message.job_id);
        delivery.ack(BasicAckOptions::default()).await?;
    }
    Ok(())
}

/// A `LISTEN`ing connection: logs each notification's id.
async fn receive_notify(pool: &PgPool, log: &Log) -> anyhow::Result<()> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(WAKE_CHANNEL).await?;
    loop {
        let notification = listener.recv().await?;
        log.record(notification.payload().parse()?);
    }
}
