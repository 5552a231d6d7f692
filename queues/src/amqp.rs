//! RabbitMQ through lapin: topology, a publisher with confirms, and a consumer
//! with prefetch and manual ack that reconnects after a broker restart.

use std::{
    collections::BTreeSet,
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use backon::{BackoffBuilder, ExponentialBuilder};
use futures_util::{
    StreamExt,
    stream::{FuturesUnordered, select_all},
};
use lapin::{
    BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind,
    message::Delivery,
    options::{
        BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions,
        BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
        QueueDeclareOptions,
    },
    types::FieldTable,
};
use secrecy::{ExposeSecret, SecretString};
use shared::{
    domain::JobType,
    jobs::{JobMessage, JobPublisher, Processed, PublishError, Worker},
};
use tokio::{
    sync::{Mutex, mpsc},
    task::JoinSet,
};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

/// Names of the exchange and the per-job-type queues.
#[derive(Debug, Clone)]
pub struct Topology {
    pub exchange: String,
}

impl Topology {
    pub fn new(exchange: impl Into<String>) -> Self {
        Self {
            exchange: exchange.into(),
        }
    }

    pub fn queue(&self, job_type: JobType) -> String {
        format!("{}.{}", self.exchange, job_type.as_str())
    }

    /// Declares the durable direct exchange and one durable queue per job type
    /// (every kind the capabilities declare), bound by the job type. Idempotent.
    pub async fn declare(&self, channel: &Channel) -> lapin::Result<()> {
        channel
            .exchange_declare(
                self.exchange.as_str().into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
        for kind in shared::app::capabilities::job_kinds().iter() {
            let job_type = kind.job_type;
            let queue = self.queue(job_type);
            channel
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions::durable(),
                    FieldTable::default(),
                )
                .await?;
            channel
                .queue_bind(
                    queue.as_str().into(),
                    self.exchange.as_str().into(),
                    job_type.as_str().into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
        }
        Ok(())
    }
}

impl Topology {
    /// Connects to the broker at `url`, declares the topology and
    /// disconnects: the release step that makes the queues exist before any
    /// consumer or event source mapping needs them.
    pub async fn declare_at(&self, url: &SecretString) -> Result<(), String> {
        let connection = connect(url).await?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|err| format!("cannot open a channel: {err}"))?;
        self.declare(&channel)
            .await
            .map_err(|err| format!("cannot declare the topology: {err}"))?;
        let _ = connection.close(200, "declared".into()).await;
        Ok(())
    }
}

async fn connect(url: &SecretString) -> Result<Connection, String> {
    let properties = ConnectionProperties::default().with_connection_name("kubebyon".into());
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        Connection::connect(url.expose_secret(), properties),
    )
    .await
    {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(err)) => Err(format!("cannot connect to the broker: {err}")),
        Err(_) => Err("cannot connect to the broker: timed out".into()),
    }
}

/// A connection and a channel on it with the topology declared.
async fn open_channel(
    url: &SecretString,
    topology: &Topology,
) -> Result<(Connection, Channel), String> {
    let connection = connect(url).await?;
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| e.to_string())?;
    topology
        .declare(&channel)
        .await
        .map_err(|e| e.to_string())?;
    Ok((connection, channel))
}

/// Publishes wake-ups as persistent messages and waits for the broker's confirms.
/// Reconnects on the next publish after any failure.
/// Publishes from many tasks at once on one channel: the lock is held only to
/// take the channel, so confirms of concurrent publishes are awaited together
/// (a window of confirms, not one round trip after another).
pub struct AmqpPublisher {
    url: SecretString,
    topology: Topology,
    session: Mutex<Option<Session>>,
    /// Sessions opened so far; numbers each session.
    opened: AtomicU64,
}

/// An open connection, its confirm-mode channel, and which opening it was.
struct Session {
    connection: Connection,
    channel: Channel,
    generation: u64,
}

