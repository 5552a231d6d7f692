//! Extractors that turn malformed input into the same problem+json body as every
//! other error, instead of axum's plain-text rejections.

use axum::{
    extract::{FromRequest, FromRequestParts, Request, rejection::JsonRejection},
    http::request::Parts,
    response::{IntoResponse, Response},
};
use serde::{Serialize, de::DeserializeOwned};

use crate::error::ApiError;

/// The largest request body any route reads (`with_common_layers` sets it):
/// every body the API takes is a small JSON document.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// JSON body in, JSON body out, with problem+json rejections.
#[derive(Debug, Clone, Copy, Default)]
pub struct AppJson<T>(pub T);

impl<S, T> FromRequest<S> for AppJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::UnsupportedMediaType(
                "expected content-type application/json".into(),
            )),
            Err(JsonRejection::JsonDataError(err)) => Err(ApiError::BadRequest {
                code: "invalid_body",
                detail: err.body_text(),
            }),
            Err(JsonRejection::JsonSyntaxError(err)) => Err(ApiError::BadRequest {
                code: "malformed_json",
                detail: err.body_text(),
            }),
            Err(other) if other.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::PayloadTooLarge {
                    limit_bytes: MAX_BODY_BYTES,
                })
            }
            Err(other) => Err(ApiError::BadRequest {
                code: "invalid_body",
                detail: other.body_text(),
            }),
        }
    }
}

impl<T: Serialize> IntoResponse for AppJson<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// Path parameters with problem+json rejections.
#[derive(Debug)]
pub struct AppPath<T>(pub T);

impl<S, T> FromRequestParts<S> for AppPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| Self(value))
            .map_err(|err| ApiError::BadRequest {
                code: "invalid_path",
                detail: err.body_text(),
            })
    }
}

/// Query string with problem+json rejections.
#[derive(Debug)]
pub struct AppQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for AppQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Self(value))
            .map_err(|err| ApiError::BadRequest {
                code: "invalid_query",
                detail: err.body_text(),
            })
    }
}

/// The `limit` of a listing: 1–500, default 100.
pub fn page_limit(raw: Option<i64>) -> Result<i64, ApiError> {
    let limit = raw.unwrap_or(100);
    if (1..=500).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::invalid("limit", "must be between 1 and 500"))
    }
}
