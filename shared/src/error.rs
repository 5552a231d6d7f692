//! The one HTTP error type: every failure answers `application/problem+json`
//! with a stable machine `code`. Internal errors are logged with their cause chain
//! and never echoed to the client.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use utoipa::ToSchema;

/// RFC 9457 problem details, plus our stable `code` and optional field errors.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct Problem {
    /// A URI naming the problem type: `https://kubebyon.dev/problems/<code>`.
    #[serde(rename = "type")]
    pub type_: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// Stable machine-readable code; clients switch on this.
    pub code: String,
    /// Per-field validation messages, when the input was invalid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// The members a problem type adds (RFC 9457 §3.2), documented with the
    /// operations that answer it.
    #[serde(flatten)]
    pub extensions: serde_json::Map<String, serde_json::Value>,
}

/// A problem a capability defines: its status, code and title, and the
/// extension members it fills in (RFC 9457 §3.2).
#[derive(Debug)]
pub struct ExtendedProblem {
    pub status: StatusCode,
    pub code: &'static str,
    pub title: &'static str,
    pub detail: String,
    pub extensions: serde_json::Map<String, serde_json::Value>,
}

crate::domain::text_enum! {
    /// What a refused field breaks, for a client's own words; `params`
    /// fill them in.
    FieldErrorCode {
        /// Outside `min`..=`max`.
        OutOfRange => "out_of_range",
        /// Not a name: 1 to `max` lowercase letters, digits and '-',
        /// starting with a letter and not ending with '-'.
        Name => "name",
        /// Not one of `choices` (comma-separated).
        NotOffered => "not_offered",
    }
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    /// In English.
    pub message: String,
    /// The same as a code with `params`, where the platform has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<FieldErrorCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub params: Option<std::collections::BTreeMap<String, String>>,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
            code: None,
            params: None,
        }
    }

    /// `value` of `field` is outside `range`: the message and its code.
    pub fn out_of_range(field: impl Into<String>, range: &std::ops::RangeInclusive<i64>) -> Self {
        let (min, max) = (range.start(), range.end());
        Self::coded(
            field,
            format!("must be between {min} and {max}"),
            FieldErrorCode::OutOfRange,
            &[("min", min.to_string()), ("max", max.to_string())],
        )
    }

    /// A refusal with its code and the params its words need.
    pub fn coded(
        field: impl Into<String>,
        message: impl Into<String>,
        code: FieldErrorCode,
        params: &[(&str, String)],
    ) -> Self {
        Self {
            code: Some(code),
            params: Some(
                params
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
            ),
            ..Self::new(field, message)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body or a parameter could not be read at all.
    #[error("{detail}")]
    BadRequest { code: &'static str, detail: String },
    /// The input was read but breaks a rule.
    #[error("the request has invalid fields")]
    Validation(Vec<FieldError>),
    #[error("authentication is required")]
    Unauthenticated,
    /// Credentials were presented and refused.
    #[error("{detail}")]
    Unauthorized { code: &'static str, detail: String },
    #[error("{0}")]
    Forbidden(String),
    /// A problem of a capability's own, with its extension members.
    #[error("{}", .0.detail)]
    Extended(Box<ExtendedProblem>),
    #[error("{what} not found")]
    NotFound { what: &'static str },
    #[error("{detail}")]
    Conflict { code: &'static str, detail: String },
    /// The request is well formed but cannot be processed as it stands
    /// (422 with a code of its own, unlike [`ApiError::Validation`]).
    #[error("{detail}")]
    Unprocessable { code: &'static str, detail: String },
    #[error("unsupported media type: {0}")]
    UnsupportedMediaType(String),
    /// The body is larger than the platform reads.
    #[error("the request body is larger than {limit_bytes} bytes")]
    PayloadTooLarge { limit_bytes: usize },
    #[error("the service is not ready")]
    Unavailable,
    /// The database could not be reached (down, restarting, failing over,
    /// out of connections): nothing was done; try again after `Retry-After`.
    #[error("the database cannot be reached; nothing was done, try again shortly")]
    DatabaseUnavailable,
    /// More requests are in flight than the function takes.
    #[error("too many requests are in flight; try again shortly")]
    Overloaded,
    /// The request took longer than the function allows.
    #[error("the request took too long and was stopped")]
    TimedOut,
    /// Too many attempts: wait `retry_after_secs` (sent as `Retry-After`).
    #[error("too many attempts; try again in {retry_after_secs} s")]
    TooManyRequests { retry_after_secs: u64 },
    /// The platform lacks configuration this request needs.
    #[error("{detail}")]
    NotConfigured { code: &'static str, detail: String },
    /// A system we depend on (a cluster's API) failed or could not be reached.
    #[error("{detail}")]
    Upstream { code: &'static str, detail: String },
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// A capability's settings that cannot be read (checked at start, so only
/// a process that skipped the check meets it).
impl From<crate::config::ConfigError> for ApiError {
    fn from(err: crate::config::ConfigError) -> Self {
        Self::Internal(err.into())
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        if database_unreachable(&err) {
            tracing::warn!(error = %err, "the database cannot be reached");
            Self::DatabaseUnavailable
        } else {
            Self::Internal(err.into())
        }
    }
}

/// Seconds a client is told to wait when the database cannot be reached.
pub const DATABASE_RETRY_AFTER_SECS: u64 = 5;

/// Whether a database error says the database could not be reached — the
/// connection failed or broke, the pool could not get one in time, the server
/// is shutting down, starting up or out of connections — rather than that a
/// statement failed. A request that met it may succeed once the database is
/// back.
pub fn database_unreachable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        // Class 08: connection exception; 57P01–57P03: admin or crash
        // shutdown, cannot connect now; 53300: too many connections.
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03" | "53300")
        }),
        _ => false,
    }
}

/// Whether an error, through any context added on its way up, is the
/// database being unreachable (see [`database_unreachable`]).
pub fn caused_by_unreachable_database(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<sqlx::Error>()
            .is_some_and(database_unreachable)
    })
}

impl ApiError {
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::Validation(vec![FieldError::new(field, message)])
    }

    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Self::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code, "Bad request"),
            Self::Validation(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "validation_failed",
                "Validation failed",
            ),
            Self::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "Authentication required",
            ),
            Self::Unauthorized { code, .. } => (StatusCode::UNAUTHORIZED, code, "Unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden", "Forbidden"),
            Self::Extended(problem) => (problem.status, problem.code, problem.title),
            Self::NotFound { .. } => (StatusCode::NOT_FOUND, "not_found", "Not found"),
            Self::Conflict { code, .. } => (StatusCode::CONFLICT, code, "Conflict"),
            Self::Unprocessable { code, .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                code,
                "Unprocessable content",
            ),
            Self::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "Unsupported media type",
            ),
            Self::PayloadTooLarge { .. } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "Payload too large",
            ),
            Self::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "Service unavailable",
            ),
            Self::DatabaseUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "Service unavailable",
            ),
            Self::Overloaded => (
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "Service unavailable",
            ),
            Self::TimedOut => (
                StatusCode::SERVICE_UNAVAILABLE,
                "timed_out",
                "Service unavailable",
            ),
            Self::TooManyRequests { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "Too many requests",
            ),
            Self::NotConfigured { code, .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, code, "Not configured")
            }
            Self::Upstream { code, .. } => (StatusCode::BAD_GATEWAY, code, "Bad gateway"),
            Self::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "Internal error",
            ),
        }
    }

    pub fn problem(&self) -> Problem {
        let (status, code, title) = self.parts();
        let detail = match self {
            Self::Internal(_) => "an internal error occurred; it has been logged".to_string(),
            other => other.to_string(),
        };
        let errors = match self {
            Self::Validation(errors) => errors.clone(),
            _ => Vec::new(),
        };
        let extensions = match self {
            Self::Extended(problem) => problem.extensions.clone(),
            _ => serde_json::Map::new(),
        };
        // The standard members are the kernel's: an extension cannot replace them.
        let mut extensions = extensions;
        extensions.retain(|name, _| {
            !matches!(
                name.as_str(),
                "type" | "title" | "status" | "detail" | "code" | "errors"
            )
        });
        Problem {
            type_: format!("https://kubebyon.dev/problems/{code}"),
            title: title.into(),
            status: status.as_u16(),
            detail,
            code: code.into(),
            errors,
            extensions,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Internal(err) = &self {
            tracing::error!(error = format!("{err:#}"), "request failed");
        }
        let retry_after = match &self {
            Self::TooManyRequests { retry_after_secs } => Some(*retry_after_secs),
            Self::DatabaseUnavailable => Some(DATABASE_RETRY_AFTER_SECS),
            _ => None,
        };
        let problem = self.problem();
        let status =
            StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(problem)).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// 409 `cluster_job_active` when a write broke the one-active-job-per-cluster
/// index; any other error stays internal.
pub fn active_job_conflict(err: sqlx::Error) -> ApiError {
    match unique_violation(&err) {
        Some("idx_cluster_jobs_active_cluster") => ApiError::Conflict {
            code: "cluster_job_active",
            detail: "another operation on this cluster is still pending or running; try again when it has finished".into(),
        },
        _ => err.into(),
    }
}

/// The name of the unique or exclusion constraint a database error broke, if any.
pub fn unique_violation(err: &sqlx::Error) -> Option<&str> {
    match err {
        sqlx::Error::Database(db) if db.is_unique_violation() => db.constraint(),
        _ => None,
    }
}

/// An error that knows whether another attempt may help: an API that is
/// down, busy or lost a race, against a request that will fail the same way
/// again. Adapters return such errors; the job backbone turns them into
/// retryable or fatal job errors (`jobs::StepError`) without knowing them.
pub trait Transient: std::fmt::Display {
    fn is_transient(&self) -> bool;

    /// What kind of failure this is, for the job it ends.
    fn failure_code(&self) -> crate::domain::FailureCode;

    /// This error as the failure of `step`, in words for the user: a
    /// transient one reads as a pause ("step: …"), the other as an end
    /// ("step failed: …").
    fn at_step_message(&self, step: &str) -> String {
        if self.is_transient() {
            format!("{step}: {self}")
        } else {
            format!("{step} failed: {self}")
        }
    }
}

/// The problem codes this module's refusals answer with (the OpenAPI
/// document's `ProblemCode`, through `app::capabilities::problem_codes`).
pub const PROBLEM_CODES: &[&str] = &[
    "validation_failed",
    "unauthenticated",
    "forbidden",
    "not_found",
    "unsupported_media_type",
    "payload_too_large",
    "unavailable",
    "database_unavailable",
    "overloaded",
    "timed_out",
    "rate_limited",
    "internal_error",
    "cluster_job_active",
];

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn an_unreachable_database_is_told_from_a_failed_statement() {
        let refused = || sqlx::Error::Io(std::io::ErrorKind::ConnectionRefused.into());
        for unreachable in [
            refused(),
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
        ] {
            assert!(database_unreachable(&unreachable), "{unreachable}");
        }
        for failed in [
            sqlx::Error::RowNotFound,
            sqlx::Error::ColumnNotFound("x".into()),
        ] {
            assert!(!database_unreachable(&failed), "{failed}");
        }
        let wrapped = anyhow::Error::from(refused()).context("listing clusters");
        assert!(caused_by_unreachable_database(&wrapped));
        assert!(!caused_by_unreachable_database(&anyhow::anyhow!("no host")));
    }

    async fn render(err: ApiError) -> (StatusCode, String, serde_json::Value) {
        let response = err.into_response();
        let status = response.status();
        let content_type = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_string();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, content_type, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn validation_errors_list_their_fields() {
        let (status, content_type, body) =
            render(ApiError::invalid("name", "must be lowercase")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(body["code"], "validation_failed");
        assert_eq!(body["errors"][0]["field"], "name");
        assert_eq!(
            body["type"],
            "https://kubebyon.dev/problems/validation_failed"
        );
    }

    #[tokio::test]
    async fn internal_errors_do_not_leak_their_cause() {
        let err = ApiError::Internal(anyhow::anyhow!(
            "password authentication failed for user app"
        ));
        let (status, _, body) = render(err).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["code"], "internal_error");
        assert!(!body.to_string().contains("password"), "{body}");
    }

    #[tokio::test]
    async fn a_capability_s_problem_carries_its_members_beside_the_standard_ones() {
        let mut extensions = serde_json::Map::new();
        extensions.insert("quota".into(), serde_json::json!({ "limit": 3 }));
        extensions.insert("code".into(), serde_json::json!("spoofed"));
        let (status, content_type, body) = render(ApiError::Extended(Box::new(ExtendedProblem {
            status: StatusCode::FORBIDDEN,
            code: "quota_exceeded",
            title: "Quota exceeded",
            detail: "three is the limit".into(),
            extensions,
        })))
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(body["code"], "quota_exceeded");
        assert_eq!(body["detail"], "three is the limit");
        assert_eq!(body["quota"]["limit"], 3);
        assert_eq!(body["type"], "https://kubebyon.dev/problems/quota_exceeded");
    }

    #[tokio::test]
    async fn conflicts_keep_their_specific_code() {
        let (status, _, body) = render(ApiError::Conflict {
            code: "cluster_job_active",
            detail: "another operation is running".into(),
        })
        .await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(body["code"], "cluster_job_active");
    }
}
