//! Single-node mode: wake-ups travel on an in-memory channel to a runner in the
//! same process. Claims, leases and fencing are the same as with RabbitMQ, so a
//! crash loses nothing: the rows stay pending and `sweep` republishes them.

use std::{future::Future, sync::Arc, time::Duration};

use async_trait::async_trait;
use shared::jobs::{JobMessage, JobPublisher, Processed, PublishError, Worker};
use tokio::{
    sync::{Mutex, Semaphore, mpsc},
    task::JoinSet,
};

/// The publishing half.
#[derive(Clone)]
pub struct InProcessDispatcher {
    tx: mpsc::UnboundedSender<JobMessage>,
}

/// The consuming half.
pub struct InProcessRunner {
    rx: Mutex<mpsc::UnboundedReceiver<JobMessage>>,
    tx: mpsc::UnboundedSender<JobMessage>,
    worker: Worker,
    concurrency: usize,
}

/// A connected dispatcher and runner. The worker's follow-up jobs travel on
/// the same channel.
pub fn channel(worker: Worker, concurrency: usize) -> (InProcessDispatcher, InProcessRunner) {
    let (tx, rx) = mpsc::unbounded_channel();
    worker.publish_follow_ups_with(Arc::new(InProcessDispatcher { tx: tx.clone() }));
    (
        InProcessDispatcher { tx: tx.clone() },
        InProcessRunner {
            rx: Mutex::new(rx),
            tx,
            worker,
            concurrency: concurrency.max(1),
        },
    )
}

#[async_trait]
impl JobPublisher for InProcessDispatcher {
    async fn publish(&self, messages: &[JobMessage]) -> Result<(), PublishError> {
        for message in messages {
            self.tx
                .send(*message)
                .map_err(|_| PublishError("the in-process runner has stopped".into()))?;
        }
        Ok(())
    }
}

impl InProcessRunner {
    /// Processes wake-ups with bounded concurrency until `shutdown` resolves,
    /// then waits for the jobs in flight.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let permits = Arc::new(Semaphore::new(self.concurrency));
        let mut in_flight = JoinSet::new();
        let mut rx = self.rx.lock().await;
        loop {
            let message = tokio::select! {
                () = &mut shutdown => break,
                message = rx.recv() => match message {
                    Some(message) => message,
                    None => break,
                },
            };
            let permit = permits
                .clone()
                .acquire_owned()
                .await
                .expect("semaphore is never closed");
            let this = self.clone();
            in_flight.spawn(async move {
                this.handle(message).await;
                drop(permit);
            });
            while in_flight.try_join_next().is_some() {}
        }
        in_flight.join_all().await;
    }

    /// Processes every queued wake-up, one at a time, until the channel is empty;
    /// returns what became of each. For tests and tools that drive work to the end.
    pub async fn run_until_idle(&self) -> Vec<(JobMessage, Processed)> {
        let mut done = Vec::new();
        let mut rx = self.rx.lock().await;
        while let Ok(message) = rx.try_recv() {
            if let Some(processed) = self.handle(message).await {
                done.push((message, processed));
            }
        }
        done
    }

    async fn handle(&self, message: JobMessage) -> Option<Processed> {
        match self.worker.process(message).await {
            Ok(processed) => Some(processed),
            Err(err) => {
                tracing::warn!(error = %err, job_id = %message.job_id, "database unavailable; retrying wake-up");
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let _ = tx.send(message);
                });
                None
            }
        }
    }
}