impl AmqpPublisher {
    pub fn new(url: SecretString, topology: Topology) -> Self {
        Self {
            url,
            topology,
            session: Mutex::new(None),
            opened: AtomicU64::new(0),
        }
    }

    async fn open(&self) -> Result<(Connection, Channel), String> {
        let (connection, channel) = open_channel(&self.url, &self.topology).await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        Ok((connection, channel))
    }

    async fn publish_on(&self, channel: &Channel, messages: &[JobMessage]) -> Result<(), String> {
        let mut confirms = Vec::with_capacity(messages.len());
        // The publishing span's W3C trace context, for whatever reads the
        // broker; the job itself continues the trace kept in its row.
        let headers = shared::telemetry::trace::current_traceparent().map(|traceparent| {
            let mut headers = FieldTable::default();
            headers.insert(
                "traceparent".into(),
                lapin::types::AMQPValue::LongString(traceparent.into()),
            );
            headers
        });
        for message in messages {
            let body = serde_json::to_vec(message).map_err(|e| e.to_string())?;
            let mut properties = BasicProperties::default()
                .with_delivery_mode(2)
                .with_content_type("application/json".into())
                .with_message_id(message.job_id.to_string().into());
            if let Some(headers) = &headers {
                properties = properties.with_headers(headers.clone());
            }
            let confirm = channel
                .basic_publish(
                    self.topology.exchange.as_str().into(),
                    message.job_type.as_str().into(),
                    BasicPublishOptions {
                        mandatory: true,
                        ..Default::default()
                    },
                    &body,
                    properties,
                )
                .await
                .map_err(|e| e.to_string())?;
            confirms.push(confirm);
        }
        for confirm in confirms {
            let confirmation = tokio::time::timeout(CONFIRM_TIMEOUT, confirm)
                .await
                .map_err(|_| "timed out waiting for the broker's confirm".to_string())?
                .map_err(|e| e.to_string())?;
            if !confirmation.is_ack() {
                return Err("the broker refused a message".into());
            }
            if confirmation.take_message().is_some() {
                return Err("the broker could not route a message to its queue".into());
            }
        }
        Ok(())
    }

    /// The open session's channel and generation, opening one first when
    /// there is none or its connection has ended.
    async fn channel(&self) -> Result<(Channel, u64), PublishError> {
        let mut session = self.session.lock().await;
        if session
            .as_ref()
            .is_none_or(|s| !s.connection.status().connected())
        {
            let generation = self.opened.fetch_add(1, Ordering::Relaxed);
            let (connection, channel) = self.open().await.map_err(PublishError)?;
            *session = Some(Session {
                connection,
                channel,
                generation,
            });
        }
        let session = session.as_ref().expect("session was just opened");
        Ok((session.channel.clone(), session.generation))
    }
}

#[async_trait]
impl JobPublisher for AmqpPublisher {
    /// Opens the connection and its confirm-mode channel with the topology
    /// declared: over a dozen round trips to the broker (the handshake, a
    /// declaration and a binding per queue, confirm mode) that the first
    /// publish would otherwise wait for.
    async fn connect(&self) -> Result<(), PublishError> {
        self.channel().await.map(|_| ())
    }

    async fn publish(&self, messages: &[JobMessage]) -> Result<(), PublishError> {
        let (channel, generation) = self.channel().await?;
        let result = self.publish_on(&channel, messages).await;
        if result.is_err() {
            // Drop the session this publish used, unless another task replaced it already.
            let mut session = self.session.lock().await;
            if session.as_ref().is_some_and(|s| s.generation == generation) {
                *session = None;
            }
        }
        result.map_err(PublishError)
    }
}

/// Consumes the queues of the worker's job types and runs the deliveries through
/// the worker, those that arrived together as one batch (one claim). Acks each
/// delivery once its job's outcome is recorded; on a database outage it
/// negatively acknowledges with requeue after a pause. Reconnects with backoff
/// when the broker goes away.
pub struct Consumer {
    url: SecretString,
    topology: Topology,
    worker: Worker,
    prefetch: u16,
    outcomes: Outcomes,
}

