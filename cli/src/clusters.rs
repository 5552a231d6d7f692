//! `kubebyon clusters`: list, get, create, update, delete and retry, with
//! `--wait` following the operation's stages until it ends.

use std::{
    io::IsTerminal,
    time::{Duration, Instant},
};

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    Session,
    client::{self, Client, segment},
    error::{CliError, Exit},
    model::{Cluster, ClusterPage, Operation, OperationAccepted},
    output::{self, Format},
};

#[derive(Debug, Subcommand)]
pub enum ClustersCommand {
    /// The clusters of the organisation, newest first or by name.
    #[command(visible_alias = "ls")]
    List {
        /// Only those whose name holds this text.
        #[arg(long)]
        search: Option<String>,
        /// Only those of this health: healthy, degraded, no_nodes,
        /// unreachable, in_progress or failed.
        #[arg(long)]
        health: Option<String>,
        /// The order: newest (first) or name (A to Z).
        #[arg(long, default_value = "newest")]
        sort: String,
        /// At most this many.
        #[arg(long, default_value_t = 200)]
        limit: usize,
    },
    /// One cluster.
    Get { cluster: String },
    /// Ask for a new cluster.
    Create(CreateArgs),
    /// Change a cluster's limits or access.
    Update(UpdateArgs),
    /// Delete a cluster and everything in it.
    Delete {
        cluster: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        wait: Wait,
    },
    /// Run a cluster's failed operation again.
    Retry {
        cluster: String,
        /// The operation (its id); the newest failed one by default.
        #[arg(long)]
        operation: Option<String>,
        #[command(flatten)]
        wait: Wait,
    },
}

#[derive(Debug, Args)]
pub struct Wait {
    /// Follow the operation's stages until it ends; exit 6 when it fails.
    #[arg(long)]
    wait: bool,
    /// How long `--wait` waits, in seconds (exit 8 after).
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Its name: a DNS label of 1–40 characters.
    name: String,
    /// CPU the workloads may use in total, in millicores.
    #[arg(long, default_value_t = 2000)]
    cpu: i64,
    /// Memory the workloads may use in total, in MiB.
    #[arg(long, default_value_t = 4096)]
    memory: i64,
    /// Kubernetes minor version (`1.33`); the platform's default otherwise.
    #[arg(long)]
    version: Option<String>,
    /// How nodes reach the control plane: loadbalancer, nodeport, haproxy…
    #[arg(long)]
    public_access_mode: Option<String>,
    /// The managed ingress, with DNS and TLS.
    #[arg(long)]
    ingress: bool,
    #[command(flatten)]
    wait: Wait,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    cluster: String,
    #[arg(long)]
    cpu: Option<i64>,
    #[arg(long)]
    memory: Option<i64>,
    #[arg(long)]
    public_access_mode: Option<String>,
    /// Turn the managed ingress on or off.
    #[arg(long)]
    ingress: Option<bool>,
    #[command(flatten)]
    wait: Wait,
}

