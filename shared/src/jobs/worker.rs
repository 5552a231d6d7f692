use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use futures_util::{
    FutureExt,
    future::{BoxFuture, Either},
};
use sqlx::{PgConnection, PgPool, Postgres, pool::PoolConnection};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;
use uuid::Uuid;

use super::{Failure, JobError, Stage, Unavailable, retry_delay};
use crate::{
    config::JobSettings,
    domain::{FailureCode, JobKind, JobPayload, JobType},
    jobs::{self, ClaimedJob, JobMessage, JobPublisher},
    telemetry::metrics::AttemptOutcome,
};

/// Proof that a handler ended its job inside a fenced transaction: succeeded
/// ([`JobContext::complete`], [`JobContext::complete_alone`]) or failed with
/// business state of its own ([`JobContext::fail_within`]).
#[must_use = "commit the transaction that finished the job, then return this"]
#[derive(Debug)]
pub struct Finished(Verdict);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Succeeded,
    Failed,
}

/// One job type's work. `handle` re-reads state, performs idempotent steps,
/// records its stage, and ends by writing its business state and calling
/// [`JobContext::complete`] in one transaction.
#[async_trait]
pub trait JobHandler: Send + Sync + 'static {
    /// The kind of work it does.
    fn kind(&self) -> JobKind;
    /// Every stage the handler may record, beyond the backbone's own
    /// (`jobs::STAGES`): recording another is a bug a debug build stops at.
    fn stages(&self) -> Vec<Stage>;
    async fn handle(&self, ctx: &JobContext) -> Result<Finished, JobError>;
}

/// A handler of one job type, by its payload type: the job type is the
/// payload's ([`JobPayload::KIND`]), and `run` gets the payload parsed
/// (a job of another type or a malformed payload fails as fatal before it).
/// Every such handler is a [`JobHandler`].
#[async_trait]
pub trait TypedJobHandler: Send + Sync + 'static {
    type Payload: JobPayload + Send;
    /// Every stage the handler may record ([`JobHandler::stages`]).
    fn stages(&self) -> Vec<Stage>;
    async fn run(&self, ctx: &JobContext, payload: Self::Payload) -> Result<Finished, JobError>;
}

#[async_trait]
impl<H: TypedJobHandler> JobHandler for H {
    fn kind(&self) -> JobKind {
        H::Payload::KIND
    }

    fn stages(&self) -> Vec<Stage> {
        TypedJobHandler::stages(self)
    }

    async fn handle(&self, ctx: &JobContext) -> Result<Finished, JobError> {
        let payload = ctx.payload::<H::Payload>()?;
        self.run(ctx, payload).await
    }
}

/// What a handler sees of the job and the platform.
pub struct JobContext {
    pub pool: PgPool,
    pub job: ClaimedJob,
    /// What its handler declares of the job's kind.
    kind: JobKind,
    completions: Completions,
    max_attempts: i32,
    follow_ups: std::sync::Mutex<Vec<JobMessage>>,
    /// The stages its handler declares, for the check of a debug build
    /// (a release build does not ask the handler for them on every job).
    #[cfg(debug_assertions)]
    declared: Vec<Stage>,
}

impl JobContext {
    /// Records the current step on the operation, so the console can show it.
    pub async fn stage(&self, stage: Stage) -> Result<(), JobError> {
        #[cfg(debug_assertions)]
        assert!(
            self.declared.contains(&stage) || super::STAGES.contains(&stage),
            "the handler of {} records the stage {stage:?}, which its stages() does not name",
            self.job.job_type
        );
        tracing::info!(stage = stage.as_str(), "job stage");
        if jobs::record_stage(&self.pool, &self.job, stage.as_str()).await? {
            Ok(())
        } else {
            Err(JobError::LeaseLost)
        }
    }

    /// The job's payload as its type defines it. A job of another type, or a
    /// payload that does not parse, fails the job: no attempt would read it.
    pub fn payload<P: JobPayload>(&self) -> Result<P, JobError> {
        if self.job.job_type != P::KIND.job_type {
            return Err(JobError::fatal(
                FailureCode::InvalidConfiguration,
                format!(
                    "a {} job does not carry a {} payload",
                    self.job.job_type,
                    P::KIND.job_type
                ),
            ));
        }
        P::deserialize(&self.job.payload).map_err(|e| {
            JobError::fatal(
                FailureCode::InvalidConfiguration,
                format!("the job's payload is malformed: {e}"),
            )
        })
    }

