//! Job handlers whose behaviour the test chooses, and seed data for them.

use std::sync::{
    Arc,
    atomic::{AtomicU32, Ordering},
};

use async_trait::async_trait;
use shared::{
    accounts::users,
    clusters::{self, Cluster, ClusterCreation, NewCluster},
    config::JobSettings,
    domain::{FailureCode, JobKind, JobPayload},
    jobs::{
        self, Finished, JobContext, JobError, JobHandler, JobMessage, JobPublisher, NewJob, Stage,
        SweepReport,
    },
};
use sqlx::PgPool;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Marks the cluster ready and completes, in one transaction.
    Succeed,
    /// Fails with a retryable error every time.
    Retryable,
    /// Fails with a fatal error.
    Fatal,
    /// Completes with nothing else to write (grouped with concurrent completions).
    CompleteAlone,
    /// Completes with nothing else to write; the first run works this long before.
    SlowFirstCompleteAlone(std::time::Duration),
    /// Loses its lease mid-run (another worker claims the job again), then
    /// tries to complete with nothing else to write.
    LoseLeaseThenCompleteAlone,
}

/// Counts its runs and does what it was told.
pub struct ScriptedHandler {
    pub kind: JobKind,
    pub behaviour: Behaviour,
    pub runs: Arc<AtomicU32>,
}

impl ScriptedHandler {
    pub fn new(kind: JobKind, behaviour: Behaviour) -> Arc<Self> {
        Arc::new(Self {
            kind,
            behaviour,
            runs: Arc::new(AtomicU32::new(0)),
        })
    }

    pub fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }
}

shared::stages! {
    SCRIPTED = "scripted step";
}

#[async_trait]
impl JobHandler for ScriptedHandler {
    fn kind(&self) -> JobKind {
        self.kind.clone()
    }

    fn stages(&self) -> Vec<Stage> {
        STAGES.to_vec()
    }

    async fn handle(&self, ctx: &JobContext) -> Result<Finished, JobError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        ctx.stage(SCRIPTED).await?;
        match self.behaviour {
            Behaviour::Succeed => {
                let mut tx = ctx.pool.begin().await?;
                sqlx::query("UPDATE clusters SET status = 'ready' WHERE id = $1")
                    .bind(ctx.job.cluster_id)
                    .execute(&mut *tx)
                    .await?;
                let completed = ctx.complete(&mut tx).await?;
                tx.commit().await?;
                Ok(completed)
            }
            Behaviour::Retryable => Err(JobError::retryable(
                FailureCode::HostUnreachable,
                format!("host API busy (run {run})"),
            )),
            Behaviour::Fatal => Err(JobError::fatal(
                FailureCode::ChartInstallFailed,
                "the chart values are invalid",
            )),
            Behaviour::CompleteAlone => ctx.complete_alone().await,
            Behaviour::SlowFirstCompleteAlone(work) => {
                if run == 1 {
                    tokio::time::sleep(work).await;
                }
                ctx.complete_alone().await
            }
            Behaviour::LoseLeaseThenCompleteAlone => {
                sqlx::query(
                    "UPDATE cluster_jobs SET attempt_count = attempt_count + 1, worker_id = 'other'
                     WHERE id = $1",
                )
                .bind(ctx.job.id)
                .execute(&ctx.pool)
                .await?;
                ctx.complete_alone().await
            }
        }
    }
}

/// A user and a cluster in `provisioning`, to hang jobs on.
pub async fn seed_cluster(pool: &PgPool) -> Uuid {
    let owner = users::ensure_development_user(pool).await.expect("user");
    let id = Uuid::new_v4();
    let name = format!("c{}", &id.simple().to_string()[..12]);
    let namespace = format!("kb-{}", id.simple());
    let mut tx = pool.begin().await.expect("tx");
    clusters::insert(
        &mut tx,
        &NewCluster {
            id,
            owner_user_id: owner,
            organization_id: shared::organizations::personal(pool, owner)
                .await
                .expect("read the personal organization")
                .expect("the user's personal organization"),
            name: &name,
            vcluster_name: &name,
            namespace: &namespace,
            kubernetes_version: "1.33",
            workload_cpu_limit_milli_cores: 1000,
            workload_memory_limit_mib: 1024,
            control_plane_cpu_request_milli_cores: 500,
            control_plane_memory_request_mib: 1024,
            public_access_mode: shared::domain::PublicAccessMode::Nodeport,
            managed_workload_ingress_enabled: false,
            tailscale_enabled: false,
            engine: shared::domain::Engine::Vcluster,
            networks: None,
        },
    )
    .await
    .expect("insert cluster");
    tx.commit().await.expect("commit");
    id
}

