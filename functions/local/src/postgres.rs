//! A private PostgreSQL for `local`, started from the installed server binaries
//! in a data directory it owns. PostgreSQL refuses to run as root, so as root
//! the server runs as the `postgres` system user.

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context, bail};
use sqlx::{Connection, PgConnection};
use tokio::process::{Child, Command};

pub struct EmbeddedPostgres {
    child: Child,
    port: u16,
}

const INSTALL_HINT: &str = "PostgreSQL server binaries were not found. Install them \
    (Debian: `apt-get install -y postgresql`), point KUBEBYON_PG_BIN at their directory, \
    or set DATABASE_URL to an existing server";

fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("KUBEBYON_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut candidates: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    candidates.sort();
    candidates.pop().map(|(_, bin)| bin).context(INSTALL_HINT)
}

/// uid and gid of the `postgres` user, when we are root and must drop privileges.
pub fn run_as() -> anyhow::Result<Option<(u32, u32)>> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let is_root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        == Some("0");
    if !is_root {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<_> = line.split(':').collect();
            (fields.first() == Some(&"postgres")).then(|| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
        })
        .flatten()
        .map(Some)
        .context("running as root, but there is no `postgres` system user to run PostgreSQL as (apt-get install -y postgresql creates it)")
}

fn command(program: PathBuf, user: Option<(u32, u32)>) -> Command {
    let mut std_command = std::process::Command::new(program);
    if let Some((uid, gid)) = user {
        std_command.uid(uid).gid(gid);
    }
    Command::from(std_command)
}

impl EmbeddedPostgres {
    pub async fn start(data_dir: &Path, port: u16) -> anyhow::Result<Self> {
        let bin = bin_dir()?;
        let user = run_as()?;
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        let data_dir = data_dir.canonicalize()?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&data_dir, Some(uid), Some(gid))
                .context("giving the data directory to postgres")?;
        }
        if !data_dir.join("PG_VERSION").exists() {
            tracing::info!(dir = %data_dir.display(), "initialising a private PostgreSQL");
            let output = command(bin.join("initdb"), user)
                .args(["-D"])
                .arg(&data_dir)
                .args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-sync",
                ])
                .output()
                .await
                .context("running initdb")?;
            if !output.status.success() {
                bail!("initdb failed: {}", String::from_utf8_lossy(&output.stderr));
            }
        }
        let child = command(bin.join("postgres"), user)
            .arg("-D")
            .arg(&data_dir)
            .args([
                "-p",
                &port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
                "-k",
            ])
            .arg(&data_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting postgres")?;
        let mut pg = Self { child, port };
        pg.wait_ready().await?;
        Ok(pg)
    }

    fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/kubebyon", self.port)
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        for _ in 0..150 {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "postgres exited during start ({status}); is port {} already in use?",
                    self.port
                );
            }
            if let Ok(mut conn) = PgConnection::connect(&self.admin_url()).await {
                let exists: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'kubebyon')",
                )
                .fetch_one(&mut conn)
                .await?;
                if !exists {
                    sqlx::query("CREATE DATABASE kubebyon")
                        .execute(&mut conn)
                        .await?;
                }
                tracing::info!(port = self.port, "private PostgreSQL ready");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("postgres did not accept connections within 30 s")
    }

    /// Fast shutdown (SIGINT), waiting for the server to exit.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = interrupt(pid);
            if tokio::time::timeout(Duration::from_secs(20), self.child.wait())
                .await
                .is_ok()
            {
                tracing::info!("private PostgreSQL stopped");
                return;
            }
        }
        let _ = self.child.kill().await;
    }

    /// Immediate shutdown (SIGQUIT), what `pg_ctl stop -m immediate` sends:
    /// every connection is cut, nothing is checkpointed, and the next start
    /// on the same data directory runs crash recovery. A database crash, for
    /// the fault-injection tests.
    pub async fn stop_immediately(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = send(pid, nix::sys::signal::Signal::SIGQUIT);
            if tokio::time::timeout(Duration::from_secs(20), self.child.wait())
                .await
                .is_ok()
            {
                return;
            }
        }
        let _ = self.child.kill().await;
    }
}

/// Sends SIGINT: PostgreSQL's fast shutdown.
fn interrupt(pid: u32) -> nix::Result<()> {
    send(pid, nix::sys::signal::Signal::SIGINT)
}

fn send(pid: u32, signal: nix::sys::signal::Signal) -> nix::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
}