    /// The adapter a job acts on, or the honest failure `reason` when none is
    /// configured (recorded at the stage "connecting to the host cluster";
    /// `invalid_configuration`).
    pub async fn require<'a, T>(
        &self,
        adapter: &'a Option<std::sync::Arc<T>>,
        reason: &str,
    ) -> Result<&'a T, JobError> {
        match adapter {
            Some(adapter) => Ok(adapter),
            None => {
                self.stage(super::stage::CONNECTING).await?;
                Err(JobError::fatal(FailureCode::InvalidConfiguration, reason))
            }
        }
    }

    /// Records `stage` on the operation, then runs `step`: a failure is the
    /// job's error, naming the stage.
    pub async fn step<T, E: super::StepError>(
        &self,
        stage: Stage,
        step: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, JobError> {
        self.stage(stage).await?;
        step.await.map_err(|e| e.at_step(stage.as_str()))
    }

    /// Marks the job succeeded inside `tx`, fenced by the claimed attempt.
    pub async fn complete(&self, tx: &mut PgConnection) -> Result<Finished, JobError> {
        if jobs::complete(tx, &self.job).await? {
            Ok(Finished(Verdict::Succeeded))
        } else {
            Err(JobError::LeaseLost)
        }
    }

    /// Ends the job failed with `failure` inside `tx`, fenced by the claimed
    /// attempt, for a handler that records the failure in business state of
    /// its own in the same transaction. No retry follows.
    pub async fn fail_within(
        &self,
        tx: &mut PgConnection,
        failure: &Failure,
    ) -> Result<Finished, JobError> {
        if jobs::fail(
            tx,
            &self.job,
            failure,
            self.kind.lifecycle.map(|l| l.failed),
        )
        .await?
        {
            tracing::warn!(reason = failure.message, code = %failure.code, "job failed");
            Ok(Finished(Verdict::Failed))
        } else {
            Err(JobError::LeaseLost)
        }
    }

    /// Enqueues the job `payload` belongs to, on this job's cluster, in `tx`:
    /// the transaction that completes this job, after [`Self::complete`] (until
    /// then this job holds the cluster's active-job slot). Nothing is written
    /// when the cluster has other work queued. The wake-up is published once
    /// this job has succeeded, where the worker has a publisher; otherwise
    /// `sweep` publishes it. `true` when the job was written.
    pub async fn enqueue_follow_up<P: JobPayload>(
        &self,
        tx: &mut PgConnection,
        payload: &P,
    ) -> Result<bool, JobError> {
        let (kind, payload) = jobs::encode(payload).map_err(|e| {
            JobError::fatal(
                FailureCode::InvalidConfiguration,
                format!("the follow-up job's payload: {e}"),
            )
        })?;
        let enqueued = jobs::enqueue_if_idle(
            tx,
            jobs::NewJob {
                cluster_id: self.job.cluster_id,
                kind,
                requested_by: None,
                payload: &payload,
                max_attempts: self.max_attempts,
            },
        )
        .await?;
        if let Some(enqueued) = &enqueued {
            self.follow_ups
                .lock()
                .expect("follow-ups lock")
                .push(enqueued.job);
        }
        Ok(enqueued.is_some())
    }

    /// Marks the job succeeded with nothing else to write: its work was done
    /// already (say, by an attempt that lost its lease after committing). Such
    /// completions of concurrent jobs share one statement and one commit; this
    /// returns once the commit that includes it is done.
    pub async fn complete_alone(&self) -> Result<Finished, JobError> {
        if self.completions.complete(&self.job).await? {
            Ok(Finished(Verdict::Succeeded))
        } else {
            Err(JobError::LeaseLost)
        }
    }
}

type CompletionRequest = (Uuid, i32, oneshot::Sender<Result<bool, String>>);

/// Groups the completions of jobs with nothing else to write: a task takes
/// every request waiting and completes them in one statement, while the next
/// requests gather behind it (group commit). Started on first use.
#[derive(Clone)]
struct Completions {
    pool: PgPool,
    sender: Arc<OnceLock<mpsc::UnboundedSender<CompletionRequest>>>,
}

impl Completions {
    const MAX_BATCH: usize = 512;

