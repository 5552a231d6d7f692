//! `api-organizations`: the organizations a user is a member of, new shared
//! ones, and their members — roles changed, members removed, leaving
//! (docs/organizations.md). The rules of a change are `app::membership`'s.

use axum::{Router, extract::State, http::StatusCode};
use serde::Deserialize;
use shared::{
    accounts::auth::{self, random_token},
    app::membership::{self, Answer, Change},
    audit::{self, AuditEvent},
    audit::{ActivityQuery, AuditRecord},
    domain::EmailAddress,
    error::ApiError,
    extract::{AppJson, AppPath, AppQuery},
    http::{AppState, Caller},
    organizations::{
        self, Action, Member, Membership, Role,
        invitations::{self, Invitation},
    },
    secretbox,
};
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

mod keys;

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(shared::openapi::answering(ApiDoc::openapi(), PROBLEM_CODES))
        .routes(routes!(list, create))
        .routes(routes!(members))
        .routes(routes!(set_role, remove))
        .routes(routes!(invite, invitations))
        .routes(routes!(revoke_invitation))
        .routes(routes!(accept))
        .routes(routes!(decline))
        .routes(routes!(activity))
        .routes(routes!(keys::create, keys::list))
        .routes(routes!(keys::revoke))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(tags((name = "organizations", description = "Organizations and their members")))]
struct ApiDoc;

/// The longest name an organization takes, in characters.
const MAX_NAME: usize = 100;

/// Invitations an organization sends in an hour: each is a mail to an
/// address its admins chose, so a compromised admin cannot make the
/// platform a spam relay.
pub const INVITATIONS_PER_ORGANIZATION: auth::Limit = auth::Limit {
    name: "invite:organization",
    max: 50,
    window: std::time::Duration::from_secs(3600),
};

/// Invitations one person sends in an hour, whatever organizations they
/// send them from: organizations are free to make, so the limit per
/// organization alone would let one account send one organization's worth
/// per organization it makes.
pub const INVITATIONS_PER_INVITER: auth::Limit = auth::Limit {
    name: "invite:user",
    max: 50,
    window: std::time::Duration::from_secs(3600),
};

/// Invitations the whole platform sends in an hour: the ceiling on what
/// many accounts together can make its mail server send.
pub const INVITATIONS_PER_PLATFORM: auth::Limit = auth::Limit {
    name: "invite:platform",
    max: 1000,
    window: std::time::Duration::from_secs(3600),
};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewOrganization {
    /// 1–100 characters, no control, direction or zero-width characters
    /// (Unicode's format characters); spaces at either end are dropped.
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
    // The name goes into invitations' mails and every member's console:
    // nothing in it may hide or reorder what it says.
    if name.is_empty() || name.chars().count() > MAX_NAME || shared::domain::hides_text(name) {
        return Err(ApiError::invalid(
            "name",
            format!(
                "must be 1 to {MAX_NAME} characters, none of them control, direction or zero-width characters"
            ),
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
    organizations::member_role(&state.pool, organization_id, caller.user_id).await?;
    Ok(AppJson(
        organizations::members(&state.pool, organization_id).await?,
    ))
}

/// Change a member's role
///
/// Admins change the roles of members who are not owners; only owners make
/// or unmake owners; the last owner stays one (409 `last_owner`); a
/// personal organization's member is its owner (409
/// `personal_organization`). A member made a viewer loses their kubeconfigs
/// in the organization's clusters at once (a viewer holds none). Audited as
/// `organization.member_role_changed`.
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
                changed.ended.counted_in(serde_json::json!({
                    "member": member,
                    "from": changed.from.as_str(),
                    "to": changed.to.as_str(),
                })),
            ),
        )
        .await?;
    }
    tx.commit().await?;
    changed
        .ended
        .removed_from_clusters(&state.pool, state.host.as_deref())
        .await;
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
            removed
                .ended
                .counted_in(serde_json::json!({ "member": member, "role": removed.role.as_str() })),
        ),
    )
    .await?;
    tx.commit().await?;
    removed
        .ended
        .removed_from_clusters(&state.pool, state.host.as_deref())
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

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewInvitation {
    /// Who is invited: only the account with this verified address can
    /// accept.
    #[schema(format = "email", max_length = 254)]
    pub email: String,
    /// The role they will have.
    pub role: Role,
}

