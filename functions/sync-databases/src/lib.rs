//! `sync-databases`: the schedule of tenant databases (docs/databases.md).
//! Each run:
//!
//! - removes the databases of deleted clusters by their policy (a cluster's
//!   deletion takes their Secrets with it, and nothing else): `retain`
//!   forgets the record, leaving the role and the database on the server;
//!   `delete` drops the role and the database the instance's registry
//!   proves are the record's, with their registry rows, then forgets it. An
//!   object the registry does not prove is the record's stops it in
//!   `conflict`, dropping nothing; a server that does not answer stops it in
//!   `failed`, and the next run tries again.
//! - checks that each `ready` database's Secret is in its cluster (one list
//!   a cluster, by the label the projection writes). A database whose
//!   Secret is gone is set back to `database_created` and the cluster's
//!   `database_converge` job enqueued, in one transaction, when the cluster
//!   is idle; the job projects it again. A busy cluster is looked at again
//!   at the next run.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::ListParams};
use queues::runtime::{Schedule, ScheduleContext};
use serde::Serialize;
use shared::{
    clusters,
    config::Millis,
    databases::{
        self,
        instances::{AdminConnection, AdminConnections},
        records::{self, DatabaseConvergence, DeletionPolicy, Phase, TenantDatabase, condition},
        server::{self, Kind, Owner},
    },
    host::HostCluster,
    jobs::{self, JobPublisher, NewJob},
    secretbox::SecretBox,
};
use sqlx::PgPool;
use uuid::Uuid;

pub const SCHEDULE: Schedule = Schedule {
    name: "sync-databases",
    interval: Millis::new("SYNC_DATABASES_INTERVAL_MS", 60_000),
    needs_host: true,
    needs_publisher: true,
    run: |ctx| Box::pin(async move { Ok(serde_json::to_value(run(&ctx).await?)?) }),
};

/// Records of deleted clusters removed in one run, at most.
pub const ORPHANS_PER_RUN: i64 = 100;

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Records of deleted clusters forgotten with `retain`.
    pub retained: usize,
    /// Records of deleted clusters whose role and database were dropped.
    pub dropped: usize,
    /// Records of deleted clusters stopped (`conflict` or `failed`).
    pub stopped: usize,
    /// Clusters whose Secrets were listed.
    pub clusters_checked: usize,
    /// Clusters whose API did not answer.
    pub clusters_unreachable: usize,
    /// Databases set back for their Secret to be projected again.
    pub reprojected: u64,
}

/// Where the cluster's database jobs go.
pub struct Enqueuing<'a> {
    pub publisher: &'a dyn JobPublisher,
    pub max_attempts: i32,
}

pub async fn run(ctx: &ScheduleContext) -> anyhow::Result<Report> {
    let key = ctx.settings.secret_box();
    let enqueuing = Enqueuing {
        publisher: ctx.publisher()?,
        max_attempts: ctx.settings.jobs.max_attempts,
    };
    let mut report = Report::default();
    remove_orphans(&ctx.pool, key.as_ref(), &mut report).await?;
    reproject_missing(&ctx.pool, ctx.host()?, &enqueuing, &mut report).await?;
    Ok(report)
}

/// Removes the databases of deleted clusters by their policy.
pub async fn remove_orphans(
    pool: &PgPool,
    key: Option<&SecretBox>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let install_id = records::install_id(pool).await?;
    let mut admins = key.map(|key| AdminConnections::new(pool, key));
    for record in records::orphaned(pool, ORPHANS_PER_RUN).await? {
        if record.deletion_policy == DeletionPolicy::Retain {
            records::settle_orphan(pool, record.id, None).await?;
            report.retained += 1;
            continue;
        }
        let outcome = match admins.as_mut() {
            None => Err((Phase::Failed, NO_KEY.to_string())),
            Some(admins) => match admins.get(record.instance_id).await {
                Ok(admin) => drop_owned(admin, &record, install_id).await,
                Err(reason) => Err((Phase::Failed, reason)),
            },
        };
        if matches!(outcome, Err((Phase::Failed, _)))
            && let Some(admins) = admins.as_mut()
        {
            admins.reset(record.instance_id).await;
        }
        match outcome {
            Ok(()) => {
                records::settle_orphan(pool, record.id, None).await?;
                report.dropped += 1;
            }
            Err((phase, message)) => {
                tracing::warn!(database_id = %record.id, ?phase, message, "a deleted cluster's database stopped");
                let reason = if phase == Phase::Conflict {
                    "Conflict"
                } else {
                    "Failed"
                };
                let stopped = condition("Ready", false, reason, &message);
                records::settle_orphan(pool, record.id, Some((phase, &stopped, &message))).await?;
                report.stopped += 1;
            }
        }
    }
    if let Some(admins) = admins {
        admins.close().await;
    }
    Ok(())
}

