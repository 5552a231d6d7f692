//! The process's figures: HTTP requests, job attempts, schedule runs and the
//! job backlog, in one Prometheus registry per process, exposed as
//! OpenMetrics text (which Prometheus scrapes) by the process runtimes on
//! `METRICS_PORT`. Under Lambda, where nothing scrapes, each figure is also
//! written as it happens as a CloudWatch Embedded Metric Format line on
//! standard output, which CloudWatch Logs turns into metrics (namespace
//! `KubeBYON`). Names and labels are documented in
//! `docs/runbooks/observability.md`; every label has a bounded set of values
//! (route templates, not paths).

use std::{
    sync::{OnceLock, atomic::AtomicU64},
    time::Duration,
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use crate::domain::{JobKinds, JobType};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    route: String,
    method: &'static str,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    route: String,
    method: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Attempt {
    job_type: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    job_type: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Run {
    schedule: &'static str,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Schedule {
    schedule: &'static str,
}

/// How a job attempt ended, as the metrics name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Succeeded,
    /// Failed and scheduled again.
    Retried,
    Failed,
    /// Its lease went to another worker; its result was not recorded.
    LeaseLost,
}

impl AttemptOutcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Retried => "retried",
            Self::Failed => "failed",
            Self::LeaseLost => "lease_lost",
        }
    }
}

/// How a schedule's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunResult {
    Succeeded,
    Failed,
    /// Another run held the schedule's lock.
    Skipped,
}

impl RunResult {
    fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }
}

/// Pending jobs of one type: how many, and how long the oldest has been due.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backlog {
    pub job_type: JobType,
    pub pending: i64,
    pub oldest_due_seconds: f64,
}

pub struct Metrics {
    /// Whether figures are also written as EMF lines (under Lambda).
    emf: bool,
    registry: Registry,
    requests: Family<Request, Counter>,
    request_seconds: Family<Route, Histogram>,
    claimed: Family<Kind, Counter>,
    attempts: Family<Attempt, Counter>,
    attempt_seconds: Family<Kind, Histogram>,
    start_delay_seconds: Family<Kind, Histogram>,
    runs: Family<Run, Counter>,
    run_seconds: Family<Schedule, Histogram>,
    pending: Family<Kind, Gauge>,
    oldest_pending_seconds: Family<Kind, Gauge<f64, AtomicU64>>,
}

/// Buckets from 5 ms to about 20 s (request latencies, delays).
fn fast() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

/// Buckets from 50 ms to about 30 minutes (job attempts, schedule runs).
fn slow() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 16))
}

/// The CloudWatch namespace of the EMF figures.
const EMF_NAMESPACE: &str = "KubeBYON";

/// One Embedded Metric Format line: `values` (name, unit, value) under each
/// of the `dimension_sets`, whose dimensions' values are in `dimensions`.
fn emf_line(
    timestamp_ms: i64,
    dimensions: &[(&str, &str)],
    dimension_sets: &[&[&str]],
    values: &[(&str, &str, f64)],
) -> String {
    let mut line = serde_json::Map::new();
    line.insert(
        "_aws".into(),
        serde_json::json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": EMF_NAMESPACE,
                "Dimensions": dimension_sets,
                "Metrics": values.iter().map(|(name, unit, _)| serde_json::json!({ "Name": name, "Unit": unit })).collect::<Vec<_>>(),
            }],
        }),
    );
    for (name, value) in dimensions {
        line.insert((*name).into(), (*value).into());
    }
    for (name, _, value) in values {
        line.insert((*name).into(), serde_json::json!(value));
    }
    serde_json::Value::Object(line).to_string()
}

impl Metrics {
    /// Writes one EMF line, when this process writes them.
    fn emit(&self, dimensions: &[(&str, &str)], sets: &[&[&str]], values: &[(&str, &str, f64)]) {
        if !self.emf {
            return;
        }
        use std::io::Write;
        let line = emf_line(
            chrono::Utc::now().timestamp_millis(),
            dimensions,
            sets,
            values,
        );
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
    }

