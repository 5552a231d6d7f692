//! The backbone through a real RabbitMQ: publisher confirms, the consumer with
//! manual ack, duplicate deliveries, an outage after commit, and reconnection.

use shared::clusters::ClusterCreation;
use std::{sync::Arc, time::Duration};

use queues::{AmqpPublisher, Consumer};
use secrecy::SecretString;
use shared::{
    config::JobSettings,
    domain::JobPayload,
    jobs::{self, JobMessage, JobPublisher, NewJob, Processed, Worker},
};
use tests::{
    broker::TestBroker,
    database::TestDb,
    handlers::{Behaviour, ScriptedHandler, create_jobs, enqueue, job_status, seed_cluster, sweep},
    proxy::TcpProxy,
};
use tokio::sync::{mpsc, oneshot};

type Outcomes = mpsc::UnboundedReceiver<(JobMessage, Processed)>;

fn start_consumer(
    url: SecretString,
    broker: &TestBroker,
    worker: Worker,
) -> (Outcomes, oneshot::Sender<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let consumer = Consumer::new(url, broker.topology.clone(), worker).with_outcomes(tx);
    tokio::spawn(consumer.run(async {
        let _ = stop_rx.await;
    }));
    (rx, stop_tx)
}

/// Waits up to 10 s for the broker to count `wanted` consumers on the queue
/// of `cluster_create` (a consumer subscribing, or going away).
async fn until_consumers(broker: &TestBroker, wanted: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while broker.consumers(&ClusterCreation::KIND).await != wanted {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broker counts {wanted} consumer(s)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn next_outcome(outcomes: &mut Outcomes) -> (JobMessage, Processed) {
    tokio::time::timeout(Duration::from_secs(30), outcomes.recv())
        .await
        .expect("a delivery was processed within 30 s")
        .expect("consumer is running")
}

fn worker(db: &TestDb, handler: Arc<ScriptedHandler>) -> Worker {
    Worker::new(
        db.pool.clone(),
        JobSettings::default(),
        "consumer-1",
        vec![handler],
    )
}

fn new_job(cluster_id: uuid::Uuid) -> NewJob<'static> {
    static PAYLOAD: std::sync::LazyLock<serde_json::Value> =
        std::sync::LazyLock::new(|| serde_json::json!({}));
    NewJob {
        cluster_id,
        kind: shared::clusters::ClusterCreation::KIND,
        requested_by: None,
        payload: &PAYLOAD,
        max_attempts: 3,
    }
}

#[tokio::test]
async fn a_committed_job_is_delivered_once_through_rabbitmq_and_a_rolled_back_one_never() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let publisher = AmqpPublisher::new(broker.url.clone(), broker.topology.clone());
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let (mut outcomes, _stop) =
        start_consumer(broker.url.clone(), &broker, worker(&db, handler.clone()));

    let rolled_back_cluster = seed_cluster(&db.pool).await;
    let mut tx = db.pool.begin().await.unwrap();
    jobs::enqueue(&mut tx, new_job(rolled_back_cluster))
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let cluster = seed_cluster(&db.pool).await;
    let enqueued =
        tests::handlers::enqueue_and_publish(&db.pool, &publisher, new_job(cluster)).await;
    assert_eq!(
        next_outcome(&mut outcomes).await,
        (enqueued.job, Processed::Succeeded)
    );
    assert_eq!(job_status(&db.pool, enqueued.job.job_id).await, "succeeded");

    // The sweep finds nothing to publish: the rolled-back job does not exist.
    let report = sweep(&db.pool, &publisher, &JobSettings::default())
        .await
        .unwrap();
    assert_eq!(report.published, 0);
    assert_eq!(broker.ready_messages(&ClusterCreation::KIND).await, 0);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), outcomes.recv())
            .await
            .is_err(),
        "no other delivery arrives"
    );
    assert_eq!(handler.runs(), 1);
}

