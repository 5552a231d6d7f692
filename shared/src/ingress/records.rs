//! Hostname bindings, and the DNS records the platform owns on clusters and
//! bindings.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor, PgPool};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::domain::{DnsManagementScope, DnsManagementStatus, TlsMode, TlsStatus};

/// What a DNS record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Cluster(Uuid),
    Binding(Uuid),
}

/// A cluster or binding with a record wanted, or one it still owns.
#[derive(Debug, Clone)]
pub struct DnsOwner {
    pub owner: Owner,
    pub cluster_id: Uuid,
    pub vcluster_name: String,
    pub hostname: Option<String>,
    pub wanted: bool,
    pub recorded_name: Option<String>,
    pub recorded_target: Option<String>,
    /// Synced in the last ten minutes without error: a settled record needs no write.
    pub fresh: bool,
}

pub async fn owners(pool: &PgPool) -> Result<Vec<DnsOwner>, sqlx::Error> {
    let clusters = sqlx::query!(
        r#"SELECT id, vcluster_name,
                  (deleted_at IS NULL AND managed_workload_ingress_enabled AND status IN ('ready', 'updating')) AS "wanted!",
                  managed_workload_ingress_dns_record_name AS recorded_name, managed_workload_ingress_dns_target AS recorded_target,
                  COALESCE(managed_workload_ingress_dns_last_error IS NULL
                           AND managed_workload_ingress_dns_last_synced_at > now() - interval '10 minutes', false) AS "fresh!"
           FROM clusters
           WHERE (deleted_at IS NULL AND managed_workload_ingress_enabled AND status IN ('ready', 'updating'))
              OR managed_workload_ingress_dns_record_name IS NOT NULL"#
    )
    .fetch_all(pool)
    .await?;
    let bindings = sqlx::query!(
        r#"SELECT b.id, b.cluster_id, c.vcluster_name, b.hostname,
                  (b.deleted_at IS NULL AND b.dns_management_scope = 'platform_managed' AND c.deleted_at IS NULL
                   AND c.managed_workload_ingress_enabled AND c.status IN ('ready', 'updating')) AS "wanted!",
                  b.managed_dns_record_name AS recorded_name, b.managed_dns_target AS recorded_target,
                  COALESCE(b.dns_management_last_error IS NULL
                           AND b.dns_management_last_synced_at > now() - interval '10 minutes', false) AS "fresh!"
           FROM workload_ingress_hostname_bindings b JOIN clusters c ON c.id = b.cluster_id
           WHERE (b.deleted_at IS NULL AND b.dns_management_scope = 'platform_managed')
              OR b.managed_dns_record_name IS NOT NULL"#
    )
    .fetch_all(pool)
    .await?;
    Ok(clusters
        .into_iter()
        .map(|r| DnsOwner {
            owner: Owner::Cluster(r.id),
            cluster_id: r.id,
            vcluster_name: r.vcluster_name,
            hostname: None,
            wanted: r.wanted,
            recorded_name: r.recorded_name,
            recorded_target: r.recorded_target,
            fresh: r.fresh,
        })
        .chain(bindings.into_iter().map(|r| DnsOwner {
            owner: Owner::Binding(r.id),
            cluster_id: r.cluster_id,
            vcluster_name: r.vcluster_name,
            hostname: Some(r.hostname),
            wanted: r.wanted,
            recorded_name: r.recorded_name,
            recorded_target: r.recorded_target,
            fresh: r.fresh,
        }))
        .collect())
}