pub async fn run(session: &Session, command: ClustersCommand) -> Result<(), CliError> {
    let client = session.signed_in()?;
    match command {
        ClustersCommand::List {
            search,
            health,
            sort,
            limit,
        } => list(session, &client, search, health, &sort, limit).await,
        ClustersCommand::Get { cluster } => {
            let cluster = resolve(&client, &cluster).await?;
            let raw = client
                .get(&format!("/api/console/clusters/{}", segment(&cluster.id)))
                .await?;
            show(session.output, &raw, &[client::read(&raw)?])
        }
        ClustersCommand::Create(args) => {
            let mut body = json!({
                "name": args.name,
                "workload_cpu_limit_milli_cores": args.cpu,
                "workload_memory_limit_mib": args.memory,
                "managed_workload_ingress_enabled": args.ingress,
            });
            if let Some(version) = args.version {
                body["kubernetes_version"] = version.into();
            }
            if let Some(mode) = args.public_access_mode {
                body["public_access_mode"] = mode.into();
            }
            let answer = client
                .call(Method::POST, "/api/console/clusters", Some(&body))
                .await?;
            accepted(session, &client, &answer.body, &args.wait).await
        }
        ClustersCommand::Update(args) => {
            let cluster = resolve(&client, &args.cluster).await?;
            let mut body = json!({});
            if let Some(cpu) = args.cpu {
                body["workload_cpu_limit_milli_cores"] = cpu.into();
            }
            if let Some(memory) = args.memory {
                body["workload_memory_limit_mib"] = memory.into();
            }
            if let Some(mode) = args.public_access_mode {
                body["public_access_mode"] = mode.into();
            }
            if let Some(ingress) = args.ingress {
                body["managed_workload_ingress_enabled"] = ingress.into();
            }
            let answer = client
                .call(
                    Method::PATCH,
                    &format!("/api/console/clusters/{}", segment(&cluster.id)),
                    Some(&body),
                )
                .await?;
            if answer.status.as_u16() == 200 {
                note!("Nothing to change.");
                return show(session.output, &answer.body, &[client::read(&answer.body)?]);
            }
            accepted(session, &client, &answer.body, &args.wait).await
        }
        ClustersCommand::Delete { cluster, yes, wait } => {
            let cluster = resolve(&client, &cluster).await?;
            if !yes {
                confirm(&format!(
                    "Delete the cluster {} and everything in it?",
                    cluster.name
                ))?;
            }
            let answer = client
                .call(
                    Method::DELETE,
                    &format!("/api/console/clusters/{}", segment(&cluster.id)),
                    None,
                )
                .await?;
            accepted(session, &client, &answer.body, &wait).await
        }
        ClustersCommand::Retry {
            cluster,
            operation,
            wait,
        } => {
            let cluster = resolve(&client, &cluster).await?;
            let operation = match operation {
                Some(id) => id,
                None => {
                    let operations: Vec<Operation> = client::read(
                        &client
                            .get(&format!(
                                "/api/console/clusters/{}/operations?limit=20",
                                segment(&cluster.id)
                            ))
                            .await?,
                    )?;
                    operations
                        .into_iter()
                        .find(|o| o.status == "failed")
                        .map(|o| o.id)
                        .ok_or_else(|| {
                            CliError::new(
                                Exit::NotFound,
                                format!("{} has no failed operation to retry", cluster.name),
                            )
                        })?
                }
            };
            let answer = client
                .call(
                    Method::POST,
                    &format!(
                        "/api/console/clusters/{}/operations/{}/retry",
                        segment(&cluster.id),
                        segment(&operation)
                    ),
                    None,
                )
                .await?;
            accepted(session, &client, &answer.body, &wait).await
        }
    }
}

async fn list(
    session: &Session,
    client: &Client,
    search: Option<String>,
    health: Option<String>,
    sort: &str,
    limit: usize,
) -> Result<(), CliError> {
    let mut items: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!(
            "/api/console/clusters?limit={}&sort={}",
            limit.clamp(1, 200),
            segment(sort)
        );
        if let Some(search) = &search {
            path.push_str(&format!("&q={}", segment(search)));
        }
        if let Some(health) = &health {
            path.push_str(&format!("&health={}", segment(health)));
        }
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={}", segment(cursor)));
        }
        let raw = client.get(&path).await?;
        let page: ClusterPage = client::read(&raw)?;
        items.extend(raw["items"].as_array().cloned().unwrap_or_default());
        cursor = page.next_cursor;
        if cursor.is_none() || items.len() >= limit {
            break;
        }
    }
    items.truncate(limit);
    let clusters: Vec<Cluster> = client::read(&Value::Array(items.clone()))?;
    show(session.output, &Value::Array(items), &clusters)
}

