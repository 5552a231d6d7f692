//! The job backbone against real PostgreSQL, with the in-process transport:
//! enqueue, claim, lease, fencing, retries and the sweep.

use shared::clusters::ClusterChanges;
use shared::clusters::ClusterCreation;
use shared::clusters::ClusterDeletion;
use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use queues::inprocess;
use shared::{
    config::JobSettings,
    db,
    domain::{FailureCode, JobPayload},
    jobs::{self, JobPublisher, Processed, Worker},
};
use tests::{
    database::TestDb,
    handlers::{
        Behaviour, ScriptedHandler, claims_run, create_jobs, enqueue, job_status, seed_cluster,
        sweep,
    },
};

pub(crate) fn settings() -> JobSettings {
    JobSettings {
        lease: Duration::from_secs(30),
        max_attempts: 4,
        retry_base: Duration::from_millis(40),
        retry_max: Duration::from_secs(10),
        republish_after: Duration::from_secs(300),
        prefetch: 4,
    }
}

pub(crate) fn worker(db: &TestDb, id: &str, handler: Arc<ScriptedHandler>) -> Worker {
    Worker::new(db.pool.clone(), settings(), id, vec![handler])
}

/// A worker on a pool of its own with a single connection: every statement it
/// sends, and any the test sends on that pool, goes down the same one.
pub(crate) fn worker_on_one_connection(
    db: &TestDb,
    workload: db::Workload,
    id: &str,
    behaviour: Behaviour,
) -> (sqlx::PgPool, Worker) {
    let url = secrecy::SecretString::from(db.url.clone());
    let pool = db::lazy_pool(&url, 1, workload).unwrap();
    let handler = ScriptedHandler::new(ClusterCreation::KIND, behaviour);
    let worker = Worker::new(pool.clone(), settings(), id, vec![handler]);
    (pool, worker)
}

/// Claims the job of one wake-up directly, as a worker would.
async fn claim_one(
    pool: &sqlx::PgPool,
    message: jobs::JobMessage,
    worker_id: &str,
    lease: Duration,
) -> jobs::ClaimedJob {
    jobs::claim_many(pool, &[message], worker_id, lease)
        .await
        .unwrap()
        .pop()
        .expect("claimable")
}

/// A job of a new cluster that "worker-a" claimed with a 1 ms lease and
/// died holding: the lease has run out, so the next sweep rescues it.
/// Returns the cluster, the job's wake-up and the dead worker's claim.
pub(crate) async fn job_of_a_dead_worker(
    db: &TestDb,
    max_attempts: i32,
) -> (uuid::Uuid, jobs::JobMessage, jobs::ClaimedJob) {
    let cluster = seed_cluster(&db.pool).await;
    let message = enqueue(&db.pool, cluster, ClusterCreation::of, max_attempts).await;
    let dead = claim_one(&db.pool, message, "worker-a", Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    (cluster, message, dead)
}

#[tokio::test]
async fn a_rolled_back_enqueue_is_never_delivered_and_a_committed_one_is_delivered_once() {
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let (dispatcher, runner) = inprocess::channel(worker(&db, "w1", handler.clone()), 1);

    let mut tx = db.pool.begin().await.unwrap();
    jobs::enqueue(
        &mut tx,
        jobs::NewJob {
            cluster_id: cluster,
            kind: shared::clusters::ClusterCreation::KIND,
            requested_by: None,
            payload: &serde_json::json!({}),
            max_attempts: 3,
        },
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let report = sweep(&db.pool, &dispatcher, &settings()).await.unwrap();
    assert_eq!(report.published, 0);
    assert!(runner.run_until_idle().await.is_empty());
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM cluster_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let operations: i64 = sqlx::query_scalar("SELECT count(*) FROM cluster_operations")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        (jobs, operations),
        (0, 0),
        "a rolled-back enqueue leaves nothing behind"
    );

    let enqueued = tests::handlers::enqueue_and_publish(
        &db.pool,
        &dispatcher,
        jobs::NewJob {
            cluster_id: cluster,
            kind: shared::clusters::ClusterCreation::KIND,
            requested_by: None,
            payload: &serde_json::json!({}),
            max_attempts: 3,
        },
    )
    .await;
    let record = jobs::get(&db.pool, enqueued.job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        record.published_at.is_some(),
        "publish after commit stamps published_at"
    );
    // A sweep now finds nothing to publish: the wake-up is already out.
    assert_eq!(
        sweep(&db.pool, &dispatcher, &settings())
            .await
            .unwrap()
            .published,
        0
    );

    let done = runner.run_until_idle().await;
    assert_eq!(done, vec![(enqueued.job, Processed::Succeeded)]);
    assert_eq!(handler.runs(), 1);
    assert_eq!(job_status(&db.pool, enqueued.job.job_id).await, "succeeded");
    let operation = jobs::get_operation(&db.pool, enqueued.operation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (operation.status.as_str(), operation.stage.as_str()),
        ("succeeded", "done")
    );
    let cluster_status: String = sqlx::query_scalar("SELECT status FROM clusters WHERE id = $1")
        .bind(cluster)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        cluster_status, "ready",
        "business state committed with the completion"
    );
}