/// The owner's record is as wanted: made (`name`, `target`) or gone (`None`).
/// Writes only when something changed, or to refresh a sync time older than ten minutes.
pub async fn record_success(
    pool: &PgPool,
    owner: Owner,
    name: Option<&str>,
    target: Option<&str>,
    zone: &str,
) -> Result<(), sqlx::Error> {
    let zone = name.map(|_| zone);
    let provider = name.map(|_| "route53");
    match owner {
        Owner::Cluster(id) => {
            sqlx::query!(
                "UPDATE clusters SET managed_workload_ingress_dns_record_name = $2, managed_workload_ingress_dns_target = $3,
                        managed_workload_ingress_dns_zone_id = $4, managed_workload_ingress_dns_provider = $5,
                        managed_workload_ingress_dns_last_synced_at = now(), managed_workload_ingress_dns_last_error = NULL
                 WHERE id = $1 AND ((managed_workload_ingress_dns_record_name, managed_workload_ingress_dns_target,
                                     managed_workload_ingress_dns_zone_id) IS DISTINCT FROM ($2, $3, $4)
                                    OR managed_workload_ingress_dns_last_error IS NOT NULL
                                    OR managed_workload_ingress_dns_last_synced_at IS NULL
                                    OR managed_workload_ingress_dns_last_synced_at < now() - interval '10 minutes')",
                id,
                name,
                target,
                zone,
                provider
            )
            .execute(pool)
            .await?;
        }
        Owner::Binding(id) => {
            sqlx::query!(
                "UPDATE workload_ingress_hostname_bindings
                 SET managed_dns_record_name = $2, managed_dns_target = $3, managed_dns_zone_id = $4, managed_dns_provider = $5,
                     dns_management_last_synced_at = now(), dns_management_last_success_at = now(),
                     dns_management_last_error = NULL,
                     dns_management_status = CASE WHEN dns_management_scope = 'platform_managed' THEN 'synced' ELSE dns_management_status END,
                     dns_management_message = CASE WHEN $2::text IS NULL THEN NULL ELSE 'CNAME ' || $2 || ' → ' || $3 END
                 WHERE id = $1 AND ((managed_dns_record_name, managed_dns_target, managed_dns_zone_id) IS DISTINCT FROM ($2, $3, $4)
                                    OR dns_management_last_error IS NOT NULL
                                    OR dns_management_last_synced_at IS NULL
                                    OR dns_management_last_synced_at < now() - interval '10 minutes')",
                id,
                name,
                target,
                zone,
                provider
            )
            .execute(pool)
            .await?;
        }
    }
    Ok(())
}

/// Hands the records the platform made in zones other than `zone_id` (the
/// zone in the settings changed) to `dns_retired_records`, and clears them from
/// their owners, who then get a record in the current zone; one statement, so
/// both happen or neither. Returns how many were handed over.
pub async fn retire_other_zones(pool: &PgPool, zone_id: &str) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "WITH old_clusters AS (
             SELECT id, managed_workload_ingress_dns_zone_id AS zone_id, managed_workload_ingress_dns_record_name AS name,
                    managed_workload_ingress_dns_target AS value
             FROM clusters
             WHERE managed_workload_ingress_dns_record_name IS NOT NULL AND managed_workload_ingress_dns_zone_id <> $1
             FOR UPDATE
         ), cleared_clusters AS (
             UPDATE clusters c SET managed_workload_ingress_dns_record_name = NULL, managed_workload_ingress_dns_target = NULL,
                    managed_workload_ingress_dns_zone_id = NULL, managed_workload_ingress_dns_provider = NULL
             FROM old_clusters old WHERE c.id = old.id
         ), old_bindings AS (
             SELECT id, managed_dns_zone_id AS zone_id, managed_dns_record_name AS name, managed_dns_target AS value
             FROM workload_ingress_hostname_bindings
             WHERE managed_dns_record_name IS NOT NULL AND managed_dns_zone_id <> $1
             FOR UPDATE
         ), cleared_bindings AS (
             UPDATE workload_ingress_hostname_bindings b SET managed_dns_record_name = NULL, managed_dns_target = NULL,
                    managed_dns_zone_id = NULL, managed_dns_provider = NULL
             FROM old_bindings old WHERE b.id = old.id
         )
         INSERT INTO dns_retired_records (zone_id, name, value)
         SELECT zone_id, name, value FROM old_clusters WHERE value IS NOT NULL
         UNION ALL
         SELECT zone_id, name, value FROM old_bindings WHERE value IS NOT NULL
         ON CONFLICT (zone_id, name) DO NOTHING",
        zone_id
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// A record left in a zone the platform no longer manages.
#[derive(Debug, Clone)]
pub struct Retired {
    pub zone_id: String,
    pub name: String,
    pub value: String,
}

pub async fn retired(pool: &PgPool) -> Result<Vec<Retired>, sqlx::Error> {
    sqlx::query_as!(
        Retired,
        "SELECT zone_id, name, value FROM dns_retired_records ORDER BY zone_id, name"
    )
    .fetch_all(pool)
    .await
}

/// The retired records of `zone_id` named `names` are gone from it (or no
/// longer the platform's): forgotten.
pub async fn forget_retired(
    pool: &PgPool,
    zone_id: &str,
    names: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM dns_retired_records WHERE zone_id = $1 AND name = ANY($2)",
        zone_id,
        names
    )
    .execute(pool)
    .await?;
    Ok(())
}

