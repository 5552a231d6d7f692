//! A cluster's databases: ask for one, list them, read one, remove it by its
//! policy, retry one that stopped, rotate one's credential. Each change writes the record and
//! enqueues the cluster's `database_converge` job (or queues it behind the
//! cluster's active job) in one transaction. Audited.

use axum::{
    extract::State,
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use shared::{
    audit::{self, AuditEvent},
    billing::entitlements::Amounts,
    clusters::Cluster,
    databases::{
        self,
        instances::{self, Instance},
        records::{self, DatabaseConvergence, DeletionPolicy, NewDatabase, TenantDatabase},
    },
    domain::JobPayload,
    error::{ApiError, FieldError, unique_violation},
    extract::{AppJson, AppPath},
    http::{AppState, Caller, OwnedCluster, operations, owned, plan},
    jobs,
    organizations::Action,
};
use sqlx::{PgConnection, Postgres, Transaction};
use utoipa::ToSchema;
use uuid::Uuid;

/// A database asked for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDatabase {
    /// A lower-case letter, then up to 29 lower-case letters, digits and
    /// `_`; unique in the cluster. The server's names are derived from it.
    #[schema(pattern = "^[a-z][a-z0-9_]{0,29}$")]
    pub name: String,
    /// The instance to make it on; default: the platform's default instance.
    pub instance_id: Option<Uuid>,
    /// The namespace of the cluster its Secret is projected into (default
    /// `default`); it must exist there, and not be one of the cluster's own
    /// (`kube-system`, `kube-public`, `kube-node-lease`, `kubebyon-ingress`).
    /// A Secret of that name the platform did not make is never overwritten
    /// nor removed: the database fails, saying so.
    #[schema(pattern = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
    pub namespace: Option<String>,
    /// Default `<name>-postgres`, with `_` as `-`.
    #[schema(pattern = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
    pub secret_name: Option<String>,
    /// Default `retain`.
    pub deletion_policy: Option<DeletionPolicy>,
    /// PostgreSQL extensions to make in the database (as its owner: the
    /// server's `trusted` ones), at most 16, each once; more can be added
    /// later, none removed.
    #[schema(max_items = 16, value_type = Option<BTreeSet<ExtensionName>>)]
    pub extensions: Option<Vec<ExtensionName>>,
}

/// A PostgreSQL extension's name: a lower-case letter, then up to 62
/// lower-case letters, digits, `_` and `-` (`pgcrypto`, `uuid-ossp`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(transparent)]
#[schema(pattern = "^[a-z][a-z0-9_-]{0,62}$")]
pub struct ExtensionName(pub String);

/// A change of a database.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateDatabase {
    /// The extensions the database asks for: every one it asked for
    /// before, and the ones to add (at most 16 in all, each once).
    #[schema(max_items = 16, value_type = BTreeSet<ExtensionName>)]
    pub extensions: Vec<ExtensionName>,
}

/// Every problem of an extension list at once.
fn check_extensions(extensions: &[String], errors: &mut Vec<FieldError>) {
    if extensions.len() > databases::MAX_EXTENSIONS {
        errors.push(FieldError::new(
            "extensions",
            format!("at most {} extensions", databases::MAX_EXTENSIONS),
        ));
    }
    for (i, name) in extensions.iter().enumerate() {
        if !databases::valid_extension(name) {
            errors.push(FieldError::new(
                format!("extensions[{i}]"),
                "must be an extension's name: a lower-case letter, then lower-case letters, digits, _ and -",
            ));
        } else if extensions[..i].contains(name) {
            errors.push(FieldError::new(
                format!("extensions[{i}]"),
                "is named twice",
            ));
        }
    }
}

fn dns_label(text: &str) -> bool {
    let b = text.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first() != Some(&b'-')
        && b.last() != Some(&b'-')
}

