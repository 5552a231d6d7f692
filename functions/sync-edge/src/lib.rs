//! `sync-edge`: the schedule that keeps HTTPS on the workload edge, where the
//! host's workload Gateway has it (`KUBEBYON_EDGE_ISSUER`): from every
//! hostname the clusters' edges serve, the cert-manager `Certificate`s (the
//! platform's names shared, at most `KUBEBYON_EDGE_SAN_LIMIT` to one; one per
//! self-managed hostname) and the Gateway's HTTPS listeners, applied with
//! server-side apply so the listeners of others (the chart's HTTP one) stay;
//! certificates no longer needed removed; and each binding's TLS state
//! following its certificate, cleared once the edge no longer serves it
//! ([`shared::ingress::edge::https`]).
//!
//! In the `local` route mode (`KUBEBYON_ROUTE_MODE=local`, a host of one
//! machine) it also programs the route plan on the machine it runs on, as
//! `route-agent` does on each host node in the default mode, and records
//! what it applied as that node's report ([`program_routes`]).

use queues::runtime::{Schedule, ScheduleContext};
use serde::Serialize;
use shared::{
    config::Millis,
    domain::{TlsMode, TlsStatus},
    host::HostCluster,
    ingress::{
        config::{Config, RouteMode},
        edge::{
            COMPONENT,
            https::{self, CERTIFICATE_KIND, CERTIFICATES, GATEWAY_KIND},
            routes, store,
        },
        records::{self, TlsState},
        tls::state_for,
    },
};

pub const SCHEDULE: Schedule = Schedule {
    name: "sync-edge",
    interval: Millis::new("SYNC_EDGE_INTERVAL_MS", 30_000),
    needs_host: true,
    needs_publisher: false,
    run: |ctx| Box::pin(async move { Ok(serde_json::to_value(run(&ctx).await?)?) }),
};

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct EdgeReport {
    /// Why nothing was done, when nothing was.
    pub skipped: Option<&'static str>,
    pub certificates: usize,
    pub listeners: usize,
    /// Certificates removed: no site needs them any more.
    pub removed: usize,
    /// Bindings that cannot be served over HTTPS (the Gateway is full).
    pub refused: usize,
    /// Bindings whose TLS state was read from their certificate.
    pub followed: usize,
    /// Bindings the edge no longer serves, whose edge certificate state was
    /// cleared.
    pub forgotten: u64,
    /// The routes programmed here, in the `local` route mode.
    pub routes: Option<RoutesReport>,
}

/// What the `local` route mode did on this machine.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct RoutesReport {
    pub node: String,
    /// Routes added, replaced or removed.
    pub changed: usize,
    pub applied: usize,
    pub failed: usize,
}

pub async fn run(ctx: &ScheduleContext) -> anyhow::Result<EdgeReport> {
    let routes = match &ctx.settings.part::<Config>()?.route_mode {
        RouteMode::Agents => None,
        RouteMode::Local { node, netns } => {
            Some(program_routes(&ctx.pool, node, netns.as_deref()).await?)
        }
    };
    let mut report = converge(&ctx.pool, ctx.host()?).await?;
    report.routes = routes;
    Ok(report)
}

/// The `local` route mode's pass: the whole route plan made the routes
/// marked as the plan's in this machine's main table (or those of the
/// network namespace `netns`), through [`route_agent::converge`], and
/// recorded as host node `node`'s report, as an agent's is.
pub async fn program_routes(
    pool: &sqlx::PgPool,
    node: &str,
    netns: Option<&str>,
) -> anyhow::Result<RoutesReport> {
    let plan = routes::plan(pool).await?;
    let wanted: Vec<route_agent::Route> = plan
        .routes
        .iter()
        .map(|r| route_agent::Route {
            destination: r.destination.clone(),
            via: r.via.clone(),
        })
        .collect();
    let netns = netns.map(str::to_string);
    let outcome = tokio::task::spawn_blocking(move || {
        let mut table = route_agent::Table::open(netns.as_deref())?;
        route_agent::converge(&mut table, plan.protocol, &wanted)
    })
    .await??;
    let report = routes::Report {
        node: node.to_string(),
        applied: outcome.applied.clone(),
        failed: outcome
            .failed
            .iter()
            .map(|f| routes::Failed {
                destination: f.destination.clone(),
                error: f.error.clone(),
            })
            .collect(),
    };
    routes::record_report(pool, &report).await?;
    Ok(RoutesReport {
        node: node.to_string(),
        changed: outcome.changed,
        applied: outcome.applied.len(),
        failed: outcome.failed.len(),
    })
}

pub async fn converge(pool: &sqlx::PgPool, host: &HostCluster) -> anyhow::Result<EdgeReport> {
    let Some(gateway) = &host.settings().workload_gateway else {
        return Ok(skipped("the host has no workload Gateway"));
    };
    let Some(tls) = &gateway.https else {
        return Ok(skipped("HTTPS is off on the workload edge"));
    };
    let current = host
        .get_object(GATEWAY_KIND, &gateway.namespace, &gateway.name)
        .await?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the workload Gateway {}/{} does not exist",
                gateway.namespace,
                gateway.name
            )
        })?;
    let served = store::served_everywhere(pool).await?;
    let plan = https::plan(gateway, tls, &served, https::room(&current, tls));
    // Certificates first, so no listener names a Secret nobody asked for;
    // the old ones go once no listener names them.
    host.apply_objects(&plan.certificates).await?;
    host.apply_objects(&[https::gateway(gateway, &plan.listeners)])
        .await?;
    let selector = format!("{}={CERTIFICATES}", COMPONENT.0);
    let keep: Vec<&str> = plan.certificates.iter().map(|c| c.name.as_str()).collect();
    let removed = host
        .prune_objects(CERTIFICATE_KIND, &gateway.namespace, &selector, &keep)
        .await?;
    let listed = host
        .list_objects(CERTIFICATE_KIND, &gateway.namespace, &selector)
        .await?;
    let mut followed = 0;
    let mut serving = Vec::new();
    for site in &served {
        let Some(id) = site.binding_id else { continue };
        let state = match plan.refused.iter().find(|(refused, _)| *refused == id) {
            Some((_, why)) => TlsState {
                mode: TlsMode::CertManager,
                status: TlsStatus::Error,
                secret_name: None,
                error: Some(why.clone()),
            },
            None => state_for(&site.hostname, &listed),
        };
        records::record_tls(pool, id, &state).await?;
        serving.push(id);
        followed += 1;
    }
    let forgotten = records::forget_edge_tls(pool, &serving).await?;
    Ok(EdgeReport {
        skipped: None,
        certificates: plan.certificates.len(),
        listeners: plan.listeners.len(),
        removed: removed.len(),
        refused: plan.refused.len(),
        followed,
        forgotten,
        routes: None,
    })
}

fn skipped(why: &'static str) -> EdgeReport {
    EdgeReport {
        skipped: Some(why),
        ..EdgeReport::default()
    }
}
