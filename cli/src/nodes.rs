//! `kubebyon nodes` (list, timeline, remove) and `kubebyon tokens` (create,
//! which prints the join command, list, revoke).

use std::collections::BTreeMap;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    Session,
    client::{self, segment},
    clusters::resolve,
    error::{CliError, Exit},
    model::{CreatedToken, Node, NodePage, Timeline, Token},
    output::{self, Format},
};

#[derive(Debug, Subcommand)]
pub enum NodesCommand {
    /// A cluster's nodes, by name.
    #[command(visible_alias = "ls")]
    List {
        cluster: String,
        /// Deleted nodes too.
        #[arg(long)]
        all: bool,
    },
    /// A node's events and uptime over the last `--hours`.
    Timeline {
        cluster: String,
        node: String,
        #[arg(long, default_value_t = 24)]
        hours: i64,
    },
    /// Drain a node and take it out of the cluster.
    Remove { cluster: String, node: String },
}

#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Make a join token and print the command that joins a machine with it.
    Create {
        cluster: String,
        /// How many machines may join with it (1–100).
        #[arg(long, default_value_t = 1)]
        uses: i64,
        /// Its lifetime in seconds (60 up to 7 days); the platform's default otherwise.
        #[arg(long)]
        ttl: Option<i64>,
        /// A label for each node it joins, `key=value` (repeat it).
        #[arg(long = "label", value_parser = key_value)]
        labels: Vec<(String, String)>,
        #[arg(long)]
        description: Option<String>,
    },
    /// A cluster's join tokens, newest first.
    #[command(visible_alias = "ls")]
    List { cluster: String },
    /// Revoke a join token (its id or its prefix).
    Revoke { cluster: String, token: String },
}

fn key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| "expected key=value".into())
}

pub async fn run(session: &Session, command: NodesCommand) -> Result<(), CliError> {
    let client = session.signed_in()?;
    match command {
        NodesCommand::List { cluster, all } => {
            let cluster = resolve(&client, &cluster).await?;
            let items = nodes_of(&client, &cluster.id, all).await?;
            let nodes: Vec<Node> = client::read(&Value::Array(items.clone()))?;
            output::print(
                session.output,
                &Value::Array(items),
                &["NAME", "STATUS", "ADDRESS", "KUBELET", "LAST SEEN", "AGE"],
                nodes
                    .iter()
                    .map(|n| {
                        vec![
                            n.name.clone(),
                            n.status.clone(),
                            output::or_dash(&n.internal_ip),
                            output::or_dash(&n.kubelet_version),
                            n.last_seen_at
                                .as_deref()
                                .map(output::age)
                                .unwrap_or("-".into()),
                            output::age(&n.created_at),
                        ]
                    })
                    .collect(),
            )
        }
        NodesCommand::Timeline {
            cluster,
            node,
            hours,
        } => {
            if !(1..=24 * 90).contains(&hours) {
                return Err(CliError::new(Exit::Usage, "--hours must be 1 to 2160"));
            }
            let cluster = resolve(&client, &cluster).await?;
            let node = node_of(&client, &cluster.id, &node).await?;
            let from = (chrono::Utc::now() - chrono::Duration::hours(hours))
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let raw = client
                .get(&format!(
                    "/api/console/clusters/{}/nodes/{}/timeline?from={}",
                    segment(&cluster.id),
                    segment(&node.id),
                    segment(&from)
                ))
                .await?;
            let timeline: Timeline = client::read(&raw)?;
            if session.output == Format::Table && timeline.observed_seconds > 0 {
                note!(
                    "{}: ready {:.1}% of the {} h observed{}",
                    timeline.node.name,
                    100.0 * timeline.ready_seconds as f64 / timeline.observed_seconds as f64,
                    timeline.observed_seconds / 3600,
                    if timeline.events_omitted > 0 {
                        format!(" ({} older events left out)", timeline.events_omitted)
                    } else {
                        String::new()
                    }
                );
            }
            output::print(
                session.output,
                &raw,
                &["WHEN", "EVENT", "FROM", "TO", "MESSAGE"],
                timeline
                    .events
                    .iter()
                    .map(|e| {
                        vec![
                            e.observed_at.clone(),
                            e.r#type.clone(),
                            output::or_dash(&e.old_status),
                            output::or_dash(&e.new_status),
                            output::or_dash(&e.message),
                        ]
                    })
                    .collect(),
            )
        }
        NodesCommand::Remove { cluster, node } => {
            let cluster = resolve(&client, &cluster).await?;
            let node = node_of(&client, &cluster.id, &node).await?;
            let answer = client
                .call(
                    Method::DELETE,
                    &format!(
                        "/api/console/clusters/{}/nodes/{}",
                        segment(&cluster.id),
                        segment(&node.id)
                    ),
                    None,
                )
                .await?;
            note!("{} is being removed from {}.", node.name, cluster.name);
            output::print(
                session.output,
                &answer.body,
                &["NODE", "STATUS"],
                vec![vec![node.name, "removing".into()]],
            )
        }
    }
}

