//! The state every route is served with and who a console request acts as.

use std::sync::Arc;

use axum::{
    extract::FromRequestParts,
    http::{Method, request::Parts},
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    config::Settings, error::ApiError, host::HostCluster, jobs::JobPublisher, organizations::Role,
};

/// Who console requests act as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// Development mode: every request is this user.
    Development(Uuid),
    /// Accounts: a session cookie (with its CSRF token on writes) or an API key.
    Accounts,
}

/// State shared by every route of every HTTP function.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub publisher: Arc<dyn JobPublisher>,
    pub settings: Arc<Settings>,
    pub identity: Identity,
    /// The host cluster, for reads that need it (kubeconfig); `None` when not configured.
    pub host: Option<Arc<HostCluster>>,
}

/// The authenticated caller of a console route.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// The user: for an organisation's API key, the member who made it.
    pub user_id: Uuid,
    /// The session the request came with, when it came with one.
    pub session_id: Option<Uuid>,
    /// The API key the request came with, when it came with one.
    pub api_key_id: Option<Uuid>,
    /// An organisation's API key: it acts in this organisation alone, with
    /// this role, whatever its maker's memberships are.
    pub organization_key: Option<KeyOrganization>,
}

/// The organisation an organisation's API key acts in, and its role there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyOrganization {
    pub id: Uuid,
    pub role: Role,
}

/// Whether an organisation's API key may call `path`: one of the routes a
/// capability opens to such keys (`Capability::organization_key_routes`:
/// its organisation's clusters, their labels and node events, its plan and
/// its orders) or one under it. Everything else (an account's own routes,
/// the organisations' members, the back office) is its makers' and answers
/// 403; a new route is closed to such keys until its capability names it.
fn open_to_organization_keys(path: &str) -> bool {
    crate::app::capabilities::organization_key_routes().any(|route| {
        path.strip_prefix(route)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

impl Caller {
    /// What a credential this caller asks for rests on
    /// ([`crate::app::authority::hold`]).
    pub fn authority(&self) -> crate::app::authority::Authority {
        crate::app::authority::Authority {
            user_id: self.user_id,
            session_id: self.session_id,
            api_key_id: self.api_key_id,
        }
    }

    /// Refuses a caller that is not a signed-in browser: an account's
    /// credentials (keys, password, sessions) are managed from a session.
    pub fn require_session(&self) -> Result<Uuid, ApiError> {
        self.session_id.ok_or_else(|| {
            ApiError::Forbidden(
                "an API key cannot manage the account's credentials; sign in".into(),
            )
        })
    }
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(*caller);
        }
        let caller = match state.identity {
            Identity::Development(user_id) => Self {
                user_id,
                session_id: None,
                api_key_id: None,
                organization_key: None,
            },
            Identity::Accounts => authenticate(parts, state).await?,
        };
        parts.extensions.insert(caller);
        Ok(caller)
    }
}

/// An API key in `Authorization: Bearer`, else the session cookie; a cookie
/// write must echo the CSRF cookie in `X-CSRF-Token` (double submit).
async fn authenticate(parts: &Parts, state: &AppState) -> Result<Caller, ApiError> {
    use crate::accounts::{self, auth};
    let bearer = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(key) = bearer {
        let Some(holder) = accounts::api_key_user(&state.pool, &auth::hash_secret(key)).await?
        else {
            return Err(ApiError::Unauthenticated);
        };
        if holder.scope == accounts::KeyScope::Read && !is_safe(&parts.method) {
            return Err(ApiError::Forbidden(
                "this API key may only read (its scope is read)".into(),
            ));
        }
        if holder.organization.is_some() && !open_to_organization_keys(parts.uri.path()) {
            return Err(ApiError::Forbidden(
                "an organization's API key acts only on its organization's clusters and plan"
                    .into(),
            ));
        }
        return Ok(Caller {
            user_id: holder.user_id,
            session_id: None,
            api_key_id: Some(holder.key_id),
            organization_key: holder
                .organization
                .map(|(id, role)| KeyOrganization { id, role }),
        });
    }
    let (session_cookie, csrf_cookie) = auth::cookie_names(!state.settings.insecure_cookies);
    let token = auth::cookie(&parts.headers, session_cookie).ok_or(ApiError::Unauthenticated)?;
    let (session_id, user_id) = accounts::session_user(
        &state.pool,
        &auth::hash_secret(token),
        state
            .settings
            .part::<accounts::config::Config>()?
            .session_idle,
    )
    .await?
    .ok_or(ApiError::Unauthenticated)?;
    if !is_safe(&parts.method) {
        // The header must carry this session's own token: a value planted in
        // both the cookie and the header by someone else does not pass.
        let header = parts
            .headers
            .get(auth::CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let expected = auth::csrf_token_for(token);
        if !auth::constant_time_eq(expected.as_bytes(), header.as_bytes()) {
            return Err(ApiError::Forbidden(format!(
                "a write with a session cookie must carry the {csrf_cookie} cookie's value in X-CSRF-Token"
            )));
        }
    }
    Ok(Caller {
        user_id,
        session_id: Some(session_id),
        api_key_id: None,
        organization_key: None,
    })
}

/// An authenticated caller whose role is `admin`; anyone else gets 403.
#[derive(Debug, Clone, Copy)]
pub struct AdminCaller {
    pub user_id: Uuid,
}

impl FromRequestParts<AppState> for AdminCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        match crate::accounts::users::active_role(&state.pool, caller.user_id)
            .await?
            .as_deref()
        {
            Some("admin") => Ok(Self {
                user_id: caller.user_id,
            }),
            Some(_) => Err(ApiError::Forbidden(
                "this route is for administrators".into(),
            )),
            None => Err(ApiError::Unauthenticated),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::open_to_organization_keys;

    #[test]
    fn an_organizations_key_reaches_its_routes_and_nothing_that_only_starts_alike() {
        for open in [
            "/api/console/clusters",
            "/api/console/clusters/0d0c/kubeconfigs",
            "/api/console/billing/orders/1/cancel",
            "/api/console/account/entitlements",
        ] {
            assert!(open_to_organization_keys(open), "{open}");
        }
        for closed in [
            "/api/console/clusters-admin",
            "/api/console/account/api-keys",
            "/api/console/account",
            "/api/console/organizations/1/members",
            "/api/console/admin/users",
            "/api/console/billing/orders-export",
            "/api/auth/logout",
        ] {
            assert!(!open_to_organization_keys(closed), "{closed}");
        }
    }
}
