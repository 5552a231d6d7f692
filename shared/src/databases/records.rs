//! The databases users asked for: one record each, its phase the checkpoint
//! the `database_converge` job records before each write to the server, its
//! conditions and last error what the user sees.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{
    domain::{JobKind, JobPayload},
    jobs::ClaimedJob,
    secretbox::SecretBox,
    settings::{ResealError, Resealed, Resealer},
};

/// The column a database's credential is sealed for.
pub const PASSWORD_COLUMN: &str = "tenant_databases.password";

crate::domain::text_enum! {
    /// Where a database is. The job walks `planned` → `credential_created`
    /// → `role_created` → `database_created` → `secret_projected` → `ready`;
    /// `conflict` when the server holds an object of its name the registry
    /// does not prove the platform made for it; `failed` with the reason;
    /// `deleting` once its removal is asked for.
    Phase {
        Planned => "planned",
        CredentialCreated => "credential_created",
        RoleCreated => "role_created",
        DatabaseCreated => "database_created",
        SecretProjected => "secret_projected",
        Ready => "ready",
        Conflict => "conflict",
        Failed => "failed",
        Deleting => "deleting",
    }
}

crate::domain::text_enum! {
    /// What removing the database does: `retain` forgets the record and
    /// the Secret and leaves the role and the database on the server;
    /// `delete` drops them too.
    DeletionPolicy {
        Retain => "retain",
        Delete => "delete",
    }
}

/// A condition of a database, as Kubernetes writes them: its type, whether
/// it holds, why, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: DateTime<Utc>,
}

/// A database as its owner sees it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantDatabase {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub instance_id: Uuid,
    /// The name asked for.
    pub name: String,
    /// The database's name on the server.
    pub database_name: String,
    /// The role the credential logs in as.
    pub role_name: String,
    /// Where the credential's Secret is, in the cluster.
    pub namespace: String,
    pub secret_name: String,
    pub extensions: Vec<String>,
    pub deletion_policy: DeletionPolicy,
    pub phase: Phase,
    /// Whether it is being removed.
    pub deleting: bool,
    #[schema(value_type = Vec<Condition>)]
    pub conditions: sqlx::types::Json<Vec<Condition>>,
    pub last_error: Option<String>,
    /// When the job last looked at it on the server.
    pub observed_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

macro_rules! record_query {
    ($head:literal, $tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            TenantDatabase,
            $head + r#" id, cluster_id, instance_id, name, database_name, role_name, namespace,
               secret_name, extensions, deletion_policy AS "deletion_policy: DeletionPolicy",
               phase AS "phase: Phase", wanted = 'absent' AS "deleting!",
               conditions AS "conditions: sqlx::types::Json<Vec<Condition>>", last_error,
               observed_at, created_at, updated_at "# + $tail,
            $($arg),*
        )
    };
}

/// A database as asked for.
#[derive(Debug, Clone)]
pub struct NewDatabase<'a> {
    pub cluster_id: Uuid,
    pub organization_id: Uuid,
    pub instance_id: Uuid,
    pub requested_by: Uuid,
    pub name: &'a str,
    pub namespace: &'a str,
    pub secret_name: &'a str,
    pub extensions: &'a [String],
    pub deletion_policy: DeletionPolicy,
}

pub async fn insert(
    tx: &mut PgConnection,
    new: &NewDatabase<'_>,
) -> Result<TenantDatabase, sqlx::Error> {
    let server_name = super::server_name(new.cluster_id, new.name);
    record_query!(
        "INSERT INTO tenant_databases (cluster_id, organization_id, instance_id,
             requested_by_user_id, name, database_name, role_name, namespace, secret_name,
             extensions, deletion_policy)
         VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8, $9, $10)
         RETURNING",
        "",
        new.cluster_id,
        new.organization_id,
        new.instance_id,
        new.requested_by,
        new.name,
        server_name,
        new.namespace,
        new.secret_name,
        new.extensions,
        new.deletion_policy.as_str(),
    )
    .fetch_one(&mut *tx)
    .await
}

