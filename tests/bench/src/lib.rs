//! What the benchmark programs share.

use anyhow::Context;
use sqlx::PgPool;

/// The number after `name` in `args` (`--clusters 1000`), else `default`.
pub fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .with_context(|| format!("{name} needs a value"))?
            .parse()
            .with_context(|| format!("{name} must be a number")),
        None => Ok(default),
    }
}

/// The `p` quantile of `sorted` milliseconds, to the microsecond.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    (sorted[i] * 1000.0).round() / 1000.0
}

/// Adds `count` ready clusters named `c1`… to the user with `email`, made
/// verified if new, in one statement.
pub async fn seed_clusters(pool: &PgPool, email: &str, count: usize) -> anyhow::Result<uuid::Uuid> {
    let owner: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name, email_verified_at) VALUES ($1, 'Benchmark', now())
         ON CONFLICT (email) DO UPDATE SET display_name = EXCLUDED.display_name
         RETURNING id",
    )
    .bind(email)
    .fetch_one(pool)
    .await?;
    sqlx::query(
        "INSERT INTO clusters (owner_user_id, name, vcluster_name, namespace, kubernetes_version,
             workload_cpu_limit_milli_cores, workload_memory_limit_mib,
             control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
             public_access_mode, status)
         SELECT $1, 'c' || g, 'c' || g, 'kb-c' || g, '1.31', 1000, 1024, 100, 256, 'nodeport', 'ready'
         FROM generate_series(1, $2) g",
    )
    .bind(owner)
    .bind(i64::try_from(count)?)
    .execute(pool)
    .await?;
    Ok(owner)
}

/// Accepts every message and drops it: the benchmarks measure the requests,
/// not the jobs they would start.
pub struct Dropping;

#[async_trait::async_trait]
impl shared::jobs::JobPublisher for Dropping {
    async fn publish(
        &self,
        _: &[shared::jobs::JobMessage],
    ) -> Result<(), shared::jobs::PublishError> {
        Ok(())
    }
}

/// User and system CPU seconds a process has used so far (`/proc/PID/stat`;
/// `self` for this one); 0 when it cannot be read.
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // utime and stime are the 14th and 15th fields: the 12th and 13th after
    // the parenthesised name, which may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    (ticks(11).unwrap_or(0.0) + ticks(12).unwrap_or(0.0)) / 100.0
}

/// CPU seconds used so far by every PostgreSQL server process on the
/// machine (those named `postgres`).
pub fn postgres_cpu_seconds() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().into_string().ok()?;
            pid.bytes().all(|b| b.is_ascii_digit()).then_some(pid)
        })
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .map(|pid| cpu_seconds(&pid))
        .sum()
}

/// Where the CPU time of a stretch went: this process, a child (the
/// simulated clusters) and PostgreSQL, in seconds, from readings before and
/// after.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSplit {
    pub own: f64,
    pub child: f64,
    pub postgres: f64,
}

impl CpuSplit {
    pub fn now(child: u32) -> Self {
        Self {
            own: cpu_seconds("self"),
            child: cpu_seconds(&child.to_string()),
            postgres: postgres_cpu_seconds(),
        }
    }

    /// What was used since `before`, divided by `runs`, as JSON.
    pub fn per_run_since(&self, before: &Self, runs: usize) -> serde_json::Value {
        let each = |after: f64, before: f64| {
            ((after - before) / runs.max(1) as f64 * 100.0).round() / 100.0
        };
        serde_json::json!({
            "own_s": each(self.own, before.own),
            "simulated_clusters_s": each(self.child, before.child),
            "postgres_s": each(self.postgres, before.postgres),
        })
    }
}

/// A simulated fleet in a child process, so that this process's CPU time and
/// peak RSS are the measured code's own: this program run again with
/// `serve` and the arguments given, which describes the fleet in one JSON
/// line on its stdout ([`serve_until_parent_closes`]) and serves until its
/// stdin closes.
pub struct ChildFleet {
    child: std::process::Child,
    /// The child's description of the fleet.
    pub description: serde_json::Value,
    /// Seconds from the start to the description.
    pub ready_s: f64,
}

impl ChildFleet {
    pub fn start(args: &[String]) -> anyhow::Result<Self> {
        use std::io::BufRead;
        let started = std::time::Instant::now();
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .arg("serve")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().context("child stdout")?)
            .read_line(&mut line)?;
        let description = serde_json::from_str(&line).context("the fleet's description")?;
        Ok(Self {
            child,
            description,
            ready_s: started.elapsed().as_secs_f64(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes the child's stdin and waits for it to end.
    pub fn stop(mut self) -> anyhow::Result<()> {
        drop(self.child.stdin.take());
        self.child.wait()?;
        Ok(())
    }
}

/// The child's side of [`ChildFleet`]: writes `description` as one line,
/// then serves until the parent closes stdin.
pub async fn serve_until_parent_closes(description: &serde_json::Value) -> anyhow::Result<()> {
    use std::io::{BufRead, Write};
    let mut out = std::io::stdout().lock();
    writeln!(out, "{description}")?;
    out.flush()?;
    drop(out);
    tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin()
            .lock()
            .read_line(&mut sink)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
    })
    .await?;
    Ok(())
}

/// This process's peak resident memory (VmHWM), in MiB.
pub fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
        / 1024
}

/// A child process, killed when dropped.
pub struct Process(pub std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `check` every 5 ms for up to `limit`.
pub async fn until<T>(
    limit: std::time::Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(found) = check().await {
            return Ok(found);
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!("{what}: not within {limit:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
