//! The one authorization of the API's cluster routes: the caller's role in
//! the cluster's organisation must allow what the route does
//! ([`Role::allows`], the matrix in docs/organizations.md).
//!
//! Every cluster route takes [`OwnedCluster`], which reads what the route
//! does from its method and route ([`action_of`]: the rules each capability
//! declares beside its routes, collected) and authorizes it; a route that decides under the cluster's row lock checks
//! again there with [`lock`] or [`authorize`] and its own action.
//!
//! A cluster that does not exist, a deleted one and one in an organisation
//! the caller is not a member of are all 404 `cluster not found`, so nobody
//! learns which ids exist; a member whose role does not allow the action is
//! 403 `forbidden`.

use axum::{
    extract::{FromRequestParts, MatchedPath},
    http::{Method, request::Parts},
};
use serde::Deserialize;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{AppState, Caller};
use crate::{
    clusters::{self, Cluster},
    error::ApiError,
    extract::AppPath,
    organizations::Action,
};

/// The live cluster that the path's `{cluster_id}` names, when the caller's
/// role in its organisation allows what the route does. The caller is
/// authenticated first (401 before anything about the path), and is still
/// there to extract as [`Caller`] (it is kept in the request).
#[derive(Debug, Clone)]
pub struct OwnedCluster(pub Cluster);

#[derive(Deserialize)]
struct ClusterPath {
    cluster_id: Uuid,
}

impl FromRequestParts<AppState> for OwnedCluster {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let AppPath(path) = AppPath::<ClusterPath>::from_request_parts(parts, state).await?;
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map(MatchedPath::as_str)
            .unwrap_or_default();
        let action = action_of(&parts.method, route);
        let mut db = state.pool.acquire().await?;
        authorize(&mut db, &caller, path.cluster_id, action)
            .await
            .map(Self)
    }
}

/// What a cluster route does. Reading is [`Action::Read`]; every route that
/// changes something has its rule in its capability's declaration
/// (`Capability::cluster_routes`). A route without one is [`Action::Own`]:
/// only owners pass until it is given its rule, and the route × role test
/// (tests/e2e/organizations.rs) fails.
pub fn action_of(method: &Method, route: &str) -> Action {
    if method == Method::GET || method == Method::HEAD {
        return Action::Read;
    }
    let rule = route
        .strip_prefix("/api/console/clusters/{cluster_id}")
        .and_then(|rest| {
            crate::app::capabilities::cluster_routes()
                .find(|r| r.method == method.as_str() && r.route == rest)
        });
    rule.map_or(Action::Own, |r| r.action)
}

/// Who a cluster route asks about: a member, or an organisation's key.
fn acting(caller: &Caller) -> clusters::Acting {
    match caller.organization_key {
        Some(key) => clusters::Acting::Key {
            organization_id: key.id,
            role: key.role,
        },
        None => clusters::Acting::Member(caller.user_id),
    }
}

/// The live cluster, when the caller's role in its organisation allows
/// `action`.
pub async fn authorize(
    db: &mut PgConnection,
    caller: &Caller,
    cluster_id: Uuid,
    action: Action,
) -> Result<Cluster, ApiError> {
    let not_found = || ApiError::NotFound { what: "cluster" };
    clusters::member_role(&mut *db, acting(caller), cluster_id)
        .await?
        .ok_or_else(not_found)?
        .require(action)?;
    clusters::get(db, cluster_id).await?.ok_or_else(not_found)
}

/// Locks the live cluster's row for the rest of the transaction, when the
/// caller's role in its organisation (read under the lock) allows `action`.
pub async fn lock(
    tx: &mut PgConnection,
    caller: &Caller,
    cluster_id: Uuid,
    action: Action,
) -> Result<(), ApiError> {
    match clusters::lock_for(tx, acting(caller), cluster_id).await? {
        Some(role) => role.require(action),
        None => Err(ApiError::NotFound { what: "cluster" }),
    }
}

/// Documents the refusal in every cluster route whose action is not for
/// every member: a 403 `forbidden` (added to the description of a 403 the
/// route documents already, a plan limit's).
pub fn document(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{Ref, RefOr, ResponseBuilder, content::ContentBuilder};
    const REFUSED: &str =
        "The caller's role in the cluster's organization does not allow this (`forbidden`)";
    for (route, item) in doc.paths.paths.iter_mut() {
        if !route.starts_with("/api/console/clusters/{cluster_id}") {
            continue;
        }
        let operations = [
            (Method::POST, item.post.as_mut()),
            (Method::PUT, item.put.as_mut()),
            (Method::PATCH, item.patch.as_mut()),
            (Method::DELETE, item.delete.as_mut()),
        ];
        for (method, operation) in operations {
            let Some(operation) = operation else { continue };
            if action_of(&method, route) == Action::Read {
                continue;
            }
            let responses = &mut operation.responses.responses;
            match responses.get_mut("403") {
                Some(RefOr::T(existing)) => {
                    existing.description = format!("{}; or: {REFUSED}", existing.description);
                }
                _ => {
                    let problem = ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("Problem")))
                        .build();
                    responses.insert(
                        "403".into(),
                        RefOr::T(
                            ResponseBuilder::new()
                                .description(REFUSED)
                                .content("application/problem+json", problem)
                                .build(),
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_reads_and_an_unknown_write_is_for_owners_only() {
        let route = "/api/console/clusters/{cluster_id}";
        assert_eq!(action_of(&Method::GET, route), Action::Read);
        assert_eq!(action_of(&Method::DELETE, route), Action::DeleteCluster);
        assert_eq!(
            action_of(&Method::POST, &format!("{route}/kubeconfigs")),
            Action::IssueCredential
        );
        assert_eq!(
            action_of(&Method::POST, &format!("{route}/something-new")),
            Action::Own
        );
        assert_eq!(
            action_of(&Method::POST, "/api/console/elsewhere"),
            Action::Own
        );
    }
}
