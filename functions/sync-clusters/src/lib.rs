//! `sync-clusters`: the schedule that gives clusters made before it the
//! platform's access in their namespace ([`access`]), checks every ready cluster's control
//! plane and records whether it answers (`connection_status`, `last_observed_at`),
//! keeps its managed ingress on target (enqueuing an `ingress_converge` job when
//! it is off it), keeps its admission webhook as the platform registered it
//! and follows its hostnames' certificates ([`observe`], [`tls`]); then
//! deletes the ServiceAccounts of revoked and expired kubeconfig credentials
//! from their clusters, and tells the owners of organizations past their plan ([`plan`]).

pub mod access;
pub mod observe;
pub mod plan;
pub mod tls;

use queues::runtime::{Schedule, ScheduleContext};
use serde::Serialize;
use shared::config::Millis;
use shared::kubeconfigs::credential::{self, RemovalReport};

use crate::{
    access::AccessReport,
    observe::{Enqueuing, ObservationReport, observe_clusters},
    plan::PlanReport,
};

/// Control planes checked at once.
pub const CONCURRENCY: usize = 16;

pub const SCHEDULE: Schedule = Schedule {
    name: "sync-clusters",
    interval: Millis::new("SYNC_CLUSTERS_INTERVAL_MS", 30_000),
    needs_host: true,
    needs_publisher: true,
    run: |ctx| Box::pin(async move { Ok(serde_json::to_value(run(&ctx).await?)?) }),
};

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub access: AccessReport,
    #[serde(flatten)]
    pub observation: ObservationReport,
    pub credentials: RemovalReport,
    pub plans: PlanReport,
}

pub async fn run(ctx: &ScheduleContext) -> anyhow::Result<Report> {
    let host = ctx.host()?;
    let enqueuing = Enqueuing {
        publisher: ctx.publisher()?,
        max_attempts: ctx.settings.jobs.max_attempts,
    };
    let access = access::grant_missing(&ctx.pool, host).await?;
    let observation = observe_clusters(&ctx.pool, host, enqueuing, CONCURRENCY).await?;
    let credentials = credential::remove_stale(&ctx.pool, host, None).await?;
    let plans =
        plan::notify_organizations_past_their_plan(&ctx.pool, &ctx.settings.public_base_url)
            .await?;
    Ok(Report {
        access,
        observation,
        credentials,
        plans,
    })
}
