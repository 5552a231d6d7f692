//! Changing who is in an organisation: an invitation answered, a member's
//! role changed, a member removed or leaving. The rules (docs/organizations.md): admins manage the
//! members who are not owners, only owners make or unmake owners, anyone
//! may leave, an organisation always keeps an owner, and a personal
//! organisation keeps its one member. A member who goes loses what they
//! hold in the organisation at once (kubeconfigs, join tokens, the
//! invitations they sent), and one given another role what it may not hold
//! ([`credentials::end`]). Each change is decided under the organisation's
//! row lock, so two owners removing each other at once leave one of them,
//! and an invitation is taken up only while its sender may still send it.

use sqlx::PgConnection;
use uuid::Uuid;

use super::credentials::{self, Ended, Why};
use crate::{
    accounts,
    error::ApiError,
    organizations::{
        self, Action, Role,
        invitations::{self, Invitation, InvitationStatus},
    },
    secretbox,
};

/// Who asks and for whom.
#[derive(Debug, Clone, Copy)]
pub struct Change {
    pub organization_id: Uuid,
    /// The member asking.
    pub by: Uuid,
    /// The member changed.
    pub member: Uuid,
}

/// A member's role before and after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleChanged {
    pub from: Role,
    pub to: Role,
    /// What the member held that the new role may not (their kubeconfigs'
    /// ServiceAccounts go once the transaction commits).
    pub ended: Ended,
}

/// Gives `change.member` the role `to`.
pub async fn set_role(
    tx: &mut PgConnection,
    change: Change,
    to: Role,
) -> Result<RoleChanged, ApiError> {
    let (actor, from) = decide(tx, change).await?;
    actor.require(owner_touched(from, to))?;
    if from == to {
        return Ok(RoleChanged {
            from,
            to,
            ended: Ended::default(),
        });
    }
    if change.by == change.member && !actor.allows(Action::Own) {
        return Err(ApiError::Forbidden(
            "members cannot change their own role".into(),
        ));
    }
    keep_an_owner(tx, change.organization_id, from, Some(to)).await?;
    let why = Why::RoleChanged {
        organization_id: change.organization_id,
        to,
    };
    let ended = credentials::end(tx, change.member, change.by, why).await?;
    organizations::set_role(&mut *tx, change.organization_id, change.member, to).await?;
    Ok(RoleChanged { from, to, ended })
}

/// What a removal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub role: Role,
    /// What the member held in the organisation (their kubeconfigs'
    /// ServiceAccounts go once the transaction commits).
    pub ended: Ended,
}

/// Takes `change.member` out of the organisation: they leave when they ask
/// themselves.
pub async fn remove(tx: &mut PgConnection, change: Change) -> Result<Removed, ApiError> {
    let (actor, role) = decide(tx, change).await?;
    if change.by != change.member {
        actor.require(owner_touched(role, Role::Viewer))?;
    }
    keep_an_owner(tx, change.organization_id, role, None).await?;
    let why = Why::Removed {
        organization_id: change.organization_id,
    };
    let ended = credentials::end(tx, change.member, change.by, why).await?;
    organizations::remove(&mut *tx, change.organization_id, change.member).await?;
    Ok(Removed { role, ended })
}

/// Whether an invitation is taken up or turned down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Accept,
    Decline,
}

