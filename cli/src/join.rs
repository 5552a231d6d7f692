//! `kubebyon join watch`: the live join checklist in the terminal. Each step
//! a join script reports is printed as it arrives, for the attempts that
//! start (or are under way) while it watches, until one ends.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use clap::Subcommand;

use crate::{
    Session,
    client::{self, segment},
    clusters::resolve,
    error::{CliError, Exit},
    model::Attempt,
};

#[derive(Debug, Subcommand)]
pub enum JoinCommand {
    /// Follow the machines joining the cluster, step by step, until one
    /// has joined (exit 0) or failed (exit 6).
    Watch {
        cluster: String,
        /// Give up after this many seconds (exit 8).
        #[arg(long, default_value_t = 1800)]
        timeout: u64,
    },
}

/// Where an attempt is finished.
fn ended(outcome: &str) -> bool {
    matches!(outcome, "succeeded" | "failed" | "refused")
}

fn mark(status: &str) -> &'static str {
    match status {
        "ok" => "✓",
        "warning" => "!",
        "failed" => "✗",
        "skipped" => "-",
        _ => "…",
    }
}

pub async fn run(session: &Session, command: JoinCommand) -> Result<(), CliError> {
    let JoinCommand::Watch { cluster, timeout } = command;
    let client = session.signed_in()?;
    let cluster = resolve(&client, &cluster).await?;
    let path = format!(
        "/api/console/clusters/{}/join-attempts",
        segment(&cluster.id)
    );
    let deadline = Instant::now() + Duration::from_secs(timeout);
    // Attempts that had ended before the watch began are history, not news.
    let before: Vec<Attempt> = client::read(&client.get(&path).await?)?;
    let old: HashSet<String> = before
        .into_iter()
        .filter(|a| ended(&a.outcome))
        .map(|a| a.id)
        .collect();
    note!(
        "Waiting for a machine to join {} (run the join command on it)…",
        cluster.name
    );
    // Per attempt: how many of its steps are printed, and whether its
    // header is printed and named the machine (the script reports its host
    // name with its steps, which may come after the attempt is first seen:
    // the header is printed again once the name is known).
    let mut shown: HashMap<String, (usize, Option<bool>)> = HashMap::new();
    let mut progress = crate::output::Progress::new();
    let started = Instant::now();
    loop {
        let attempts: Vec<Attempt> = client::read(&client.get(&path).await?)?;
        progress.clear();
        // Oldest first, so lines read in the order things happened.
        for attempt in attempts.iter().rev().filter(|a| !old.contains(&a.id)) {
            let (seen, header) = shown.entry(attempt.id.clone()).or_insert((0, None));
            let named = attempt.hostname.is_some();
            if header.is_none() || (*header == Some(false) && named) {
                say!(
                    "{} ({}) with token {}:",
                    attempt.hostname.as_deref().unwrap_or("a machine"),
                    attempt.source_ip.as_deref().unwrap_or("-"),
                    attempt.token_prefix
                );
                *header = Some(named);
            }
            for step in attempt.steps.iter().skip(*seen) {
                say!(
                    "  {} {}{}",
                    mark(&step.status),
                    step.step,
                    step.detail
                        .as_deref()
                        .map(|d| format!(": {}", crate::error::one_line(d)))
                        .unwrap_or_default()
                );
            }
            *seen = (*seen).max(attempt.steps.len());
            match attempt.outcome.as_str() {
                "succeeded" => {
                    say!(
                        "{} joined {}: `kubebyon nodes list {}` shows it.",
                        attempt.hostname.as_deref().unwrap_or("The machine"),
                        cluster.name,
                        cluster.name
                    );
                    return Ok(());
                }
                "failed" | "refused" => {
                    return Err(CliError::new(
                        Exit::OperationFailed,
                        format!(
                            "the join {}: {}",
                            attempt.outcome,
                            attempt.reason.as_deref().unwrap_or("no reason given")
                        ),
                    ));
                }
                _ => {}
            }
        }
        if Instant::now() > deadline {
            return Err(CliError::new(
                Exit::TimedOut,
                format!("no machine finished joining {} in {timeout}s", cluster.name),
            ));
        }
        progress.status(&format!("watching ({}s)", started.elapsed().as_secs()));
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}
