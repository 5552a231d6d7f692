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
        // Read as a JSON value first: text holding NUL is refused here, for
        // PostgreSQL can store no NUL in text and would fail the request late.
        let mut value = match axum::Json::<serde_json::Value>::from_request(req, state).await {
            Ok(axum::Json(value)) => value,
            Err(JsonRejection::MissingJsonContentType(_)) => {
                return Err(ApiError::UnsupportedMediaType(
                    "expected content-type application/json".into(),
                ));
            }
            Err(JsonRejection::JsonSyntaxError(err)) => {
                return Err(ApiError::BadRequest {
                    code: "malformed_json",
                    detail: err.body_text(),
                });
            }
            Err(other) if other.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(ApiError::PayloadTooLarge {
                    limit_bytes: MAX_BODY_BYTES,
                });
            }
            Err(other) => {
                return Err(ApiError::BadRequest {
                    code: "invalid_body",
                    detail: other.body_text(),
                });
            }
        };
        if !value.is_object() {
            // serde would read an array into a struct's fields by position.
            return Err(ApiError::BadRequest {
                code: "invalid_body",
                detail: "the body must be a JSON object".into(),
            });
        }
        if holds_nul(&value) {
            return Err(ApiError::BadRequest {
                code: "invalid_body",
                detail: "text in the body must not contain NUL (\\u0000)".into(),
            });
        }
        integral_numbers_as_integers(&mut value);
        serde_json::from_value(value)
            .map(Self)
            .map_err(|err| ApiError::BadRequest {
                code: "invalid_body",
                detail: format!("Failed to deserialize the JSON body into the target type: {err}"),
            })
    }
}

/// `deserialize_with` for a nested struct field: reads a JSON object only
/// (serde would also read an array into the struct's fields by position).
pub fn json_object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    use serde::{Deserialize, de::Error};
    let map = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
    serde_json::from_value(serde_json::Value::Object(map)).map_err(D::Error::custom)
}

/// Writes every number with no fraction that fits an `i64` (`1024.0`, `-0.0`,
/// `1e3`) as that integer. JSON has one number type, and JSON Schema's
/// `integer` is any number whose fraction is zero; serde reads `1024.0` into
/// an integer field as an error, so the body is normalised first. Numbers
/// with a fraction, or too large for an `i64`, are left for the field's type
/// to refuse.
fn integral_numbers_as_integers(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                // -2^63 is exact as a float; 2^63 is one past i64::MAX.
                && f >= i64::MIN as f64
                && f < i64::MAX as f64
            {
                *value = serde_json::Value::from(f as i64);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral_numbers_as_integers),
        serde_json::Value::Object(map) => map.values_mut().for_each(integral_numbers_as_integers),
        _ => {}
    }
}

/// Whether any string in `value`, key or text, holds a NUL.
fn holds_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(holds_nul),
        serde_json::Value::Object(map) => map
            .iter()
            .any(|(key, value)| key.contains('\0') || holds_nul(value)),
        _ => false,
    }
}

/// Whether a raw path or query encodes a NUL (`%00`), which no parameter may hold.
fn encodes_nul(raw: &str) -> bool {
    raw.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1] == b'0' && w[2] == b'0')
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
        if encodes_nul(parts.uri.path()) {
            return Err(ApiError::BadRequest {
                code: "invalid_path",
                detail: "the path must not contain NUL (%00)".into(),
            });
        }
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
        if encodes_nul(parts.uri.query().unwrap_or_default()) {
            return Err(ApiError::BadRequest {
                code: "invalid_query",
                detail: "the query must not contain NUL (%00)".into(),
            });
        }
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Self(value))
            .map_err(|err| ApiError::BadRequest {
                code: "invalid_query",
                detail: err.body_text(),
            })
    }
}

/// The query of a listing read a bounded page at a time, newest first, with
/// nothing else to choose: `?limit=`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

impl PageQuery {
    /// The page's size ([`page_limit`]).
    pub fn limit(&self) -> Result<i64, ApiError> {
        page_limit(self.limit)
    }
}

/// The `limit` of a listing: 1–500, default 100.
pub fn page_limit(raw: Option<i64>) -> Result<i64, ApiError> {
    limit_within(raw, 100, 500)
}

/// The `limit` of a listing whose rows are large (a cluster and its
/// labels): 1–200, default 50.
pub fn short_page_limit(raw: Option<i64>) -> Result<i64, ApiError> {
    limit_within(raw, 50, 200)
}

fn limit_within(raw: Option<i64>, default: i64, most: i64) -> Result<i64, ApiError> {
    let limit = raw.unwrap_or(default);
    if (1..=most).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {most}"),
        ))
    }
}

