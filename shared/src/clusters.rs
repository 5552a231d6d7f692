//! The `clusters` snapshot.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{
    domain::{
        ClusterName, ClusterStatus, ConnectionStatus, Engine, IngressStatus, JobKind, JobPayload,
        Lifecycle, PublicAccessMode, text_enum,
    },
    error::ApiError,
    organizations::Role,
};

/// A query answering [`Cluster`] rows: `$head` (a `SELECT`, or an `INSERT`
/// or `UPDATE` up to `RETURNING`), then the columns, written here once, then
/// `$tail`.
macro_rules! cluster_query {
    ($head:literal, $tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Cluster,
            $head + r#" id, owner_user_id, organization_id, name, vcluster_name, namespace, kubernetes_version,
               workload_cpu_limit_milli_cores, workload_memory_limit_mib,
               control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
               public_access_enabled, public_access_mode AS "public_access_mode: PublicAccessMode",
               public_access_port, managed_workload_ingress_enabled,
               managed_workload_ingress_status AS "managed_workload_ingress_status: IngressStatus",
               managed_workload_ingress_class, managed_workload_ingress_last_error,
               managed_workload_ingress_dns_record_name AS managed_workload_ingress_cname_target,
               managed_workload_ingress_dns_target, managed_workload_ingress_dns_last_synced_at,
               managed_workload_ingress_dns_last_error, tailscale_enabled, api_endpoint,
               status AS "status: ClusterStatus",
               connection_status AS "connection_status: ConnectionStatus",
               kubeconfig_available, kubeconfig_available_at,
               last_observed_at, last_error_message, created_at, updated_at,
               pod_cidr::text AS pod_cidr, service_cidr::text AS service_cidr,
               previous_api_endpoint,
               previous_public_access_mode AS "previous_public_access_mode: PublicAccessMode",
               previous_endpoint_until, engine AS "engine: Engine" "# + $tail,
            $($arg),*
        )
    };
}

/// The namespaces of a cluster that are its own components' and the
/// platform's (its managed ingress controller's, `kubebyon-ingress`), not
/// the tenant's: the admission webhook weighs nothing there, its authorizer
/// keeps the tenant's workloads and Secrets out, and no capability writes
/// into them for the tenant.
pub const SYSTEM_NAMESPACES: [&str; 4] = [
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "kubebyon-ingress",
];

/// A cluster as the console shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Cluster {
    pub id: Uuid,
    /// Who created it.
    pub owner_user_id: Uuid,
    /// The organisation it belongs to: its members reach it, each as their
    /// role allows.
    pub organization_id: Uuid,
    pub name: String,
    pub vcluster_name: String,
    pub namespace: String,
    pub kubernetes_version: String,
    pub workload_cpu_limit_milli_cores: i32,
    pub workload_memory_limit_mib: i32,
    pub control_plane_cpu_request_milli_cores: i32,
    pub control_plane_memory_request_mib: i32,
    pub public_access_enabled: bool,
    pub public_access_mode: PublicAccessMode,
    pub public_access_port: Option<i32>,
    pub managed_workload_ingress_enabled: bool,
    pub managed_workload_ingress_status: IngressStatus,
    pub managed_workload_ingress_class: String,
    /// Why the managed ingress is in `error`, when it is.
    pub managed_workload_ingress_last_error: Option<String>,
    /// The cluster's name under the platform's base domain, once `sync-dns`
    /// has made its CNAME: point self-managed hostnames at it.
    pub managed_workload_ingress_cname_target: Option<String>,
    /// Where that CNAME points (the platform's ingress edge).
    pub managed_workload_ingress_dns_target: Option<String>,
    pub managed_workload_ingress_dns_last_synced_at: Option<DateTime<Utc>>,
    pub managed_workload_ingress_dns_last_error: Option<String>,
    pub tailscale_enabled: bool,
    pub api_endpoint: Option<String>,
    pub status: ClusterStatus,
    pub connection_status: ConnectionStatus,
    pub kubeconfig_available: bool,
    pub kubeconfig_available_at: Option<DateTime<Utc>>,
    pub last_observed_at: Option<DateTime<Utc>>,
    /// The last failure, in words the owner can act on.
    pub last_error_message: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The network its pods' addresses come from (`10.64.0.0/19`): its
    /// own, overlapping no other cluster's. Absent for a cluster made
    /// before networks were allocated, whose pods use `10.64.0.0/16` as
    /// every such cluster's do.
    pub pod_cidr: Option<String>,
    /// The network its Services' addresses come from (`10.128.0.0/22`);
    /// absent as `pod_cidr` is (`10.128.0.0/16`).
    pub service_cidr: Option<String>,
    /// The address the cluster had before its endpoint last moved, while
    /// it still serves (until `previous_endpoint_until`): kubeconfigs and
    /// nodes naming it keep working until then.
    pub previous_api_endpoint: Option<String>,
    /// The public access mode that serves `previous_api_endpoint`.
    pub previous_public_access_mode: Option<PublicAccessMode>,
    /// When the old address stops being served (the platform removes it
    /// shortly after).
    pub previous_endpoint_until: Option<DateTime<Utc>>,
    /// What runs its control plane on the host, chosen when it was made
    /// (the platform's engine then) and never changed.
    pub engine: Engine,
}

