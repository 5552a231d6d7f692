//! Ending every credential of a user at once — a password reset or change,
//! an account disabled, an administrator made from an existing account: the
//! sessions (all, or all but the caller's own), the API keys and the
//! kubeconfigs, in the caller's transaction, counted for its audit event;
//! then, once it commits, the kubeconfigs' ServiceAccounts removed from the
//! clusters that answer (`sync-clusters` removes the rest). And ending what
//! one API key asked for when it is revoked: the `exec` credentials
//! `kubebyon credential` renews with it.

use serde_json::{Value, json};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::{
    accounts,
    host::HostCluster,
    kubeconfigs::{self, RevokeAll, credential},
};

/// Why a user's credentials end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// A password reset, a password change, or a password given by the
    /// admin command: every session but `keep` ends.
    PasswordChanged { keep: Option<Uuid> },
    /// An administrator disabled the account.
    Disabled,
}

/// What ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "the kubeconfigs' ServiceAccounts go with `removed_from_clusters` after the commit"]
pub struct Ended {
    user_id: Uuid,
    pub sessions: u64,
    pub api_keys: u64,
    pub kubeconfigs: u64,
}

impl Ended {
    /// The counts, as audit events carry them.
    pub fn audit(&self) -> Value {
        json!({
            "sessions_ended": self.sessions,
            "api_keys_revoked": self.api_keys,
            "kubeconfigs_revoked": self.kubeconfigs,
        })
    }

    /// After the commit: the revoked kubeconfigs' ServiceAccounts deleted
    /// from the clusters that answer now.
    pub async fn removed_from_clusters(self, pool: &PgPool, host: Option<&HostCluster>) {
        credential::remove_revoked_now(pool, host, self.user_id, self.kubeconfigs).await;
    }
}

/// Ends `user_id`'s sessions, API keys and kubeconfigs in `tx`, `by` the
/// user who asked (the user themselves, or an administrator).
pub async fn end_all(
    tx: &mut PgConnection,
    user_id: Uuid,
    by: Uuid,
    why: Why,
) -> Result<Ended, sqlx::Error> {
    let (keep, reason) = match why {
        Why::PasswordChanged { keep } => (keep, RevokeAll::PasswordChanged),
        Why::Disabled => (None, RevokeAll::UserDisabled),
    };
    Ok(Ended {
        user_id,
        sessions: accounts::delete_sessions(&mut *tx, user_id, keep).await?,
        api_keys: accounts::revoke_all_api_keys(tx, user_id).await?,
        kubeconfigs: kubeconfigs::revoke_all_of_user(tx, user_id, by, reason).await?,
    })
}

/// Ends, in the caller's transaction, the kubeconfig credentials the API key
/// `key_id` (of `user_id`) asked for, once the key is revoked there; `by`
/// revoked it. The ServiceAccounts go with
/// [`Ended::removed_from_clusters`] after the commit.
pub async fn key_revoked(
    tx: &mut PgConnection,
    user_id: Uuid,
    key_id: Uuid,
    by: Uuid,
) -> Result<Ended, sqlx::Error> {
    Ok(Ended {
        user_id,
        sessions: 0,
        api_keys: 1,
        kubeconfigs: kubeconfigs::revoke_all_of_key(tx, key_id, by).await?,
    })
}