pub async fn retired_failure(
    pool: &PgPool,
    zone_id: &str,
    names: &[String],
    error: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE dns_retired_records SET last_error = $3, last_error_at = now()
         WHERE zone_id = $1 AND name = ANY($2)",
        zone_id,
        names,
        error
    )
    .execute(pool)
    .await?;
    Ok(())
}

pub async fn record_failure(pool: &PgPool, owner: Owner, error: &str) -> Result<(), sqlx::Error> {
    match owner {
        Owner::Cluster(id) => {
            sqlx::query!(
                "UPDATE clusters SET managed_workload_ingress_dns_last_error = $2, managed_workload_ingress_dns_last_error_at = now()
                 WHERE id = $1",
                id,
                error
            )
            .execute(pool)
            .await?;
        }
        Owner::Binding(id) => {
            sqlx::query!(
                "UPDATE workload_ingress_hostname_bindings
                 SET dns_management_last_error = $2, dns_management_last_error_at = now(),
                     dns_management_status = 'error', dns_management_message = $2
                 WHERE id = $1",
                id,
                error
            )
            .execute(pool)
            .await?;
        }
    }
    Ok(())
}

/// A self-managed binding to observe.
#[derive(Debug, Clone)]
pub struct SelfManaged {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub vcluster_name: String,
    pub hostname: String,
}

pub async fn self_managed(pool: &PgPool) -> Result<Vec<SelfManaged>, sqlx::Error> {
    sqlx::query_as!(
        SelfManaged,
        "SELECT b.id, b.cluster_id, c.vcluster_name, b.hostname
         FROM workload_ingress_hostname_bindings b JOIN clusters c ON c.id = b.cluster_id
         WHERE b.deleted_at IS NULL AND b.dns_management_scope = 'self_managed' AND c.deleted_at IS NULL
           AND b.verified_at IS NOT NULL"
    )
    .fetch_all(pool)
    .await
}

pub async fn record_observation(
    pool: &PgPool,
    id: Uuid,
    status: DnsManagementStatus,
    message: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE workload_ingress_hostname_bindings
         SET dns_management_status = $2, dns_management_message = $3, dns_management_last_synced_at = now(),
             dns_management_last_success_at = CASE WHEN $2 = 'resolves' THEN now() ELSE dns_management_last_success_at END
         WHERE id = $1",
        id,
        status.as_str(),
        message
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// A hostname binding as its owner sees it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Binding {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub hostname: String,
    pub dns_management_scope: DnsManagementScope,
    pub dns_management_status: DnsManagementStatus,
    pub dns_management_message: Option<String>,
    pub managed_dns_record_name: Option<String>,
    pub managed_dns_target: Option<String>,
    pub dns_management_last_synced_at: Option<DateTime<Utc>>,
    pub dns_management_last_success_at: Option<DateTime<Utc>>,
    pub dns_management_last_error: Option<String>,
    pub dns_management_last_error_at: Option<DateTime<Utc>>,
    pub tls_mode: TlsMode,
    pub tls_status: TlsStatus,
    pub tls_secret_name: Option<String>,
    pub tls_last_synced_at: Option<DateTime<Utc>>,
    pub tls_last_error: Option<String>,
    /// Whether the claim is proven: platform-managed names are when bound,
    /// self-managed ones once their DNS TXT challenge is found. Until then
    /// the name is not held against other clusters, not observed and gets
    /// no certificate state.
    pub verified: bool,
    pub verified_at: Option<DateTime<Utc>>,
    /// For an unverified binding: the TXT record to create, its name…
    pub verification_record_name: Option<String>,
    /// …and its value.
    pub verification_record_value: Option<String>,
    pub verification_checked_at: Option<DateTime<Utc>>,
    /// What the last check found.
    pub verification_message: Option<String>,
    pub created_at: DateTime<Utc>,
    /// On the platform's workload edge: the `HTTPRoute` (in the cluster's
    /// host namespace) that serves it, once its edge was converged…
    pub edge_route: Option<String>,
    /// …the Gateway listener it is served on…
    pub edge_listener: Option<String>,
    /// …and, over HTTPS for a self-managed hostname, its certificate's
    /// Secret (in the Gateway's namespace).
    pub edge_certificate: Option<String>,
}