/// The end of a cluster's creation times a cursor may name:
/// 9999-12-31T23:59:59.999999Z in microseconds since the epoch.
const MAX_CURSOR_MICROS: i64 = 253_402_300_799_999_999;

fn invalid_cursor() -> ApiError {
    ApiError::BadRequest {
        code: "invalid_cursor",
        detail: "cursor is not one this API returned, in this order".into(),
    }
}

/// The position a `next_cursor` names: a cluster's creation time and id.
fn parse_page_cursor(raw: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let invalid = invalid_cursor;
    let (at, id) = raw.split_once('_').ok_or_else(invalid)?;
    let micros: i64 = at.parse().map_err(|_| invalid())?;
    // A cluster's creation time: from 1970 to the end of year 9999, inside
    // what both chrono and PostgreSQL's timestamptz hold.
    if !(0..=MAX_CURSOR_MICROS).contains(&micros) {
        return Err(invalid());
    }
    Ok((
        DateTime::from_timestamp_micros(micros).ok_or_else(invalid)?,
        id.parse().map_err(|_| invalid())?,
    ))
}

/// The text a search looks for in names: what a cluster's name can hold,
/// in lower case; anything else (a wildcard, a look-alike letter) cannot
/// match a name and is refused rather than searched for.
fn name_search(raw: &str) -> Result<String, ApiError> {
    let valid = (1..=63).contains(&raw.len())
        && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !valid {
        return Err(ApiError::invalid(
            "q",
            "must be 1–63 letters, digits or '-', as a cluster's name has",
        ));
    }
    Ok(raw.to_ascii_lowercase())
}

text_enum! {
    /// The order a list of clusters is read in: `newest` first, or by
    /// `name` (A to Z).
    ClusterOrder {
        Newest => "newest",
        Name => "name",
    }
}

/// What a cursor of a list by name starts with, before the name.
const NAME_CURSOR: &str = "name:";

/// Where a page of clusters starts: after a cluster, in the list's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    /// Newest first: after this creation time and id.
    Created(DateTime<Utc>, Uuid),
    /// By name: after this name (one organisation's live clusters have
    /// each their own).
    Name(String),
}

impl After {
    /// Before the first cluster of a list in `order`.
    pub fn start(order: ClusterOrder) -> Self {
        match order {
            ClusterOrder::Newest => {
                let (at, id) = crate::extract::before_everything();
                Self::Created(at, id)
            }
            ClusterOrder::Name => Self::Name(String::new()),
        }
    }

    /// The position a `next_cursor` of a list in `order` names: a cursor of
    /// the other order is refused.
    fn parse(order: ClusterOrder, raw: &str) -> Result<Self, ApiError> {
        match order {
            ClusterOrder::Newest => parse_page_cursor(raw).map(|(at, id)| Self::Created(at, id)),
            ClusterOrder::Name => raw
                .strip_prefix(NAME_CURSOR)
                .and_then(|name| ClusterName::parse(name).ok())
                .map(|name| Self::Name(name.as_str().to_string()))
                .ok_or_else(invalid_cursor),
        }
    }

    /// The creation time and id a page newest first starts after; none for
    /// a page by name.
    pub fn created(&self) -> Option<(DateTime<Utc>, Uuid)> {
        match self {
            Self::Created(at, id) => Some((*at, *id)),
            Self::Name(_) => None,
        }
    }

    /// The `next_cursor` that reads the clusters after `cluster` in `order`.
    pub fn cursor(order: ClusterOrder) -> impl Fn(&Cluster) -> String {
        move |cluster| match order {
            ClusterOrder::Newest => {
                format!("{}_{}", cluster.created_at.timestamp_micros(), cluster.id)
            }
            ClusterOrder::Name => format!("{NAME_CURSOR}{}", cluster.name),
        }
    }
}

