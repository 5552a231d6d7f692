//! Organisations own clusters; people are their members, each with a
//! [`Role`]. Every user has a personal organisation, made with the user by
//! the database (`migrations/…_organizations.sql`), so one person's
//! clusters are the one-member case. What a role may do is [`Role::allows`]:
//! the one matrix every route's authorization reads (docs/organizations.md).

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::{audit::AuditRecord, error::ApiError};

pub mod invitations;

crate::domain::text_enum! {
    /// A member's part in an organisation.
    Role {
        /// Everything, the bill and the owners included.
        Owner => "owner",
        /// Everything about clusters, and the members who are not owners.
        Admin => "admin",
        /// Builds and runs clusters; does not delete them or manage people.
        Member => "member",
        /// Reads.
        Viewer => "viewer",
    }
}

/// What a request does, as far as who may do it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Reads a cluster and what hangs off it.
    Read,
    /// Creates a cluster in the organisation.
    CreateCluster,
    /// Changes a cluster or what hangs off it: its limits, labels, join
    /// tokens, hostnames, nodes, retries; revokes a kubeconfig.
    Operate,
    /// Issues a kubeconfig: a credential with cluster-admin in the cluster.
    IssueCredential,
    /// Deletes a cluster.
    DeleteCluster,
    /// Invites, removes and changes the role of members who are not owners.
    ManageMembers,
    /// Reads the organisation's orders.
    ReadBilling,
    /// Makes or unmakes owners, pays (places and cancels orders), deletes
    /// the organisation.
    Own,
}

impl Action {
    /// Every action, for the matrix's documentation and tests.
    pub const ALL: &'static [Self] = &[
        Self::Read,
        Self::CreateCluster,
        Self::Operate,
        Self::IssueCredential,
        Self::DeleteCluster,
        Self::ManageMembers,
        Self::ReadBilling,
        Self::Own,
    ];
}

impl Role {
    /// Refused (403 `forbidden`, naming the role) unless this role may do
    /// `action`.
    pub fn require(self, action: Action) -> Result<(), ApiError> {
        if self.allows(action) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "your role in this organization ({}) does not allow this",
                self.as_str()
            )))
        }
    }

    /// What sending an invitation that makes a member of this role is:
    /// owners' business for an owner, else managing members.
    pub fn to_invite(self) -> Action {
        if self == Self::Owner {
            Action::Own
        } else {
            Action::ManageMembers
        }
    }

    /// Whether a member with this role may do `action`.
    pub fn allows(self, action: Action) -> bool {
        use Action::*;
        match self {
            Self::Owner => true,
            Self::Admin => action != Own,
            Self::Member => matches!(action, Read | CreateCluster | Operate | IssueCredential),
            Self::Viewer => action == Read,
        }
    }
}

/// The user's personal organisation; none for a user that does not exist.
pub async fn personal(db: impl PgExecutor<'_>, user_id: Uuid) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT id FROM organizations WHERE personal_user_id = $1",
        user_id
    )
    .fetch_optional(db)
    .await
}

/// The user's role in the organisation; none for a non-member.
pub async fn role_of(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
    user_id: Uuid,
) -> Result<Option<Role>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT role AS "role: Role" FROM organization_members
           WHERE organization_id = $1 AND user_id = $2"#,
        organization_id,
        user_id
    )
    .fetch_optional(db)
    .await
}

/// The user's role in the organisation; a non-member is 404 `organization
/// not found`, alike for an organisation that does not exist.
pub async fn member_role(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
    user_id: Uuid,
) -> Result<Role, ApiError> {
    role_of(db, organization_id, user_id)
        .await?
        .ok_or(ApiError::NotFound {
            what: "organization",
        })
}

/// An organisation as one of its members sees it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Membership {
    pub id: Uuid,
    pub name: String,
    /// A user's personal organisation: only they are its member.
    pub personal: bool,
    /// The caller's role in it.
    pub role: Role,
    pub created_at: DateTime<Utc>,
}

/// The organisations the user is a member of, personal first, then by name.
pub async fn of_user(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
) -> Result<Vec<Membership>, sqlx::Error> {
    sqlx::query_as!(
        Membership,
        r#"SELECT o.id, o.name, o.personal_user_id IS NOT NULL AS "personal!",
                  m.role AS "role: Role", o.created_at
           FROM organization_members m JOIN organizations o ON o.id = m.organization_id
           WHERE m.user_id = $1
           ORDER BY o.personal_user_id IS NULL, o.name, o.id"#,
        user_id
    )
    .fetch_all(db)
    .await
}

/// A new shared organisation with `owner` as its owner.
pub async fn create(
    tx: &mut PgConnection,
    name: &str,
    owner: Uuid,
) -> Result<Membership, sqlx::Error> {
    let made = sqlx::query!(
        "INSERT INTO organizations (name) VALUES ($1) RETURNING id, created_at",
        name
    )
    .fetch_one(&mut *tx)
    .await?;
    let (id, created_at) = (made.id, made.created_at);
    sqlx::query!(
        "INSERT INTO organization_members (organization_id, user_id, role) VALUES ($1, $2, 'owner')",
        id,
        owner
    )
    .execute(&mut *tx)
    .await?;
    Ok(Membership {
        id,
        name: name.to_string(),
        personal: false,
        role: Role::Owner,
        created_at,
    })
}

/// A member as the organisation's members see them.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Member {
    pub user_id: Uuid,
    #[schema(format = "email")]
    pub email: String,
    pub display_name: String,
    pub role: Role,
    /// When they joined.
    pub created_at: DateTime<Utc>,
}

