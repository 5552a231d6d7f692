//! The back office's users: find, disable or enable, change role, delete; and
//! the audit stream of everyone.

use axum::{extract::State, http::StatusCode};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use shared::{
    accounts::{self, User},
    app::credentials::{self, Why},
    audit::{self, AuditEvent, AuditRecord},
    domain::{UserRole, UserStatus},
    error::ApiError,
    extract::{AppJson, AppPath, AppQuery},
    http::{AdminCaller, AppState},
    organizations,
};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

fn admin_event(
    admin: AdminCaller,
    action: &str,
    user_id: Uuid,
    metadata: serde_json::Value,
) -> AuditEvent<'_> {
    AuditEvent {
        actor_user_id: Some(admin.user_id),
        actor_kind: "admin",
        action,
        target_kind: "user",
        target_id: user_id.to_string(),
        cluster_id: None,
        metadata,
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsersQuery {
    /// Part of the email or the display name.
    pub q: Option<String>,
    pub status: Option<UserStatus>,
    pub role: Option<UserRole>,
    /// The keyset cursor: users created before this time (the last listed
    /// user's `created_at`), between 2000-01-01 and a day from now.
    pub before: Option<DateTime<Utc>>,
    /// With `before`: the last listed user's id, so that users created at
    /// the same instant as it are listed next, not skipped.
    pub before_id: Option<Uuid>,
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// Users
///
/// Newest first; deleted users are not listed. Page with `before` and
/// `before_id`, the last listed user's `created_at` and id.
#[utoipa::path(get, path = "/api/console/admin/users", tag = "admin", params(UsersQuery),
    responses((status = 200, body = Vec<User>),
              (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "A bad limit or cursor (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(state): State<AppState>,
    _admin: AdminCaller,
    AppQuery(query): AppQuery<UsersQuery>,
) -> Result<AppJson<Vec<User>>, ApiError> {
    let limit = shared::extract::page_limit(query.limit)?;
    let q = query.q.as_deref().map(str::trim).filter(|q| !q.is_empty());
    if query.before.is_none() && query.before_id.is_some() {
        return Err(ApiError::invalid("before_id", "is a cursor with `before`"));
    }
    // Without an id, before the instant itself: every id sorts after the nil one.
    let before = query
        .before
        .map(|at| {
            Ok::<_, ApiError>((
                shared::extract::instant("before", at)?,
                query.before_id.unwrap_or_else(Uuid::nil),
            ))
        })
        .transpose()?;
    Ok(AppJson(
        accounts::list_users(&state.pool, q, query.status, query.role, before, limit).await?,
    ))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserChange {
    /// A disabled user's sessions end and keys stop at once, and every
    /// kubeconfig credential they were issued is revoked.
    pub status: Option<UserStatus>,
    pub role: Option<UserRole>,
}

/// Change a user's status or role
///
/// An administrator cannot disable or demote themselves (409 `cannot_change_self`).
#[utoipa::path(patch, path = "/api/console/admin/users/{user_id}", tag = "admin", params(("user_id" = Uuid, Path)), request_body = UserChange,
    responses((status = 200, body = User), (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn update(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppPath(user_id): AppPath<Uuid>,
    AppJson(body): AppJson<UserChange>,
) -> Result<AppJson<User>, ApiError> {
    if user_id == admin.user_id
        && (body.status == Some(UserStatus::Disabled) || body.role == Some(UserRole::User))
    {
        return Err(ApiError::Conflict {
            code: "cannot_change_self",
            detail: "administrators cannot disable or demote themselves".into(),
        });
    }
    let mut tx = state.pool.begin().await?;
    accounts::update_user(
        &mut tx,
        user_id,
        body.status.map(UserStatus::as_str),
        body.role.map(UserRole::as_str),
    )
    .await?
    .ok_or(ApiError::NotFound { what: "user" })?;
    let ended = if body.status == Some(UserStatus::Disabled) {
        Some(credentials::end(&mut tx, user_id, admin.user_id, Why::Disabled).await?)
    } else {
        None
    };
    let mut metadata = serde_json::json!({ "status": body.status, "role": body.role });
    if let (Some(ended), Some(fields)) = (ended, metadata.as_object_mut()) {
        fields.extend(ended.audit().as_object().cloned().unwrap_or_default());
    }
    audit::record(
        &mut *tx,
        admin_event(admin, "admin.user.update", user_id, metadata),
    )
    .await?;
    tx.commit().await?;
    if let Some(ended) = ended {
        ended
            .removed_from_clusters(&state.pool, state.host.as_deref())
            .await;
    }
    accounts::get_user(&state.pool, user_id)
        .await?
        .map(AppJson)
        .ok_or(ApiError::NotFound { what: "user" })
}

/// Delete a user
///
/// Sessions, API keys, linked identities, codes and settings go, the user
/// leaves every shared organization, and the account keeps nothing
/// personal; its history stays. A user who still has clusters cannot be
/// deleted (409 `user_has_clusters`): delete the clusters first, or disable
/// the user; nor the only owner of a shared organization with other members
/// (409 `user_owns_organization`).
#[utoipa::path(delete, path = "/api/console/admin/users/{user_id}", tag = "admin", params(("user_id" = Uuid, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(state): State<AppState>,
    admin: AdminCaller,
    AppPath(user_id): AppPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    if user_id == admin.user_id {
        return Err(ApiError::Conflict {
            code: "cannot_change_self",
            detail: "administrators cannot delete themselves".into(),
        });
    }
    let clusters = accounts::live_clusters(&state.pool, user_id).await?;
    if clusters > 0 {
        return Err(ApiError::Conflict {
            code: "user_has_clusters",
            detail: format!(
                "the user still has {clusters} cluster(s); delete them first, or disable the user"
            ),
        });
    }
    let mut tx = state.pool.begin().await?;
    let owned = organizations::only_owner_of(&mut tx, user_id).await?;
    if !owned.is_empty() {
        return Err(ApiError::Conflict {
            code: "user_owns_organization",
            detail: format!(
                "the user is the only owner of {}; make another member an owner first",
                owned.join(", ")
            ),
        });
    }
    accounts::scrub_user(&mut tx, user_id)
        .await?
        .ok_or(ApiError::NotFound { what: "user" })?;
    // Gone from every shared organization, and from none without an owner.
    organizations::leave_all(&mut tx, user_id).await?;
    audit::record(
        &mut *tx,
        admin_event(admin, "admin.user.delete", user_id, serde_json::json!({})),
    )
    .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only this actor's events.
    pub actor_user_id: Option<Uuid>,
    /// Only events older than this id (the last id of the previous page).
    pub before_id: Option<i64>,
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// Audit events of everyone
///
/// Newest first; page with `before_id`.
#[utoipa::path(get, path = "/api/console/admin/audit-events", tag = "admin", params(AuditQuery),
    responses((status = 200, body = Vec<AuditRecord>), (status = 403, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn audit_events(
    State(state): State<AppState>,
    _admin: AdminCaller,
    AppQuery(query): AppQuery<AuditQuery>,
) -> Result<AppJson<Vec<AuditRecord>>, ApiError> {
    Ok(AppJson(
        audit::list(
            &state.pool,
            query.actor_user_id,
            query.before_id,
            shared::extract::page_limit(query.limit)?,
        )
        .await?,
    ))
}