/// A page of clusters as a list route is asked for it: its size (1–200,
/// default 50), the position its `cursor` names in its order, and the part
/// of a name its `q` looks for; each checked as the route's document says.
#[derive(Debug)]
pub struct PageAsked {
    pub limit: i64,
    pub order: ClusterOrder,
    pub after: After,
    pub name_contains: Option<String>,
}

impl PageAsked {
    pub fn read(
        order: ClusterOrder,
        limit: Option<i64>,
        cursor: Option<&str>,
        q: Option<&str>,
    ) -> Result<Self, ApiError> {
        Ok(Self {
            limit: crate::extract::short_page_limit(limit)?,
            order,
            after: match cursor {
                Some(raw) => After::parse(order, raw)?,
                None => After::start(order),
            },
            name_contains: q.map(name_search).transpose()?,
        })
    }
}

/// The validated snapshot a create request writes.
#[derive(Debug)]
pub struct NewCluster<'a> {
    pub id: Uuid,
    pub owner_user_id: Uuid,
    pub organization_id: Uuid,
    pub name: &'a str,
    pub vcluster_name: &'a str,
    pub namespace: &'a str,
    pub kubernetes_version: &'a str,
    pub workload_cpu_limit_milli_cores: i32,
    pub workload_memory_limit_mib: i32,
    pub control_plane_cpu_request_milli_cores: i32,
    pub control_plane_memory_request_mib: i32,
    pub public_access_mode: PublicAccessMode,
    pub managed_workload_ingress_enabled: bool,
    pub tailscale_enabled: bool,
    pub engine: Engine,
    /// Its networks, allocated in the same transaction.
    pub networks: Option<crate::networks::Networks>,
}

/// Inserts the cluster. The unique index `idx_clusters_organization_name_active`
/// rejects a second live cluster of the same name in the same organisation.
pub async fn insert(tx: &mut PgConnection, new: &NewCluster<'_>) -> Result<Cluster, sqlx::Error> {
    cluster_query!(
        r#"INSERT INTO clusters (
               id, owner_user_id, organization_id, name, vcluster_name, namespace,
               kubernetes_version, workload_cpu_limit_milli_cores, workload_memory_limit_mib,
               control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
               public_access_mode, managed_workload_ingress_enabled, tailscale_enabled, status,
               pod_cidr, service_cidr, engine)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 'provisioning',
                   $15::text::cidr, $16::text::cidr, $17)
           RETURNING"#,
        r#""#,
        new.id,
        new.owner_user_id,
        new.organization_id,
        new.name,
        new.vcluster_name,
        new.namespace,
        new.kubernetes_version,
        new.workload_cpu_limit_milli_cores,
        new.workload_memory_limit_mib,
        new.control_plane_cpu_request_milli_cores,
        new.control_plane_memory_request_mib,
        new.public_access_mode.as_str(),
        new.managed_workload_ingress_enabled,
        new.tailscale_enabled,
        new.networks.map(|n| n.pod.to_string()),
        new.networks.map(|n| n.service.to_string()),
        new.engine.as_str(),
    )
    .fetch_one(tx)
    .await
}

/// Who asks about a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acting {
    /// A user, with their role in the cluster's organisation.
    Member(Uuid),
    /// An organisation's API key: its role, in its organisation only.
    Key { organization_id: Uuid, role: Role },
}

impl Acting {
    /// The parameters of the role queries: the member, or the key's
    /// organisation and role.
    fn binds(self) -> (Option<Uuid>, Option<Uuid>, Option<&'static str>) {
        match self {
            Self::Member(user) => (Some(user), None, None),
            Self::Key {
                organization_id,
                role,
            } => (None, Some(organization_id), Some(role.as_str())),
        }
    }
}

/// The role of who acts in the organisation of a live (not deleted)
/// cluster; none when the cluster does not exist, is deleted, or is in an
/// organisation the user is not a member of (or not the key's).
pub async fn member_role(
    db: impl PgExecutor<'_>,
    acting: Acting,
    cluster_id: Uuid,
) -> Result<Option<Role>, sqlx::Error> {
    let (user, key_organization, key_role) = acting.binds();
    sqlx::query_scalar!(
        r#"SELECT coalesce($4::text, m.role) AS "role!: Role"
           FROM clusters c
           LEFT JOIN organization_members m
                  ON m.organization_id = c.organization_id AND m.user_id = $2
           WHERE c.id = $1 AND c.deleted_at IS NULL
             AND (m.user_id IS NOT NULL OR c.organization_id = $3)"#,
        cluster_id,
        user,
        key_organization,
        key_role,
    )
    .fetch_optional(db)
    .await
}

