//! A hostname's certificate state, from the cert-manager `Certificate`s that
//! may cover it: `ready` when the one whose `dnsNames` hold it is Ready,
//! `error` with the reason when it is not, `pending` before it has a
//! verdict, `none` when none covers it.

use serde_json::Value;

use super::records::TlsState;
use crate::domain::{TlsMode, TlsStatus};

/// The state of the certificate covering `hostname`, from the Certificates
/// listed (each object without its metadata).
pub fn state_for(hostname: &str, certificates: &[Value]) -> TlsState {
    let covering = certificates.iter().find(|c| {
        c["spec"]["dnsNames"]
            .as_array()
            .is_some_and(|names| names.iter().any(|n| n.as_str() == Some(hostname)))
    });
    let Some(certificate) = covering else {
        return TlsState {
            mode: TlsMode::None,
            status: TlsStatus::None,
            secret_name: None,
            error: None,
        };
    };
    let secret_name = certificate["spec"]["secretName"]
        .as_str()
        .map(str::to_string);
    let ready = certificate["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null);
    let (status, error) = match ready["status"].as_str() {
        Some("True") => (TlsStatus::Ready, None),
        Some("False") => (
            TlsStatus::Error,
            Some(format!(
                "{}: {}",
                ready["reason"].as_str().unwrap_or("NotReady"),
                ready["message"].as_str().unwrap_or_default()
            )),
        ),
        _ => (TlsStatus::Pending, None),
    };
    TlsState {
        mode: TlsMode::CertManager,
        status,
        secret_name,
        error,
    }
}
