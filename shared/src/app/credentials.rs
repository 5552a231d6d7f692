//! Ending what a user's credentials rest on, and the credentials with it,
//! in the caller's transaction under [`authority::revoking`]'s lock, so no
//! credential issued at the same moment survives it: a password reset or
//! change, an account disabled, an administrator made from an existing
//! account, an API key revoked, a member removed from an organisation or
//! given another role. Counted for the audit event; then, once it commits,
//! the kubeconfigs' ServiceAccounts removed from the clusters that answer
//! (`sync-clusters` removes the rest) — the join tokens' bootstrap Secrets
//! go with `sync-nodes`.

use serde_json::{Value, json};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::authority;
use crate::{
    accounts::{self, device},
    host::HostCluster,
    kubeconfigs::{self, RevokeAll, RevokeInOrganization, credential},
    nodes::tokens::{self, MadeBy},
    organizations::{Action, Role, invitations},
};

/// Why a user's credentials end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// A password reset, a password change, or a password given by the
    /// admin command: every session but `keep` ends, with every API key the
    /// user made (their organisations' keys too), their kubeconfigs, join
    /// tokens and approved device sign-ins.
    PasswordChanged { keep: Option<Uuid> },
    /// An administrator disabled the account: all of the above, every
    /// session included.
    Disabled,
    /// The user's API key `key_id` was revoked: the kubeconfigs and join
    /// tokens it was used to make.
    KeyRevoked { key_id: Uuid },
    /// The user left the organisation or was removed from it: what they
    /// hold in it (kubeconfigs, join tokens, the invitations they sent).
    Removed { organization_id: Uuid },
    /// The user's role in the organisation is now `to`: what `to` may not
    /// hold (a viewer's kubeconfigs and join tokens, a member's
    /// invitations, an admin's invitations of owners).
    RoleChanged { organization_id: Uuid, to: Role },
}

/// What ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use = "the kubeconfigs' ServiceAccounts go with `removed_from_clusters` after the commit"]
pub struct Ended {
    user_id: Uuid,
    pub sessions: u64,
    pub api_keys: u64,
    pub kubeconfigs: u64,
    pub join_tokens: u64,
    pub device_sign_ins: u64,
    pub invitations: u64,
}

impl Ended {
    /// The counts, as audit events carry them.
    pub fn audit(&self) -> Value {
        json!({
            "sessions_ended": self.sessions,
            "api_keys_revoked": self.api_keys,
            "kubeconfigs_revoked": self.kubeconfigs,
            "join_tokens_revoked": self.join_tokens,
            "device_sign_ins_ended": self.device_sign_ins,
            "invitations_revoked": self.invitations,
        })
    }

    /// `metadata` (an object) with the counts beside its own fields.
    pub fn counted_in(&self, mut metadata: Value) -> Value {
        if let (Some(fields), Value::Object(counts)) = (metadata.as_object_mut(), self.audit()) {
            fields.extend(counts);
        }
        metadata
    }

    /// After the commit: the revoked kubeconfigs' ServiceAccounts deleted
    /// from the clusters that answer now.
    pub async fn removed_from_clusters(self, pool: &PgPool, host: Option<&HostCluster>) {
        credential::remove_revoked_now(pool, host, self.user_id, self.kubeconfigs).await;
    }
}

/// Ends, in `tx`, `user_id`'s credentials for `why`, `by` the user who
/// asked (the user themselves, an organisation's admin, an administrator).
/// The caller has changed, or changes next in `tx`, what they rested on
/// (the password, the account's status, the key, the membership).
pub async fn end(
    tx: &mut PgConnection,
    user_id: Uuid,
    by: Uuid,
    why: Why,
) -> Result<Ended, sqlx::Error> {
    authority::revoking(tx, user_id).await?;
    let mut ended = Ended {
        user_id,
        ..Ended::default()
    };
    match why {
        Why::PasswordChanged { .. } | Why::Disabled => {
            let (keep, reason) = match why {
                Why::PasswordChanged { keep } => (keep, RevokeAll::PasswordChanged),
                _ => (None, RevokeAll::UserDisabled),
            };
            ended.sessions = accounts::delete_sessions(&mut *tx, user_id, keep).await?;
            ended.api_keys = accounts::revoke_all_api_keys(tx, user_id).await?;
            ended.kubeconfigs = kubeconfigs::revoke_all_of_user(tx, user_id, by, reason).await?;
            ended.join_tokens = tokens::revoke_made_by(tx, MadeBy::User(user_id), by).await?;
            ended.device_sign_ins = device::revoke_approved(tx, user_id).await?;
        }
        Why::KeyRevoked { key_id } => {
            ended.api_keys = 1;
            ended.kubeconfigs = kubeconfigs::revoke_all_of_key(tx, key_id, by).await?;
            ended.join_tokens = tokens::revoke_made_by(tx, MadeBy::Key(key_id), by).await?;
        }
        Why::Removed { organization_id } => {
            ended = in_organization(tx, ended, organization_id, None, by).await?;
        }
        Why::RoleChanged {
            organization_id,
            to,
        } => {
            ended = in_organization(tx, ended, organization_id, Some(to), by).await?;
        }
    }
    Ok(ended)
}

/// What a member loses in an organisation: everything when they go
/// (`to` none), else what their new role may not hold.
async fn in_organization(
    tx: &mut PgConnection,
    mut ended: Ended,
    organization_id: Uuid,
    to: Option<Role>,
    by: Uuid,
) -> Result<Ended, sqlx::Error> {
    let user_id = ended.user_id;
    let may = |action| to.is_some_and(|role| role.allows(action));
    if !may(Action::IssueCredential) {
        let why = match to {
            None => RevokeInOrganization::Removed,
            Some(_) => RevokeInOrganization::RoleChanged,
        };
        ended.kubeconfigs =
            kubeconfigs::revoke_all_in_organization(tx, user_id, organization_id, by, why).await?;
    }
    if !may(Action::Operate) {
        let made_by = MadeBy::UserIn {
            user_id,
            organization_id,
        };
        ended.join_tokens = tokens::revoke_made_by(tx, made_by, by).await?;
    }
    if !may(Action::Own) {
        let owners_only = may(Action::ManageMembers);
        ended.invitations =
            invitations::revoke_sent_by(tx, organization_id, user_id, owners_only).await?;
    }
    Ok(ended)
}