macro_rules! select_binding {
    ($tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Binding,
            r#"SELECT id, cluster_id, hostname, dns_management_scope AS "dns_management_scope: DnsManagementScope",
                      dns_management_status AS "dns_management_status: DnsManagementStatus", dns_management_message,
                      managed_dns_record_name, managed_dns_target, dns_management_last_synced_at,
                      dns_management_last_success_at, dns_management_last_error, dns_management_last_error_at,
                      tls_mode AS "tls_mode: TlsMode", tls_status AS "tls_status: TlsStatus",
                      tls_secret_name, tls_last_synced_at, tls_last_error,
                      verified_at IS NOT NULL AS "verified!", verified_at,
                      CASE WHEN verified_at IS NULL THEN '_kubebyon-challenge.' || hostname END AS verification_record_name,
                      CASE WHEN verified_at IS NULL THEN 'kubebyon-verification=' || verification_token END AS verification_record_value,
                      verification_checked_at, verification_message, created_at,
                      edge_route, edge_listener, edge_certificate
               FROM workload_ingress_hostname_bindings "# + $tail,
            $($arg),*
        )
    };
}

/// Inserts a binding: a platform-managed one verified at once, a
/// self-managed one with its challenge token.
pub async fn insert_binding(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    hostname: &str,
    scope: DnsManagementScope,
    verification_token: Option<&str>,
) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar!(
        "INSERT INTO workload_ingress_hostname_bindings
             (cluster_id, hostname, dns_management_scope, verification_token, verified_at)
         VALUES ($1, $2, $3, $4, CASE WHEN $3 = 'platform_managed' THEN now() END) RETURNING id",
        cluster_id,
        hostname,
        scope.as_str(),
        verification_token
    )
    .fetch_one(db)
    .await
}

/// Whether a live, verified binding holds `hostname`.
pub async fn hostname_held(db: impl PgExecutor<'_>, hostname: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM workload_ingress_hostname_bindings
                          WHERE hostname = $1 AND deleted_at IS NULL AND verified_at IS NOT NULL) AS "held!""#,
        hostname
    )
    .fetch_one(db)
    .await
}

/// Whether a live, verified binding of another organization's cluster
/// holds a name `hostname` is under, or one under `hostname`: a name nested
/// in another tenant's (`login.shop.apps…` under `shop.apps…`) would serve
/// pages and cookies as theirs.
pub async fn hostname_nests(
    db: impl PgExecutor<'_>,
    hostname: &str,
    organization_id: Uuid,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (
               SELECT 1 FROM workload_ingress_hostname_bindings b
               JOIN clusters c ON c.id = b.cluster_id
               WHERE b.deleted_at IS NULL AND b.verified_at IS NOT NULL
                 AND c.organization_id <> $2
                 AND (right($1, length(b.hostname) + 1) = '.' || b.hostname
                      OR right(b.hostname, length($1) + 1) = '.' || $1)) AS "nests!""#,
        hostname,
        organization_id
    )
    .fetch_one(db)
    .await
}

/// An unverified binding with its challenge.
#[derive(Debug, Clone)]
pub struct Unverified {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub hostname: String,
    pub token: String,
}

