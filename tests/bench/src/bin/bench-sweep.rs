//! `sweep` on the fleet data (`tests/bench/fleet.sql`: 500,000 finished
//! jobs): whole runs as the schedule makes them (rescue, publish, token
//! expiry, pruning of expired rows, retention), the publisher dropping what
//! it is given. Run it once with the retention's ages long enough that
//! nothing is past them (the backbone's part alone, as on a platform whose
//! histories are pruned), then with the defaults, whose first runs meet the
//! generated backlog. Prints one JSON line per figure; deletes rows past
//! their retention, so run it on a scratch database.

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]

use std::{collections::HashMap, sync::Arc, time::Instant};

use anyhow::Context;
use shared::config::Settings;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = bench::arg(&args, "--runs", 20)?;
    let url = std::env::var("DATABASE_URL").context("DATABASE_URL")?;
    let pool = sqlx::PgPool::connect(&url).await?;
    let ten_years = (10 * 365 * 86_400_000u64).to_string();
    let kept: HashMap<&str, &str> = [
        "NODE_EVENTS_RETENTION_MS",
        "AUDIT_EVENTS_RETENTION_MS",
        "LOGIN_EVENTS_RETENTION_MS",
        "FINISHED_JOBS_RETENTION_MS",
    ]
    .into_iter()
    .map(|name| (name, ten_years.as_str()))
    .collect();
    for (what, source) in [
        ("nothing past retention", kept),
        ("default retention", HashMap::new()),
    ] {
        let context = queues::runtime::ScheduleContext::new(
            pool.clone(),
            Arc::new(Settings::from_source(&source)?),
            None,
            Some(Arc::new(bench::Dropping)),
        );
        let mut times = Vec::new();
        let mut pruned = 0;
        for _ in 0..runs {
            let started = Instant::now();
            let report = sweep::run(&context).await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            pruned += report.retention.total();
        }
        let first = times[0];
        times.sort_by(f64::total_cmp);
        println!(
            "{}",
            serde_json::json!({"sweep": what, "runs": runs, "first_ms": (first * 1000.0).round() / 1000.0,
                               "p50_ms": bench::percentile(&times, 0.5),
                               "max_ms": bench::percentile(&times, 1.0),
                               "retention_rows": pruned})
        );
    }
    Ok(())
}