    async fn complete(&self, job: &ClaimedJob) -> Result<bool, JobError> {
        let sender = self.sender.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(run_completions(self.pool.clone(), rx));
            tx
        });
        let (reply, answer) = oneshot::channel();
        sender
            .send((job.id, job.attempt, reply))
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?.map_err(|err| {
            JobError::retryable(FailureCode::Internal, format!("database error: {err}"))
        })
    }
}

fn stopped() -> JobError {
    JobError::retryable(FailureCode::Internal, "the completion task has stopped")
}

async fn run_completions(pool: PgPool, mut requests: mpsc::UnboundedReceiver<CompletionRequest>) {
    let mut connection = HeldConnection::new(pool);
    let mut batch = Vec::with_capacity(Completions::MAX_BATCH);
    while connection
        .next(&mut requests, &mut batch, Completions::MAX_BATCH)
        .await
        > 0
    {
        let ids: Vec<Uuid> = batch.iter().map(|r| r.0).collect();
        let attempts: Vec<i32> = batch.iter().map(|r| r.1).collect();
        let result = connection
            .run(async |conn| jobs::complete_many(conn, &ids, &attempts).await)
            .await
            .map(|done| done.into_iter().collect::<HashSet<Uuid>>());
        for (id, _, reply) in batch.drain(..) {
            let answer = match &result {
                Ok(done) => Ok(done.contains(&id)),
                Err(err) => Err(err.to_string()),
            };
            let _ = reply.send(answer);
        }
    }
}

/// A batch's wake-ups, and where to send its claimed jobs, keyed by wake-up.
type ClaimRequest = (
    Vec<JobMessage>,
    oneshot::Sender<Result<HashMap<JobMessage, ClaimedJob>, Unavailable>>,
);

/// Groups claims the way [`Completions`] groups completions: a task takes
/// every batch of wake-ups waiting and claims them in one statement, while
/// the next batches gather behind it. A lone batch goes straight through;
/// under load the statements grow instead of multiplying. Started on first
/// use; it ends when the last clone of its worker is dropped.
#[derive(Clone)]
struct Claims {
    claimer: Claimer,
    sender: Arc<OnceLock<mpsc::UnboundedSender<ClaimRequest>>>,
}

/// What the claiming task needs: who claims, and for how long.
#[derive(Clone)]
struct Claimer {
    pool: PgPool,
    worker_id: Arc<str>,
    lease: Duration,
}

impl Claims {
    const MAX_BATCHES: usize = 256;