fn show(format: Format, raw: &Value, clusters: &[Cluster]) -> Result<(), CliError> {
    output::print(
        format,
        raw,
        &[
            "NAME", "STATUS", "HEALTH", "NODES", "VERSION", "CPU", "MEMORY", "ENDPOINT", "AGE",
        ],
        clusters
            .iter()
            .map(|c| {
                vec![
                    c.name.clone(),
                    c.status.clone(),
                    health(c),
                    c.nodes
                        .as_ref()
                        .map_or_else(|| "-".to_string(), |n| format!("{}/{}", n.ready, n.total)),
                    c.kubernetes_version.clone(),
                    format!("{}m", c.workload_cpu_limit_milli_cores),
                    format!("{}Mi", c.workload_memory_limit_mib),
                    output::or_dash(&c.api_endpoint),
                    output::age(&c.created_at),
                ]
            })
            .collect(),
    )
}

/// A cluster's health with what its nodes say: `degraded (1/1 offline)`.
fn health(cluster: &Cluster) -> String {
    let Some(health) = &cluster.health else {
        return "-".into();
    };
    match &cluster.nodes {
        Some(n) if n.offline + n.not_ready > 0 => {
            let mut down = Vec::new();
            if n.offline > 0 {
                down.push(format!("{}/{} offline", n.offline, n.total));
            }
            if n.not_ready > 0 {
                down.push(format!("{}/{} not ready", n.not_ready, n.total));
            }
            format!("{health} ({})", down.join(", "))
        }
        _ => health.clone(),
    }
}

/// The cluster a name or an id names, or an error that says there is none.
pub async fn resolve(client: &Client, name_or_id: &str) -> Result<Cluster, CliError> {
    let by_id = name_or_id.len() == 36 && name_or_id.parse::<uuid::Uuid>().is_ok();
    if by_id {
        return client::read(
            &client
                .get(&format!("/api/console/clusters/{}", segment(name_or_id)))
                .await?,
        );
    }
    let valid = (1..=63).contains(&name_or_id.len())
        && name_or_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        return Err(CliError::new(
            Exit::NotFound,
            format!(
                "no cluster named {}: a name is a DNS label",
                crate::error::one_line(name_or_id)
            ),
        ));
    }
    let page: ClusterPage = client::read(
        &client
            .get(&format!(
                "/api/console/clusters?limit=200&q={}",
                segment(name_or_id)
            ))
            .await?,
    )?;
    page.items
        .into_iter()
        .find(|c| c.name == name_or_id)
        .ok_or_else(|| CliError::new(Exit::NotFound, format!("no cluster named {name_or_id}")))
}

fn confirm(question: &str) -> Result<(), CliError> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::new(
            Exit::Usage,
            "not asking without a terminal: add --yes",
        ));
    }
    eprint!("{question} Type yes: ");
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| CliError::new(Exit::Failure, e.to_string()))?;
    if answer.trim() == "yes" {
        Ok(())
    } else {
        Err(CliError::new(
            Exit::Usage,
            "not confirmed; nothing was done",
        ))
    }
}

/// A 202's operation: printed, then followed when `--wait` asks.
async fn accepted(
    session: &Session,
    client: &Client,
    body: &Value,
    wait: &Wait,
) -> Result<(), CliError> {
    let accepted: OperationAccepted = client::read(body)?;
    let cluster = &accepted.cluster;
    if !wait.wait {
        note!(
            "{} {}: operation {} accepted.",
            cluster.name,
            accepted.operation.r#type,
            accepted.operation.id
        );
        return output::print(
            session.output,
            body,
            &["CLUSTER", "OPERATION", "TYPE", "STATUS"],
            vec![vec![
                cluster.name.clone(),
                accepted.operation.id.clone(),
                accepted.operation.r#type.clone(),
                accepted.operation.status.clone(),
            ]],
        );
    }
    let finished = follow(client, cluster, &accepted.operation, wait.timeout).await?;
    let raw = serde_json::to_value(json!({ "operation": finished.1, "cluster_id": cluster.id }))
        .expect("JSON");
    if session.output != Format::Table {
        output::print(session.output, &raw, &[], vec![])?;
    }
    let operation = finished.0;
    if operation.status == "succeeded" {
        return Ok(());
    }
    let (code, retry) = match &operation.error {
        Some(detail) => (
            detail.code.clone(),
            if detail.retryable {
                format!("; `kubebyon clusters retry {}` runs it again", cluster.name)
            } else {
                format!("; {}", detail.hint)
            },
        ),
        None => ("failed".into(), String::new()),
    };
    Err(CliError::new(
        Exit::OperationFailed,
        format!(
            "{} {} failed at {}: {} [{code}]{retry}",
            cluster.name,
            operation.r#type,
            operation.stage,
            operation
                .error_message
                .as_deref()
                .unwrap_or("no reason given"),
        ),
    ))
}