/// Live clusters of the organisation after `after`, newest first or by
/// name as it says; with `name_contains`, only those whose name holds it (a
/// statement of its own, walking the same index and testing each of the
/// organisation's clusters until the page is full).
pub async fn list_of(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
    name_contains: Option<&str>,
    after: &After,
    limit: i64,
) -> Result<Vec<Cluster>, sqlx::Error> {
    let (before_at, before_id) = match after {
        After::Created(at, id) => (*at, *id),
        After::Name(name) => {
            return list_by_name(db, organization_id, name_contains, name, limit).await;
        }
    };
    match name_contains {
        None => {
            cluster_query!(
                r#"SELECT"#,
                r#"
                   FROM clusters
                   WHERE organization_id = $1 AND deleted_at IS NULL AND (created_at, id) < ($2, $3)
                   ORDER BY created_at DESC, id DESC
                   LIMIT $4"#,
                organization_id,
                before_at,
                before_id,
                limit,
            )
            .fetch_all(db)
            .await
        }
        Some(text) => {
            cluster_query!(
                r#"SELECT"#,
                r#"
                   FROM clusters
                   WHERE organization_id = $1 AND deleted_at IS NULL AND (created_at, id) < ($2, $3)
                     AND strpos(name, $4) > 0
                   ORDER BY created_at DESC, id DESC
                   LIMIT $5"#,
                organization_id,
                before_at,
                before_id,
                text,
                limit,
            )
            .fetch_all(db)
            .await
        }
    }
}

/// The organisation's live clusters by name, after `after`, through the
/// index of their names (`idx_clusters_organization_name_active`).
async fn list_by_name(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
    name_contains: Option<&str>,
    after: &str,
    limit: i64,
) -> Result<Vec<Cluster>, sqlx::Error> {
    match name_contains {
        None => {
            cluster_query!(
                r#"SELECT"#,
                r#"
                   FROM clusters
                   WHERE organization_id = $1 AND deleted_at IS NULL AND name > $2
                   ORDER BY name
                   LIMIT $3"#,
                organization_id,
                after,
                limit,
            )
            .fetch_all(db)
            .await
        }
        Some(text) => {
            cluster_query!(
                r#"SELECT"#,
                r#"
                   FROM clusters
                   WHERE organization_id = $1 AND deleted_at IS NULL AND name > $2
                     AND strpos(name, $3) > 0
                   ORDER BY name
                   LIMIT $4"#,
                organization_id,
                after,
                text,
                limit,
            )
            .fetch_all(db)
            .await
        }
    }
}