#[tokio::test]
async fn the_same_wake_up_delivered_twice_runs_the_handler_once() {
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let (dispatcher, runner) = inprocess::channel(worker(&db, "w1", handler.clone()), 1);
    let message = enqueue(&db.pool, cluster, ClusterCreation::of, 3).await;
    dispatcher.publish(&[message, message]).await.unwrap();
    let done = runner.run_until_idle().await;
    assert_eq!(
        done,
        vec![
            (message, Processed::Succeeded),
            (message, Processed::Skipped)
        ]
    );
    assert_eq!(handler.runs(), 1);
}

#[tokio::test]
async fn a_batch_of_wake_ups_claims_each_claimable_job_once_and_skips_the_rest() {
    let db = TestDb::new().await;
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let worker = worker(&db, "w1", handler.clone());
    let fresh = create_jobs(&db.pool, 3).await;
    let done = enqueue(
        &db.pool,
        seed_cluster(&db.pool).await,
        ClusterCreation::of,
        3,
    )
    .await;
    assert_eq!(worker.process(done).await.unwrap(), Processed::Succeeded);
    let wrong_type = jobs::JobMessage {
        job_type: shared::clusters::ClusterDeletion::KIND.job_type,
        ..fresh[2]
    };

    let batch = [fresh[0], fresh[1], fresh[0], done, wrong_type, fresh[2]];
    let outcomes = worker.process_batch(&batch).await.unwrap();
    assert_eq!(
        outcomes,
        vec![
            Processed::Succeeded,
            Processed::Succeeded,
            Processed::Skipped,   // the same wake-up again in the batch
            Processed::Skipped,   // already succeeded
            Processed::NoHandler, // no handler here for that type
            Processed::Succeeded,
        ]
    );
    assert_eq!(
        handler.runs(),
        4,
        "each job ran once, the earlier one included"
    );
    for message in &fresh {
        let record = jobs::get(&db.pool, message.job_id).await.unwrap().unwrap();
        assert_eq!(
            (record.status.as_str(), record.attempt_count),
            ("succeeded", 1)
        );
    }

    // A wake-up naming a job under another type never claims it.
    let other = enqueue(
        &db.pool,
        seed_cluster(&db.pool).await,
        ClusterCreation::of,
        3,
    )
    .await;
    let mislabelled = jobs::JobMessage {
        job_type: shared::clusters::ClusterDeletion::KIND.job_type,
        ..other
    };
    let claimed = jobs::claim_many(&db.pool, &[mislabelled], "w2", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(claimed.is_empty());
    assert_eq!(job_status(&db.pool, other.job_id).await, "pending");
}

#[tokio::test]
async fn completions_with_nothing_else_to_write_are_grouped_and_still_fenced() {
    let db = TestDb::new().await;
    let alone = ScriptedHandler::new(ClusterChanges::KIND, Behaviour::CompleteAlone);
    let worker_a = worker(&db, "w1", alone.clone());
    let mut batch = Vec::new();
    for _ in 0..20 {
        let cluster = seed_cluster(&db.pool).await;
        batch.push(enqueue(&db.pool, cluster, ClusterChanges::of, 3).await);
    }
    let outcomes = worker_a.process_batch(&batch).await.unwrap();
    assert_eq!(outcomes, vec![Processed::Succeeded; 20]);
    for message in &batch {
        let record = jobs::get(&db.pool, message.job_id).await.unwrap().unwrap();
        assert_eq!(record.status, "succeeded");
        assert!(record.finished_at.is_some());
    }
    let operations_done: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM cluster_operations WHERE status = 'succeeded' AND stage = 'done'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(operations_done, 20, "each job's operation ends with it");

    // A handler whose lease was taken over cannot complete, even alone.
    let stolen = ScriptedHandler::new(ClusterChanges::KIND, Behaviour::LoseLeaseThenCompleteAlone);
    let message = enqueue(
        &db.pool,
        seed_cluster(&db.pool).await,
        ClusterChanges::of,
        3,
    )
    .await;
    assert_eq!(
        worker(&db, "w2", stolen).process(message).await.unwrap(),
        Processed::LeaseLost
    );
    assert_eq!(job_status(&db.pool, message.job_id).await, "running");
}

#[tokio::test]
async fn a_dead_workers_job_is_rescued_by_sweep_and_its_late_writes_are_refused() {
    let db = TestDb::new().await;
    // Worker A claims with a short lease, then dies without a word.
    let (_, message, dead) = job_of_a_dead_worker(&db, 3).await;
    assert_eq!(dead.attempt, 1);

    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let (dispatcher, runner) = inprocess::channel(worker(&db, "worker-b", handler.clone()), 1);
    let report = sweep(&db.pool, &dispatcher, &settings()).await.unwrap();
    assert_eq!(
        (report.requeued, report.failed, report.published),
        (1, 0, 1)
    );

    assert_eq!(
        runner.run_until_idle().await,
        vec![(message, Processed::Succeeded)]
    );
    let record = jobs::get(&db.pool, message.job_id).await.unwrap().unwrap();
    assert_eq!(record.status, "succeeded");
    assert_eq!(record.attempt_count, 2);
    assert_eq!(record.worker_id.as_deref(), Some("worker-b"));
    assert_eq!(record.error_history[0]["error"], "lease expired");
    assert_eq!(record.error_history[0]["worker_id"], "worker-a");

    // The dead worker wakes up: every write it tries is fenced off.
    let mut tx = db.pool.begin().await.unwrap();
    assert!(!jobs::complete(&mut tx, &dead).await.unwrap());
    tx.rollback().await.unwrap();
    assert!(
        !jobs::fail(
            &db.pool,
            &dead,
            &failure("late failure"),
            ClusterCreation::KIND.lifecycle.map(|l| l.failed)
        )
        .await
        .unwrap()
    );
    assert!(
        jobs::schedule_retry(&db.pool, &dead, &failure("late"), Duration::ZERO)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !jobs::heartbeat(&db.pool, &dead, Duration::from_secs(30))
            .await
            .unwrap()
    );
    assert!(
        !jobs::record_stage(&db.pool, &dead, "late stage")
            .await
            .unwrap()
    );
    let record = jobs::get(&db.pool, message.job_id).await.unwrap().unwrap();
    assert_eq!(record.status, "succeeded");
    assert_eq!(record.last_error, None);
}

/// A sweep takes one connection for all its statements; taking one from the
/// pool per statement would open a second connection on a cold start, while
/// the first was still being tested on its way back.
#[tokio::test]
async fn a_lease_that_expires_on_the_last_attempt_fails_the_job() {
    let db = TestDb::new().await;
    let (cluster, message, _) = job_of_a_dead_worker(&db, 1).await;
    let (dispatcher, _runner) = inprocess::channel(
        worker(
            &db,
            "w",
            ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed),
        ),
        1,
    );
    let report = sweep(&db.pool, &dispatcher, &settings()).await.unwrap();
    assert_eq!(
        (report.requeued, report.failed, report.published),
        (0, 1, 0)
    );
    let record = jobs::get(&db.pool, message.job_id).await.unwrap().unwrap();
    assert_eq!(record.status, "failed");
    let error = record.error.expect("a failed job carries its code");
    assert_eq!(
        (error.code, error.retryable),
        (FailureCode::WorkerLost, true)
    );
    let operation = jobs::get_operation(&db.pool, record.operation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(operation.error, Some(error));
    let (status, error): (String, Option<String>) =
        sqlx::query_as("SELECT status, last_error_message FROM clusters WHERE id = $1")
            .bind(cluster)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(status, "failed");
    assert!(error.unwrap().contains("lease expired"));
}

fn failure(message: &str) -> jobs::Failure {
    jobs::Failure {
        code: FailureCode::Internal,
        message: message.into(),
    }
}

fn at(value: &serde_json::Value) -> DateTime<Utc> {
    value.as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn retryable_failures_back_off_and_end_failed_with_every_error_kept() {
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Retryable);
    let worker = worker(&db, "w1", handler.clone());
    let message = enqueue(&db.pool, cluster, ClusterCreation::of, 4).await;

    for attempt in 1..=3 {
        assert_eq!(
            worker.process(message).await.unwrap(),
            Processed::RetryScheduled,
            "attempt {attempt}"
        );
        // Not due yet: an early wake-up is dropped.
        assert_eq!(worker.process(message).await.unwrap(), Processed::Skipped);
        let record = jobs::get(&db.pool, message.job_id).await.unwrap().unwrap();
        assert_eq!(record.status, "pending");
        // While it waits to retry, the job shows why its last attempt failed.
        assert_eq!(
            record.error.map(|e| e.code),
            Some(FailureCode::HostUnreachable)
        );
        assert!(
            record.published_at.is_none(),
            "sweep will publish the retry when due"
        );
        // Make it due now instead of sleeping through the delay.
        sqlx::query("UPDATE cluster_jobs SET run_after = now() WHERE id = $1")
            .bind(message.job_id)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    assert_eq!(worker.process(message).await.unwrap(), Processed::Failed);
    assert_eq!(handler.runs(), 4);

    let record = jobs::get(&db.pool, message.job_id).await.unwrap().unwrap();
    assert_eq!(record.status, "failed");
    assert_eq!(record.attempt_count, 4);
    assert_eq!(
        record.last_error.as_deref(),
        Some("gave up after 4 attempts: host API busy (run 4)")
    );
    let history = record.error_history.as_array().unwrap();
    assert_eq!(history.len(), 4, "one entry per attempt: {history:?}");
    for (i, entry) in history.iter().enumerate() {
        assert_eq!(entry["attempt"], i as i64 + 1);
        assert_eq!(entry["code"], "host_unreachable");
    }
    let delays: Vec<i64> = history[..3]
        .iter()
        .map(|e| (at(&e["retry_at"]) - at(&e["at"])).num_milliseconds())
        .collect();
    for (i, delay) in delays.iter().enumerate() {
        let full = 40 << i;
        assert!(
            *delay >= full / 2 - 1 && *delay <= full + 1,
            "delay {i} = {delay} ms outside [{}, {full}]",
            full / 2
        );
    }
    assert!(
        delays.windows(2).all(|w| w[0] <= w[1]),
        "delays grow: {delays:?}"
    );

    let operation = jobs::get_operation(&db.pool, record.operation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(operation.status, "failed");
    assert_eq!(operation.error_message, record.last_error);
    let error = operation
        .error
        .expect("a failed operation carries its code");
    assert_eq!(error.code, FailureCode::HostUnreachable);
    assert!(error.retryable, "running it again may succeed");
    assert_eq!(record.error, Some(error));
}

#[tokio::test]
async fn a_fatal_failure_fails_at_once_and_tells_the_user_why() {
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Fatal);
    let worker = worker(&db, "w1", handler.clone());
    let message = enqueue(&db.pool, cluster, ClusterCreation::of, 5).await;
    assert_eq!(worker.process(message).await.unwrap(), Processed::Failed);
    assert_eq!(handler.runs(), 1);
    let record = jobs::get(&db.pool, message.job_id).await.unwrap().unwrap();
    assert_eq!(
        (record.status.as_str(), record.attempt_count),
        ("failed", 1)
    );
    assert_eq!(
        record.error.map(|e| e.code),
        Some(FailureCode::ChartInstallFailed)
    );
    let (status, error): (String, Option<String>) =
        sqlx::query_as("SELECT status, last_error_message FROM clusters WHERE id = $1")
            .bind(cluster)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(status, "failed");
    assert_eq!(error.as_deref(), Some("the chart values are invalid"));
    // A finished job is never claimed again.
    assert_eq!(worker.process(message).await.unwrap(), Processed::Skipped);
}

#[tokio::test]
async fn a_wake_up_for_a_type_this_worker_does_not_run_is_left_alone() {
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    let worker = worker(
        &db,
        "w1",
        ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed),
    );
    let message = enqueue(&db.pool, cluster, ClusterDeletion::of, 3).await;
    assert_eq!(worker.process(message).await.unwrap(), Processed::NoHandler);
    assert_eq!(job_status(&db.pool, message.job_id).await, "pending");
}

#[tokio::test]
async fn each_run_of_a_claimed_batch_ends_on_its_own() {
    let db = TestDb::new().await;
    // The first job to run works for 3 s, the other ends at once.
    let handler = ScriptedHandler::new(
        ClusterCreation::KIND,
        Behaviour::SlowFirstCompleteAlone(Duration::from_secs(3)),
    );
    let slow = enqueue(
        &db.pool,
        seed_cluster(&db.pool).await,
        ClusterCreation::of,
        3,
    )
    .await;
    let quick = enqueue(
        &db.pool,
        seed_cluster(&db.pool).await,
        ClusterCreation::of,
        3,
    )
    .await;
    let worker = worker(&db, "w1", handler.clone());
    let messages = [slow, quick];
    let mut runs = worker.start_batch(&messages).await.unwrap().into_iter();
    // One statement claimed both.
    assert_eq!(job_status(&db.pool, slow.job_id).await, "running");
    assert_eq!(job_status(&db.pool, quick.job_id).await, "running");
    let (slow_run, quick_run) = (runs.next().unwrap(), runs.next().unwrap());
    // The slow run is polled first (so it is the handler's first run).
    let raced = tokio::time::timeout(
        Duration::from_secs(2),
        futures_util::future::select(slow_run, quick_run),
    )
    .await
    .expect("the quick job ends without waiting for the slow one");
    let futures_util::future::Either::Right((quick_outcome, slow_run)) = raced else {
        panic!("the slow job ended first");
    };
    assert_eq!(quick_outcome.unwrap(), Processed::Succeeded);
    assert_eq!(job_status(&db.pool, quick.job_id).await, "succeeded");
    assert_eq!(job_status(&db.pool, slow.job_id).await, "running");
    assert_eq!(slow_run.await.unwrap(), Processed::Succeeded);
    assert_eq!(job_status(&db.pool, slow.job_id).await, "succeeded");
}

/// A job function's pool runs each claim statement with its cached generic
/// plan from the first execution on. With PostgreSQL's default choice the
/// first five claims are planned for their parameters, and once the table
/// holds thousands of jobs every later claim of a few wake-ups too (a generic
/// plan counts 100 ids for the `unnest`, dearer than a plan for the actual
/// array).
/// Batches of wake-ups that reach a worker while its claim is under way
/// gather behind it and are claimed together: one statement for all, each
/// batch running the jobs of its own wake-ups, a job woken twice running once.
#[tokio::test]
async fn batches_waiting_for_a_claim_share_the_next_statement() {
    let db = TestDb::new().await;
    // The count of claims below is every claim's.
    let (pool, worker) =
        worker_on_one_connection(&db, db::Workload::Jobs, "grouper", Behaviour::Succeed);
    let messages = create_jobs(&db.pool, 4).await;
    let [a, b, c, d] = messages[..] else {
        unreachable!()
    };
    let batches = [vec![a], vec![b], vec![c, d], vec![b]];
    // Polled together, every batch asks for its claim before the first
    // statement is sent (the test runtime has one thread).
    let outcomes: Vec<Vec<Processed>> =
        futures_util::future::join_all(batches.iter().map(|batch| worker.process_batch(batch)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    assert_eq!(
        outcomes,
        vec![
            vec![Processed::Succeeded],
            vec![Processed::Succeeded],
            vec![Processed::Succeeded, Processed::Succeeded],
            vec![Processed::Skipped],
        ]
    );
    for message in messages {
        assert_eq!(job_status(&db.pool, message.job_id).await, "succeeded");
    }
    assert_eq!(
        claims_run(&pool).await,
        1,
        "claim statements for four batches"
    );
}

/// A worker's background tasks (grouped claims and completions) end with the
/// worker: once it is dropped, its pool's connections close.
#[tokio::test]
async fn a_dropped_worker_lets_go_of_its_connections() {
    let db = TestDb::new().await;
    let url = secrecy::SecretString::from(db.url.clone());
    let pool = db::lazy_pool(&url, 2, db::Workload::Jobs).unwrap();
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::CompleteAlone);
    let worker = Worker::new(pool, settings(), "short-lived", vec![handler]);
    let cluster = seed_cluster(&db.pool).await;
    let message = enqueue(&db.pool, cluster, ClusterCreation::of, 3).await;
    assert_eq!(worker.process(message).await.unwrap(), Processed::Succeeded);
    let open = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'kubebyon'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    assert!(open().await > 0, "the worker's pool connected");

    drop(worker);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while open().await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dropped worker's connections are still open after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The operation a job carries out is `running` from the job's first recorded
/// stage (the claim writes the job alone); whichever way it ends, its start
/// is the job's.
#[tokio::test]
async fn an_operation_runs_from_its_jobs_first_stage() {
    let db = TestDb::new().await;
    let operation = |job_id| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (String, String, Option<DateTime<Utc>>)>(
                "SELECT o.status, o.stage, o.started_at FROM cluster_operations o
                 JOIN cluster_jobs j ON j.operation_id = o.id WHERE j.id = $1",
            )
            .bind(job_id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let job_start = |job_id| {
        let pool = db.pool.clone();
        async move { jobs::get(&pool, job_id).await.unwrap().unwrap().started_at }
    };
    // A job of a new cluster, enqueued and claimed.
    let claimed = || async {
        let cluster = seed_cluster(&db.pool).await;
        let message = enqueue(&db.pool, cluster, ClusterChanges::of, 3).await;
        claim_one(&db.pool, message, "w1", Duration::from_secs(30)).await
    };

    let job = claimed().await;
    assert_eq!(
        operation(job.id).await,
        ("pending".into(), "queued".into(), None)
    );
    assert!(
        jobs::record_stage(&db.pool, &job, "updating the control plane")
            .await
            .unwrap()
    );
    let (status, stage, started) = operation(job.id).await;
    assert_eq!(
        (status.as_str(), stage.as_str()),
        ("running", "updating the control plane")
    );
    assert_eq!(started, job_start(job.id).await);
    let done = jobs::complete_many(&db.pool, &[job.id], &[job.attempt])
        .await
        .unwrap();
    assert_eq!(done, vec![job.id]);
    assert_eq!(
        operation(job.id).await,
        ("succeeded".into(), "done".into(), started)
    );

    // Done with nothing recorded on the way, and failed the same.
    let job = claimed().await;
    jobs::complete_many(&db.pool, &[job.id], &[job.attempt])
        .await
        .unwrap();
    let (status, _, started) = operation(job.id).await;
    assert_eq!(status, "succeeded");
    assert!(started.is_some());
    assert_eq!(started, job_start(job.id).await);
    let job = claimed().await;
    let failed = ClusterChanges::KIND.lifecycle.map(|l| l.failed);
    assert!(
        jobs::fail(&db.pool, &job, &failure("no"), failed)
            .await
            .unwrap()
    );
    let (status, _, started) = operation(job.id).await;
    assert_eq!(status, "failed");
    assert_eq!(started, job_start(job.id).await);
}

/// A worker's claim and completion tasks keep a connection each between
/// statements, and give them back once idle. When the server cuts them, the
/// statement that finds out fails, and the next ones take fresh connections.
#[tokio::test]
async fn grouping_tasks_keep_their_connections_and_replace_cut_ones() {
    let db = TestDb::new().await;
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::CompleteAlone);
    let worker = worker(&db, "keeper", handler);
    let checked_out = || db.pool.size() - u32::try_from(db.pool.num_idle()).unwrap();
    let settled = |want: u32, within: Duration| async move {
        let deadline = tokio::time::Instant::now() + within;
        while checked_out() != want && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        checked_out()
    };
    let job = || async {
        enqueue(
            &db.pool,
            seed_cluster(&db.pool).await,
            ClusterCreation::of,
            3,
        )
        .await
    };

    assert_eq!(
        worker.process(job().await).await.unwrap(),
        Processed::Succeeded
    );
    assert_eq!(
        settled(2, Duration::from_secs(2)).await,
        2,
        "the claim's and the completions' connections"
    );

    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let cut = job().await;
    assert!(
        worker.process(cut).await.is_err(),
        "the claim on the cut connection fails"
    );
    // Claimed on a fresh connection; the completion finds its own cut.
    assert_eq!(
        worker.process(cut).await.unwrap(),
        Processed::RetryScheduled
    );
    assert_eq!(
        worker.process(job().await).await.unwrap(),
        Processed::Succeeded
    );

    assert_eq!(
        settled(0, Duration::from_secs(8)).await,
        0,
        "given back once idle"
    );
}

/// A handler working longer than its lease keeps it: the worker extends the
/// lease while the handler runs, so sweeps meanwhile rescue nothing and the
/// job ends succeeded on its first attempt.
#[tokio::test]
async fn a_handler_working_past_its_lease_keeps_it() {
    let db = TestDb::new().await;
    let handler = ScriptedHandler::new(
        ClusterCreation::KIND,
        Behaviour::SlowFirstCompleteAlone(Duration::from_millis(1500)),
    );
    let settings = JobSettings {
        lease: Duration::from_millis(600),
        ..settings()
    };
    let worker = Worker::new(db.pool.clone(), settings, "worker-a", vec![handler.clone()]);
    let message = create_jobs(&db.pool, 1).await[0];
    let run = tokio::spawn(async move { worker.process(message).await });
    let mut rescued = 0;
    while !run.is_finished() {
        rescued += jobs::rescue_expired(&db.pool, &shared::app::capabilities::job_kinds())
            .await
            .unwrap()
            .requeued;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(run.await.unwrap().unwrap(), Processed::Succeeded);
    assert_eq!(rescued, 0, "no sweep found the lease run out");
    assert_eq!(handler.runs(), 1);
    assert_eq!(job_status(&db.pool, message.job_id).await, "succeeded");
}

/// A schedule's run steps aside while another run holds its advisory lock
/// (an overlapping invocation, a CronJob still going) and does nothing; the
/// lock is per schedule, and a released one is free at once.
#[tokio::test]
async fn a_schedule_run_steps_aside_while_another_run_holds_its_lock() {
    let db = TestDb::new().await;
    let (dispatcher, _runner) = inprocess::channel(
        worker(
            &db,
            "w",
            ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed),
        ),
        4,
    );
    let settings = shared::config::Settings::from_source(&std::collections::HashMap::new())
        .expect("default settings");
    let context = queues::runtime::ScheduleContext::new(
        db.pool.clone(),
        Arc::new(settings),
        None,
        Some(Arc::new(dispatcher)),
    );
    let stale = || async {
        sqlx::query("INSERT INTO rate_limit_hits (bucket, window_start, hits) VALUES ('b', now() - interval '2 days', 1) ON CONFLICT DO NOTHING")
            .execute(&db.pool)
            .await
            .unwrap();
    };
    let stale_left = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM rate_limit_hits")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };

    stale().await;
    let other_run = db::try_advisory_lock(&db.pool, "schedule:sweep")
        .await
        .unwrap()
        .expect("nobody holds it yet");
    assert!(
        db::try_advisory_lock(&db.pool, "schedule:sweep")
            .await
            .unwrap()
            .is_none(),
        "a second holder is refused"
    );
    let summary = ::sweep::SCHEDULE
        .run_exclusively(context.clone())
        .await
        .unwrap();
    assert_eq!(
        summary,
        serde_json::json!({ "skipped": "another run is in progress" })
    );
    assert_eq!(
        stale_left().await,
        1,
        "the stepped-aside run pruned nothing"
    );

    // Another schedule's lock is its own.
    let other_schedule = db::try_advisory_lock(&db.pool, "schedule:sync-dns")
        .await
        .unwrap();
    assert!(other_schedule.is_some());

    other_run.release().await;
    let summary = ::sweep::SCHEDULE.run_exclusively(context).await.unwrap();
    assert_eq!(summary["pruned"], 1, "{summary}");
    assert_eq!(stale_left().await, 0);

    // Dropped unreleased (a run cancelled mid-way), the lock goes with the
    // transaction once the pool takes its connection back.
    let cancelled = db::try_advisory_lock(&db.pool, "schedule:sweep")
        .await
        .unwrap()
        .expect("free");
    drop(cancelled);
    tests::eventually(10, "the dropped lock to be free", || async {
        db::try_advisory_lock(&db.pool, "schedule:sweep")
            .await
            .unwrap()
            .map(drop)
    })
    .await;
}

/// The backlog figures: pending jobs by type, and how long the oldest due
/// one has waited; a job not yet due counts as pending but not as waiting.
#[tokio::test]
async fn the_backlog_counts_pending_jobs_and_the_oldest_due_ones_wait() {
    let db = TestDb::new().await;
    assert_eq!(jobs::backlog(&db.pool).await.unwrap(), vec![]);
    let waiting = create_jobs(&db.pool, 2).await;
    let later = create_jobs(&db.pool, 1).await;
    sqlx::query("UPDATE cluster_jobs SET run_after = now() - interval '90 seconds' WHERE id = $1")
        .bind(waiting[0].job_id)
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE cluster_jobs SET run_after = now() + interval '1 hour' WHERE id = $1")
        .bind(later[0].job_id)
        .execute(&db.pool)
        .await
        .unwrap();
    let backlog = jobs::backlog(&db.pool).await.unwrap();
    assert_eq!(backlog.len(), 1, "{backlog:?}");
    assert_eq!(
        (backlog[0].job_type, backlog[0].pending),
        (shared::clusters::ClusterCreation::KIND.job_type, 3)
    );
    assert!(
        (90.0..120.0).contains(&backlog[0].oldest_due_seconds),
        "{backlog:?}"
    );

    // Claimed, a job leaves the backlog.
    claim_one(&db.pool, waiting[0], "w", Duration::from_secs(30)).await;
    let backlog = jobs::backlog(&db.pool).await.unwrap();
    assert_eq!(backlog[0].pending, 2);
    assert!(backlog[0].oldest_due_seconds < 90.0, "{backlog:?}");
}

/// A run that cannot even take its lock (the database is unreachable) is a
/// failed run in the metrics, like one whose work failed.
#[tokio::test]
async fn a_schedule_run_that_cannot_take_its_lock_counts_as_failed() {
    let unreachable = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy(&format!(
            "postgres://postgres@127.0.0.1:{}/none",
            tests::free_port()
        ))
        .unwrap();
    let settings = shared::config::Settings::from_source(&std::collections::HashMap::new())
        .expect("default settings");
    let context =
        queues::runtime::ScheduleContext::new(unreachable, Arc::new(settings), None, None);
    let err = ::sweep::SCHEDULE
        .run_exclusively(context)
        .await
        .expect_err("no database");
    assert!(
        format!("{err:#}").contains("taking the schedule's lock"),
        "{err:#}"
    );
    let text = shared::telemetry::metrics::metrics().encode();
    assert!(
        text.contains(r#"kubebyon_schedule_runs_total{schedule="sweep",result="failed"} 1"#),
        "{text}"
    );
}