/// Polls the cluster's operations until `operation_id` ends, printing each
/// stage as it is reached: a line per stage (`[n] stage  +12s`) on
/// standard error, so standard output stays the result's.
/// How long `--wait` keeps asking a platform that does not answer, or
/// answers 5xx, before it gives up (exit 7): the operation goes on there.
const OUTAGE_PATIENCE: Duration = Duration::from_secs(60);

/// A deleted cluster's operations are gone with it: its deletion is done
/// once the cluster answers 404.
async fn follow(
    client: &Client,
    cluster: &Cluster,
    accepted: &Operation,
    timeout: u64,
) -> Result<(Operation, Value), CliError> {
    let operation_id = accepted.id.as_str();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(timeout);
    let mut shown = 0;
    let path = format!(
        "/api/console/clusters/{}/operations?limit=50",
        segment(&cluster.id)
    );
    note!("Following {} of {}…", operation_id, cluster.name);
    let mut progress = output::Progress::new();
    // Since when the platform has not answered (a restart, a network blip).
    let mut silent_since: Option<Instant> = None;
    loop {
        let raw = match client.get(&path).await {
            Err(e) if e.exit == Exit::Unavailable => {
                let since = *silent_since.get_or_insert_with(|| {
                    progress.line(&format!(
                        "  {}; asking again for up to {}s",
                        e.message,
                        OUTAGE_PATIENCE.as_secs()
                    ));
                    Instant::now()
                });
                if since.elapsed() > OUTAGE_PATIENCE || Instant::now() > deadline {
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            Err(e) if e.exit == Exit::NotFound && accepted.r#type == "delete" => {
                progress.line(&format!(
                    "{} is deleted ({}s).",
                    cluster.name,
                    started.elapsed().as_secs()
                ));
                let mut done = accepted.clone();
                done.status = "succeeded".into();
                return Ok((done, json!({ "id": operation_id, "status": "succeeded" })));
            }
            other => other?,
        };
        if silent_since.take().is_some() {
            progress.line("  the platform answers again");
        }
        let operations: Vec<Operation> = client::read(&raw)?;
        let position = operations.iter().position(|o| o.id == operation_id);
        let Some(position) = position else {
            return Err(CliError::new(
                Exit::Failure,
                format!("the operation {operation_id} is not among the cluster's"),
            ));
        };
        let operation = operations[position].clone();
        for (n, stage) in operation.stages.iter().enumerate().skip(shown) {
            progress.line(&format!(
                "  [{:>2}] {:<50} +{}s",
                n + 1,
                stage.stage,
                started.elapsed().as_secs()
            ));
        }
        shown = shown.max(operation.stages.len());
        match operation.status.as_str() {
            "succeeded" => {
                progress.line(&format!(
                    "{} {} succeeded in {}s.",
                    cluster.name,
                    operation.r#type,
                    started.elapsed().as_secs()
                ));
                return Ok((operation, raw[position].clone()));
            }
            "failed" | "cancelled" => return Ok((operation, raw[position].clone())),
            _ => progress.status(&format!(
                "{} ({}s)",
                operation.stage,
                started.elapsed().as_secs()
            )),
        }
        if Instant::now() > deadline {
            return Err(CliError::new(
                Exit::TimedOut,
                format!(
                    "{} is still {} after {timeout}s (at {}); it goes on without us",
                    cluster.name, operation.status, operation.stage
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}