/// A change accepted: the database as written, and the job's operation.
#[derive(Debug, Serialize, ToSchema)]
pub struct DatabaseAccepted {
    pub database: TenantDatabase,
    pub operation_id: Uuid,
}

fn event<'a>(caller: &Caller, action: &'a str, database: &TenantDatabase) -> AuditEvent<'a> {
    AuditEvent {
        actor_user_id: Some(caller.user_id),
        actor_kind: "user",
        action,
        target_kind: "database",
        target_id: database.id.to_string(),
        cluster_id: Some(database.cluster_id),
        metadata: serde_json::json!({
            "name": database.name, "instance_id": database.instance_id,
            "deletion_policy": database.deletion_policy,
        }),
    }
}

/// Enqueues the cluster's convergence, or queues it behind the cluster's
/// active job (joining a convergence queued there already); commits.
async fn converge(
    state: &AppState,
    mut tx: Transaction<'_, Postgres>,
    cluster: &Cluster,
    caller: &Caller,
) -> Result<Uuid, ApiError> {
    let activity = jobs::activity(&mut tx, cluster.id).await?;
    let written = if activity.active_job.is_some() {
        // One convergence already waiting serves this change too: it reads
        // every record when it runs.
        if let Some(queued) =
            jobs::queued_operation_of(&mut tx, cluster.id, &DatabaseConvergence::KIND).await?
        {
            tx.commit().await?;
            return Ok(queued);
        }
        operations::queue_behind(&mut tx, cluster.id, caller.user_id, &DatabaseConvergence {})
            .await?
    } else {
        operations::enqueue(
            state,
            &mut tx,
            cluster.id,
            caller.user_id,
            &DatabaseConvergence {},
        )
        .await
        .map_err(shared::error::active_job_conflict)?
    };
    let operation_id = written.operation_id;
    written.commit(state, tx).await?;
    Ok(operation_id)
}

async fn instance_for(
    db: &mut PgConnection,
    requested: Option<Uuid>,
) -> Result<Instance, ApiError> {
    let instance = match requested {
        Some(id) => instances::get(&mut *db, id).await?.ok_or_else(|| {
            ApiError::Validation(vec![FieldError::new(
                "instance_id",
                "no such database instance",
            )])
        })?,
        None => instances::default(&mut *db)
            .await?
            .ok_or(ApiError::Unprocessable {
                code: "no_database_instance",
                detail: "the platform has no default database instance: name one (instance_id), or ask an administrator to register one".into(),
            })?,
    };
    if !instance.enabled {
        return Err(ApiError::Unprocessable {
            code: "database_instance_disabled",
            detail: format!("the instance {} takes no new databases", instance.name),
        });
    }
    Ok(instance)
}

/// The cluster's databases
#[utoipa::path(get, path = "/api/console/clusters/{cluster_id}/databases", tag = "databases",
    params(("cluster_id" = Uuid, Path)),
    responses((status = 200, body = Vec<TenantDatabase>),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
) -> Result<AppJson<Vec<TenantDatabase>>, ApiError> {
    let mut tx = state.pool.begin().await?;
    let cluster = owned::authorize(&mut tx, &caller, authorized.id, Action::Read).await?;
    Ok(AppJson(
        records::list_for_cluster(&mut *tx, cluster.id).await?,
    ))
}

