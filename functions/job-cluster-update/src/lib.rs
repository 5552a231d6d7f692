//! `job-cluster-update`: converges the host to the cluster's updated snapshot:
//! quota and limits, the network policy, the control plane's values, and the
//! public endpoint. When the endpoint moves (a change of public access mode,
//! or of the address the mode gives), the job is the switch: it makes the
//! new entry beside the old one, has the control plane's certificate name
//! both, verifies the new address from the platform (a TLS handshake with
//! the cluster's CA and `GET /version`), and only then records it, with the
//! old one kept serving for `KUBEBYON_ENDPOINT_GRACE_SECONDS` (removed by
//! an `endpoint_retire` job afterwards) and the owner notified
//! (`cluster_endpoint_changed`). Kubeconfigs naming the old address are
//! listed as stale from then on; join scripts name the new one. A new
//! address that does not answer fails the job with `endpoint_unreachable`
//! and leaves the cluster on its old endpoint, the new entry removed. When
//! the managed ingress switch leaves the controller off its target, an
//! `ingress_converge` job is enqueued in the transaction that finishes this
//! one.

use std::sync::Arc;

use async_trait::async_trait;
use shared::{
    admission,
    clusters::{self, Cluster, ClusterChanges, PreviousEndpoint},
    domain::FailureCode,
    host::{HostCluster, endpoint_host},
    ingress::{self, IngressConvergence},
    jobs::{Finished, JobContext, JobError, Stage, TypedJobHandler},
    notifications,
};

pub const NO_HOST_ADAPTER: &str =
    "cannot update the control plane: no host cluster adapter is configured on this platform";

pub struct UpdateCluster {
    host: Option<Arc<HostCluster>>,
}

impl UpdateCluster {
    pub fn new(host: Option<Arc<HostCluster>>) -> Self {
        Self { host }
    }
}

// The stages this job records.
shared::stages! {
    APPLYING_LIMITS = "applying the resource quota and limits";
    ISOLATING = "isolating the control plane's network";
    UPDATING_ENDPOINT = "updating the public endpoint";
    UPDATING = "updating the control plane";
    WAITING_FOR_READY = "waiting for the control plane and its endpoint";
    VERIFYING_ENDPOINT = "verifying the new endpoint";
    REMOVING_OLD_ENDPOINT = "removing the old endpoint";
}

#[async_trait]
impl TypedJobHandler for UpdateCluster {
    type Payload = ClusterChanges;

    fn stages(&self) -> Vec<Stage> {
        [
            STAGES,
            admission::registration::STAGES,
            admission::authorizer::STAGES,
        ]
        .concat()
    }