    fn new(emf: bool) -> Self {
        let mut registry = Registry::with_prefix("kubebyon");
        let requests = Family::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by route template, method and status",
            requests.clone(),
        );
        let request_seconds = Family::<Route, Histogram>::new_with_constructor(fast as fn() -> _);
        registry.register(
            "http_request_duration_seconds",
            "Time to answer an HTTP request",
            request_seconds.clone(),
        );
        let claimed = Family::default();
        registry.register("jobs_claimed", "Job attempts started", claimed.clone());
        let attempts = Family::default();
        registry.register(
            "job_attempts",
            "Job attempts finished, by outcome (succeeded, retried, failed, lease_lost)",
            attempts.clone(),
        );
        let attempt_seconds = Family::<Kind, Histogram>::new_with_constructor(slow as fn() -> _);
        registry.register(
            "job_attempt_duration_seconds",
            "From a job's claim to its attempt's recorded outcome",
            attempt_seconds.clone(),
        );
        let start_delay_seconds =
            Family::<Kind, Histogram>::new_with_constructor(fast as fn() -> _);
        registry.register(
            "job_start_delay_seconds",
            "From the moment a job was due (enqueued, or its retry time) to its claim",
            start_delay_seconds.clone(),
        );
        let runs = Family::default();
        registry.register(
            "schedule_runs",
            "Schedule runs, by result (succeeded, failed, skipped: another run held the lock)",
            runs.clone(),
        );
        let run_seconds = Family::<Schedule, Histogram>::new_with_constructor(slow as fn() -> _);
        registry.register(
            "schedule_run_duration_seconds",
            "Time a schedule's run took",
            run_seconds.clone(),
        );
        let pending = Family::default();
        registry.register(
            "jobs_pending",
            "Jobs waiting to run, read from PostgreSQL at each scrape",
            pending.clone(),
        );
        let oldest_pending_seconds = Family::default();
        registry.register(
            "jobs_oldest_pending_age_seconds",
            "How long the oldest due pending job has waited, read at each scrape",
            oldest_pending_seconds.clone(),
        );
        Self {
            emf,
            registry,
            requests,
            request_seconds,
            claimed,
            attempts,
            attempt_seconds,
            start_delay_seconds,
            runs,
            run_seconds,
            pending,
            oldest_pending_seconds,
        }
    }

    /// Whether figures are written as they happen (EMF under Lambda), so
    /// what is otherwise read at a scrape has to be reported by someone.
    pub fn writes_lines(&self) -> bool {
        self.emf
    }

    /// `method` is one of a bounded set (the HTTP layer names any
    /// non-standard method `other`).
    pub fn http_request(&self, route: &str, method: &'static str, status: u16, took: Duration) {
        if self.emf {
            self.emit(
                &[
                    ("route", route),
                    ("method", method),
                    ("status", &status.to_string()),
                ],
                &[&["route", "method", "status"]],
                &[
                    ("Requests", "Count", 1.0),
                    ("RequestDuration", "Seconds", took.as_secs_f64()),
                ],
            );
        }
        let route = route.to_string();
        self.request_seconds
            .get_or_create(&Route {
                route: route.clone(),
                method,
            })
            .observe(took.as_secs_f64());
        self.requests
            .get_or_create(&Request {
                route,
                method,
                status,
            })
            .inc();
    }

    pub fn job_claimed(&self, job_type: JobType, due_for: Duration) {
        self.emit(
            &[("job_type", job_type.as_str())],
            &[&["job_type"]],
            &[("JobStartDelay", "Seconds", due_for.as_secs_f64())],
        );
        let kind = Kind {
            job_type: job_type.as_str(),
        };
        self.claimed.get_or_create(&kind).inc();
        self.start_delay_seconds
            .get_or_create(&kind)
            .observe(due_for.as_secs_f64());
    }

    pub fn job_attempt(&self, job_type: JobType, outcome: AttemptOutcome, took: Duration) {
        self.emit(
            &[
                ("job_type", job_type.as_str()),
                ("outcome", outcome.as_str()),
            ],
            // By type and outcome, and by outcome alone (what an alarm on
            // failed jobs watches).
            &[&["job_type", "outcome"], &["outcome"]],
            &[
                ("JobAttempts", "Count", 1.0),
                ("JobAttemptDuration", "Seconds", took.as_secs_f64()),
            ],
        );
        self.attempts
            .get_or_create(&Attempt {
                job_type: job_type.as_str(),
                outcome: outcome.as_str(),
            })
            .inc();
        self.attempt_seconds
            .get_or_create(&Kind {
                job_type: job_type.as_str(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn schedule_run(&self, schedule: &'static str, result: RunResult, took: Duration) {
        self.emit(
            &[("schedule", schedule), ("result", result.as_str())],
            &[&["schedule", "result"]],
            &[
                ("ScheduleRuns", "Count", 1.0),
                ("ScheduleRunDuration", "Seconds", took.as_secs_f64()),
            ],
        );
        self.runs
            .get_or_create(&Run {
                schedule,
                result: result.as_str(),
            })
            .inc();
        self.run_seconds
            .get_or_create(&Schedule { schedule })
            .observe(took.as_secs_f64());
    }

    /// Sets the backlog gauges: every kind of job (`kinds`), those without
    /// pending jobs at 0. As EMF, by type and in total (the oldest age
    /// across types: what an alarm on stuck jobs watches).
    pub fn set_backlog(&self, kinds: &JobKinds, backlog: &[Backlog]) {
        for b in backlog {
            self.emit(
                &[("job_type", b.job_type.as_str())],
                &[&["job_type"]],
                &[
                    ("JobsPending", "Count", b.pending as f64),
                    ("JobsOldestPendingAge", "Seconds", b.oldest_due_seconds),
                ],
            );
        }
        self.emit(
            &[("service", "kubebyon")],
            &[&["service"]],
            &[
                (
                    "JobsPending",
                    "Count",
                    backlog.iter().map(|b| b.pending as f64).sum(),
                ),
                (
                    "JobsOldestPendingAge",
                    "Seconds",
                    backlog
                        .iter()
                        .map(|b| b.oldest_due_seconds)
                        .fold(0.0, f64::max),
                ),
            ],
        );
        for job_type in kinds.iter().map(|k| k.job_type) {
            let kind = Kind {
                job_type: job_type.as_str(),
            };
            let of_type = backlog.iter().find(|b| b.job_type == job_type);
            self.pending
                .get_or_create(&kind)
                .set(of_type.map_or(0, |b| b.pending));
            self.oldest_pending_seconds
                .get_or_create(&kind)
                .set(of_type.map_or(0.0, |b| b.oldest_due_seconds));
        }
    }

    /// The OpenMetrics text exposition of every figure.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// The process's figures.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| Metrics::new(std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some()))
}

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_come_out_as_openmetrics_text_with_their_labels() {
        let m = Metrics::new(false);
        m.http_request(
            "/api/console/clusters/{id}",
            "GET",
            200,
            Duration::from_millis(12),
        );
        m.http_request(
            "/api/console/clusters/{id}",
            "GET",
            404,
            Duration::from_millis(3),
        );
        let kinds = JobKinds::new([
            crate::domain::JobKind::new("sample_grow", "grow"),
            crate::domain::JobKind::new("sample_shrink", "shrink"),
        ]);
        m.job_claimed(JobType::of("sample_grow"), Duration::from_millis(40));
        m.job_attempt(
            JobType::of("sample_grow"),
            AttemptOutcome::Retried,
            Duration::from_secs(2),
        );
        m.schedule_run("sweep", RunResult::Skipped, Duration::from_millis(1));
        m.set_backlog(
            &kinds,
            &[Backlog {
                job_type: JobType::of("sample_shrink"),
                pending: 7,
                oldest_due_seconds: 12.5,
            }],
        );
        let text = m.encode();
        for line in [
            r#"kubebyon_http_requests_total{route="/api/console/clusters/{id}",method="GET",status="200"} 1"#,
            r#"kubebyon_http_requests_total{route="/api/console/clusters/{id}",method="GET",status="404"} 1"#,
            r#"kubebyon_http_request_duration_seconds_count{route="/api/console/clusters/{id}",method="GET"} 2"#,
            r#"kubebyon_jobs_claimed_total{job_type="sample_grow"} 1"#,
            r#"kubebyon_job_attempts_total{job_type="sample_grow",outcome="retried"} 1"#,
            r#"kubebyon_schedule_runs_total{schedule="sweep",result="skipped"} 1"#,
            r#"kubebyon_jobs_pending{job_type="sample_shrink"} 7"#,
            r#"kubebyon_jobs_pending{job_type="sample_grow"} 0"#,
            r#"kubebyon_jobs_oldest_pending_age_seconds{job_type="sample_shrink"} 12.5"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn an_emf_line_names_its_metrics_dimensions_and_values() {
        let line: serde_json::Value = serde_json::from_str(&emf_line(
            1_700_000_000_000,
            &[("job_type", "sample_grow"), ("outcome", "failed")],
            &[&["job_type", "outcome"], &["outcome"]],
            &[
                ("JobAttempts", "Count", 1.0),
                ("JobAttemptDuration", "Seconds", 2.5),
            ],
        ))
        .unwrap();
        assert_eq!(
            line,
            serde_json::json!({
                "_aws": {
                    "Timestamp": 1_700_000_000_000_i64,
                    "CloudWatchMetrics": [{
                        "Namespace": "KubeBYON",
                        "Dimensions": [["job_type", "outcome"], ["outcome"]],
                        "Metrics": [
                            { "Name": "JobAttempts", "Unit": "Count" },
                            { "Name": "JobAttemptDuration", "Unit": "Seconds" }
                        ]
                    }]
                },
                "job_type": "sample_grow",
                "outcome": "failed",
                "JobAttempts": 1.0,
                "JobAttemptDuration": 2.5
            })
        );
    }
}