pub async fn list_for_cluster(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
) -> Result<Vec<TenantDatabase>, sqlx::Error> {
    record_query!(
        "SELECT",
        "FROM tenant_databases WHERE cluster_id = $1 AND deleted_at IS NULL ORDER BY name",
        cluster_id
    )
    .fetch_all(db)
    .await
}

pub async fn get(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    id: Uuid,
) -> Result<Option<TenantDatabase>, sqlx::Error> {
    record_query!(
        "SELECT",
        "FROM tenant_databases WHERE cluster_id = $1 AND id = $2 AND deleted_at IS NULL",
        cluster_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// Asks for the database's removal (by its policy); `None` when it is not
/// there.
pub async fn mark_absent(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    id: Uuid,
) -> Result<Option<TenantDatabase>, sqlx::Error> {
    record_query!(
        "UPDATE tenant_databases SET wanted = 'absent', phase = 'deleting', updated_at = now()
         WHERE cluster_id = $1 AND id = $2 AND deleted_at IS NULL
         RETURNING",
        "",
        cluster_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// Sets the extensions the database asks for to `extensions`, which must
/// hold every one it asked for before (the list only grows). A database
/// past `database_created` goes back to it (and a stopped one's resume
/// point with it), so the job makes the new ones and checks the credential
/// again. `None` when it is not there, is being removed, or `extensions`
/// leaves one out.
pub async fn add_extensions(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    id: Uuid,
    extensions: &[String],
) -> Result<Option<TenantDatabase>, sqlx::Error> {
    record_query!(
        "UPDATE tenant_databases
         SET extensions = $3,
             phase = CASE WHEN phase IN ('secret_projected', 'ready') THEN 'database_created'
                          ELSE phase END,
             resume_phase = CASE WHEN resume_phase = 'secret_projected' THEN 'database_created'
                                 ELSE resume_phase END,
             updated_at = now()
         WHERE cluster_id = $1 AND id = $2 AND deleted_at IS NULL AND wanted = 'present'
           AND extensions <@ $3
         RETURNING",
        "",
        cluster_id,
        id,
        extensions
    )
    .fetch_optional(db)
    .await
}

/// The cluster's databases the job has work on: not `ready`, or asked to go.
pub async fn unsettled(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
) -> Result<Vec<TenantDatabase>, sqlx::Error> {
    record_query!(
        "SELECT",
        "FROM tenant_databases
         WHERE cluster_id = $1 AND deleted_at IS NULL
           AND (wanted = 'absent' OR phase NOT IN ('ready', 'conflict', 'failed'))
         ORDER BY created_at",
        cluster_id
    )
    .fetch_all(db)
    .await
}

/// Records the phase the record reached, with its condition (replacing the
/// one of the same type); a `failed` or `conflict` phase keeps the error
/// and the phase it stopped at (`resume_from`), which a retry resumes.
/// Fenced: written only while `job` still holds its lease (`false` when it
/// does not, or the record is forgotten).
pub async fn record_phase(
    db: impl PgExecutor<'_>,
    job: &ClaimedJob,
    id: Uuid,
    phase: Phase,
    condition: &Condition,
    error: Option<&str>,
    resume_from: Option<Phase>,
) -> Result<bool, sqlx::Error> {
    let written = sqlx::query!(
        r#"UPDATE tenant_databases
           SET phase = $2, last_error = $3, resume_phase = $5, observed_at = now(),
               updated_at = now(),
               conditions = (SELECT coalesce(jsonb_agg(c), '[]'::jsonb)
                             FROM jsonb_array_elements(conditions) c
                             WHERE c->>'type' <> $4::jsonb->>'type') || jsonb_build_array($4::jsonb)
           WHERE id = $1 AND deleted_at IS NULL
             AND EXISTS (SELECT 1 FROM cluster_jobs j
                         WHERE j.id = $6 AND j.attempt_count = $7 AND j.status = 'running')"#,
        id,
        phase.as_str(),
        error,
        serde_json::to_value(condition).unwrap_or_default(),
        resume_from.map(Phase::as_str),
        job.id,
        job.attempt,
    )
    .execute(db)
    .await?;
    Ok(written.rows_affected() == 1)
}

/// A condition of `kind`, now.
pub fn condition(kind: &str, holds: bool, reason: &str, message: impl Into<String>) -> Condition {
    Condition {
        kind: kind.into(),
        status: if holds { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Utc::now(),
    }
}

/// The phase the record is at now.
pub async fn phase_of(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Phase>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT phase AS "phase: Phase" FROM tenant_databases WHERE id = $1"#,
        id
    )
    .fetch_optional(db)
    .await
}

/// Sets a `failed` or `conflict` record back to the phase it stopped at,
/// for the job to go on from there; `None` when it is not stopped.
pub async fn resume(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    id: Uuid,
) -> Result<Option<TenantDatabase>, sqlx::Error> {
    record_query!(
        "UPDATE tenant_databases
         SET phase = coalesce(resume_phase, 'planned'), resume_phase = NULL, last_error = NULL,
             updated_at = now()
         WHERE cluster_id = $1 AND id = $2 AND deleted_at IS NULL AND phase IN ('failed', 'conflict')
         RETURNING",
        "",
        cluster_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// Starts a new credential for a `ready` database: its password forgotten
/// and its phase back to `planned`, so the job generates another, sets it
/// on the role and projects it again; `None` when it is not ready.
pub async fn rotate(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    id: Uuid,
) -> Result<Option<TenantDatabase>, sqlx::Error> {
    record_query!(
        "UPDATE tenant_databases
         SET phase = 'planned', password_encrypted = NULL, last_error = NULL, updated_at = now()
         WHERE cluster_id = $1 AND id = $2 AND deleted_at IS NULL AND wanted = 'present'
           AND phase = 'ready'
         RETURNING",
        "",
        cluster_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// Stores the credential's sealed password, once. Fenced as
/// [`record_phase`].
pub async fn store_password(
    db: impl PgExecutor<'_>,
    job: &ClaimedJob,
    id: Uuid,
    sealed: &[u8],
) -> Result<bool, sqlx::Error> {
    let written = sqlx::query!(
        "UPDATE tenant_databases SET password_encrypted = coalesce(password_encrypted, $2)
         WHERE id = $1
           AND EXISTS (SELECT 1 FROM cluster_jobs j
                       WHERE j.id = $3 AND j.attempt_count = $4 AND j.status = 'running')",
        id,
        sealed,
        job.id,
        job.attempt,
    )
    .execute(db)
    .await?;
    Ok(written.rows_affected() == 1)
}

pub async fn sealed_password(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<Option<Vec<u8>>, sqlx::Error> {
    Ok(sqlx::query_scalar!(
        "SELECT password_encrypted FROM tenant_databases WHERE id = $1",
        id
    )
    .fetch_optional(db)
    .await?
    .flatten())
}

/// Forgets the record (its removal is done): its names are free again.
/// Fenced as [`record_phase`]; a record forgotten already is `true`.
pub async fn forget(
    db: impl PgExecutor<'_>,
    job: &ClaimedJob,
    id: Uuid,
) -> Result<bool, sqlx::Error> {
    let held = sqlx::query_scalar!(
        r#"WITH held AS (SELECT 1 FROM cluster_jobs j
                         WHERE j.id = $2 AND j.attempt_count = $3 AND j.status = 'running'),
                forgotten AS (
               UPDATE tenant_databases
               SET deleted_at = now(), password_encrypted = NULL, updated_at = now()
               WHERE id = $1 AND deleted_at IS NULL AND EXISTS (SELECT 1 FROM held))
           SELECT EXISTS (SELECT 1 FROM held) AS "held!""#,
        id,
        job.id,
        job.attempt,
    )
    .fetch_one(db)
    .await?;
    Ok(held)
}

/// Records whose cluster was deleted and that are not forgotten yet,
/// oldest first, at most `limit`: what `sync-databases` removes by their
/// policy. A record stopped in `conflict` stays until an administrator
/// acts.
pub async fn orphaned(
    db: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<TenantDatabase>, sqlx::Error> {
    record_query!(
        "SELECT",
        "FROM tenant_databases d
         WHERE deleted_at IS NULL AND phase <> 'conflict'
           AND EXISTS (SELECT 1 FROM clusters c WHERE c.id = d.cluster_id AND c.deleted_at IS NOT NULL)
         ORDER BY created_at LIMIT $1",
        limit
    )
    .fetch_all(db)
    .await
}

/// Records what removing a record of a deleted cluster came to: forgotten,
/// or stopped with `error` (`conflict` or `failed`).
pub async fn settle_orphan(
    db: impl PgExecutor<'_>,
    id: Uuid,
    stopped: Option<(Phase, &Condition, &str)>,
) -> Result<(), sqlx::Error> {
    let (phase, condition, error) = match stopped {
        Some((phase, condition, error)) => (
            Some(phase.as_str()),
            serde_json::to_value(condition).ok(),
            Some(error),
        ),
        None => (None, None, None),
    };
    sqlx::query!(
        r#"UPDATE tenant_databases d
           SET deleted_at = CASE WHEN $2::text IS NULL THEN now() END,
               password_encrypted = CASE WHEN $2::text IS NULL THEN NULL ELSE password_encrypted END,
               phase = coalesce($2, phase), last_error = $4, observed_at = now(), updated_at = now(),
               conditions = CASE WHEN $3::jsonb IS NULL THEN conditions ELSE
                   (SELECT coalesce(jsonb_agg(c), '[]'::jsonb) FROM jsonb_array_elements(conditions) c
                    WHERE c->>'type' <> $3::jsonb->>'type') || jsonb_build_array($3::jsonb) END
           WHERE id = $1 AND deleted_at IS NULL
             AND EXISTS (SELECT 1 FROM clusters c WHERE c.id = d.cluster_id AND c.deleted_at IS NOT NULL)"#,
        id,
        phase,
        condition,
        error,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The `ready` databases of ready clusters, by cluster: the credentials
/// whose Secrets `sync-databases` checks.
pub async fn ready_by_cluster(
    db: impl PgExecutor<'_>,
) -> Result<Vec<(Uuid, Vec<TenantDatabase>)>, sqlx::Error> {
    let ready = record_query!(
        "SELECT",
        "FROM tenant_databases d
         WHERE deleted_at IS NULL AND phase = 'ready' AND wanted = 'present'
           AND EXISTS (SELECT 1 FROM clusters c
                       WHERE c.id = d.cluster_id AND c.deleted_at IS NULL AND c.status = 'ready')
         ORDER BY cluster_id, name",
    )
    .fetch_all(db)
    .await?;
    let mut grouped: Vec<(Uuid, Vec<TenantDatabase>)> = Vec::new();
    for record in ready {
        match grouped.last_mut() {
            Some((cluster, records)) if *cluster == record.cluster_id => records.push(record),
            _ => grouped.push((record.cluster_id, vec![record])),
        }
    }
    Ok(grouped)
}

/// Sets `ready` databases back to `database_created`, for the job to make
/// what is missing (a Secret removed in the cluster) and project their
/// credential again. Answers how many.
pub async fn reproject(db: impl PgExecutor<'_>, ids: &[Uuid]) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE tenant_databases SET phase = 'database_created', updated_at = now()
         WHERE id = ANY ($1) AND deleted_at IS NULL AND phase = 'ready' AND wanted = 'present'",
        ids
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Re-seals every credential under `key`'s current key.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    let rows = sqlx::query!(
        "SELECT id, password_encrypted FROM tenant_databases
         WHERE password_encrypted IS NOT NULL ORDER BY id FOR UPDATE"
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut resealer = Resealer::new(key);
    for row in rows {
        let again = resealer.again(PASSWORD_COLUMN, row.password_encrypted)?;
        sqlx::query!(
            "UPDATE tenant_databases SET password_encrypted = $2 WHERE id = $1",
            row.id,
            again
        )
        .execute(&mut *tx)
        .await?;
    }
    Ok(resealer.done)
}

/// The platform's install id: what the registry in each instance names it by.
pub async fn install_id(db: impl PgExecutor<'_>) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar!("SELECT install_id FROM system_settings WHERE id")
        .fetch_one(db)
        .await
}

/// The job that brings a cluster's databases to what their records ask:
/// every record of the cluster, so one job serves however many were asked
/// for at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseConvergence {}

impl JobPayload for DatabaseConvergence {
    const KIND: JobKind = JobKind::new("database_converge", "database_converge");
}
