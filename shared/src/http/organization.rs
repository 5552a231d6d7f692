//! The organisation a list or a create acts in: [`InOrganization`].

use axum::{
    extract::FromRequestParts,
    http::{HeaderName, request::Parts},
};
use uuid::Uuid;

use super::{AppState, Caller};
use crate::{
    error::ApiError,
    organizations::{self, Action, Role},
};

/// The request header naming the organisation (its id).
pub const HEADER: HeaderName = HeaderName::from_static("kubebyon-organization");

/// The organisation the `KubeBYON-Organization` header names, or the
/// caller's personal one when the header is absent, with the caller's role
/// in it. An organisation the caller is not a member of is 404
/// `organization not found`, alike for one that does not exist. An
/// organisation's API key acts in its organisation with its own role: a
/// header naming another is 404 as well.
#[derive(Debug, Clone, Copy)]
pub struct InOrganization {
    pub id: Uuid,
    pub role: Role,
}

impl InOrganization {
    /// Refused (403) unless the caller's role allows `action`.
    pub fn require(&self, action: Action) -> Result<(), ApiError> {
        self.role.require(action)
    }
}

impl FromRequestParts<AppState> for InOrganization {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let named = match parts.headers.get(HEADER) {
            None => None,
            Some(value) => Some(
                value
                    .to_str()
                    .ok()
                    .and_then(|text| Uuid::parse_str(text.trim()).ok())
                    .ok_or_else(|| {
                        ApiError::invalid("KubeBYON-Organization", "must be an organization id")
                    })?,
            ),
        };
        let not_found = || ApiError::NotFound {
            what: "organization",
        };
        if let Some(key) = caller.organization_key {
            return match named {
                Some(other) if other != key.id => Err(not_found()),
                _ => Ok(Self {
                    id: key.id,
                    role: key.role,
                }),
            };
        }
        let id = match named {
            Some(id) => id,
            None => organizations::personal(&state.pool, caller.user_id)
                .await?
                .ok_or_else(not_found)?,
        };
        let role = organizations::member_role(&state.pool, id, caller.user_id).await?;
        Ok(Self { id, role })
    }
}
