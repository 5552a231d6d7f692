//! `route-agent`: runs on every host node (a DaemonSet with the host's
//! network and `NET_ADMIN`) and keeps the workload edge's route plan there:
//! each cluster node's pod network via that node's address. It reads the
//! whole plan from the platform (`GET /api/route-agent/routes`, with the
//! route agents' token), makes the node's routing table hold exactly the
//! planned routes among the routes marked with the plan's protocol number,
//! never touching a route without that mark, and reports what it holds
//! (`POST /api/route-agent/reports`). Routes are read and written through
//! rtnetlink by iproute2's `ip`, the kernel's own client of it.
//!
//! Environment: `KUBEBYON_API` (the platform's base URL),
//! `KUBEBYON_ROUTE_AGENT_TOKEN`, `NODE_NAME` (the host node, from the
//! downward API), `ROUTE_AGENT_INTERVAL_MS` (default 30000). `--once` runs
//! one pass and exits non-zero when it could not complete; `--netns NAME`
//! programs the network namespace `NAME` instead of its own.
//! Each pass prints one JSON line: what it changed and what failed.

// The agent's output is its log: one JSON line a pass.
#![allow(clippy::print_stdout)]

use std::{collections::BTreeMap, process::Command, time::Duration};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
struct RoutePlan {
    protocol: u8,
    routes: Vec<Route>,
}

#[derive(Debug, Deserialize)]
struct Route {
    destination: String,
    via: String,
}

#[derive(Debug, Serialize)]
struct Report {
    node: String,
    applied: Vec<String>,
    failed: Vec<Failed>,
}

#[derive(Debug, Serialize)]
struct Failed {
    destination: String,
    error: String,
}

struct Agent {
    api: String,
    token: String,
    node: String,
    netns: Option<String>,
    http: reqwest::Client,
}

impl Agent {
    fn ip(&self) -> Command {
        let mut command = Command::new("ip");
        if let Some(netns) = &self.netns {
            command.args(["-n", netns]);
        }
        command
    }

    /// The routes marked with `protocol` in the main table: destination →
    /// next hop.
    fn ours(&self, protocol: u8) -> anyhow::Result<BTreeMap<String, String>> {
        let output = self
            .ip()
            .args(["-json", "route", "show", "proto", &protocol.to_string()])
            .output()
            .context("running ip")?;
        if !output.status.success() {
            bail!(
                "ip route show: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let routes: Vec<serde_json::Value> =
            serde_json::from_slice(&output.stdout).context("reading ip's JSON")?;
        Ok(routes
            .iter()
            .filter_map(|r| {
                let destination = r["dst"].as_str()?;
                let destination = match destination.contains('/') {
                    true => destination.to_string(),
                    false => format!("{destination}/32"),
                };
                Some((
                    destination,
                    r["gateway"].as_str().unwrap_or_default().to_string(),
                ))
            })
            .collect())
    }

    /// Runs `ip route <args…>`; its error output when it fails.
    fn route(&self, args: &[&str]) -> Result<(), String> {
        let output = self
            .ip()
            .arg("route")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        match output.status.success() {
            true => Ok(()),
            false => Err(String::from_utf8_lossy(&output.stderr).trim().to_string()),
        }
    }

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
        let protocol = plan.protocol.to_string();
        let current = self.ours(plan.protocol)?;
        let mut changed = 0;
        let mut report = Report {
            node: self.node.clone(),
            applied: Vec::new(),
            failed: Vec::new(),
        };
        for route in &plan.routes {
            if current.get(&route.destination) == Some(&route.via) {
                report.applied.push(route.destination.clone());
                continue;
            }
            let args = [
                "replace",
                &route.destination,
                "via",
                &route.via,
                "proto",
                &protocol,
            ];
            match self.route(&args) {
                Ok(()) => {
                    changed += 1;
                    report.applied.push(route.destination.clone());
                }
                Err(error) => report.failed.push(Failed {
                    destination: route.destination.clone(),
                    error,
                }),
            }
        }
        for destination in current.keys() {
            if plan.routes.iter().any(|r| &r.destination == destination) {
                continue;
            }
            match self.route(&["del", destination, "proto", &protocol]) {
                Ok(()) => changed += 1,
                Err(error) => report.failed.push(Failed {
                    destination: destination.clone(),
                    error,
                }),
            }
        }
        self.http
            .post(format!("{}/api/route-agent/reports", self.api))
            .bearer_auth(&self.token)
            .json(&report)
            .send()
            .await
            .context("sending the report")?
            .error_for_status()
            .context("sending the report")?;
        Ok((changed, report))
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