/// A page read as `limit + 1` rows cut to `limit`; the cursor of its last
/// row when there was one more, else none (the last page).
pub fn cut_page<T>(
    rows: &mut Vec<T>,
    limit: i64,
    cursor_of: impl Fn(&T) -> String,
) -> Option<String> {
    let limit = usize::try_from(limit).unwrap_or_default();
    if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(cursor_of)
    } else {
        None
    }
}

/// The keyset bound of a first page, `(created_at, id)` after every row: a
/// list's statement then always bounds its index scan by the cursor,
/// whether or not one was given, instead of
/// `($n IS NULL OR (created_at, id) < ($n, $m))`, which a generic plan can
/// only filter (a page then costs in proportion to its depth).
pub fn before_everything() -> (chrono::DateTime<chrono::Utc>, uuid::Uuid) {
    (
        chrono::DateTime::from_timestamp(253_402_300_799, 0).expect("9999-12-31 is an instant"),
        uuid::Uuid::max(),
    )
}

/// An instant asked for in a query (a keyset cursor, a period's end),
/// refused unless it lies between 2000-01-01 and a day from now: the edges
/// of what a timestamp holds are a 422, never an overflow in the database.
pub fn instant(
    field: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    use chrono::{TimeDelta, TimeZone, Utc};
    let earliest = Utc
        .with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid date");
    let latest = Utc::now() + TimeDelta::days(1);
    if (earliest..=latest).contains(&at) {
        Ok(at)
    } else {
        Err(ApiError::invalid(
            field,
            "must be between 2000-01-01 and a day from now",
        ))
    }
}

/// A period asked for in a query, bounded before any arithmetic: `to`
/// defaults to now, `from` to `default_span` before `to`; both must lie
/// between 2000-01-01 and a day from now, `from` before `to`, and the
/// period at most `max_span`. An instant at the edge of what a timestamp can
/// hold is a 422, never an overflow.
pub fn time_range(
    from: Option<chrono::DateTime<chrono::Utc>>,
    to: Option<chrono::DateTime<chrono::Utc>>,
    default_span: chrono::TimeDelta,
    max_span: chrono::TimeDelta,
) -> Result<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>), ApiError> {
    use chrono::Utc;
    let now = Utc::now();
    let within = |field: &str, at: chrono::DateTime<Utc>| instant(field, at);
    let to = within("to", to.unwrap_or(now))?;
    let from = match from {
        Some(from) => within("from", from)?,
        // `to` is bounded: this cannot overflow.
        None => to - default_span,
    };
    if from >= to {
        return Err(ApiError::invalid("from", "must be before `to`"));
    }
    if to - from > max_span {
        return Err(ApiError::invalid(
            "from",
            format!("the period is at most {} days", max_span.num_days()),
        ));
    }
    Ok((from, to))
}

/// The problem codes this module's refusals answer with (the OpenAPI
/// document's `ProblemCode`, through `app::capabilities::problem_codes`).
pub const PROBLEM_CODES: &[&str] = &[
    "invalid_body",
    "invalid_path",
    "invalid_query",
    "malformed_json",
];

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta, Utc};

    use super::*;

    fn range(
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<(DateTime<Utc>, DateTime<Utc>), ApiError> {
        let parse = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        time_range(
            from.map(parse),
            to.map(parse),
            TimeDelta::hours(24),
            TimeDelta::days(90),
        )
    }

    #[test]
    fn time_ranges_at_the_edges_of_time_are_refused_not_overflowed() {
        for (from, to) in [
            (None, Some("-262143-01-01T00:00:00Z")),
            (Some("-262143-01-01T00:00:00Z"), None),
            (None, Some("+262142-12-31T23:59:59Z")),
            (Some("1999-12-31T23:59:59Z"), Some("2000-01-02T00:00:00Z")),
            (Some("2026-01-02T00:00:00Z"), Some("2026-01-01T00:00:00Z")),
            (Some("2025-01-01T00:00:00Z"), Some("2026-01-01T00:00:00Z")),
        ] {
            assert!(
                matches!(range(from, to), Err(ApiError::Validation(_))),
                "{from:?} .. {to:?}"
            );
        }
        let (from, to) = range(None, Some("2026-01-01T00:00:00Z")).unwrap();
        assert_eq!(to - from, TimeDelta::hours(24));
        assert!(range(None, None).is_ok());
    }

    #[test]
    fn integral_numbers_read_as_integers_and_fractions_stay_numbers() {
        let mut body = serde_json::json!({
            "a": 1024.0, "b": -17466667.0, "c": -0.0, "d": 1.5,
            "e": [3.0, {"f": 9.223372036854776e18}], "g": 7, "h": -9.223372036854776e18,
        });
        integral_numbers_as_integers(&mut body);
        assert_eq!(
            body,
            serde_json::json!({
                "a": 1024, "b": -17466667, "c": 0, "d": 1.5,
                "e": [3, {"f": 9.223372036854776e18}], "g": 7, "h": i64::MIN,
            })
        );
    }
}
