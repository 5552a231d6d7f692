//! How long the platform keeps its histories, and their pruning. Each
//! capability deletes its own rows past their age, oldest first, a bounded
//! batch per statement (short transactions, no long lock, no table rewrite);
//! `sweep` runs [`prune`] every few seconds, a few batches a table each time,
//! so a backlog drains over successive runs. Control-plane metrics keep their
//! own retention (`METRICS_RETENTION_MS`), pruned the same way by
//! `sync-metrics`.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgConnection;

use crate::{
    accounts, audit,
    config::{ConfigError, Millis, Part, Source, parse_or},
    jobs, nodes,
};

/// The ages past which histories are deleted.
#[derive(Debug, Clone)]
pub struct Config {
    /// `NODE_EVENTS_RETENTION_MS` (default 90 days, the longest timeline a
    /// node's page shows).
    pub node_events: Duration,
    /// `AUDIT_EVENTS_RETENTION_MS` (default 400 days).
    pub audit_events: Duration,
    /// `LOGIN_EVENTS_RETENTION_MS` (default 180 days).
    pub login_events: Duration,
    /// `FINISHED_JOBS_RETENTION_MS` (default 30 days): succeeded and failed
    /// jobs; their operations (a cluster's history) stay.
    pub finished_jobs: Duration,
    /// `RETENTION_BATCH` (default 1,000): rows one statement deletes.
    pub batch: i64,
    /// `RETENTION_BATCHES` (default 10): batches a table gets per run, while
    /// each is full.
    pub batches: u32,
}

impl Part for Config {
    fn read(source: &dyn Source) -> Result<Self, ConfigError> {
        const DAY: u64 = 86_400_000;
        let count = |name: &'static str, default: u32| {
            let n: u32 = parse_or(source, name, default)?;
            if (1..=100_000).contains(&n) {
                Ok(n)
            } else {
                Err(ConfigError::Invalid {
                    name,
                    reason: "must be between 1 and 100000".into(),
                })
            }
        };
        Ok(Self {
            node_events: Millis::new("NODE_EVENTS_RETENTION_MS", 90 * DAY).read(source)?,
            audit_events: Millis::new("AUDIT_EVENTS_RETENTION_MS", 400 * DAY).read(source)?,
            login_events: Millis::new("LOGIN_EVENTS_RETENTION_MS", 180 * DAY).read(source)?,
            finished_jobs: Millis::new("FINISHED_JOBS_RETENTION_MS", 30 * DAY).read(source)?,
            batch: count("RETENTION_BATCH", 1_000)?.into(),
            batches: count("RETENTION_BATCHES", 10)?,
        })
    }
}

/// Rows one run deleted, by history.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pruned {
    pub node_events: u64,
    pub audit_events: u64,
    pub login_events: u64,
    pub finished_jobs: u64,
}

impl Pruned {
    pub fn total(&self) -> u64 {
        self.node_events + self.audit_events + self.login_events + self.finished_jobs
    }
}

/// Runs a pruning statement (deleting at most `config.batch` rows) again
/// while it deletes a full batch, at most `config.batches` times; how many
/// rows it deleted in all.
macro_rules! drain {
    ($config:expr, $statement:expr) => {{
        let mut deleted = 0;
        for _ in 0..$config.batches {
            let n = $statement.await?;
            deleted += n;
            if n < $config.batch.unsigned_abs() {
                break;
            }
        }
        deleted
    }};
}

/// Deletes, from each history, the rows past its age: batches while each is
/// full, at most `config.batches` of them a history.
pub async fn prune(conn: &mut PgConnection, config: &Config) -> Result<Pruned, sqlx::Error> {
    Ok(Pruned {
        node_events: drain!(
            config,
            nodes::prune_events(&mut *conn, config.node_events, config.batch)
        ),
        audit_events: drain!(
            config,
            audit::prune(&mut *conn, config.audit_events, config.batch)
        ),
        login_events: drain!(
            config,
            accounts::prune_logins(&mut *conn, config.login_events, config.batch)
        ),
        finished_jobs: drain!(
            config,
            jobs::prune_finished(&mut *conn, config.finished_jobs, config.batch)
        ),
    })
}
