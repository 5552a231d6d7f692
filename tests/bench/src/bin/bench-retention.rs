//! The pruning of histories on the fleet data (`tests/bench/fleet.sql`):
//! each capability's pruning statement (`shared::app::retention`, metrics'
//! own), one batch at a time, then a whole `retention::prune` as `sweep`
//! runs it, each in a transaction rolled back so the data stays as
//! generated. Ages are chosen so every history has a backlog past its age.
//! Prints one JSON line per figure.

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use anyhow::Context;
use shared::app::retention;

const DAY: u64 = 86_400;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let batch: i64 = bench::arg(&args, "--batch", 1_000)?;
    let runs: usize = bench::arg(&args, "--runs", 5)?;
    let url = std::env::var("DATABASE_URL").context("DATABASE_URL")?;
    let pool = sqlx::PgPool::connect(&url).await?;
    let age = |days: u64| Duration::from_secs(days * DAY);
    let config = retention::Config {
        ages: [
            ("node_events", age(30)),
            ("audit_events", age(200)),
            ("login_events", age(30)),
            ("finished_jobs", age(30)),
        ]
        .into(),
        batch,
        batches: 10,
    };
    for history in [
        "node_events",
        "audit_events",
        "login_events",
        "finished_jobs",
        "metrics",
    ] {
        let mut times = Vec::new();
        for _ in 0..runs {
            let mut tx = pool.begin().await?;
            let started = Instant::now();
            let deleted = match history {
                "metrics" => {
                    shared::metrics::prune(&mut *tx, age(3), batch)
                        .await?
                        .samples
                }
                name => {
                    let declared = shared::app::capabilities::histories()
                        .find(|h| h.name == name)
                        .context("a declared history")?;
                    (declared.prune)(&mut tx, config.ages[name], batch).await?
                }
            };
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(
                deleted == batch.unsigned_abs(),
                "{history}: {deleted} rows, not a full batch"
            );
            tx.rollback().await?;
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{}",
            serde_json::json!({"history": history, "batch": batch,
                               "median_ms": bench::percentile(&times, 0.5),
                               "max_ms": bench::percentile(&times, 1.0)})
        );
    }
    let mut tx = pool.begin().await?;
    let started = Instant::now();
    let pruned = retention::prune(&mut tx, &config).await?;
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    tx.rollback().await?;
    println!(
        "{}",
        serde_json::json!({"history": "a sweep's run (10 batches of each)", "batch": batch,
                           "rows": pruned.total(), "ms": (elapsed * 1000.0).round() / 1000.0})
    );
    Ok(())
}
