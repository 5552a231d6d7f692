//! Job functions under AWS Lambda: an Amazon MQ (RabbitMQ) event source mapping
//! delivers batches of wake-ups.

use aws_lambda_events::event::rabbitmq::RabbitMqEvent;
use base64::Engine;
use futures_util::future::join_all;
use serde::Serialize;
use shared::jobs::{JobMessage, Processed, Worker};

/// Per-message result of one batch. Amazon MQ acknowledges the whole batch when
/// the invocation succeeds, so a message listed here is not redelivered by the
/// broker: its job row stays pending and unclaimed, and `sweep` republishes it.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct BatchResponse {
    #[serde(rename = "batchItemFailures")]
    pub batch_item_failures: Vec<BatchItemFailure>,
    pub processed: Vec<ProcessedItem>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct BatchItemFailure {
    #[serde(rename = "itemIdentifier")]
    pub item_identifier: String,
    pub reason: String,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ProcessedItem {
    pub job_id: uuid::Uuid,
    pub outcome: String,
}

/// Runs the batch's wake-ups through the worker together: one claim for all,
/// then their jobs concurrently (a batch of long jobs does not run them one
/// after another within the invocation's time limit).
pub async fn handle_batch(worker: &Worker, event: RabbitMqEvent) -> BatchResponse {
    let mut response = BatchResponse::default();
    let mut queues: Vec<_> = event.messages_by_queue.into_iter().collect();
    queues.sort_by(|a, b| a.0.cmp(&b.0));
    let mut ids = Vec::new();
    let mut jobs = Vec::new();
    for (queue, messages) in queues {
        for (index, message) in messages.into_iter().enumerate() {
            let id = message
                .basic_properties
                .message_id
                .clone()
                .unwrap_or_else(|| format!("{queue}#{index}"));
            let decoded = message
                .data
                .as_deref()
                .ok_or_else(|| "message has no data".to_string())
                .and_then(|data| {
                    base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .map_err(|e| format!("data is not base64: {e}"))
                })
                .and_then(|bytes| {
                    serde_json::from_slice::<JobMessage>(&bytes)
                        .map_err(|e| format!("not a job wake-up: {e}"))
                });
            match decoded {
                Ok(job) => {
                    ids.push(id);
                    jobs.push(job);
                }
                Err(reason) => {
                    tracing::warn!(item = id, reason, "undecodable message in batch");
                    response.batch_item_failures.push(BatchItemFailure {
                        item_identifier: id,
                        reason,
                    });
                }
            }
        }
    }
    if jobs.is_empty() {
        return response;
    }
    let results = match worker.start_batch(&jobs).await {
        Ok(runs) => join_all(runs).await,
        Err(err) => vec![Err(err); jobs.len()],
    };
    for ((id, job), result) in ids.into_iter().zip(&jobs).zip(results) {
        match result {
            Ok(processed) => response.processed.push(ProcessedItem {
                job_id: job.job_id,
                outcome: outcome_name(&processed).into(),
            }),
            Err(err) => response.batch_item_failures.push(BatchItemFailure {
                item_identifier: id,
                reason: format!("database unavailable: {err}"),
            }),
        }
    }
    response
}

fn outcome_name(processed: &Processed) -> &'static str {
    match processed {
        Processed::Skipped => "skipped",
        Processed::Succeeded => "succeeded",
        Processed::RetryScheduled => "retry_scheduled",
        Processed::Failed => "failed",
        Processed::LeaseLost => "lease_lost",
        Processed::NoHandler => "no_handler",
    }
}
