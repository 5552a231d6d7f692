use std::{future::Future, time::Duration};

use lambda_runtime::{LambdaEvent, service_fn};

/// How a schedule function was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleMode {
    /// Invoked by EventBridge Scheduler through the Lambda runtime.
    Lambda,
    /// `--once`: one run, then exit (a Kubernetes CronJob).
    Once,
    /// A long-running loop on an interval.
    Loop(Duration),
}

impl ScheduleMode {
    pub fn from_process(interval: Duration) -> Self {
        if super::under_lambda() {
            Self::Lambda
        } else if std::env::args().any(|a| a == "--once") {
            Self::Once
        } else {
            Self::Loop(interval)
        }
    }
}

/// Logs a failed run of a looping schedule: a warning that the cycle was
/// skipped when the database could not be reached, an error otherwise.
pub fn report_failed_run(schedule: &str, err: &anyhow::Error) {
    if crate::error::caused_by_unreachable_database(err) {
        tracing::warn!(
            schedule,
            error = format!("{err:#}"),
            "the database cannot be reached; this cycle is skipped"
        );
    } else {
        tracing::error!(schedule, error = format!("{err:#}"), "scheduled run failed");
    }
}

/// Runs a scheduled task in the given mode. The task returns a JSON summary,
/// which is the Lambda response and is logged otherwise. A failed run is logged
/// and the loop goes on (a run that found the database unreachable says the
/// cycle was skipped for that); under `--once` or Lambda the failure is
/// returned.
pub async fn run_schedule<F, Fut>(
    name: &'static str,
    mode: ScheduleMode,
    task: F,
) -> anyhow::Result<()>
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = anyhow::Result<serde_json::Value>> + Send,
{
    match mode {
        ScheduleMode::Lambda => {
            lambda_runtime::run(service_fn(move |_event: LambdaEvent<serde_json::Value>| {
                let task = task.clone();
                async move {
                    let result = task().await;
                    crate::telemetry::trace::flush().await;
                    result.map_err(|e| lambda_runtime::Error::from(format!("{e:#}")))
                }
            }))
            .await
            .map_err(|err| anyhow::anyhow!("lambda runtime: {err}"))
        }
        ScheduleMode::Once => {
            let summary = task().await?;
            tracing::info!(schedule = name, %summary, "run finished");
            Ok(())
        }
        ScheduleMode::Loop(interval) => {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let shutdown = super::shutdown_signal();
            tokio::pin!(shutdown);
            loop {
                tokio::select! {
                    () = &mut shutdown => return Ok(()),
                    _ = ticker.tick() => {
                        if let Err(err) = task().await {
                            report_failed_run(name, &err);
                        }
                    }
                }
            }
        }
    }
}
