//! `route-agent`: runs on every host node (a DaemonSet with the host's
//! network and `NET_ADMIN`) and keeps the workload edge's route plan there:
//! each cluster node's pod network via that node's address. It reads the
//! whole plan from the platform (`GET /api/route-agent/routes`, with the
//! route agents' token), makes the node's routing table hold exactly the
//! planned routes among the routes marked with the plan's protocol number,
//! never touching a route without that mark, and reports what it holds
//! (`POST /api/route-agent/reports`). Routes are read and written over
//! rtnetlink ([`route_agent::Table`]).
//!
//! Environment: `KUBEBYON_API` (the platform's base URL),
//! `KUBEBYON_ROUTE_AGENT_TOKEN`, `NODE_NAME` (the host node, from the
//! downward API), `ROUTE_AGENT_INTERVAL_MS` (default 30000). `--once` runs
//! one pass and exits non-zero when it could not complete; `--netns NAME`
//! programs the network namespace `NAME` instead of its own.
//! Each pass prints one JSON line: what it changed and what failed.

// The agent's output is its log: one JSON line a pass.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use anyhow::{Context, bail};
use route_agent::{Failed, Route, Table, converge};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
struct RoutePlan {
    protocol: u8,
    routes: Vec<Route>,
}

#[derive(Debug, Serialize)]
struct Report {
    node: String,
    applied: Vec<String>,
    failed: Vec<Failed>,
}

struct Agent {
    api: String,
    token: String,
    node: String,
    netns: Option<String>,
    http: reqwest::Client,
}

impl Agent {
    /// One pass: the plan read, the routes made to match it, the report
    /// sent. Says how many routes it changed.
    async fn pass(&self) -> anyhow::Result<(usize, Report)> {
        let plan: RoutePlan = self
            .http
            .get(format!("{}/api/route-agent/routes", self.api))
            .bearer_auth(&self.token)
            .send()
            .await
            .context("reading the route plan")?
            .error_for_status()
            .context("reading the route plan")?
            .json()
            .await?;
        let mut table = Table::open(self.netns.as_deref()).context("opening the routing table")?;
        let outcome =
            converge(&mut table, plan.protocol, &plan.routes).context("reading the routes")?;
        let report = Report {
            node: self.node.clone(),
            applied: outcome.applied,
            failed: outcome.failed,
        };
        self.http
            .post(format!("{}/api/route-agent/reports", self.api))
            .bearer_auth(&self.token)
            .json(&report)
            .send()
            .await
            .context("sending the report")?
            .error_for_status()
            .context("sending the report")?;
        Ok((outcome.changed, report))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut once = false;
    let mut netns = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--once" => once = true,
            "--netns" => netns = Some(rest.next().context("--netns needs a name")?.clone()),
            other => bail!("unknown option {other:?}; the options are --once and --netns NAME"),
        }
    }
    let env = |name: &str| std::env::var(name).with_context(|| format!("{name} is required"));
    let interval: u64 = std::env::var("ROUTE_AGENT_INTERVAL_MS")
        .ok()
        .map(|v| v.parse())
        .transpose()
        .context("ROUTE_AGENT_INTERVAL_MS must be milliseconds")?
        .unwrap_or(30_000);
    let agent = Agent {
        api: env("KUBEBYON_API")?.trim_end_matches('/').to_string(),
        token: env("KUBEBYON_ROUTE_AGENT_TOKEN")?,
        node: env("NODE_NAME")?,
        netns,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?,
    };
    loop {
        match agent.pass().await {
            Ok((changed, report)) => println!(
                "{}",
                serde_json::json!({"changed": changed, "applied": report.applied.len(), "failed": report.failed})
            ),
            Err(error) if once => return Err(error),
            Err(error) => println!("{}", serde_json::json!({"error": format!("{error:#}")})),
        }
        if once {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(interval)).await;
    }
}