#[tokio::test]
async fn the_same_message_delivered_twice_by_rabbitmq_runs_the_handler_once() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let publisher = AmqpPublisher::new(broker.url.clone(), broker.topology.clone());
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let cluster = seed_cluster(&db.pool).await;
    let message = enqueue(&db.pool, cluster, ClusterCreation::of, 3).await;
    publisher.publish(&[message, message]).await.unwrap();
    assert_eq!(broker.ready_messages(&ClusterCreation::KIND).await, 2);

    let (mut outcomes, _stop) =
        start_consumer(broker.url.clone(), &broker, worker(&db, handler.clone()));
    let mut seen = vec![
        next_outcome(&mut outcomes).await.1,
        next_outcome(&mut outcomes).await.1,
    ];
    seen.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(seen, vec![Processed::Skipped, Processed::Succeeded]);
    assert_eq!(handler.runs(), 1);
}

#[tokio::test]
async fn a_publish_lost_to_a_broker_outage_after_commit_is_published_by_sweep_when_it_returns() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let proxy = TcpProxy::start(tests::broker::addr()).await;
    let publisher = AmqpPublisher::new(
        SecretString::from(proxy.amqp_url()),
        broker.topology.clone(),
    );
    // Connect once through the proxy so the outage cuts a live connection.
    let warm_cluster = seed_cluster(&db.pool).await;
    let warm = enqueue(&db.pool, warm_cluster, ClusterCreation::of, 3).await;
    publisher
        .publish(&[warm])
        .await
        .expect("broker reachable through the proxy");
    jobs::mark_published(&db.pool, warm.job_id).await.unwrap();

    proxy.down();
    let cluster = seed_cluster(&db.pool).await;
    // The request still succeeds: the job is committed.
    let enqueued =
        tests::handlers::enqueue_and_publish(&db.pool, &publisher, new_job(cluster)).await;
    let record = jobs::get(&db.pool, enqueued.job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        record.published_at.is_none(),
        "the failed publish is not recorded as published"
    );

    let report = sweep(&db.pool, &publisher, &JobSettings::default())
        .await
        .unwrap();
    assert_eq!(report.published, 0);
    assert_eq!(report.publish_failed, 1);
    assert!(
        jobs::get(&db.pool, enqueued.job.job_id)
            .await
            .unwrap()
            .unwrap()
            .published_at
            .is_none()
    );

    proxy.up();
    let report = sweep(&db.pool, &publisher, &JobSettings::default())
        .await
        .unwrap();
    assert_eq!(report.published, 1);

    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let (mut outcomes, _stop) =
        start_consumer(broker.url.clone(), &broker, worker(&db, handler.clone()));
    let mut results = [
        next_outcome(&mut outcomes).await,
        next_outcome(&mut outcomes).await,
    ];
    results.sort_by_key(|(m, _)| m.job_id != enqueued.job.job_id);
    assert_eq!(results[0], (enqueued.job, Processed::Succeeded));
    assert_eq!(job_status(&db.pool, enqueued.job.job_id).await, "succeeded");
}

#[tokio::test]
async fn a_publisher_connected_ahead_publishes_on_the_connection_it_opened() {
    let broker = TestBroker::new();
    let proxy = TcpProxy::start(tests::broker::addr()).await;
    let publisher: Arc<dyn JobPublisher> = Arc::new(AmqpPublisher::new(
        SecretString::from(proxy.amqp_url()),
        broker.topology.clone(),
    ));
    publisher.connect().await.expect("broker reachable");

    // A publish that had to connect now would be refused.
    proxy.refuse_new();
    let message = JobMessage {
        job_id: uuid::Uuid::new_v4(),
        job_type: shared::clusters::ClusterCreation::KIND.job_type,
    };
    publisher
        .publish(&[message])
        .await
        .expect("published on the connection opened ahead");
    assert_eq!(broker.ready_messages(&ClusterCreation::KIND).await, 1);
}

