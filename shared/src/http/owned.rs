//! The one ownership check of the API's cluster routes: [`OwnedCluster`].

use axum::{extract::FromRequestParts, http::request::Parts};
use serde::Deserialize;
use uuid::Uuid;

use super::{AppState, Caller};
use crate::{
    clusters::{self, Cluster},
    error::ApiError,
    extract::AppPath,
};

/// The caller's live cluster that the path's `{cluster_id}` names, or 404
/// `cluster not found` — alike for an id that does not exist, a deleted
/// cluster and another user's, so nobody learns which ids exist. The caller
/// is authenticated first (401 before anything about the path), and is
/// still there to extract as [`Caller`] (it is kept in the request).
///
/// A route that changes a cluster under its row lock checks ownership in
/// its own transaction instead (`clusters::lock_owned`).
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
        clusters::get_owned(&state.pool, caller.user_id, path.cluster_id)
            .await?
            .map(Self)
            .ok_or(ApiError::NotFound { what: "cluster" })
    }
}