/// Answers the invitation whose link carries `token`, as `user`: only the
/// user the invitation was sent to (their verified address is the one
/// invited) may, once, before it expires. Accepting makes them a member
/// with the role it names, while the member who sent it may still send it
/// (409 `invitation_revoked` once they were removed or given a role that
/// may not).
pub async fn answer(
    tx: &mut PgConnection,
    token: &str,
    user: Uuid,
    answer: Answer,
) -> Result<Invitation, ApiError> {
    let invitation = invitations::take(tx, &secretbox::hash(token))
        .await?
        .ok_or(ApiError::NotFound { what: "invitation" })?;
    if invitation.status != InvitationStatus::Pending {
        return Err(ApiError::Conflict {
            code: "invitation_answered",
            detail: format!("this invitation was {} already", invitation.status.as_str()),
        });
    }
    if invitation.expires_at <= chrono::Utc::now() {
        return Err(ApiError::Conflict {
            code: "invitation_expired",
            detail: "this invitation has expired: ask for a new one".into(),
        });
    }
    let account = accounts::get_user(&mut *tx, user)
        .await?
        .ok_or(ApiError::NotFound { what: "invitation" })?;
    if !account.email_verified || !account.email.eq_ignore_ascii_case(&invitation.email) {
        return Err(ApiError::Forbidden(
            "this invitation was sent to another address: sign in as its recipient".into(),
        ));
    }
    let status = match answer {
        Answer::Accept => {
            organizations::lock(tx, invitation.organization_id).await?;
            let sender = organizations::role_of(
                &mut *tx,
                invitation.organization_id,
                invitation.invited_by_user_id,
            )
            .await?;
            if !sender.is_some_and(|role| role.allows(invitation.role.to_invite())) {
                return Err(ApiError::Conflict {
                    code: "invitation_revoked",
                    detail: "whoever sent this invitation may no longer invite: ask the organization's admins for a new one".into(),
                });
            }
            if organizations::role_of(&mut *tx, invitation.organization_id, user)
                .await?
                .is_some()
            {
                return Err(ApiError::Conflict {
                    code: "already_member",
                    detail: "you are a member of this organization already".into(),
                });
            }
            invitations::add_member(tx, invitation.organization_id, user, invitation.role).await?;
            InvitationStatus::Accepted
        }
        Answer::Decline => InvitationStatus::Declined,
    };
    invitations::answer(tx, invitation.id, status, user).await?;
    Ok(Invitation {
        status,
        ..invitation
    })
}

/// Locks the organisation; the roles of the member asking and of the one
/// changed. A personal organisation's membership never changes.
async fn decide(tx: &mut PgConnection, change: Change) -> Result<(Role, Role), ApiError> {
    let not_found = |what| ApiError::NotFound { what };
    let personal = organizations::lock(tx, change.organization_id)
        .await?
        .ok_or_else(|| not_found("organization"))?
        .personal;
    let actor = organizations::member_role(&mut *tx, change.organization_id, change.by).await?;
    let member = organizations::role_of(&mut *tx, change.organization_id, change.member)
        .await?
        .ok_or_else(|| not_found("member"))?;
    if personal {
        return Err(ApiError::Conflict {
            code: "personal_organization",
            detail: "a personal organization has its one member".into(),
        });
    }
    Ok((actor, member))
}

/// What changing a member from `from` to `to` is: owners' business when an
/// owner is made or unmade, else managing members.
fn owner_touched(from: Role, to: Role) -> Action {
    if from == Role::Owner || to == Role::Owner {
        Action::Own
    } else {
        Action::ManageMembers
    }
}

/// Refuses a change that would leave the organisation without an owner.
async fn keep_an_owner(
    tx: &mut PgConnection,
    organization_id: Uuid,
    from: Role,
    to: Option<Role>,
) -> Result<(), ApiError> {
    if from == Role::Owner
        && to != Some(Role::Owner)
        && organizations::owners(&mut *tx, organization_id).await? == 1
    {
        return Err(ApiError::Conflict {
            code: "last_owner",
            detail: "an organization keeps at least one owner: make another member its owner first"
                .into(),
        });
    }
    Ok(())
}

/// The problem codes this module's refusals answer with (the OpenAPI
/// document's `ProblemCode`, through `http::problem_codes`).
pub const PROBLEM_CODES: &[&str] = &[
    "already_member",
    "invitation_answered",
    "invitation_expired",
    "invitation_revoked",
    "last_owner",
    "personal_organization",
];
