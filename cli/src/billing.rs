//! `kubebyon plan` (what the plan allows and what is used; the plans) and
//! `kubebyon orders` (list, create — which prints the checkout URL —, cancel).

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use crate::{
    Session,
    client::{self, segment},
    error::{CliError, Exit},
    model::{Checkout, Entitlement, Order, Plan},
    output::{self, Format},
};

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// The organisation's plan: each limit, what is used and what is left.
    Show,
    /// The plans one can order.
    List,
}

#[derive(Debug, Subcommand)]
pub enum OrdersCommand {
    /// The organisation's orders, newest first.
    #[command(visible_alias = "ls")]
    List,
    /// Order a plan (its name or id); prints where to pay.
    Create { plan: String },
    /// Cancel an order that is not paid.
    Cancel { order: String },
}

fn money(minor: i64, currency: &str) -> String {
    format!(
        "{}.{:02} {}",
        minor / 100,
        minor % 100,
        currency.to_uppercase()
    )
}

pub async fn plan(session: &Session, command: PlanCommand) -> Result<(), CliError> {
    let client = session.signed_in()?;
    match command {
        PlanCommand::Show => {
            let raw = client.get("/api/console/account/entitlements").await?;
            let entitlement: Entitlement = client::read(&raw)?;
            if session.output == Format::Table {
                note!(
                    "Plan: {} ({})",
                    entitlement
                        .plan
                        .as_ref()
                        .map(|p| p.name.as_str())
                        .unwrap_or("none: nothing is limited"),
                    entitlement.source
                );
            }
            let usage = &entitlement.usage;
            let limits = entitlement.limits.as_ref();
            let row = |name: &str, used: i64, limit: Option<i64>| {
                vec![
                    name.to_string(),
                    used.to_string(),
                    limit.map(|l| l.to_string()).unwrap_or_else(|| "-".into()),
                    limit
                        .map(|l| (l - used).to_string())
                        .unwrap_or_else(|| "-".into()),
                ]
            };
            output::print(
                session.output,
                &raw,
                &["RESOURCE", "USED", "LIMIT", "LEFT"],
                vec![
                    row("clusters", usage.clusters, limits.map(|l| l.clusters)),
                    row("nodes", usage.nodes, limits.map(|l| l.nodes)),
                    row(
                        "cpu (millicores)",
                        usage.cpu_milli_cores,
                        limits.map(|l| l.cpu_milli_cores),
                    ),
                    row(
                        "memory (MiB)",
                        usage.memory_mib,
                        limits.map(|l| l.memory_mib),
                    ),
                    row("hostnames", usage.hostnames, limits.map(|l| l.hostnames)),
                    row("databases", usage.databases, limits.map(|l| l.databases)),
                ],
            )
        }
        PlanCommand::List => {
            let raw = client.get("/api/console/billing/plans").await?;
            let plans: Vec<Plan> = client::read(&raw)?;
            output::print(
                session.output,
                &raw,
                &["NAME", "PRICE", "CLUSTERS", "NODES", "CPU", "MEMORY", "ID"],
                plans
                    .iter()
                    .map(|p| {
                        vec![
                            p.name.clone(),
                            money(p.price_minor_units, &p.currency),
                            p.max_clusters.to_string(),
                            p.max_nodes.to_string(),
                            format!("{}m", p.max_cpu_milli_cores),
                            format!("{}Mi", p.max_memory_mib),
                            p.id.clone(),
                        ]
                    })
                    .collect(),
            )
        }
    }
}

pub async fn orders(session: &Session, command: OrdersCommand) -> Result<(), CliError> {
    let client = session.signed_in()?;
    match command {
        OrdersCommand::List => {
            let raw = client.get("/api/console/billing/orders").await?;
            let orders: Vec<Order> = client::read(&raw)?;
            output::print(
                session.output,
                &raw,
                &["ID", "PLAN", "STATUS", "AMOUNT", "AGE"],
                orders
                    .iter()
                    .map(|o| {
                        vec![
                            o.id.clone(),
                            o.plan_name.clone(),
                            o.status.clone(),
                            money(o.amount, &o.currency),
                            output::age(&o.created_at),
                        ]
                    })
                    .collect(),
            )
        }
        OrdersCommand::Create { plan } => {
            let plans: Vec<Plan> = client::read(&client.get("/api/console/billing/plans").await?)?;
            let plan = plans
                .into_iter()
                .find(|p| p.id == plan || p.name == plan)
                .ok_or_else(|| {
                    CliError::new(
                        Exit::NotFound,
                        format!(
                            "no plan {} (`kubebyon plan list`)",
                            crate::error::one_line(&plan)
                        ),
                    )
                })?;
            let answer = client
                .call(
                    Method::POST,
                    "/api/console/billing/orders",
                    Some(&json!({ "plan_id": plan.id })),
                )
                .await?;
            let checkout: Checkout = answer.read()?;
            if session.output == Format::Table {
                note!(
                    "Order {} for {} ({}): pay at",
                    checkout.order.id,
                    plan.name,
                    money(checkout.order.amount, &checkout.order.currency)
                );
                return output::write_stdout(&format!("{}\n", checkout.checkout_url));
            }
            output::print(session.output, &answer.body, &[], vec![])
        }
        OrdersCommand::Cancel { order } => {
            let answer = client
                .call(
                    Method::POST,
                    &format!("/api/console/billing/orders/{}/cancel", segment(&order)),
                    None,
                )
                .await?;
            let order: Order = answer.read()?;
            note!("Order {} is {}.", order.id, order.status);
            if session.output != Format::Table {
                output::print(session.output, &answer.body, &[], vec![])?;
            }
            Ok(())
        }
    }
}