const NO_KEY: &str = "KUBEBYON_SETTINGS_KEY is not set: the instance's password is sealed with it";

/// Drops the record's role and database, when the registry proves both
/// are its own (or they are gone).
async fn drop_owned(
    admin: &mut AdminConnection,
    record: &TenantDatabase,
    install_id: Uuid,
) -> Result<(), (Phase, String)> {
    let AdminConnection {
        instance,
        connection,
    } = admin;
    let owner = Owner {
        install_id,
        instance_id: instance.id,
        record_id: record.id,
    };
    for (kind, name) in [
        (Kind::Database, &record.database_name),
        (Kind::Role, &record.role_name),
    ] {
        let proven = server::proven(connection, kind, name, owner)
            .await
            .map_err(|e| {
                (
                    Phase::Failed,
                    format!("reading the catalog and the registry: {e}"),
                )
            })?;
        if !proven {
            return Err((
                Phase::Conflict,
                format!(
                    "the {} {name} on {} is not registered as this database's: nothing is dropped",
                    kind.as_str(),
                    instance.name
                ),
            ));
        }
    }
    server::drop_registered(connection, &record.database_name, &record.role_name, owner)
        .await
        .map_err(|e| {
            (
                Phase::Failed,
                format!("dropping the database and the role: {e}"),
            )
        })
}

/// Sets back the `ready` databases whose Secret is gone from their cluster,
/// with the cluster's job enqueued, when it is idle.
pub async fn reproject_missing(
    pool: &PgPool,
    host: &HostCluster,
    enqueuing: &Enqueuing<'_>,
    report: &mut Report,
) -> anyhow::Result<()> {
    for (cluster_id, ready) in records::ready_by_cluster(pool).await? {
        let Some(cluster) = clusters::get(pool, cluster_id).await? else {
            continue;
        };
        let Some(endpoint) = cluster.api_endpoint.as_deref() else {
            continue;
        };
        let listed = match host.vcluster_client(&cluster, endpoint).await {
            Ok(client) => {
                Api::<Secret>::all(client)
                    .list(&ListParams::default().labels(databases::SECRET_LABEL))
                    .await
            }
            Err(error) => {
                tracing::warn!(%cluster_id, %error, "could not reach the cluster to check its database Secrets");
                report.clusters_unreachable += 1;
                continue;
            }
        };
        let listed = match listed {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%cluster_id, %error, "could not list the cluster's database Secrets");
                report.clusters_unreachable += 1;
                continue;
            }
        };
        report.clusters_checked += 1;
        let present: HashSet<(String, String, String)> = listed
            .items
            .iter()
            .filter_map(|secret| {
                let id = secret
                    .metadata
                    .labels
                    .as_ref()?
                    .get(databases::SECRET_LABEL)?;
                Some((
                    id.clone(),
                    secret.metadata.namespace.clone()?,
                    secret.metadata.name.clone()?,
                ))
            })
            .collect();
        let missing: Vec<Uuid> = ready
            .iter()
            .filter(|r| {
                !present.contains(&(r.id.to_string(), r.namespace.clone(), r.secret_name.clone()))
            })
            .map(|r| r.id)
            .collect();
        if missing.is_empty() {
            continue;
        }
        let (kind, payload) = jobs::encode(&DatabaseConvergence {})?;
        let new = NewJob {
            cluster_id,
            kind,
            requested_by: None,
            payload: &payload,
            max_attempts: enqueuing.max_attempts,
        };
        // A busy cluster writes nothing: it is looked at again next run.
        let reprojected =
            jobs::enqueue_when_idle_with(pool, enqueuing.publisher, new, async |tx| {
                records::reproject(tx, &missing).await
            })
            .await?;
        report.reprojected += reprojected.unwrap_or(0);
    }
    Ok(())
}