/// The node a name or id names among the cluster's.
async fn node_of(
    client: &client::Client,
    cluster_id: &str,
    name_or_id: &str,
) -> Result<Node, CliError> {
    let nodes: Vec<Node> = client::read(&Value::Array(nodes_of(client, cluster_id, false).await?))?;
    nodes
        .into_iter()
        .find(|n| n.name == name_or_id || n.id == name_or_id)
        .ok_or_else(|| {
            CliError::new(
                Exit::NotFound,
                format!("no node named {}", crate::error::one_line(name_or_id)),
            )
        })
}

/// Every node of the cluster as the platform answers them (deleted ones too
/// when `all`), read page by page.
async fn nodes_of(
    client: &client::Client,
    cluster_id: &str,
    all: bool,
) -> Result<Vec<Value>, CliError> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!(
            "/api/console/clusters/{}/nodes?limit=500",
            segment(cluster_id)
        );
        if all {
            path.push_str("&include_deleted=true");
        }
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={}", segment(cursor)));
        }
        let raw = client.get(&path).await?;
        let page: NodePage = client::read(&raw)?;
        items.extend(raw["items"].as_array().cloned().unwrap_or_default());
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(items);
        }
    }
}

pub async fn tokens(session: &Session, command: TokensCommand) -> Result<(), CliError> {
    let client = session.signed_in()?;
    match command {
        TokensCommand::Create {
            cluster,
            uses,
            ttl,
            labels,
            description,
        } => {
            let cluster = resolve(&client, &cluster).await?;
            let mut body = json!({
                "max_uses": uses,
                "node_labels": labels.into_iter().collect::<BTreeMap<_, _>>(),
            });
            if let Some(ttl) = ttl {
                body["ttl_seconds"] = ttl.into();
            }
            if let Some(description) = description {
                body["description"] = description.into();
            }
            let answer = client
                .call(
                    Method::POST,
                    &format!("/api/console/clusters/{}/tokens", segment(&cluster.id)),
                    Some(&body),
                )
                .await?;
            let created: CreatedToken = answer.read()?;
            if session.output == Format::Table {
                note!(
                    "Token {} joins up to {} machine(s) to {} until {}. Run this as root on each (it is shown once):",
                    created.token.display_prefix,
                    created.token.max_uses,
                    cluster.name,
                    created.token.expires_at
                );
                return output::write_stdout(&format!("{}\n", created.join_command));
            }
            output::print(session.output, &answer.body, &[], vec![])
        }
        TokensCommand::List { cluster } => {
            let cluster = resolve(&client, &cluster).await?;
            let raw = client
                .get(&format!(
                    "/api/console/clusters/{}/tokens",
                    segment(&cluster.id)
                ))
                .await?;
            let tokens: Vec<Token> = client::read(&raw)?;
            output::print(
                session.output,
                &raw,
                &["ID", "PREFIX", "STATUS", "USES", "EXPIRES", "DESCRIPTION"],
                tokens
                    .iter()
                    .map(|t| {
                        vec![
                            t.id.clone(),
                            t.display_prefix.clone(),
                            t.status.clone(),
                            format!("{}/{}", t.use_count, t.max_uses),
                            t.expires_at.clone(),
                            output::or_dash(&t.description),
                        ]
                    })
                    .collect(),
            )
        }
        TokensCommand::Revoke { cluster, token } => {
            let cluster = resolve(&client, &cluster).await?;
            let tokens: Vec<Token> = client::read(
                &client
                    .get(&format!(
                        "/api/console/clusters/{}/tokens",
                        segment(&cluster.id)
                    ))
                    .await?,
            )?;
            let token = tokens
                .into_iter()
                .find(|t| t.id == token || t.display_prefix == token)
                .ok_or_else(|| {
                    CliError::new(
                        Exit::NotFound,
                        format!(
                            "no token {} in {}",
                            crate::error::one_line(&token),
                            cluster.name
                        ),
                    )
                })?;
            let answer = client
                .call(
                    Method::DELETE,
                    &format!(
                        "/api/console/clusters/{}/tokens/{}",
                        segment(&cluster.id),
                        segment(&token.id)
                    ),
                    None,
                )
                .await?;
            note!("Token {} is revoked.", token.display_prefix);
            if session.output != Format::Table {
                output::print(session.output, &answer.body, &[], vec![])?;
            }
            Ok(())
        }
    }
}