#[derive(Debug, serde::Serialize, ToSchema)]
pub struct InvitationMade {
    pub invitation: Invitation,
    /// The link the invitation's email carries, shown this once: it is of
    /// use only to the account with the invited address.
    pub invitation_url: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InvitationToken {
    /// The token of the invitation's link (after `#token=`).
    #[schema(min_length = 1, max_length = 128)]
    pub token: String,
}

/// Invite someone
///
/// Admins invite members, admins and viewers; only owners invite owners. An
/// email with a link goes to the address; the invitation is good for 7
/// days, once. A personal organization takes no members (409
/// `personal_organization`); an address with an open invitation is 409
/// `already_invited`; an organization sends at most 50 invitations an hour
/// (429 with `Retry-After`). Audited as `organization.member_invited`.
#[utoipa::path(post, path = "/api/console/organizations/{organization_id}/invitations", tag = "organizations",
    params(("organization_id" = Uuid, Path)),
    request_body = NewInvitation,
    responses((status = 201, body = InvitationMade),
              (status = 400, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "The caller's role does not allow inviting with this role (`forbidden`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "`personal_organization` or `already_invited`", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "A bad address (`validation_failed`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 429, description = "The invitations of the hour are used up: the organization's (50), the inviting member's (50, across organizations) or the platform's (1,000) (`rate_limited`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn invite(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(organization_id): AppPath<Uuid>,
    AppJson(body): AppJson<NewInvitation>,
) -> Result<(StatusCode, AppJson<InvitationMade>), ApiError> {
    let email = EmailAddress::parse(&body.email).map_err(|m| ApiError::invalid("email", m))?;
    let mut tx = state.pool.begin().await?;
    let organization =
        organizations::lock(&mut tx, organization_id)
            .await?
            .ok_or(ApiError::NotFound {
                what: "organization",
            })?;
    let role = organizations::member_role(&mut *tx, organization_id, caller.user_id).await?;
    role.require(body.role.to_invite())?;
    for (limit, key) in [
        (INVITATIONS_PER_ORGANIZATION, organization_id.to_string()),
        (INVITATIONS_PER_INVITER, caller.user_id.to_string()),
        (INVITATIONS_PER_PLATFORM, "all".to_string()),
    ] {
        auth::rate_limit(&state.pool, limit, &key).await?;
    }
    if organization.personal {
        return Err(ApiError::Conflict {
            code: "personal_organization",
            detail: "a personal organization has its one member".into(),
        });
    }
    let token = random_token::<32>();
    let invitation = invitations::invite(
        &mut tx,
        organization_id,
        &email.to_string(),
        body.role,
        &secretbox::hash(&token),
        caller.user_id,
    )
    .await?
    .ok_or_else(|| ApiError::Conflict {
        code: "already_invited",
        detail: format!("{email} has an open invitation: revoke it to send another"),
    })?;
    audit::record(
        &mut *tx,
        event(
            caller,
            "organization.member_invited",
            organization_id,
            serde_json::json!({ "invitation": invitation.id, "email": invitation.email, "role": invitation.role.as_str() }),
        ),
    )
    .await?;
    tx.commit().await?;
    let base = shared::settings::load(&state.pool)
        .await?
        .fields
        .public_base_url
        .unwrap_or_else(|| state.settings.public_base_url.clone());
    let invitation_url = format!("{}/invitations#token={token}", base.trim_end_matches('/'));
    // The name is the organization's choice: quoted, so it reads as a name
    // and not as the platform's own words.
    let subject = format!(
        "You are invited to the organization “{}” on KubeBYON",
        organization.name
    );
    let mail = format!(
        "You are invited to join the organization “{}” as {} on KubeBYON.\n\nAccept or decline, signed in as {email}:\n{invitation_url}\n\nThe link is good for 7 days. If you did not expect it, ignore this message.\n",
        organization.name,
        invitation.role.as_str(),
    );
    shared::mail::deliver(
        state.pool.clone(),
        state.settings.clone(),
        email.to_string(),
        subject,
        mail,
        "an invitation",
    )
    .await;
    Ok((
        StatusCode::CREATED,
        AppJson(InvitationMade {
            invitation,
            invitation_url,
        }),
    ))
}

/// An organization's open invitations
///
/// For its owners and admins, newest first.
#[utoipa::path(get, path = "/api/console/organizations/{organization_id}/invitations", tag = "organizations",
    params(("organization_id" = Uuid, Path)),
    responses((status = 200, body = Vec<Invitation>),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn invitations(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(organization_id): AppPath<Uuid>,
) -> Result<AppJson<Vec<Invitation>>, ApiError> {
    managing(&state, caller, organization_id).await?;
    Ok(AppJson(
        invitations::pending(&state.pool, organization_id).await?,
    ))
}

/// Revoke an invitation
///
/// For its owners and admins; its link stops working. Audited as
/// `organization.invitation_revoked`.
#[utoipa::path(delete, path = "/api/console/organizations/{organization_id}/invitations/{invitation_id}", tag = "organizations",
    params(("organization_id" = Uuid, Path), ("invitation_id" = Uuid, Path)),
    responses((status = 204, description = "Revoked"),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "No such organization or open invitation", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn revoke_invitation(
    State(state): State<AppState>,
    caller: Caller,
    AppPath((organization_id, invitation_id)): AppPath<(Uuid, Uuid)>,
) -> Result<StatusCode, ApiError> {
    managing(&state, caller, organization_id).await?;
    let mut tx = state.pool.begin().await?;
    if !invitations::revoke(&mut *tx, organization_id, invitation_id).await? {
        return Err(ApiError::NotFound { what: "invitation" });
    }
    audit::record(
        &mut *tx,
        event(
            caller,
            "organization.invitation_revoked",
            organization_id,
            serde_json::json!({ "invitation": invitation_id }),
        ),
    )
    .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Refused unless the caller may manage the organization's members.
async fn managing(state: &AppState, caller: Caller, organization_id: Uuid) -> Result<(), ApiError> {
    organizations::member_role(&state.pool, organization_id, caller.user_id)
        .await?
        .require(Action::ManageMembers)
}

/// Accept an invitation
///
/// Signed in as the invited address (verified): the caller becomes a member
/// with the invitation's role. A token nobody issued is 404; one answered
/// already 409 `invitation_answered`; an expired one 409
/// `invitation_expired`; one whose sender was removed or may no longer
/// invite (their role changed) 409 `invitation_revoked`; another account's
/// 403; a member already 409 `already_member`. Audited as
/// `organization.invitation_accepted`.
#[utoipa::path(post, path = "/api/console/organizations/invitations/accept", tag = "organizations",
    request_body = InvitationToken,
    responses((status = 200, description = "Accepted: the caller is a member", body = Invitation),
              (status = 400, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "The invitation is for another address", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "`invitation_answered`, `invitation_expired`, `invitation_revoked` or `already_member`", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn accept(
    State(state): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<InvitationToken>,
) -> Result<AppJson<Invitation>, ApiError> {
    answer(&state, caller, body, Answer::Accept).await
}

/// Decline an invitation
///
/// As [accepting](#accept), without becoming a member. Audited as
/// `organization.invitation_declined`.
#[utoipa::path(post, path = "/api/console/organizations/invitations/decline", tag = "organizations",
    request_body = InvitationToken,
    responses((status = 200, description = "Declined", body = Invitation),
              (status = 400, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "The invitation is for another address", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "`invitation_answered` or `invitation_expired`", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn decline(
    State(state): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<InvitationToken>,
) -> Result<AppJson<Invitation>, ApiError> {
    answer(&state, caller, body, Answer::Decline).await
}

async fn answer(
    state: &AppState,
    caller: Caller,
    body: InvitationToken,
    how: Answer,
) -> Result<AppJson<Invitation>, ApiError> {
    if body.token.is_empty() || body.token.len() > 128 {
        return Err(ApiError::invalid("token", "is not one this platform sent"));
    }
    let mut tx = state.pool.begin().await?;
    let invitation = membership::answer(&mut tx, &body.token, caller.user_id, how).await?;
    let action = match how {
        Answer::Accept => "organization.invitation_accepted",
        Answer::Decline => "organization.invitation_declined",
    };
    audit::record(
        &mut *tx,
        event(
            caller,
            action,
            invitation.organization_id,
            serde_json::json!({ "invitation": invitation.id, "role": invitation.role.as_str() }),
        ),
    )
    .await?;
    tx.commit().await?;
    Ok(AppJson(invitation))
}

/// An organization's activity
///
/// For its owners and admins: what its members did to it (members,
/// invitations) and to its clusters, newest first; page with `before_id`.
/// The addresses events were made from are not shown.
#[utoipa::path(get, path = "/api/console/organizations/{organization_id}/activity", tag = "organizations",
    params(("organization_id" = Uuid, Path), ActivityQuery),
    responses((status = 200, body = Vec<AuditRecord>),
              (status = 401, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 403, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn activity(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(organization_id): AppPath<Uuid>,
    AppQuery(query): AppQuery<ActivityQuery>,
) -> Result<AppJson<Vec<AuditRecord>>, ApiError> {
    let limit = shared::extract::page_limit(query.limit)?;
    managing(&state, caller, organization_id).await?;
    Ok(AppJson(
        organizations::activity(&state.pool, organization_id, query.before_id, limit).await?,
    ))
}

/// The problem codes of this function's own refusals (the platform's and
/// its capabilities' come with `shared::http::problem_codes`).
const PROBLEM_CODES: &[&str] = &["already_invited"];