/// Every organization's live clusters for the back office, newest first,
/// after the keyset cursor `before`: those whose name contains
/// `name_contains`, those in `status`. One statement per filter; without a
/// name, an index walk of the clusters listed (`idx_clusters_created_at`,
/// `idx_clusters_status_created_at`). A name is planned for its own text at
/// every call (`force_custom_plan` in its transaction, as the user search
/// is): through the names' trigram index where the database has one, a rare
/// name among 50,000 clusters reads its matches alone.
pub async fn list_all(
    pool: &sqlx::PgPool,
    name_contains: Option<&str>,
    status: Option<ClusterStatus>,
    before: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<Cluster>, sqlx::Error> {
    let (before_at, before_id) = before.unwrap_or_else(crate::extract::before_everything);
    match (name_contains, status) {
        (None, None) => {
            cluster_query!(
                r#"SELECT"#,
                r#"
                   FROM clusters
                   WHERE deleted_at IS NULL AND (created_at, id) < ($1, $2)
                   ORDER BY created_at DESC, id DESC
                   LIMIT $3"#,
                before_at,
                before_id,
                limit,
            )
            .fetch_all(pool)
            .await
        }
        (None, Some(status)) => {
            cluster_query!(
                r#"SELECT"#,
                r#"
                   FROM clusters
                   WHERE status = $1 AND deleted_at IS NULL AND (created_at, id) < ($2, $3)
                   ORDER BY created_at DESC, id DESC
                   LIMIT $4"#,
                status.as_str(),
                before_at,
                before_id,
                limit,
            )
            .fetch_all(pool)
            .await
        }
        (Some(text), status) => {
            let statuses: Vec<&str> = match status {
                Some(status) => vec![status.as_str()],
                None => ClusterStatus::ALL.iter().map(|s| s.as_str()).collect(),
            };
            // `text` holds letters, digits and `-` alone
            // (`name_search`): no LIKE wildcard.
            let mut tx = pool
                .begin_with("BEGIN; SET LOCAL plan_cache_mode = force_custom_plan")
                .await?;
            cluster_query!(
                r#"SELECT"#,
                r#"
                   FROM clusters
                   WHERE deleted_at IS NULL AND (created_at, id) < ($1, $2)
                     AND name LIKE '%' || $3 || '%' AND status = ANY($4)
                   ORDER BY created_at DESC, id DESC
                   LIMIT $5"#,
                before_at,
                before_id,
                text,
                &statuses as &[&str],
                limit,
            )
            .fetch_all(&mut *tx)
            .await
        }
    }
}

/// The live clusters among `ids`, newest first.
pub async fn by_ids(db: impl PgExecutor<'_>, ids: &[Uuid]) -> Result<Vec<Cluster>, sqlx::Error> {
    cluster_query!(
        r#"SELECT"#,
        r#"
           FROM clusters
           WHERE id = ANY($1) AND deleted_at IS NULL
           ORDER BY created_at DESC, id DESC"#,
        ids,
    )
    .fetch_all(db)
    .await
}

/// Moves a live cluster to `deleting`; the delete job does the rest.
pub async fn mark_deleting(tx: &mut PgConnection, cluster_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE clusters SET status = 'deleting' WHERE id = $1 AND deleted_at IS NULL",
        cluster_id
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// A live cluster by id, for the jobs that act on it.
pub async fn get(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
) -> Result<Option<Cluster>, sqlx::Error> {
    cluster_query!(
        r#"SELECT"#,
        r#"
           FROM clusters WHERE id = $1 AND deleted_at IS NULL"#,
        cluster_id,
    )
    .fetch_optional(db)
    .await
}

/// The control plane answers on its public endpoint: the cluster is ready.
pub async fn mark_ready(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    api_endpoint: &str,
    host: &str,
    port: i32,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE clusters
         SET status = 'ready', api_endpoint = $2, control_plane_host = $3, public_access_port = $4,
             kubeconfig_available = true, kubeconfig_available_at = coalesce(kubeconfig_available_at, now()),
             connection_status = 'connected', last_observed_at = now(), last_error_message = NULL
         WHERE id = $1 AND deleted_at IS NULL",
        cluster_id,
        api_endpoint,
        host,
        port,
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// The host namespace is gone: the cluster is deleted (soft).
pub async fn mark_deleted(tx: &mut PgConnection, cluster_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE clusters
         SET status = 'deleted', deleted_at = now(), kubeconfig_available = false,
             kubeconfig_available_at = NULL, connection_status = 'unknown'
         WHERE id = $1 AND deleted_at IS NULL",
        cluster_id,
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// The changeable part of a cluster, as an update request leaves it: the
/// update job's payload, the target it converges to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterChanges {
    pub workload_cpu_limit_milli_cores: i32,
    pub workload_memory_limit_mib: i32,
    pub control_plane_cpu_request_milli_cores: i32,
    pub control_plane_memory_request_mib: i32,
    pub public_access_mode: PublicAccessMode,
    pub managed_workload_ingress_enabled: bool,
}

impl JobPayload for ClusterChanges {
    const KIND: JobKind = JobKind::moving_the_cluster(
        "cluster_update",
        "update",
        Lifecycle {
            retried: ClusterStatus::Updating,
            promoted: None,
            failed: ClusterStatus::Ready,
            cancelled: ClusterStatus::Ready,
        },
    );
}

impl ClusterChanges {
    pub fn of(cluster: &Cluster) -> Self {
        Self {
            workload_cpu_limit_milli_cores: cluster.workload_cpu_limit_milli_cores,
            workload_memory_limit_mib: cluster.workload_memory_limit_mib,
            control_plane_cpu_request_milli_cores: cluster.control_plane_cpu_request_milli_cores,
            control_plane_memory_request_mib: cluster.control_plane_memory_request_mib,
            public_access_mode: cluster.public_access_mode,
            managed_workload_ingress_enabled: cluster.managed_workload_ingress_enabled,
        }
    }

    /// `cluster` as this target leaves it.
    pub fn apply_to(&self, cluster: &mut Cluster) {
        cluster.workload_cpu_limit_milli_cores = self.workload_cpu_limit_milli_cores;
        cluster.workload_memory_limit_mib = self.workload_memory_limit_mib;
        cluster.control_plane_cpu_request_milli_cores = self.control_plane_cpu_request_milli_cores;
        cluster.control_plane_memory_request_mib = self.control_plane_memory_request_mib;
        cluster.public_access_mode = self.public_access_mode;
        cluster.managed_workload_ingress_enabled = self.managed_workload_ingress_enabled;
    }
}

/// A create job's payload: the cluster as its request was accepted, the
/// target the job builds. The row starts with the same values; a retry
/// builds what was asked even if the row has moved on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterCreation {
    pub name: String,
    pub vcluster_name: String,
    pub namespace: String,
    pub kubernetes_version: String,
    pub tailscale_enabled: bool,
    #[serde(flatten)]
    pub target: ClusterChanges,
}

impl JobPayload for ClusterCreation {
    const KIND: JobKind = JobKind::moving_the_cluster(
        "cluster_create",
        "create",
        Lifecycle {
            retried: ClusterStatus::Provisioning,
            promoted: None,
            failed: ClusterStatus::Failed,
            cancelled: ClusterStatus::Failed,
        },
    );
}

impl ClusterCreation {
    pub fn of(cluster: &Cluster) -> Self {
        Self {
            name: cluster.name.clone(),
            vcluster_name: cluster.vcluster_name.clone(),
            namespace: cluster.namespace.clone(),
            kubernetes_version: cluster.kubernetes_version.clone(),
            tailscale_enabled: cluster.tailscale_enabled,
            target: ClusterChanges::of(cluster),
        }
    }

    /// `cluster` as this target leaves it.
    pub fn apply_to(&self, cluster: &mut Cluster) {
        cluster.name.clone_from(&self.name);
        cluster.vcluster_name.clone_from(&self.vcluster_name);
        cluster.namespace.clone_from(&self.namespace);
        cluster
            .kubernetes_version
            .clone_from(&self.kubernetes_version);
        cluster.tailscale_enabled = self.tailscale_enabled;
        self.target.apply_to(cluster);
    }
}

/// A delete job's payload: where the cluster's objects live on the host,
/// kept with the job so it deletes what the request named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterDeletion {
    pub namespace: String,
    pub vcluster_name: String,
}

impl JobPayload for ClusterDeletion {
    const KIND: JobKind = JobKind::moving_the_cluster(
        "cluster_delete",
        "delete",
        Lifecycle {
            retried: ClusterStatus::Deleting,
            promoted: Some(ClusterStatus::Deleting),
            failed: ClusterStatus::Failed,
            cancelled: ClusterStatus::Ready,
        },
    );
}

impl ClusterDeletion {
    pub fn of(cluster: &Cluster) -> Self {
        Self {
            namespace: cluster.namespace.clone(),
            vcluster_name: cluster.vcluster_name.clone(),
        }
    }

    /// `cluster` with the host objects this deletion names.
    pub fn apply_to(&self, cluster: &mut Cluster) {
        cluster.namespace.clone_from(&self.namespace);
        cluster.vcluster_name.clone_from(&self.vcluster_name);
    }
}

/// Writes the new target snapshot and moves the cluster to `updating`. The
/// public access mode is not written: the cluster keeps the one that serves
/// it until the update job has verified the new endpoint and records both
/// ([`record_endpoint`]).
pub async fn apply_changes(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    changes: &ClusterChanges,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE clusters
         SET workload_cpu_limit_milli_cores = $2, workload_memory_limit_mib = $3,
             control_plane_cpu_request_milli_cores = $4, control_plane_memory_request_mib = $5,
             managed_workload_ingress_enabled = $6, status = 'updating'
         WHERE id = $1 AND deleted_at IS NULL",
        cluster_id,
        changes.workload_cpu_limit_milli_cores,
        changes.workload_memory_limit_mib,
        changes.control_plane_cpu_request_milli_cores,
        changes.control_plane_memory_request_mib,
        changes.managed_workload_ingress_enabled,
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// The endpoint a cluster had, kept serving for a while after it moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousEndpoint<'a> {
    pub api_endpoint: &'a str,
    pub mode: PublicAccessMode,
    pub until: DateTime<Utc>,
}

/// Records the public access mode that serves the cluster now and, when
/// its endpoint moved and the old one keeps serving a while, that one
/// (otherwise whatever was recorded as previous stays). The endpoint
/// itself is [`mark_ready`]'s.
pub async fn record_endpoint(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    mode: PublicAccessMode,
    previous: Option<PreviousEndpoint<'_>>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE clusters
         SET public_access_mode = $2,
             previous_api_endpoint = CASE WHEN $3::text IS NULL THEN previous_api_endpoint ELSE $3 END,
             previous_public_access_mode = CASE WHEN $3::text IS NULL THEN previous_public_access_mode ELSE $4 END,
             previous_endpoint_until = CASE WHEN $3::text IS NULL THEN previous_endpoint_until ELSE $5 END
         WHERE id = $1 AND deleted_at IS NULL",
        cluster_id,
        mode.as_str(),
        previous.as_ref().map(|p| p.api_endpoint),
        previous.as_ref().map(|p| p.mode.as_str()),
        previous.as_ref().map(|p| p.until),
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Forgets the cluster's previous endpoint once it is no longer served,
/// if it is still `api_endpoint` (a later switch may have recorded another).
pub async fn forget_previous_endpoint(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    api_endpoint: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE clusters
         SET previous_api_endpoint = NULL, previous_public_access_mode = NULL,
             previous_endpoint_until = NULL
         WHERE id = $1 AND previous_api_endpoint = $2",
        cluster_id,
        api_endpoint,
    )
    .execute(tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Live clusters whose previous endpoint's grace period has passed: an
/// `endpoint_retire` job each removes what served it.
pub async fn list_previous_endpoints_due(
    db: impl PgExecutor<'_>,
) -> Result<Vec<Cluster>, sqlx::Error> {
    cluster_query!(
        r#"SELECT"#,
        r#"
           FROM clusters
           WHERE previous_endpoint_until <= now() AND deleted_at IS NULL AND status <> 'deleting'
           ORDER BY previous_endpoint_until
           LIMIT 500"#
    )
    .fetch_all(db)
    .await
}

/// The job that removes a cluster's previous endpoint once its grace
/// period has passed: the endpoint it retires, so a job that finds another
/// recorded (a later switch) leaves that one alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointRetirement {
    pub api_endpoint: String,
}

impl JobPayload for EndpointRetirement {
    const KIND: JobKind = JobKind::new("endpoint_retire", "endpoint_retire");
}

/// Clusters whose control plane should answer: ready or being updated.
pub async fn list_observable(db: impl PgExecutor<'_>) -> Result<Vec<Cluster>, sqlx::Error> {
    cluster_query!(
        r#"SELECT"#,
        r#"
           FROM clusters
           WHERE deleted_at IS NULL AND status IN ('ready', 'updating') AND kubeconfig_available
           ORDER BY id"#
    )
    .fetch_all(db)
    .await
}

/// Live clusters reached through the host's shared load balancer: those
/// whose mode is `loadbalancer`, whose previous endpoint was (still served
/// until it is retired), or whose active update switches them to it (its
/// entry is verified before the mode is recorded). Those being deleted
/// aside: the delete job takes them out.
pub async fn list_load_balanced(db: impl PgExecutor<'_>) -> Result<Vec<Cluster>, sqlx::Error> {
    cluster_query!(
        r#"SELECT"#,
        r#"
           FROM clusters c
           WHERE deleted_at IS NULL AND status <> 'deleting'
             AND (public_access_mode = 'loadbalancer'
                  OR previous_public_access_mode = 'loadbalancer'
                  OR EXISTS (SELECT 1 FROM cluster_jobs j
                             WHERE j.cluster_id = c.id AND j.type = 'cluster_update'
                               AND j.status IN ('pending', 'running')
                               AND j.payload->>'public_access_mode' = 'loadbalancer'))
           ORDER BY id"#
    )
    .fetch_all(db)
    .await
}

/// Records that the cluster's namespace has the host access of `revision`
/// (`host::access`).
pub async fn record_host_access(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    revision: i32,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE clusters SET host_access_revision = greatest(host_access_revision, $2) WHERE id = $1",
        cluster_id,
        revision,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Up to `limit` ready clusters (or being updated) with host access below
/// `revision`: made before the platform granted it, or before this revision.
pub async fn lacking_host_access(
    db: impl PgExecutor<'_>,
    revision: i32,
    limit: i64,
) -> Result<Vec<Cluster>, sqlx::Error> {
    cluster_query!(
        r#"SELECT"#,
        r#"
           FROM clusters
           WHERE deleted_at IS NULL AND host_access_revision < $1
             AND status IN ('ready', 'updating')
           ORDER BY host_access_revision, id
           LIMIT $2"#,
        revision,
        limit,
    )
    .fetch_all(db)
    .await
}

/// Records whether the control plane answered; `last_observed_at` is the last
/// time it did.
pub async fn record_observation(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    connected: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE clusters
         SET connection_status = CASE WHEN $2 THEN 'connected' ELSE 'unreachable' END,
             last_observed_at = CASE WHEN $2 THEN now() ELSE last_observed_at END
         WHERE id = $1 AND deleted_at IS NULL",
        cluster_id,
        connected,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Locks a live cluster row for the rest of the transaction, so lifecycle
/// requests on one cluster are decided one at a time; with the role of the
/// user in its organisation, checked again under the lock (a role changed
/// since the request was authorized counts). None for a non-member.
pub async fn lock_for(
    tx: &mut PgConnection,
    acting: Acting,
    cluster_id: Uuid,
) -> Result<Option<Role>, sqlx::Error> {
    let (user, key_organization, key_role) = acting.binds();
    sqlx::query_scalar!(
        r#"SELECT coalesce($4::text, m.role) AS "role!: Role"
           FROM clusters c
           LEFT JOIN organization_members m
                  ON m.organization_id = c.organization_id AND m.user_id = $2
           WHERE c.id = $1 AND c.deleted_at IS NULL
             AND (m.user_id IS NOT NULL OR c.organization_id = $3)
           FOR UPDATE OF c"#,
        cluster_id,
        user,
        key_organization,
        key_role,
    )
    .fetch_optional(tx)
    .await
}

/// Records the managed ingress's state (`disabled`, `provisioning`, `ready`
/// or `error` with its reason), writing only when it changed.
pub async fn set_ingress_status(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    status: IngressStatus,
    last_error: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE clusters SET managed_workload_ingress_status = $2, managed_workload_ingress_last_error = $3
         WHERE id = $1 AND (managed_workload_ingress_status, managed_workload_ingress_last_error)
                          IS DISTINCT FROM ($2, $3)",
        cluster_id,
        status.as_str(),
        last_error
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Records whether an installed managed ingress has an available replica
/// (`ready`) or not yet (`provisioning`), only while it is wanted and
/// installed: a state an `ingress_converge` job wrote meanwhile (`disabled`,
/// `error`) is left alone. `true` when it changed.
pub async fn follow_ingress_availability(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    available: bool,
) -> Result<bool, sqlx::Error> {
    let status = if available {
        IngressStatus::Ready
    } else {
        IngressStatus::Provisioning
    };
    let result = sqlx::query!(
        "UPDATE clusters SET managed_workload_ingress_status = $2
         WHERE id = $1 AND deleted_at IS NULL AND managed_workload_ingress_enabled
           AND managed_workload_ingress_status IN ('provisioning', 'ready')
           AND managed_workload_ingress_status <> $2",
        cluster_id,
        status.as_str(),
    )
    .execute(db)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// The problem codes this module's refusals answer with (the OpenAPI
/// document's `ProblemCode`, through `app::capabilities::problem_codes`).
pub const PROBLEM_CODES: &[&str] = &["invalid_cursor"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_only_in_the_order_that_made_it() {
        let name = PageAsked::read(ClusterOrder::Name, None, Some("name:web-1"), None).unwrap();
        assert_eq!(name.after, After::Name("web-1".into()));
        let start = PageAsked::read(ClusterOrder::Name, None, None, None).unwrap();
        assert_eq!(start.after, After::Name(String::new()));
        let id = Uuid::new_v4();
        let newest = format!("1700000000123456_{id}");
        for (order, raw) in [
            (ClusterOrder::Name, newest.as_str()),
            (ClusterOrder::Newest, "name:web-1"),
            (ClusterOrder::Name, "name:"),
            (ClusterOrder::Name, "name:Web"),
            (ClusterOrder::Name, "name:web'--"),
            // A Cyrillic а: no cluster's name.
            (ClusterOrder::Name, "name:\u{430}pi"),
            (ClusterOrder::Name, "web-1"),
        ] {
            assert!(
                PageAsked::read(order, None, Some(raw), None).is_err(),
                "{order} {raw:?}"
            );
        }
    }

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let at = DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap();
        let id = Uuid::new_v4();
        let raw = format!("{}_{}", at.timestamp_micros(), id);
        assert_eq!(parse_page_cursor(&raw).unwrap(), (at, id));
        let last = format!("{MAX_CURSOR_MICROS}_{id}");
        assert!(parse_page_cursor(&last).is_ok());
        for bad in [
            "",
            "abc",
            "12_notauuid",
            "x_00000000-0000-0000-0000-000000000000",
            // The review's cursor: chrono takes it, PostgreSQL does not.
            "-8000000000000000000_00000000-0000-0000-0000-000000000000",
            "-1_00000000-0000-0000-0000-000000000000",
            "253402300800000000_00000000-0000-0000-0000-000000000000",
            "9223372036854775807_00000000-0000-0000-0000-000000000000",
        ] {
            assert!(parse_page_cursor(bad).is_err(), "{bad:?}");
        }
    }
}
