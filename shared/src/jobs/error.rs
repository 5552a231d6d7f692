use std::sync::Arc;

use crate::{domain::FailureCode, error::Transient};

/// Why a job step failed: a code from the taxonomy, and the words for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: FailureCode,
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// How a job step failed, decided where the failure happens.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Worth another attempt later (a network blip, a busy API, a lost connection).
    #[error("{0}")]
    Retryable(Failure),
    /// Another attempt would fail the same way; the message is for the user.
    #[error("{0}")]
    Fatal(Failure),
    /// The lease was lost: another worker owns the job now. Nothing may be written.
    #[error("the lease on this job was lost to another worker")]
    LeaseLost,
}

impl JobError {
    pub fn fatal(code: FailureCode, message: impl Into<String>) -> Self {
        Self::Fatal(Failure {
            code,
            message: message.into(),
        })
    }

    pub fn retryable(code: FailureCode, message: impl Into<String>) -> Self {
        Self::Retryable(Failure {
            code,
            message: message.into(),
        })
    }

    /// A failure that names no step (the error says where it happened):
    /// retryable when transient, fatal otherwise.
    pub fn from_transient(err: impl Transient) -> Self {
        Self::of(&err, err.to_string())
    }

    fn of(err: &impl Transient, message: String) -> Self {
        let failure = Failure {
            code: err.failure_code(),
            message,
        };
        if err.is_transient() {
            Self::Retryable(failure)
        } else {
            Self::Fatal(failure)
        }
    }
}

impl From<sqlx::Error> for JobError {
    fn from(err: sqlx::Error) -> Self {
        Self::retryable(FailureCode::Internal, format!("database error: {err}"))
    }
}

/// An error a job's step can fail with: it becomes the job's error once,
/// naming the step, retryable or fatal as the error itself tells.
pub trait StepError {
    fn at_step(self, step: &str) -> JobError;
}

/// In words for the user: retryable when transient, fatal otherwise.
impl<E: Transient> StepError for E {
    fn at_step(self, step: &str) -> JobError {
        let message = self.at_step_message(step);
        JobError::of(&self, message)
    }
}

/// The database could not be used to claim or finish a job: the transport
/// should deliver the wake-up again later. Shared by every wake-up of a
/// grouped statement that failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct Unavailable(Arc<sqlx::Error>);

impl From<sqlx::Error> for Unavailable {
    fn from(err: sqlx::Error) -> Self {
        Self(Arc::new(err))
    }
}