#[tokio::test]
async fn the_consumer_reconnects_after_the_broker_goes_away_and_comes_back() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let proxy = TcpProxy::start(tests::broker::addr()).await;
    let publisher = AmqpPublisher::new(broker.url.clone(), broker.topology.clone());
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let (mut outcomes, _stop) = start_consumer(
        SecretString::from(proxy.amqp_url()),
        &broker,
        worker(&db, handler.clone()),
    );

    let first = enqueue(
        &db.pool,
        seed_cluster(&db.pool).await,
        ClusterCreation::of,
        3,
    )
    .await;
    publisher.publish(&[first]).await.unwrap();
    assert_eq!(
        next_outcome(&mut outcomes).await,
        (first, Processed::Succeeded)
    );

    proxy.down();
    let second = enqueue(
        &db.pool,
        seed_cluster(&db.pool).await,
        ClusterCreation::of,
        3,
    )
    .await;
    publisher.publish(&[second]).await.unwrap();
    proxy.up();
    // An ack cut off by the outage makes the broker redeliver the first message:
    // it must be dropped as a duplicate, never run again.
    loop {
        match next_outcome(&mut outcomes).await {
            (message, Processed::Succeeded) if message == second => break,
            other => assert_eq!(other, (first, Processed::Skipped)),
        }
    }
    assert_eq!(handler.runs(), 2);
}

#[tokio::test]
async fn every_delivery_is_acknowledged_once_its_job_is_done() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let proxy = TcpProxy::start(tests::broker::addr()).await;
    let publisher = AmqpPublisher::new(broker.url.clone(), broker.topology.clone());
    // Jobs whose completions share commits end together: their acks go
    // together, as one ack of many deliveries where it can.
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::CompleteAlone);
    let messages = create_jobs(&db.pool, 24).await;
    publisher.publish(&messages).await.unwrap();
    let (mut outcomes, _stop) = start_consumer(
        SecretString::from(proxy.amqp_url()),
        &broker,
        worker(&db, handler.clone()),
    );
    for _ in 0..messages.len() {
        assert_eq!(next_outcome(&mut outcomes).await.1, Processed::Succeeded);
    }

    // Outcomes are reported once their acks are written; let those cross the
    // proxy, then cut the consumer off: the broker gives back whatever it
    // still holds unacked.
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.down();
    until_consumers(&broker, 0).await;
    assert_eq!(broker.ready_messages(&ClusterCreation::KIND).await, 0);
    assert_eq!(handler.runs(), 24);
}

/// A consumer opens its first database connections before it takes any
/// delivery, so its first wake-ups do not wait for PostgreSQL to start
/// backends.
#[tokio::test]
async fn a_consumer_connects_to_the_database_before_it_consumes() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let url = SecretString::from(db.url.clone());
    let pool = shared::db::lazy_pool(&url, 8, shared::db::Workload::Jobs).unwrap();
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let worker = Worker::new(pool.clone(), JobSettings::default(), "early", vec![handler]);
    assert_eq!(pool.size(), 0, "a lazy pool opens nothing by itself");

    let (_outcomes, _stop) = start_consumer(broker.url.clone(), &broker, worker);
    until_consumers(&broker, 1).await;
    assert_eq!(
        (pool.size(), pool.num_idle()),
        (4, 4),
        "the claims', the completions' and two handlers' connections, open and idle"
    );
}

/// Once its shutdown resolves, a consumer's session ends with it: the broker
/// sees it go, and a wake-up published afterwards stays queued for others.
#[tokio::test]
async fn a_stopped_consumer_leaves_the_broker_and_takes_nothing_more() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let (_outcomes, stop) =
        start_consumer(broker.url.clone(), &broker, worker(&db, handler.clone()));
    until_consumers(&broker, 1).await;

    stop.send(()).unwrap();
    until_consumers(&broker, 0).await;
    let messages = create_jobs(&db.pool, 1).await;
    AmqpPublisher::new(broker.url.clone(), broker.topology.clone())
        .publish(&messages)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(broker.ready_messages(&ClusterCreation::KIND).await, 1);
    assert_eq!(handler.runs(), 0);
}