/// Ask for a database
///
/// Counts against the plan's `max_databases`, checked under the
/// organisation's entitlement lock in the transaction that writes the
/// record (`planned`) and enqueues the cluster's
/// `database_converge` job, which walks it to `ready` and projects its
/// credential as a Secret into the cluster.
#[utoipa::path(post, path = "/api/console/clusters/{cluster_id}/databases", tag = "databases",
    params(("cluster_id" = Uuid, Path)), request_body = CreateDatabase,
    responses((status = 202, body = DatabaseAccepted),
              (status = 403, description = "The plan's database limit is reached (`plan_limit_exceeded`, with `plan_limit`)", body = shared::billing::entitlements::PlanLimitProblem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "The cluster has a database of the name (`database_name_taken`), or the server's names are another record's (`database_server_name_taken`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "Invalid fields; no default instance (`no_database_instance`); a disabled one (`database_instance_disabled`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
    AppJson(body): AppJson<CreateDatabase>,
) -> Result<Response, ApiError> {
    let mut errors = Vec::new();
    if !databases::valid_name(&body.name) {
        errors.push(FieldError::new(
            "name",
            "must be a lower-case letter, then up to 29 lower-case letters, digits and _",
        ));
    }
    let namespace = body.namespace.unwrap_or_else(|| "default".into());
    if !dns_label(&namespace) {
        errors.push(FieldError::new(
            "namespace",
            "must be a namespace name (a DNS label)",
        ));
    } else if shared::clusters::SYSTEM_NAMESPACES.contains(&namespace.as_str()) {
        // The platform writes there with the cluster's admin credential:
        // it would put a Secret where the tenant may not (bootstrap tokens
        // live in kube-system).
        errors.push(FieldError::new(
            "namespace",
            "must be a namespace of your own, not one of the cluster's (kube-system, kube-public, kube-node-lease, kubebyon-ingress)",
        ));
    }
    let secret_name = body
        .secret_name
        .unwrap_or_else(|| databases::secret_name(&body.name));
    if !dns_label(&secret_name) {
        errors.push(FieldError::new("secret_name", "must be a DNS label"));
    }
    let extensions: Vec<String> = body
        .extensions
        .unwrap_or_default()
        .into_iter()
        .map(|name| name.0)
        .collect();
    check_extensions(&extensions, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let mut tx = state.pool.begin().await?;
    let cluster = owned::authorize(&mut tx, &caller, authorized.id, Action::Operate).await?;
    let instance = instance_for(&mut tx, body.instance_id).await?;
    let one = Amounts {
        databases: 1,
        ..Amounts::default()
    };
    let mut tx = plan::require(&state, tx, cluster.organization_id, &one).await?;
    let new = NewDatabase {
        cluster_id: cluster.id,
        organization_id: cluster.organization_id,
        instance_id: instance.id,
        requested_by: caller.user_id,
        name: &body.name,
        namespace: &namespace,
        secret_name: &secret_name,
        extensions: &extensions,
        deletion_policy: body.deletion_policy.unwrap_or(DeletionPolicy::Retain),
    };
    let database =
        records::insert(&mut tx, &new)
            .await
            .map_err(|err| match unique_violation(&err) {
                Some("idx_tenant_databases_cluster_name") => ApiError::Conflict {
                    code: "database_name_taken",
                    detail: format!("the cluster has a database named {:?}", body.name),
                },
                Some(
                    "idx_tenant_databases_instance_database" | "idx_tenant_databases_instance_role",
                ) => ApiError::Conflict {
                    code: "database_server_name_taken",
                    detail: "another database record holds the server's names for this one".into(),
                },
                _ => err.into(),
            })?;
    audit::record(&mut *tx, event(&caller, "database.create", &database)).await?;
    let operation_id = converge(&state, tx, &cluster, &caller).await?;
    Ok(shared::http::accepted(DatabaseAccepted {
        database,
        operation_id,
    }))
}

/// A database
#[utoipa::path(get, path = "/api/console/clusters/{cluster_id}/databases/{database_id}", tag = "databases",
    params(("cluster_id" = Uuid, Path), ("database_id" = Uuid, Path)),
    responses((status = 200, body = TenantDatabase),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
    AppPath((_, database_id)): AppPath<(Uuid, Uuid)>,
) -> Result<AppJson<TenantDatabase>, ApiError> {
    let mut tx = state.pool.begin().await?;
    let cluster = owned::authorize(&mut tx, &caller, authorized.id, Action::Read).await?;
    records::get(&mut *tx, cluster.id, database_id)
        .await?
        .map(AppJson)
        .ok_or(ApiError::NotFound { what: "database" })
}

/// Add extensions to a database
///
/// The list only grows: it must hold every extension the database asked
/// for before. A list with nothing new changes nothing (200, the database);
/// otherwise the record takes it and the cluster's `database_converge` job
/// makes the new extensions (202): a `ready` database shows
/// `database_created` until they are made and its credential logs in again.
#[utoipa::path(patch, path = "/api/console/clusters/{cluster_id}/databases/{database_id}", tag = "databases",
    params(("cluster_id" = Uuid, Path), ("database_id" = Uuid, Path)), request_body = UpdateDatabase,
    responses((status = 200, description = "Nothing new was asked for", body = TenantDatabase),
              (status = 202, body = DatabaseAccepted),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "It is being removed (`database_deleting`), or it changed while the request was served (`database_changed`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "Invalid names; an extension asked for before is left out (`extensions_append_only`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
    AppPath((_, database_id)): AppPath<(Uuid, Uuid)>,
    AppJson(body): AppJson<UpdateDatabase>,
) -> Result<Response, ApiError> {
    let wanted: Vec<String> = body.extensions.into_iter().map(|name| name.0).collect();
    let mut errors = Vec::new();
    check_extensions(&wanted, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let mut tx = state.pool.begin().await?;
    let cluster = owned::authorize(&mut tx, &caller, authorized.id, Action::Operate).await?;
    let current = records::get(&mut *tx, cluster.id, database_id)
        .await?
        .ok_or(ApiError::NotFound { what: "database" })?;
    if current.deleting {
        return Err(ApiError::Conflict {
            code: "database_deleting",
            detail: "the database is being removed".into(),
        });
    }
    if let Some(left_out) = current
        .extensions
        .iter()
        .find(|name| !wanted.contains(name))
    {
        return Err(ApiError::Unprocessable {
            code: "extensions_append_only",
            detail: format!("extensions can be added, not removed: the list must keep {left_out}"),
        });
    }
    if wanted.len() == current.extensions.len() {
        return Ok(AppJson(current).into_response());
    }
    // Written only if the record still holds what was read: a removal or
    // another change meanwhile is answered as the next request would be.
    let database = records::add_extensions(&mut *tx, cluster.id, database_id, &wanted)
        .await?
        .ok_or(ApiError::Conflict {
            code: "database_changed",
            detail: "the database changed meanwhile: read it and try again".into(),
        })?;
    audit::record(&mut *tx, event(&caller, "database.update", &database)).await?;
    let operation_id = converge(&state, tx, &cluster, &caller).await?;
    Ok(shared::http::accepted(DatabaseAccepted {
        database,
        operation_id,
    }))
}

/// Remove a database
///
/// By its policy: `retain` removes the Secret and forgets the record,
/// leaving the role and the database (and their data) on the server;
/// `delete` drops them too, once the registry proves they are this
/// record's. The job does it; the record shows `deleting` until then.
#[utoipa::path(delete, path = "/api/console/clusters/{cluster_id}/databases/{database_id}", tag = "databases",
    params(("cluster_id" = Uuid, Path), ("database_id" = Uuid, Path)),
    responses((status = 202, body = DatabaseAccepted),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
    AppPath((_, database_id)): AppPath<(Uuid, Uuid)>,
) -> Result<Response, ApiError> {
    let mut tx = state.pool.begin().await?;
    let cluster = owned::authorize(&mut tx, &caller, authorized.id, Action::Operate).await?;
    let database = records::mark_absent(&mut *tx, cluster.id, database_id)
        .await?
        .ok_or(ApiError::NotFound { what: "database" })?;
    audit::record(&mut *tx, event(&caller, "database.delete", &database)).await?;
    let operation_id = converge(&state, tx, &cluster, &caller).await?;
    Ok(shared::http::accepted(DatabaseAccepted {
        database,
        operation_id,
    }))
}

/// Retry a database that stopped
///
/// A `failed` or `conflict` database goes back to the phase it stopped at,
/// and the job tries again from there (after a conflict: once the object
/// in the way is gone, or registered as this record's by an
/// administrator).
#[utoipa::path(post, path = "/api/console/clusters/{cluster_id}/databases/{database_id}/retry", tag = "databases",
    params(("cluster_id" = Uuid, Path), ("database_id" = Uuid, Path)),
    responses((status = 202, body = DatabaseAccepted),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "It has not stopped (`database_not_stopped`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
    AppPath((_, database_id)): AppPath<(Uuid, Uuid)>,
) -> Result<Response, ApiError> {
    restart(&state, &caller, &authorized, database_id, Restart::Retry).await
}

/// Rotate a database's credential
///
/// A `ready` database gets a new password: the job generates it, sets it on
/// the role and projects the Secret again (the old password stops working
/// as the role takes the new one).
#[utoipa::path(post, path = "/api/console/clusters/{cluster_id}/databases/{database_id}/rotate", tag = "databases",
    params(("cluster_id" = Uuid, Path), ("database_id" = Uuid, Path)),
    responses((status = 202, body = DatabaseAccepted),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "It is not ready (`database_not_ready`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(authorized): OwnedCluster,
    AppPath((_, database_id)): AppPath<(Uuid, Uuid)>,
) -> Result<Response, ApiError> {
    restart(&state, &caller, &authorized, database_id, Restart::Rotate).await
}

/// What sets a database's phase back for the job to walk again.
#[derive(Clone, Copy)]
enum Restart {
    /// A `failed` or `conflict` one, from the phase it stopped at.
    Retry,
    /// A `ready` one, from `planned` with a new credential.
    Rotate,
}

/// Sets the database back as `how` says and enqueues the job, audited;
/// 404 when there is no such database, 409 when it is not in the phase
/// `how` starts from.
async fn restart(
    state: &AppState,
    caller: &Caller,
    authorized: &Cluster,
    database_id: Uuid,
    how: Restart,
) -> Result<Response, ApiError> {
    let mut tx = state.pool.begin().await?;
    let cluster = owned::authorize(&mut tx, caller, authorized.id, Action::Operate).await?;
    let restarted = match how {
        Restart::Retry => records::resume(&mut *tx, cluster.id, database_id).await?,
        Restart::Rotate => records::rotate(&mut *tx, cluster.id, database_id).await?,
    };
    let Some(database) = restarted else {
        let database = records::get(&mut *tx, cluster.id, database_id)
            .await?
            .ok_or(ApiError::NotFound { what: "database" })?;
        return Err(match how {
            Restart::Retry => ApiError::Conflict {
                code: "database_not_stopped",
                detail: format!(
                    "the database is {}, not failed or in conflict",
                    database.phase
                ),
            },
            Restart::Rotate => ApiError::Conflict {
                code: "database_not_ready",
                detail: format!(
                    "the database is {}; only a ready one's credential is rotated",
                    database.phase
                ),
            },
        });
    };
    let action = match how {
        Restart::Retry => "database.retry",
        Restart::Rotate => "database.rotate",
    };
    audit::record(&mut *tx, event(caller, action, &database)).await?;
    let operation_id = converge(state, tx, &cluster, caller).await?;
    Ok(shared::http::accepted(DatabaseAccepted {
        database,
        operation_id,
    }))
}

#[cfg(test)]
mod tests {
    use super::dns_label;

    #[test]
    fn namespaces_and_secret_names_are_dns_labels() {
        assert!(dns_label("default") && dns_label("shop-db-postgres"));
        for bad in ["", "-a", "a-", "A", "a_b", "ѕhop", &"a".repeat(64)] {
            assert!(!dns_label(bad), "{bad:?}");
        }
    }
}
