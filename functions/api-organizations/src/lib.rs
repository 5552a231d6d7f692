//! `api-organizations`: the organizations a user is a member of, new shared
//! ones, and their members — roles changed, members removed, leaving
//! (docs/organizations.md). The rules of a change are `app::membership`'s.

use axum::{Router, extract::State, http::StatusCode};
use serde::Deserialize;
use shared::{
    app::membership::{self, Change},
    audit::{self, AuditEvent},
    error::ApiError,
    extract::{AppJson, AppPath},
    http::{AppState, Caller},
    kubeconfigs::credential,
    organizations::{self, Member, Membership, Role},
};
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(list, create))
        .routes(routes!(members))
        .routes(routes!(set_role, remove))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(tags((name = "organizations", description = "Organizations and their members")))]
struct ApiDoc;

/// The longest name an organization takes, in characters.
const MAX_NAME: usize = 100;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewOrganization {
    /// 1–100 characters, no control characters; spaces at either end are
    /// dropped.
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleChange {
    pub role: Role,
}

/// The caller's organizations
///
/// Every organization the caller is a member of, with their role: their
/// personal one first, then by name.
#[utoipa::path(get, path = "/api/console/organizations", tag = "organizations",
    responses((status = 200, body = Vec<Membership>),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<AppJson<Vec<Membership>>, ApiError> {
    Ok(AppJson(
        organizations::of_user(&state.pool, caller.user_id).await?,
    ))
}

/// Create an organization
///
/// A shared organization, the caller its owner. Audited as
/// `organization.created`.
#[utoipa::path(post, path = "/api/console/organizations", tag = "organizations",
    request_body = NewOrganization,
    responses((status = 201, body = Membership),
              (status = 400, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "A bad name (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<NewOrganization>,
) -> Result<(StatusCode, AppJson<Membership>), ApiError> {
    let name = body.name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "name",
            format!("must be 1 to {MAX_NAME} characters, none of them control characters"),
        ));
    }
    let mut tx = state.pool.begin().await?;
    let made = organizations::create(&mut tx, name, caller.user_id).await?;
    audit::record(
        &mut *tx,
        event(
            caller,
            "organization.created",
            made.id,
            serde_json::json!({ "name": name }),
        ),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, AppJson(made)))
}

/// An organization's members
///
/// For any member. An organization the caller is not a member of is 404,
/// alike for one that does not exist.
#[utoipa::path(get, path = "/api/console/organizations/{organization_id}/members", tag = "organizations",
    params(("organization_id" = Uuid, Path)),
    responses((status = 200, body = Vec<Member>),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn members(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(organization_id): AppPath<Uuid>,
) -> Result<AppJson<Vec<Member>>, ApiError> {
    organizations::role_of(&state.pool, organization_id, caller.user_id)
        .await?
        .ok_or(ApiError::NotFound {
            what: "organization",
        })?;
    Ok(AppJson(
        organizations::members(&state.pool, organization_id).await?,
    ))
}

/// Change a member's role
///
/// Admins change the roles of members who are not owners; only owners make
/// or unmake owners; the last owner stays one (409 `last_owner`); a
/// personal organization's member is its owner (409
/// `personal_organization`). Audited as `organization.member_role_changed`.
#[utoipa::path(patch, path = "/api/console/organizations/{organization_id}/members/{user_id}", tag = "organizations",
    params(("organization_id" = Uuid, Path), ("user_id" = Uuid, Path)),
    request_body = RoleChange,
    responses((status = 204, description = "The member has the role"),
              (status = 400, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "The caller's role does not allow this change (`forbidden`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "No such organization or member", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "The last owner (`last_owner`), or a personal organization (`personal_organization`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn set_role(
    State(state): State<AppState>,
    caller: Caller,
    AppPath((organization_id, member)): AppPath<(Uuid, Uuid)>,
    AppJson(body): AppJson<RoleChange>,
) -> Result<StatusCode, ApiError> {
    let change = Change {
        organization_id,
        by: caller.user_id,
        member,
    };
    let mut tx = state.pool.begin().await?;
    let changed = membership::set_role(&mut tx, change, body.role).await?;
    if changed.from != changed.to {
        audit::record(
            &mut *tx,
            event(
                caller,
                "organization.member_role_changed",
                organization_id,
                serde_json::json!({
                    "member": member,
                    "from": changed.from.as_str(),
                    "to": changed.to.as_str(),
                }),
            ),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Remove a member, or leave
///
/// A member removes themselves (leaves) whatever their role; admins remove
/// members who are not owners, owners anyone. The last owner cannot go (409
/// `last_owner`), nor a personal organization's member (409
/// `personal_organization`). The member's kubeconfigs for the
/// organization's clusters are revoked at once. Audited as
/// `organization.member_removed` or `organization.member_left`.
#[utoipa::path(delete, path = "/api/console/organizations/{organization_id}/members/{user_id}", tag = "organizations",
    params(("organization_id" = Uuid, Path), ("user_id" = Uuid, Path)),
    responses((status = 204, description = "The member is out"),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "The caller's role does not allow removing this member (`forbidden`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "No such organization or member", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "The last owner (`last_owner`), or a personal organization (`personal_organization`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    AppPath((organization_id, member)): AppPath<(Uuid, Uuid)>,
) -> Result<StatusCode, ApiError> {
    let change = Change {
        organization_id,
        by: caller.user_id,
        member,
    };
    let mut tx = state.pool.begin().await?;
    let removed = membership::remove(&mut tx, change).await?;
    let action = if member == caller.user_id {
        "organization.member_left"
    } else {
        "organization.member_removed"
    };
    audit::record(
        &mut *tx,
        event(
            caller,
            action,
            organization_id,
            serde_json::json!({
                "member": member,
                "role": removed.role.as_str(),
                "kubeconfigs_revoked": removed.kubeconfigs,
            }),
        ),
    )
    .await?;
    tx.commit().await?;
    credential::remove_revoked_now(
        &state.pool,
        state.host.as_deref(),
        member,
        removed.kubeconfigs,
    )
    .await;
    Ok(StatusCode::NO_CONTENT)
}

fn event(
    caller: Caller,
    action: &'static str,
    organization_id: Uuid,
    metadata: serde_json::Value,
) -> AuditEvent<'static> {
    AuditEvent {
        actor_user_id: Some(caller.user_id),
        actor_kind: "user",
        action,
        target_kind: "organization",
        target_id: organization_id.to_string(),
        cluster_id: None,
        metadata,
    }
}