    async fn run(&self, ctx: &JobContext, target: ClusterChanges) -> Result<Finished, JobError> {
        let host = ctx.require(&self.host, NO_HOST_ADAPTER).await?;
        let mut cluster = clusters::get(&ctx.pool, ctx.job.cluster_id)
            .await?
            .ok_or_else(|| {
                JobError::fatal(
                    FailureCode::ClusterDeleted,
                    "the cluster was deleted before it could be updated",
                )
            })?;
        // What serves the cluster now; `cluster` becomes the target.
        let before = cluster.clone();
        target.apply_to(&mut cluster);
        ctx.step(APPLYING_LIMITS, async {
            // A cluster made before the platform's identities were split gets its access now.
            host.ensure_access(&ctx.pool, &cluster).await?;
            host.ensure_limits(&cluster).await
        })
        .await?;
        ctx.step(ISOLATING, host.ensure_isolation(&cluster)).await?;
        // The platform's authorizer: a cluster made before it gets it now.
        let api_server = admission::authorizer::prepare(ctx, host, &cluster).await?;
        // The endpoint first: its address goes into the control plane's
        // certificate, beside the address clients use now, which keeps
        // serving until the new one is verified and its grace period ends.
        let public_host = ctx
            .step(UPDATING_ENDPOINT, async {
                host.ensure_public_endpoint(&cluster).await?;
                host.await_public_host(&cluster).await
            })
            .await?;
        let names: Vec<String> = public_host
            .into_iter()
            .chain(
                before
                    .api_endpoint
                    .as_deref()
                    .and_then(endpoint_host)
                    .map(str::to_string),
            )
            .chain(
                before
                    .previous_api_endpoint
                    .as_deref()
                    .and_then(endpoint_host)
                    .map(str::to_string),
            )
            .collect();
        ctx.step(
            UPDATING,
            host.ensure_control_plane(&cluster, api_server.as_ref(), &names),
        )
        .await?;

        ctx.stage(WAITING_FOR_READY).await?;
        let endpoint = host
            .await_control_plane(&cluster, UPDATING.as_str())
            .await
            .map_err(JobError::from_transient)?;
        let url = endpoint.url();
        let moved = before.api_endpoint.as_deref().filter(|old| *old != url);
        if let Some(old) = moved {
            ctx.stage(VERIFYING_ENDPOINT).await?;
            if let Err(error) = host.verify_endpoint(&cluster, &url).await {
                roll_back(host, &before, &cluster).await;
                return Err(JobError::fatal(
                    FailureCode::EndpointUnreachable,
                    format!(
                        "the new endpoint {url} did not answer as the cluster: {error}; the cluster stays on {old}"
                    ),
                ));
            }
        }
        admission::registration::register(ctx, host, &cluster, &url).await?;
        let grace = host.settings().endpoint_grace;
        let previous = moved
            .filter(|_| !grace.is_zero())
            .map(|old| PreviousEndpoint {
                api_endpoint: old,
                mode: before.public_access_mode,
                until: chrono::Utc::now()
                    + chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::MAX),
            });
        if moved.is_some() && previous.is_none() {
            ctx.step(
                REMOVING_OLD_ENDPOINT,
                host.prune_public_entries(&cluster, cluster.public_access_mode),
            )
            .await?;
        }
        let mut tx = ctx.pool.begin().await?;
        clusters::mark_ready(&mut tx, cluster.id, &url, &endpoint.host, endpoint.port).await?;
        clusters::record_endpoint(
            &mut tx,
            cluster.id,
            cluster.public_access_mode,
            previous.clone(),
        )
        .await?;
        if let Some(old) = moved {
            let until = previous.as_ref().map_or_else(chrono::Utc::now, |p| p.until);
            notifications::enqueue(
                &mut *tx,
                cluster.owner_user_id,
                "cluster_endpoint_changed",
                Some(cluster.id),
                serde_json::json!({
                    "cluster_name": cluster.name,
                    "api_endpoint": url,
                    "previous_api_endpoint": old,
                    "previous_endpoint_until": until,
                    "public_access_mode": cluster.public_access_mode,
                }),
            )
            .await?;
        }
        let finished = ctx.complete(&mut tx).await?;
        if ingress::needs_convergence(&cluster) {
            ctx.enqueue_follow_up(&mut tx, &IngressConvergence::of(&cluster))
                .await?;
        }
        tx.commit().await?;
        tracing::info!(api_endpoint = url, "cluster updated");
        Ok(finished)
    }
}

/// After a failed switch: removes what the switch made for the new mode,
/// so the cluster is left as it was. Not while a previous endpoint is
/// still in its grace period (it may be the new mode's; its retirement
/// prunes what the recorded mode does not use). Best effort: what stays is
/// removed by the next switch's retirement.
async fn roll_back(host: &HostCluster, before: &Cluster, target: &Cluster) {
    if before.public_access_mode == target.public_access_mode
        || before.previous_api_endpoint.is_some()
    {
        return;
    }
    if let Err(error) = host
        .prune_public_entries(before, before.public_access_mode)
        .await
    {
        tracing::warn!(cluster_id = %before.id, %error, "could not remove the unverified endpoint");
    }
}
