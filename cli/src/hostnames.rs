//! `kubebyon hostnames`: a cluster's hostname bindings (docs/dns.md).

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use crate::{
    Session,
    client::{self, Client, segment},
    clusters::resolve,
    error::{CliError, Exit},
    model::Binding,
    output::{self, Format},
};

#[derive(Debug, Subcommand)]
pub enum HostnamesCommand {
    /// The cluster's hostnames, with their DNS and TLS state.
    #[command(visible_alias = "ls")]
    List { cluster: String },
    /// Bind a hostname to the cluster's ingress; prints the TXT record that
    /// proves it is yours, when one is needed.
    Add { cluster: String, hostname: String },
    /// Check the hostname's TXT record now.
    Verify { cluster: String, hostname: String },
    /// Unbind a hostname.
    Remove { cluster: String, hostname: String },
}

fn rows(bindings: &[Binding]) -> Vec<Vec<String>> {
    bindings
        .iter()
        .map(|b| {
            vec![
                b.hostname.clone(),
                if b.verified { "yes" } else { "no" }.into(),
                b.dns_management_status.clone(),
                b.tls_status.clone(),
                output::age(&b.created_at),
            ]
        })
        .collect()
}

const HEADER: [&str; 5] = ["HOSTNAME", "VERIFIED", "DNS", "TLS", "AGE"];

async fn binding_of(
    client: &Client,
    cluster_id: &str,
    hostname: &str,
) -> Result<Binding, CliError> {
    let bindings: Vec<Binding> = client::read(
        &client
            .get(&format!(
                "/api/console/clusters/{}/hostnames",
                segment(cluster_id)
            ))
            .await?,
    )?;
    bindings
        .into_iter()
        .find(|b| b.hostname.eq_ignore_ascii_case(hostname))
        .ok_or_else(|| {
            CliError::new(
                Exit::NotFound,
                format!(
                    "no hostname {} on the cluster",
                    crate::error::one_line(hostname)
                ),
            )
        })
}

pub async fn run(session: &Session, command: HostnamesCommand) -> Result<(), CliError> {
    let client = session.signed_in()?;
    match command {
        HostnamesCommand::List { cluster } => {
            let cluster = resolve(&client, &cluster).await?;
            let raw = client
                .get(&format!(
                    "/api/console/clusters/{}/hostnames",
                    segment(&cluster.id)
                ))
                .await?;
            let bindings: Vec<Binding> = client::read(&raw)?;
            output::print(session.output, &raw, &HEADER, rows(&bindings))
        }
        HostnamesCommand::Add { cluster, hostname } => {
            let cluster = resolve(&client, &cluster).await?;
            let answer = client
                .call(
                    Method::POST,
                    &format!("/api/console/clusters/{}/hostnames", segment(&cluster.id)),
                    Some(&json!({ "hostname": hostname })),
                )
                .await?;
            let binding: Binding = answer.read()?;
            if session.output == Format::Table
                && let (false, Some(name), Some(value)) = (
                    binding.verified,
                    &binding.verification_record_name,
                    &binding.verification_record_value,
                )
            {
                note!(
                    "Prove {} is yours: a TXT record {name} holding {value}, then `kubebyon hostnames verify {} {}`.",
                    binding.hostname,
                    cluster.name,
                    binding.hostname
                );
            }
            output::print(session.output, &answer.body, &HEADER, rows(&[binding]))
        }
        HostnamesCommand::Verify { cluster, hostname } => {
            let cluster = resolve(&client, &cluster).await?;
            let binding = binding_of(&client, &cluster.id, &hostname).await?;
            let answer = client
                .call(
                    Method::POST,
                    &format!(
                        "/api/console/clusters/{}/hostnames/{}/verify",
                        segment(&cluster.id),
                        segment(&binding.id)
                    ),
                    None,
                )
                .await?;
            let binding: Binding = answer.read()?;
            output::print(session.output, &answer.body, &HEADER, rows(&[binding]))
        }
        HostnamesCommand::Remove { cluster, hostname } => {
            let cluster = resolve(&client, &cluster).await?;
            let binding = binding_of(&client, &cluster.id, &hostname).await?;
            client
                .call(
                    Method::DELETE,
                    &format!(
                        "/api/console/clusters/{}/hostnames/{}",
                        segment(&cluster.id),
                        segment(&binding.id)
                    ),
                    None,
                )
                .await?;
            note!(
                "{} is no longer bound to {}.",
                binding.hostname,
                cluster.name
            );
            Ok(())
        }
    }
}
