//! Organisations own clusters; people are their members, each with a
//! [`Role`]. Every user has a personal organisation, made with the user by
//! the database (`migrations/…_organizations.sql`), so one person's
//! clusters are the one-member case. What a role may do is [`Role::allows`]:
//! the one matrix every route's authorization reads (docs/organizations.md).

use sqlx::PgExecutor;
use uuid::Uuid;

use crate::error::ApiError;

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
    /// Makes or unmakes owners, pays, deletes the organisation.
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
        assert_eq!(ranked.map(allowed), [1, 4, 6, 7]);
    }
}