/// Unverified live bindings, the longest unchecked first.
pub async fn unverified(
    db: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<Unverified>, sqlx::Error> {
    sqlx::query_as!(
        Unverified,
        r#"SELECT b.id, b.cluster_id, b.hostname, b.verification_token AS "token!"
           FROM workload_ingress_hostname_bindings b JOIN clusters c ON c.id = b.cluster_id
           WHERE b.deleted_at IS NULL AND b.verified_at IS NULL AND c.deleted_at IS NULL
           ORDER BY b.verification_checked_at NULLS FIRST
           LIMIT $1"#,
        limit
    )
    .fetch_all(db)
    .await
}

/// The challenge of one unverified binding of a cluster.
pub async fn unverified_binding(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    id: Uuid,
) -> Result<Option<Unverified>, sqlx::Error> {
    sqlx::query_as!(
        Unverified,
        r#"SELECT id, cluster_id, hostname, verification_token AS "token!"
           FROM workload_ingress_hostname_bindings
           WHERE cluster_id = $1 AND id = $2 AND deleted_at IS NULL AND verified_at IS NULL"#,
        cluster_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// Records a check of a binding's challenge that did not find it.
pub async fn record_unverified(
    db: impl PgExecutor<'_>,
    id: Uuid,
    message: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE workload_ingress_hostname_bindings
         SET verification_checked_at = now(), verification_message = left($2, 1000)
         WHERE id = $1 AND verified_at IS NULL",
        id,
        message
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Marks a binding verified, and drops every other cluster's unverified
/// claim on the same name. A unique violation (another binding was verified
/// for the name first) comes back as the error.
pub async fn mark_verified(tx: &mut PgConnection, id: Uuid) -> Result<u64, sqlx::Error> {
    let hostname = sqlx::query_scalar!(
        "UPDATE workload_ingress_hostname_bindings
         SET verified_at = now(), verification_checked_at = now(),
             verification_message = 'the TXT record was found'
         WHERE id = $1 AND verified_at IS NULL AND deleted_at IS NULL
         RETURNING hostname",
        id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(hostname) = hostname else {
        return Ok(0);
    };
    Ok(sqlx::query!(
        "UPDATE workload_ingress_hostname_bindings
         SET deleted_at = now(), verification_message = 'another cluster proved it holds this name'
         WHERE hostname = $1 AND id <> $2 AND deleted_at IS NULL AND verified_at IS NULL",
        hostname,
        id
    )
    .execute(&mut *tx)
    .await?
    .rows_affected())
}

pub async fn get_binding(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    id: Uuid,
) -> Result<Option<Binding>, sqlx::Error> {
    select_binding!(
        "WHERE cluster_id = $1 AND id = $2 AND deleted_at IS NULL",
        cluster_id,
        id
    )
    .fetch_optional(db)
    .await
}

pub async fn list_bindings(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
) -> Result<Vec<Binding>, sqlx::Error> {
    select_binding!(
        "WHERE cluster_id = $1 AND deleted_at IS NULL ORDER BY hostname",
        cluster_id
    )
    .fetch_all(db)
    .await
}

/// Marks a binding deleted; `sync-dns` removes its record. `false` when there is no such live binding.
pub async fn delete_binding(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    id: Uuid,
) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE workload_ingress_hostname_bindings SET deleted_at = now()
         WHERE cluster_id = $1 AND id = $2 AND deleted_at IS NULL",
        cluster_id,
        id
    )
    .execute(db)
    .await?
    .rows_affected()
        == 1)
}

/// A live binding, for the TLS observation.
#[derive(Debug, Clone)]
pub struct BindingName {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub hostname: String,
}

/// Every live binding, in one query, by cluster.
pub async fn live_bindings(
    pool: &PgPool,
) -> Result<std::collections::HashMap<Uuid, Vec<BindingName>>, sqlx::Error> {
    let rows = sqlx::query_as!(
        BindingName,
        "SELECT id, cluster_id, hostname FROM workload_ingress_hostname_bindings
         WHERE deleted_at IS NULL AND verified_at IS NOT NULL"
    )
    .fetch_all(pool)
    .await?;
    let mut by_cluster = std::collections::HashMap::<Uuid, Vec<BindingName>>::new();
    for row in rows {
        by_cluster.entry(row.cluster_id).or_default().push(row);
    }
    Ok(by_cluster)
}

/// Bindings whose TLS state came from the workload edge's certificates
/// (their Secret is one of the edge's, `kubebyon-edge-…`) and that the edge
/// no longer serves (`served`): no certificate covers them there now.
pub async fn forget_edge_tls(pool: &PgPool, served: &[Uuid]) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE workload_ingress_hostname_bindings
         SET tls_mode = 'none', tls_status = 'none', tls_secret_name = NULL, tls_last_error = NULL,
             tls_last_synced_at = now()
         WHERE tls_secret_name LIKE 'kubebyon-edge-%' AND NOT (id = ANY($1)) AND deleted_at IS NULL",
        served,
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// What the cluster's cert-manager says of a binding's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsState {
    pub mode: TlsMode,
    pub status: TlsStatus,
    pub secret_name: Option<String>,
    pub error: Option<String>,
}

/// Records a binding's TLS state, writing only when it changed.
pub async fn record_tls(pool: &PgPool, id: Uuid, tls: &TlsState) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE workload_ingress_hostname_bindings
         SET tls_mode = $2, tls_status = $3, tls_secret_name = $4, tls_last_synced_at = now(),
             tls_last_error = $5, tls_last_error_at = CASE WHEN $5::text IS NULL THEN tls_last_error_at ELSE now() END
         WHERE id = $1 AND (tls_mode, tls_status, tls_secret_name, tls_last_error) IS DISTINCT FROM ($2, $3, $4, $5)",
        id,
        tls.mode.as_str(),
        tls.status.as_str(),
        tls.secret_name,
        tls.error
    )
    .execute(pool)
    .await?;
    Ok(())
}