impl Consumer {
    pub fn new(url: SecretString, topology: Topology, worker: Worker) -> Self {
        let prefetch = worker.settings().prefetch;
        Self {
            url,
            topology,
            worker,
            prefetch,
            outcomes: None,
        }
    }

    /// Reports every processed delivery on a channel (metrics, tests).
    pub fn with_outcomes(
        mut self,
        tx: tokio::sync::mpsc::UnboundedSender<(JobMessage, Processed)>,
    ) -> Self {
        self.outcomes = Some(tx);
        self
    }

    /// Runs until `shutdown` resolves, reconnecting as needed.
    ///
    /// Each session runs as a task of the runtime, not on the thread awaiting
    /// this (a `main` thread in `block_on`): lapin hands a delivery over from
    /// its own I/O thread, and a worker thread woken for it goes on to send
    /// the claim itself, where the main thread would have to wake a worker
    /// for that in turn.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let consumer = Arc::new(self);
        let mut backoff = reconnect_backoff();
        loop {
            // Dropping the set (on shutdown) aborts the session.
            let mut session = JoinSet::new();
            let this = consumer.clone();
            session.spawn(async move { this.session().await });
            tokio::select! {
                () = &mut shutdown => return,
                Some(result) = session.join_next() => {
                    match result {
                        Ok(Ok(())) => backoff = reconnect_backoff(),
                        Ok(Err(err)) => tracing::warn!(error = %err, "consumer lost the broker; reconnecting"),
                        // A panic ends the process as it would have here;
                        // a cancelled session means the runtime is stopping.
                        Err(err) => match err.try_into_panic() {
                            Ok(panic) => std::panic::resume_unwind(panic),
                            Err(_) => return,
                        },
                    }
                }
            }
            let delay = backoff.next().unwrap_or(Duration::from_secs(30));
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One connection's life: consume until the connection ends.
    async fn session(&self) -> Result<(), String> {
        self.worker.connect().await;
        // Kept alive for the whole session: dropping the connection closes the channel.
        let (_connection, channel) = open_channel(&self.url, &self.topology).await?;
        channel
            .basic_qos(self.prefetch, BasicQosOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        let mut consumers = Vec::new();
        for job_type in self.worker.job_types() {
            let queue = self.topology.queue(job_type);
            let consumer = channel
                .basic_consume(
                    queue.as_str().into(),
                    "".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(|e| e.to_string())?;
            consumers.push(consumer);
        }
        tracing::info!(job_types = ?self.worker.job_types(), "consuming");
        // Whatever has arrived is handled together: one claim statement per
        // batch (a batch is a single delivery when they trickle in).
        let mut batches = select_all(consumers).ready_chunks(usize::from(self.prefetch));
        let ledger = Arc::new(std::sync::Mutex::new(Ledger::default()));
        let (settle, settling) = mpsc::unbounded_channel();
        let settler = tokio::spawn(settle_deliveries(
            ledger.clone(),
            settling,
            self.outcomes.clone(),
        ));
        let mut in_flight = JoinSet::new();
        while let Some(batch) = batches.next().await {
            let mut deliveries = Vec::with_capacity(batch.len());
            for delivery in batch {
                let delivery = delivery.map_err(|e| e.to_string())?;
                lock(&ledger).delivered(delivery.delivery_tag);
                deliveries.push(delivery);
            }
            let worker = self.worker.clone();
            let settle = settle.clone();
            in_flight.spawn(async move { handle_batch(&worker, deliveries, settle).await });
            while in_flight.try_join_next().is_some() {}
        }
        in_flight.join_all().await;
        drop(settle);
        let _ = settler.await;
        Err("the broker closed the connection".into())
    }
}

type Outcomes = Option<tokio::sync::mpsc::UnboundedSender<(JobMessage, Processed)>>;

/// What to do with a delivery whose wake-up has been dealt with.
enum Settle {
    /// Handled (or undecodable): acknowledge, then report what became of it.
    Ack(Delivery, Option<(JobMessage, Processed)>),
    /// The database was down: give it back to the broker for another try.
    Requeue(Delivery),
}

/// Runs a batch of deliveries through the worker (one claim for all) and
/// settles each as soon as its own job's outcome is recorded, so a short
/// job never waits for a long one of its batch. On a database outage the
/// wake-ups concerned are requeued after a pause.
async fn handle_batch(
    worker: &Worker,
    deliveries: Vec<Delivery>,
    settle: mpsc::UnboundedSender<Settle>,
) {
    let mut messages = Vec::with_capacity(deliveries.len());
    let mut decoded = Vec::with_capacity(deliveries.len());
    for delivery in deliveries {
        match serde_json::from_slice::<JobMessage>(&delivery.data) {
            Ok(message) => {
                messages.push(message);
                decoded.push(delivery);
            }
            Err(_) => {
                tracing::warn!("undecodable message dropped");
                let _ = settle.send(Settle::Ack(delivery, None));
            }
        }
    }
    if messages.is_empty() {
        return;
    }
    let runs = match worker.start_batch(&messages).await {
        Ok(runs) => runs,
        Err(err) => {
            tracing::warn!(error = %err, wake_ups = messages.len(), "database unavailable; requeueing wake-ups");
            requeue_later(decoded, &settle).await;
            return;
        }
    };
    let mut ending: FuturesUnordered<_> = runs
        .into_iter()
        .zip(decoded)
        .zip(&messages)
        .map(|((run, delivery), message)| async move { (run.await, delivery, *message) })
        .collect();
    let mut failed = Vec::new();
    while let Some((result, delivery, message)) = ending.next().await {
        match result {
            Ok(processed) => {
                let _ = settle.send(Settle::Ack(delivery, Some((message, processed))));
            }
            Err(err) => {
                tracing::warn!(error = %err, job_id = %message.job_id, "database unavailable; requeueing the wake-up");
                failed.push(delivery);
            }
        }
    }
    if !failed.is_empty() {
        requeue_later(failed, &settle).await;
    }
}

/// Gives wake-ups back to the broker after a pause (the database is down).
async fn requeue_later(deliveries: Vec<Delivery>, settle: &mpsc::UnboundedSender<Settle>) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    for delivery in deliveries {
        let _ = settle.send(Settle::Requeue(delivery));
    }
}

/// The delivery tags of one channel: which have arrived and which are not
/// settled yet. Tags count up from 1 on a channel, but deliveries to several
/// consumers may be seen out of order, so a tag counts as covered by a
/// multiple ack only once every lower tag has been seen.
#[derive(Debug, Default)]
struct Ledger {
    /// Every tag up to this one has been seen.
    seen_through: u64,
    /// Tags seen above a gap.
    seen_ahead: BTreeSet<u64>,
    /// Tags seen and neither acked nor requeued.
    unsettled: BTreeSet<u64>,
}

impl Ledger {
    fn delivered(&mut self, tag: u64) {
        self.unsettled.insert(tag);
        if tag == self.seen_through + 1 {
            self.seen_through = tag;
            while self.seen_ahead.remove(&(self.seen_through + 1)) {
                self.seen_through += 1;
            }
        } else {
            self.seen_ahead.insert(tag);
        }
    }

    /// Marks `tags` settled and returns those that one multiple ack of the
    /// highest can settle: the tags below every tag still unsettled or not
    /// seen yet. The others are to be acked one by one.
    fn settle(&mut self, tags: &[u64]) -> usize {
        for tag in tags {
            self.unsettled.remove(tag);
        }
        let bound = self
            .unsettled
            .first()
            .copied()
            .unwrap_or(u64::MAX)
            .min(self.seen_through + 1);
        tags.iter().filter(|&&tag| tag < bound).count()
    }
}

fn lock(ledger: &std::sync::Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|e| e.into_inner())
}

/// Settles a channel's deliveries: requeues first, then the acks gathered
/// meanwhile, with one `basic.ack` (multiple) for all those below every
/// delivery still in hand. Jobs whose completions share a commit end
/// together, so their acks usually go as one frame. Outcomes are reported
/// once their acks are sent.
async fn settle_deliveries(
    ledger: Arc<std::sync::Mutex<Ledger>>,
    mut requests: mpsc::UnboundedReceiver<Settle>,
    outcomes: Outcomes,
) {
    let mut batch = Vec::new();
    while requests.recv_many(&mut batch, 1024).await > 0 {
        let mut acks = Vec::with_capacity(batch.len());
        let mut processed = Vec::with_capacity(batch.len());
        for request in batch.drain(..) {
            match request {
                Settle::Ack(delivery, outcome) => {
                    acks.push(delivery);
                    processed.extend(outcome);
                }
                Settle::Requeue(delivery) => {
                    let requeue = BasicNackOptions {
                        requeue: true,
                        ..Default::default()
                    };
                    let _ = delivery.nack(requeue).await;
                    lock(&ledger).settle(&[delivery.delivery_tag]);
                }
            }
        }
        if acks.is_empty() {
            continue;
        }
        acks.sort_by_key(|d| d.delivery_tag);
        let tags: Vec<u64> = acks.iter().map(|d| d.delivery_tag).collect();
        let together = lock(&ledger).settle(&tags);
        let mut singles = acks.split_off(together);
        if together > 1 {
            let highest = acks.pop().expect("more than one ack below the bound");
            let multiple = BasicAckOptions { multiple: true };
            if let Err(err) = highest.ack(multiple).await {
                tracing::warn!(error = %err, "ack failed; the wake-ups will be redelivered and dropped");
            }
        } else {
            singles.append(&mut acks);
        }
        for delivery in singles {
            if let Err(err) = delivery.ack(BasicAckOptions::default()).await {
                tracing::warn!(error = %err, "ack failed; the wake-up will be redelivered and dropped");
            }
        }
        if let Some(tx) = &outcomes {
            for outcome in processed {
                let _ = tx.send(outcome);
            }
        }
    }
}

fn reconnect_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(30))
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::Ledger;

    fn ledger(tags: &[u64]) -> Ledger {
        let mut ledger = Ledger::default();
        for &tag in tags {
            ledger.delivered(tag);
        }
        ledger
    }

    #[test]
    fn a_multiple_ack_covers_only_tags_below_every_delivery_still_in_hand() {
        let mut ledger = ledger(&[1, 2, 3, 4, 5]);
        assert_eq!(ledger.settle(&[1, 2]), 2);
        // 3 is still in hand: 4 and 5 go one by one.
        assert_eq!(ledger.settle(&[4, 5]), 0);
        assert_eq!(ledger.settle(&[3]), 1);
    }

    #[test]
    fn a_tag_above_one_not_seen_yet_is_not_covered() {
        // Deliveries to two consumers of the channel, seen out of order.
        let mut ledger = ledger(&[2, 3]);
        assert_eq!(ledger.settle(&[2, 3]), 0);
        ledger.delivered(1);
        ledger.delivered(4);
        assert_eq!(ledger.settle(&[1, 4]), 2);
    }

    #[test]
    fn a_requeued_delivery_no_longer_holds_back_the_ones_above_it() {
        let mut ledger = ledger(&[1, 2, 3]);
        assert_eq!(ledger.settle(&[2, 3]), 0);
        // 1 was given back to the broker (nack with requeue).
        assert_eq!(ledger.settle(&[1]), 1);
        ledger.delivered(4);
        ledger.delivered(5);
        assert_eq!(ledger.settle(&[4, 5]), 2);
    }
}