    async fn claim(
        &self,
        messages: Vec<JobMessage>,
    ) -> Result<HashMap<JobMessage, ClaimedJob>, Unavailable> {
        let sender = self.sender.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(run_claims(self.claimer.clone(), rx));
            tx
        });
        let (reply, answer) = oneshot::channel();
        let stopped = || Unavailable::from(sqlx::Error::WorkerCrashed);
        sender.send((messages, reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run_claims(claimer: Claimer, mut requests: mpsc::UnboundedReceiver<ClaimRequest>) {
    let mut connection = HeldConnection::new(claimer.pool);
    let mut batch = Vec::with_capacity(Claims::MAX_BATCHES);
    while connection
        .next(&mut requests, &mut batch, Claims::MAX_BATCHES)
        .await
        > 0
    {
        let messages: Vec<JobMessage> = batch.iter().flat_map(|(m, _)| m.iter().copied()).collect();
        let result = connection
            .run(async |conn| {
                jobs::claim_many(conn, &messages, &claimer.worker_id, claimer.lease).await
            })
            .await;
        match result {
            Ok(claimed) => {
                let mut claimed: HashMap<JobMessage, ClaimedJob> = claimed
                    .into_iter()
                    .map(|job| (job.message(), job))
                    .collect();
                for (wanted, reply) in batch.drain(..) {
                    let mine = wanted
                        .iter()
                        .filter_map(|m| claimed.remove_entry(m))
                        .collect();
                    let _ = reply.send(Ok(mine));
                }
            }
            Err(err) => {
                let err = Unavailable::from(err);
                for (_, reply) in batch.drain(..) {
                    let _ = reply.send(Err(err.clone()));
                }
            }
        }
    }
}

/// The connection a grouping task sends its statements on, one at a time.
/// Kept while statements follow one another, so none pays the pool's checkout
/// (a round trip to test the connection on giving it back, and on taking it
/// when it sat idle for [`crate::db::TEST_IF_IDLE_FOR`]). Given back after an
/// error or [`Self::IDLE`] without a statement; after such a pause the next
/// statement takes a connection from the pool, which tests it first. A pool of
/// fewer than [`Self::MIN_POOL`] connections is left to the handlers: there
/// every statement checks one out and back.
struct HeldConnection {
    pool: PgPool,
    keep: bool,
    held: Option<(PoolConnection<Postgres>, Instant)>,
}

impl HeldConnection {
    const IDLE: Duration = Duration::from_secs(5);
    /// The claim's and the completions' connections, and two for handlers.
    const MIN_POOL: u32 = 4;

    fn new(pool: PgPool) -> Self {
        Self {
            keep: pool.options().get_max_connections() >= Self::MIN_POOL,
            pool,
            held: None,
        }
    }

    /// Waits for the next requests like `recv_many`, giving the connection
    /// back when none come for [`Self::IDLE`].
    async fn next<T>(
        &mut self,
        requests: &mut mpsc::UnboundedReceiver<T>,
        batch: &mut Vec<T>,
        limit: usize,
    ) -> usize {
        if self.held.is_some() {
            if let Ok(received) =
                tokio::time::timeout(Self::IDLE, requests.recv_many(batch, limit)).await
            {
                return received;
            }
            self.give_back();
        }
        requests.recv_many(batch, limit).await
    }

    /// Runs one statement on the held connection (taking one first if need
    /// be). The connection goes back after an error, or at once when the pool
    /// is too small to keep one.
    async fn run<T>(
        &mut self,
        statement: impl AsyncFnOnce(&mut PgConnection) -> Result<T, sqlx::Error>,
    ) -> Result<T, sqlx::Error> {
        let result = match self.get().await {
            Ok(connection) => statement(connection).await,
            Err(err) => Err(err),
        };
        if result.is_err() || !self.keep {
            self.give_back();
        }
        result
    }

    async fn get(&mut self) -> Result<&mut PgConnection, sqlx::Error> {
        // A connection left alone that long (say, in a frozen function) may
        // have been closed at the other end: let the pool test it or another.
        if self
            .held
            .as_ref()
            .is_some_and(|(_, used)| used.elapsed() >= Self::IDLE)
        {
            self.give_back();
        }
        if self.held.is_none() {
            self.held = Some((self.pool.acquire().await?, Instant::now()));
        }
        let (connection, used) = self.held.as_mut().expect("a connection is held");
        *used = Instant::now();
        Ok(&mut **connection)
    }

    fn give_back(&mut self) {
        self.held = None;
    }
}

/// What became of one delivered wake-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// The job was not claimable: already done, running elsewhere, not due, or unknown.
    Skipped,
    Succeeded,
    /// A retryable failure; the job is pending again.
    RetryScheduled,
    /// Ended failed (fatal, or out of attempts).
    Failed,
    /// The lease was lost mid-run; the job belongs to another worker now.
    LeaseLost,
    /// No handler for this job type runs here.
    NoHandler,
}

impl Processed {
    /// How a job attempt that ran ended, for the metrics.
    fn attempt_outcome(&self) -> Option<AttemptOutcome> {
        match self {
            Self::Succeeded => Some(AttemptOutcome::Succeeded),
            Self::RetryScheduled => Some(AttemptOutcome::Retried),
            Self::Failed => Some(AttemptOutcome::Failed),
            Self::LeaseLost => Some(AttemptOutcome::LeaseLost),
            Self::Skipped | Self::NoHandler => None,
        }
    }
}

/// Claims, runs and finishes jobs for the handlers it was given.
#[derive(Clone)]
pub struct Worker {
    pool: PgPool,
    completions: Completions,
    claims: Claims,
    settings: JobSettings,
    handlers: Arc<HashMap<JobType, Arc<dyn JobHandler>>>,
    follow_up_publisher: Arc<OnceLock<Arc<dyn JobPublisher>>>,
}

impl Worker {
    pub fn new(
        pool: PgPool,
        settings: JobSettings,
        worker_id: impl Into<Arc<str>>,
        handlers: Vec<Arc<dyn JobHandler>>,
    ) -> Self {
        let handlers = handlers
            .into_iter()
            .map(|h| (h.kind().job_type, h))
            .collect();
        Self {
            claims: Claims {
                claimer: Claimer {
                    pool: pool.clone(),
                    worker_id: worker_id.into(),
                    lease: settings.lease,
                },
                sender: Arc::default(),
            },
            completions: Completions {
                pool: pool.clone(),
                sender: Arc::default(),
            },
            pool,
            settings,
            handlers: Arc::new(handlers),
            follow_up_publisher: Arc::default(),
        }
    }

    /// Publishes the wake-ups of the jobs handlers enqueue as follow-ups
    /// ([`JobContext::enqueue_follow_up`]) through `publisher`, once the job
    /// that enqueued them has succeeded. Set once, for this worker and its
    /// clones; without it the follow-ups wait for `sweep`.
    pub fn publish_follow_ups_with(&self, publisher: Arc<dyn JobPublisher>) {
        if self.follow_up_publisher.set(publisher).is_err() {
            tracing::warn!("this worker already publishes its follow-up jobs elsewhere");
        }
    }

    pub fn job_types(&self) -> Vec<JobType> {
        let mut types: Vec<_> = self.handlers.keys().copied().collect();
        types.sort();
        types
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn settings(&self) -> &JobSettings {
        &self.settings
    }

    /// Opens the pool's first connections (those the claims and completions
    /// take, and two for handlers) ahead of the first wake-up, which would
    /// otherwise wait for PostgreSQL to start backends: tens of milliseconds
    /// each, a few hundred when many processes start at once. For a
    /// long-lived consumer; a database it cannot reach yet is only logged,
    /// its wake-ups will find that out and be given back.
    pub async fn connect(&self) {
        let count = self
            .pool
            .options()
            .get_max_connections()
            .min(HeldConnection::MIN_POOL);
        let opened = futures_util::future::join_all((0..count).map(|_| self.pool.acquire())).await;
        if let Some(Err(err)) = opened.iter().find(|c| c.is_err()) {
            tracing::warn!(error = %err, "cannot connect to the database yet");
        }
    }

    /// Handles one wake-up to the end. An `Err` is an infrastructure failure
    /// (the database is unreachable): the transport should redeliver later.
    pub async fn process(&self, message: JobMessage) -> Result<Processed, Unavailable> {
        let mut outcomes = self.process_batch(&[message]).await?;
        Ok(outcomes.pop().expect("one outcome per wake-up"))
    }

    /// Handles a batch of wake-ups: one statement claims every claimable job,
    /// then the handlers run concurrently. The outcomes are in the order of
    /// `messages`; a wake-up repeated in the batch runs its job once.
    pub async fn process_batch(
        &self,
        messages: &[JobMessage],
    ) -> Result<Vec<Processed>, Unavailable> {
        futures_util::future::join_all(self.start_batch(messages).await?)
            .await
            .into_iter()
            .collect()
    }

    /// Claims every claimable job of a batch of wake-ups in one statement and
    /// returns one run per wake-up, in the order of `messages`, to be awaited
    /// together: each ends when its job's outcome is recorded, so a transport
    /// can acknowledge each wake-up as soon as its own job is done.
    pub async fn start_batch<'a>(
        &'a self,
        messages: &'a [JobMessage],
    ) -> Result<Vec<BoxFuture<'a, Result<Processed, Unavailable>>>, Unavailable> {
        let handled: Vec<JobMessage> = messages
            .iter()
            .filter(|m| self.handlers.contains_key(&m.job_type))
            .copied()
            .collect();
        let mut claimed: HashMap<JobMessage, ClaimedJob> = if handled.is_empty() {
            HashMap::new()
        } else {
            self.claims.claim(handled).await?
        };
        Ok(messages
            .iter()
            .map(|message| {
                let handler = self.handlers.get(&message.job_type).cloned();
                // Each claimed job runs for the first of its wake-ups only.
                let job = handler.as_ref().and_then(|_| claimed.remove(message));
                async move {
                    let Some(handler) = handler else {
                        tracing::warn!(job_id = %message.job_id, job_type = %message.job_type, "no handler for job type");
                        return Ok(Processed::NoHandler);
                    };
                    let Some(job) = job else {
                        tracing::debug!(job_id = %message.job_id, "wake-up for a job that is not claimable; dropped");
                        return Ok(Processed::Skipped);
                    };
                    let span = tracing::info_span!(
                        "job",
                        otel.name = %format_args!("job {}", job.job_type),
                        otel.kind = "consumer",
                        job_id = %job.id,
                        job_type = %job.job_type,
                        attempt = job.attempt,
                        cluster_id = %job.cluster_id,
                    );
                    if let Some(parent) = &job.trace_parent {
                        crate::telemetry::trace::continue_trace(&span, parent);
                    }
                    self.run_claimed(handler, job).instrument(span).await
                }
                .boxed()
            })
            .collect())
    }

    async fn run_claimed(
        &self,
        handler: Arc<dyn JobHandler>,
        job: ClaimedJob,
    ) -> Result<Processed, Unavailable> {
        let started = Instant::now();
        let metrics = crate::telemetry::metrics::metrics();
        metrics.job_claimed(job.job_type, job.due_for);
        let kind = handler.kind();
        let ctx = JobContext {
            pool: self.pool.clone(),
            job: job.clone(),
            kind: kind.clone(),
            completions: self.completions.clone(),
            max_attempts: self.settings.max_attempts,
            follow_ups: Default::default(),
            #[cfg(debug_assertions)]
            declared: handler.stages(),
        };
        // The lease is extended beside the handler, in the same task (no task
        // to spawn, wake and abort for each job), and stops with the attempt
        // however it ends. Handlers await their I/O, so neither holds up the other.
        let result = {
            let handle = handler.handle(&ctx);
            let beat = heartbeat(&self.pool, &job, self.settings.lease);
            futures_util::pin_mut!(handle, beat);
            match futures_util::future::select(handle, beat).await {
                Either::Left((result, _)) => result,
                // The lease was lost: the handler's own fenced writes find out.
                Either::Right(((), handle)) => handle.await,
            }
        };
        let outcome = match result {
            Ok(Finished(Verdict::Succeeded)) => {
                let follow_ups =
                    std::mem::take(&mut *ctx.follow_ups.lock().expect("follow-ups lock"));
                if let Some(publisher) = self.follow_up_publisher.get() {
                    for message in follow_ups {
                        jobs::publish_after_commit(&self.pool, publisher.as_ref(), message).await;
                    }
                }
                Processed::Succeeded
            }
            Ok(Finished(Verdict::Failed)) => Processed::Failed,
            Err(JobError::LeaseLost) => Processed::LeaseLost,
            Err(JobError::Retryable(failure)) if job.attempt < job.max_attempts => {
                let delay = retry_delay(
                    job.attempt,
                    self.settings.retry_base,
                    self.settings.retry_max,
                );
                match jobs::schedule_retry(&self.pool, &job, &failure, delay).await? {
                    Some(at) => {
                        tracing::warn!(error = failure.message, code = %failure.code, retry_at = %at, "job attempt failed; retry scheduled");
                        Processed::RetryScheduled
                    }
                    None => Processed::LeaseLost,
                }
            }
            Err(JobError::Retryable(failure)) => {
                let given_up = Failure {
                    code: failure.code,
                    message: format!("gave up after {} attempts: {failure}", job.attempt),
                };
                self.fail(&job, &given_up, &kind).await?
            }
            Err(JobError::Fatal(failure)) => self.fail(&job, &failure, &kind).await?,
        };
        let elapsed = started.elapsed();
        if let Some(counted) = outcome.attempt_outcome() {
            metrics.job_attempt(job.job_type, counted, elapsed);
        }
        tracing::info!(
            ?outcome,
            elapsed_ms = elapsed.as_millis() as u64,
            "job attempt finished"
        );
        Ok(outcome)
    }

    async fn fail(
        &self,
        job: &ClaimedJob,
        failure: &Failure,
        kind: &JobKind,
    ) -> Result<Processed, Unavailable> {
        if jobs::fail(&self.pool, job, failure, kind.lifecycle.map(|l| l.failed)).await? {
            tracing::warn!(reason = failure.message, code = %failure.code, "job failed");
            Ok(Processed::Failed)
        } else {
            Ok(Processed::LeaseLost)
        }
    }
}

/// Extends the lease every third of its length while the handler runs.
async fn heartbeat(pool: &PgPool, job: &ClaimedJob, lease: Duration) {
    let mut interval = tokio::time::interval(lease / 3);
    interval.tick().await;
    loop {
        interval.tick().await;
        match jobs::heartbeat(pool, job, lease).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!("lease lost; the job's result will not be recorded");
                return;
            }
            Err(err) => tracing::warn!(error = %err, "heartbeat failed"),
        }
    }
}
