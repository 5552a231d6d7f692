//! How long the platform keeps its histories, and their pruning. Each
//! capability declares its histories (`Capability::histories`) and deletes
//! its own rows past their age, oldest first, a bounded batch per statement
//! (short transactions, no long lock, no table rewrite); `sweep` runs [`prune`] every few seconds, a few batches a table each time,
//! so a backlog drains over successive runs. Control-plane metrics keep their
//! own retention (`METRICS_RETENTION_MS`), pruned the same way by
//! `sync-metrics`.

use std::{collections::BTreeMap, time::Duration};

use serde::Serialize;
use sqlx::PgConnection;

use crate::config::{ConfigError, Millis, Part, Source, parse_or};

/// The ages past which histories are deleted: one for each history a
/// capability declares (`Capability::histories`), from its variable.
#[derive(Debug, Clone)]
pub struct Config {
    /// Each history's age, by name (`node_events`: `NODE_EVENTS_RETENTION_MS`,
    /// 90 days unless set).
    pub ages: BTreeMap<&'static str, Duration>,
    /// `RETENTION_BATCH` (default 1,000): rows one statement deletes.
    pub batch: i64,
    /// `RETENTION_BATCHES` (default 10): batches a history gets per run,
    /// while each is full.
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
        let mut ages = BTreeMap::new();
        for history in super::capabilities::histories() {
            let age = Millis::new(history.variable, history.default_days * DAY).read(source)?;
            ages.insert(history.name, age);
        }
        Ok(Self {
            ages,
            batch: count("RETENTION_BATCH", 1_000)?.into(),
            batches: count("RETENTION_BATCHES", 10)?,
        })
    }
}

/// Rows one run deleted, by history.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Pruned(pub BTreeMap<&'static str, u64>);

impl Pruned {
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

/// Deletes, from each history with an age in `config`, the rows past it:
/// batches while each is full, at most `config.batches` of them a history.
pub async fn prune(conn: &mut PgConnection, config: &Config) -> Result<Pruned, sqlx::Error> {
    let mut pruned = Pruned::default();
    for history in super::capabilities::histories() {
        let Some(&age) = config.ages.get(history.name) else {
            continue;
        };
        let mut deleted = 0;
        for _ in 0..config.batches {
            let n = (history.prune)(&mut *conn, age, config.batch).await?;
            deleted += n;
            if n < config.batch.unsigned_abs() {
                break;
            }
        }
        pruned.0.insert(history.name, deleted);
    }
    Ok(pruned)
}