/// What a handler does to start a job: enqueues it in a transaction,
/// commits, then publishes its wake-up.
pub async fn enqueue_and_publish(
    pool: &PgPool,
    publisher: &dyn jobs::JobPublisher,
    new: NewJob<'_>,
) -> jobs::Enqueued {
    let mut tx = pool.begin().await.expect("tx");
    let enqueued = jobs::enqueue(&mut tx, new).await.expect("enqueue");
    tx.commit().await.expect("commit");
    jobs::publish_after_commit(pool, publisher, enqueued.job).await;
    enqueued
}

/// One sweep of the backbone (`jobs::sweep`) with every kind of work the
/// capabilities declare.
pub async fn sweep(
    pool: &PgPool,
    publisher: &dyn JobPublisher,
    settings: &JobSettings,
) -> Result<SweepReport, sqlx::Error> {
    jobs::sweep(
        pool,
        publisher,
        settings,
        &shared::app::capabilities::job_kinds(),
    )
    .await
}

/// Enqueues and commits a job for the cluster, without publishing it, with
/// the payload `payload` makes of the cluster (`ClusterCreation::of`).
pub async fn enqueue<P: JobPayload>(
    pool: &PgPool,
    cluster_id: Uuid,
    payload: impl FnOnce(&Cluster) -> P,
    max_attempts: i32,
) -> JobMessage {
    let cluster = clusters::get(pool, cluster_id)
        .await
        .expect("read cluster")
        .expect("seeded cluster");
    let (kind, payload) = jobs::encode(&payload(&cluster)).expect("encode payload");
    let mut tx = pool.begin().await.expect("tx");
    let enqueued = jobs::enqueue(
        &mut tx,
        NewJob {
            cluster_id,
            kind,
            requested_by: None,
            payload: &payload,
            max_attempts,
        },
    )
    .await
    .expect("enqueue");
    tx.commit().await.expect("commit");
    enqueued.job
}

/// Wake-ups of `count` create jobs (three attempts each), each of a new cluster.
pub async fn create_jobs(pool: &PgPool, count: usize) -> Vec<JobMessage> {
    let mut messages = Vec::with_capacity(count);
    for _ in 0..count {
        let cluster = seed_cluster(pool).await;
        messages.push(enqueue(pool, cluster, ClusterCreation::of, 3).await);
    }
    messages
}

/// The job's status column.
pub async fn job_status(pool: &PgPool, job_id: Uuid) -> String {
    jobs::get(pool, job_id)
        .await
        .expect("read job")
        .expect("job exists")
        .status
}

/// `LIKE` patterns of the two claim statements in `pg_prepared_statements`:
/// the claim of a set of wake-ups, and that of a lone wake-up.
pub const CLAIM_OF_A_SET: &str = "%wanted AS%FOR UPDATE OF j%";
pub const CLAIM_OF_ONE: &str = "%UPDATE cluster_jobs j%FROM relaxed%WHERE j.id = $1%";

/// How many times the claim statements ran on the connection `pool` hands
/// out next: give the worker a pool of one connection to count every claim.
pub async fn claims_run(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(generic_plans + custom_plans), 0)::bigint FROM pg_prepared_statements
         WHERE (statement LIKE $1 OR statement LIKE $2)
           AND statement NOT LIKE '%pg_prepared_statements%'",
    )
    .bind(CLAIM_OF_A_SET)
    .bind(CLAIM_OF_ONE)
    .fetch_one(pool)
    .await
    .expect("read the prepared statements")
}

/// Makes a plan of `max_clusters` clusters and `max_nodes` nodes (CPU and
/// memory 100,000, 5 hostnames, 5 databases) the default plan of every user without a
/// paid order.
pub async fn default_plan(pool: &PgPool, name: &str, max_clusters: i32, max_nodes: i32) -> Uuid {
    let plan: Uuid = sqlx::query_scalar(
        "INSERT INTO plans (name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib,
                            max_hostnames, max_databases, price_minor_units, currency)
         VALUES ($1, $2, $3, 100000, 100000, 5, 5, 0, 'usd') RETURNING id",
    )
    .bind(name)
    .bind(max_clusters)
    .bind(max_nodes)
    .fetch_one(pool)
    .await
    .expect("plan");
    sqlx::query("UPDATE billing_settings SET default_plan_id = $1")
        .bind(plan)
        .execute(pool)
        .await
        .expect("default plan");
    plan
}
