//! The adapter's error, and whether another attempt may help.

use crate::error::Transient;

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
