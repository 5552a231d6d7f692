//! An organization's API keys, for its automation: made, listed and revoked
//! by its admins. Such a key acts in its organization alone, with the role
//! it was made with (never owner), on its clusters, their labels and node
//! events, its plan and its orders; it outlives its maker's membership
//! (docs/organizations.md, "API keys of an organization").

use axum::{
    Extension,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use shared::{
    accounts::{self, KeyScope, OrganizationApiKey, auth},
    app::{authority, credentials},
    audit,
    error::ApiError,
    extract::{AppJson, AppPath},
    http::{AppState, Caller, idempotency::IssuesSecret},
    organizations::{Action, Role},
};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{event, managing};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewOrganizationKey {
    /// 1–100 characters, not only spaces, to tell keys apart.
    #[schema(min_length = 1, max_length = 100, pattern = "\\S")]
    pub name: String,
    /// `admin`, `member` or `viewer` (a viewer's key only reads); never
    /// `owner`.
    pub role: Role,
    /// 1–365, default 90.
    #[schema(minimum = 1, maximum = 365)]
    pub expires_in_days: Option<i64>,
    /// The caller's password, asked again before a key is made. An account
    /// without one makes keys within 10 minutes of signing in instead.
    pub password: Option<String>,
}

/// A new key of the organization: the only response that carries it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedOrganizationKey {
    pub api_key: OrganizationApiKey,
    /// Send it as `Authorization: Bearer <key>`; it is not shown again.
    pub key: String,
}

/// Make an API key of the organization
///
/// For its owners and admins, from a signed-in session, with the password
/// asked again. The key acts in this organization alone with `role`;
/// leaving or being removed does not end it (revoke it here). Audited as
/// `organization.api_key_created`.
#[utoipa::path(post, path = "/api/console/organizations/{organization_id}/api-keys", tag = "organizations",
    params(("organization_id" = Uuid, Path)),
    request_body = NewOrganizationKey,
    responses((status = 201, body = CreatedOrganizationKey),
              (status = 400, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "Not from a session, a role that does not manage members, or a passwordless account's sign-in older than 10 minutes (`forbidden`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "A bad name, role, lifetime or password (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 429, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(organization_id): AppPath<Uuid>,
    AppJson(body): AppJson<NewOrganizationKey>,
) -> Result<Response, ApiError> {
    let session_id = caller.require_session()?;
    managing(&state, caller, organization_id).await?;
    let (name, lifetime) = accounts::key_terms(&body.name, body.expires_in_days)?;
    if body.role == Role::Owner {
        return Err(ApiError::invalid(
            "role",
            "must be admin, member or viewer: a key cannot own an organization",
        ));
    }
    accounts::reauthenticate(&state.pool, caller.user_id, session_id, body.password).await?;
    let (key, prefix) = auth::new_api_key();
    let mut tx = state.pool.begin().await?;
    let scope = authority::Scope::Organization {
        id: organization_id,
        action: Action::ManageMembers,
    };
    authority::hold(&mut tx, caller.authority(), scope).await?;
    let made = accounts::insert_api_key(
        &mut *tx,
        &accounts::NewApiKey {
            user_id: caller.user_id,
            organization: Some((organization_id, body.role)),
            name,
            prefix: &prefix,
            token_hash: &auth::hash_secret(&key),
            scope: if body.role == Role::Viewer {
                KeyScope::Read
            } else {
                KeyScope::Write
            },
            lifetime,
        },
    )
    .await?;
    audit::record(
        &mut *tx,
        event(
            caller,
            "organization.api_key_created",
            organization_id,
            serde_json::json!({ "key": made.id, "name": made.name, "prefix": made.prefix, "role": body.role.as_str() }),
        ),
    )
    .await?;
    let api_key = accounts::organization_api_keys(&mut *tx, organization_id)
        .await?
        .into_iter()
        .find(|k| k.id == made.id)
        .ok_or_else(|| anyhow::anyhow!("the key just made is missing"))?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Extension(IssuesSecret),
        AppJson(CreatedOrganizationKey { api_key, key }),
    )
        .into_response())
}

/// An organization's API keys
///
/// For its owners and admins, newest first, revoked ones included.
#[utoipa::path(get, path = "/api/console/organizations/{organization_id}/api-keys", tag = "organizations",
    params(("organization_id" = Uuid, Path)),
    responses((status = 200, body = Vec<OrganizationApiKey>),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(organization_id): AppPath<Uuid>,
) -> Result<AppJson<Vec<OrganizationApiKey>>, ApiError> {
    managing(&state, caller, organization_id).await?;
    Ok(AppJson(
        accounts::organization_api_keys(&state.pool, organization_id).await?,
    ))
}

/// Revoke an API key of the organization
///
/// For its owners and admins: the key stops working at once. Revoking a
/// revoked key changes nothing. Audited as `organization.api_key_revoked`.
#[utoipa::path(delete, path = "/api/console/organizations/{organization_id}/api-keys/{key_id}", tag = "organizations",
    params(("organization_id" = Uuid, Path), ("key_id" = Uuid, Path)),
    responses((status = 200, body = OrganizationApiKey),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    AppPath((organization_id, key_id)): AppPath<(Uuid, Uuid)>,
) -> Result<AppJson<OrganizationApiKey>, ApiError> {
    managing(&state, caller, organization_id).await?;
    let mut tx = state.pool.begin().await?;
    let revoked = accounts::revoke_organization_api_key(&mut *tx, organization_id, key_id)
        .await?
        .ok_or(ApiError::NotFound { what: "API key" })?;
    let why = credentials::Why::KeyRevoked { key_id: revoked.id };
    let ended = credentials::end(&mut tx, revoked.created_by, caller.user_id, why).await?;
    audit::record(
        &mut *tx,
        event(
            caller,
            "organization.api_key_revoked",
            organization_id,
            ended.counted_in(
                serde_json::json!({ "key": revoked.id, "name": revoked.name, "prefix": revoked.prefix }),
            ),
        ),
    )
    .await?;
    tx.commit().await?;
    ended
        .removed_from_clusters(&state.pool, state.host.as_deref())
        .await;
    Ok(AppJson(revoked))
}