/// The organisation's members, owners first, then by email.
pub async fn members(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
) -> Result<Vec<Member>, sqlx::Error> {
    sqlx::query_as!(
        Member,
        r#"SELECT m.user_id, u.email::text AS "email!", u.display_name,
                  m.role AS "role: Role", m.created_at
           FROM organization_members m JOIN users u ON u.id = m.user_id
           WHERE m.organization_id = $1
           ORDER BY array_position(ARRAY['owner', 'admin', 'member', 'viewer'], m.role), u.email"#,
        organization_id
    )
    .fetch_all(db)
    .await
}

/// An organisation's row, as a change of its members reads it.
#[derive(Debug, Clone)]
pub struct Locked {
    pub name: String,
    /// A user's personal organisation.
    pub personal: bool,
}

/// Locks the organisation's row for the rest of the transaction, so
/// changes of its members are decided one at a time (two owners removing
/// each other cannot both leave it without one); none when it does not
/// exist.
pub async fn lock(
    tx: &mut PgConnection,
    organization_id: Uuid,
) -> Result<Option<Locked>, sqlx::Error> {
    sqlx::query_as!(
        Locked,
        r#"SELECT name, personal_user_id IS NOT NULL AS "personal!"
           FROM organizations WHERE id = $1 FOR UPDATE"#,
        organization_id
    )
    .fetch_optional(tx)
    .await
}

/// The shared organisations the user is the only owner of while others
/// are members: they would be left without an owner if the user went.
pub async fn only_owner_of(
    tx: &mut PgConnection,
    user_id: Uuid,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT o.name FROM organizations o
           JOIN organization_members m ON m.organization_id = o.id AND m.user_id = $1 AND m.role = 'owner'
           WHERE o.personal_user_id IS NULL
             AND NOT EXISTS (SELECT 1 FROM organization_members x
                             WHERE x.organization_id = o.id AND x.role = 'owner' AND x.user_id <> $1)
             AND EXISTS (SELECT 1 FROM organization_members x
                         WHERE x.organization_id = o.id AND x.user_id <> $1)
           ORDER BY o.name
           FOR UPDATE OF o"#,
        user_id
    )
    .fetch_all(tx)
    .await
}

/// Takes the user out of every shared organisation (an account deleted).
pub async fn leave_all(tx: &mut PgConnection, user_id: Uuid) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM organization_members m USING organizations o
         WHERE o.id = m.organization_id AND o.personal_user_id IS NULL AND m.user_id = $1",
        user_id
    )
    .execute(tx)
    .await?
    .rows_affected())
}

/// What happened in the organisation, newest first, older than `before_id`
/// when paging: its own events (members, invitations, orders) and its
/// clusters', by the `organization_id` a trigger gives each event. The
/// addresses events were made from stay with the platform's administrators,
/// and so do the emails of actors who are not members (an administrator of
/// the platform, a member who left).
pub async fn activity(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
    before_id: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditRecord>, sqlx::Error> {
    sqlx::query_as!(
        AuditRecord,
        r#"SELECT id, actor_user_id,
                  (SELECT u.email::text FROM users u
                   JOIN organization_members m ON m.user_id = u.id AND m.organization_id = $1
                   WHERE u.id = actor_user_id) AS actor_email,
                  actor_kind, action, target_kind, target_id, cluster_id,
                  metadata, NULL::text AS ip, created_at
           FROM audit_events
           WHERE organization_id = $1 AND id < $2
           ORDER BY id DESC LIMIT $3"#,
        organization_id,
        before_id.unwrap_or(i64::MAX),
        limit
    )
    .fetch_all(db)
    .await
}

/// The organisation's name; none for one that does not exist.
pub async fn name(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT name FROM organizations WHERE id = $1",
        organization_id
    )
    .fetch_optional(db)
    .await
}

/// The organisation's owners: who pays and hears about its plan.
pub async fn owner_ids(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT user_id FROM organization_members WHERE organization_id = $1 AND role = 'owner' ORDER BY user_id",
        organization_id
    )
    .fetch_all(db)
    .await
}

/// How many owners the organisation has.
pub async fn owners(db: impl PgExecutor<'_>, organization_id: Uuid) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM organization_members WHERE organization_id = $1 AND role = 'owner'"#,
        organization_id
    )
    .fetch_one(db)
    .await
}

/// Gives a member another role.
pub async fn set_role(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
    user_id: Uuid,
    role: Role,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE organization_members SET role = $3 WHERE organization_id = $1 AND user_id = $2",
        organization_id,
        user_id,
        role.as_str()
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Takes a member out of the organisation.
pub async fn remove(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
    user_id: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM organization_members WHERE organization_id = $1 AND user_id = $2",
        organization_id,
        user_id
    )
    .execute(db)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_may_do_what_the_one_below_it_may_and_more() {
        let ranked = [Role::Viewer, Role::Member, Role::Admin, Role::Owner];
        for pair in ranked.windows(2) {
            for &action in Action::ALL {
                assert!(
                    !pair[0].allows(action) || pair[1].allows(action),
                    "{:?} may {action:?} but {:?} may not",
                    pair[0],
                    pair[1]
                );
            }
        }
        let allowed = |role: Role| Action::ALL.iter().filter(|a| role.allows(**a)).count();
        assert_eq!(ranked.map(allowed), [1, 4, 7, 8]);
    }
}
