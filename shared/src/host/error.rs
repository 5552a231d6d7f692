//! The adapter's error, and whether another attempt may help.

use crate::{domain::FailureCode, error::Transient};

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot read the host kubeconfig: {0}")]
    Kubeconfig(String),
    /// The host API answered with an error.
    #[error("{message} ({code})")]
    Api { code: u16, message: String },
    /// The host API could not be reached or answered garbage.
    #[error("{0}")]
    Transport(String),
    #[error("{0}")]
    Invalid(String),
}

impl Transient for HostError {
    /// Worth another attempt: the API is down, busy, or lost a race.
    fn is_transient(&self) -> bool {
        match self {
            Self::Api { code, .. } => *code >= 500 || *code == 429 || *code == 409,
            Self::Transport(_) => true,
            Self::Kubeconfig(_) | Self::Invalid(_) => false,
        }
    }

    fn failure_code(&self) -> FailureCode {
        match self {
            _ if self.is_transient() => FailureCode::HostUnreachable,
            // A ResourceQuota's admission refusal: 403 "exceeded quota: …".
            Self::Api { code: 403, message } if message.contains("exceeded quota") => {
                FailureCode::QuotaExceeded
            }
            Self::Api { .. } => FailureCode::HostRejected,
            Self::Transport(_) => FailureCode::HostUnreachable,
            Self::Kubeconfig(_) | Self::Invalid(_) => FailureCode::InvalidConfiguration,
        }
    }
}

impl HostError {
    pub(super) fn is_not_found(&self) -> bool {
        matches!(self, Self::Api { code: 404, .. })
    }
}

impl From<kube::Error> for HostError {
    fn from(err: kube::Error) -> Self {
        match err {
            kube::Error::Api(status) => Self::Api {
                code: status.code,
                message: status.message,
            },
            other => Self::Transport(other.to_string()),
        }
    }
}

pub(super) fn ignore_not_found(result: Result<(), kube::Error>) -> Result<(), HostError> {
    match result.map_err(HostError::from) {
        Err(err) if err.is_not_found() => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> HostError {
        HostError::Api {
            code,
            message: message.into(),
        }
    }

    #[test]
    fn each_host_failure_has_its_code() {
        for (err, code) in [
            (
                HostError::Transport("connection refused".into()),
                FailureCode::HostUnreachable,
            ),
            (
                api(503, "etcdserver: leader changed"),
                FailureCode::HostUnreachable,
            ),
            (api(429, "too many requests"), FailureCode::HostUnreachable),
            (
                api(
                    403,
                    "pods \"x\" is forbidden: exceeded quota: kubebyon-control-plane, requested: requests.cpu=2",
                ),
                FailureCode::QuotaExceeded,
            ),
            (
                api(
                    403,
                    "serviceaccounts \"x\" is forbidden: User cannot create",
                ),
                FailureCode::HostRejected,
            ),
            (
                api(422, "spec.ports: Invalid value"),
                FailureCode::HostRejected,
            ),
            (
                HostError::Kubeconfig("no such file".into()),
                FailureCode::InvalidConfiguration,
            ),
        ] {
            assert_eq!(err.failure_code(), code, "{err}");
            // A code a user may retry is never given to a refusal that would repeat.
            if !err.is_transient() && code != FailureCode::HostUnreachable {
                assert!(!code.retryable(), "{err}");
            }
        }
    }
}
