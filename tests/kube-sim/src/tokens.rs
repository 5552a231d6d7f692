//! The TokenRequest API (`POST …/serviceaccounts/<name>/token`) and the
//! bearer tokens it issues, as a real API server's bound service-account
//! tokens behave: each expires at its `expirationTimestamp`, and each is tied
//! to the ServiceAccount's uid, so deleting the ServiceAccount revokes every
//! token issued for it (a new one of the same name does not bring them back).

use std::collections::HashMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::{Shared, registry, store::ApiError};

/// What an issued token stands for.
#[derive(Debug, Clone)]
pub(crate) struct Issued {
    namespace: String,
    service_account: String,
    uid: String,
    expires: DateTime<Utc>,
}

/// Tokens issued so far, by token.
pub(crate) type IssuedTokens = HashMap<String, Issued>;

/// The shortest and longest lifetimes the API server accepts.
const MIN_SECONDS: i64 = 600;
const MAX_SECONDS: i64 = 1 << 32;

/// The simulator's clock: the real one, moved ahead by `Faults::clock_ahead`.
pub(crate) fn now(shared: &Shared) -> DateTime<Utc> {
    let ahead = shared.faults.lock().expect("lock").clock_ahead;
    Utc::now() + chrono::Duration::from_std(ahead).unwrap_or_default()
}

/// Answers `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`.
pub(crate) fn request(
    shared: &Shared,
    namespace: &str,
    name: &str,
    body: &Value,
) -> Result<Value, ApiError> {
    let seconds = match body.pointer("/spec/expirationSeconds") {
        None | Some(Value::Null) => 3600,
        Some(value) => value
            .as_i64()
            .ok_or_else(|| ApiError::bad_request("spec.expirationSeconds must be an integer"))?,
    };
    if seconds < MIN_SECONDS {
        return Err(invalid(
            name,
            "spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes",
        ));
    }
    if seconds > MAX_SECONDS {
        return Err(invalid(
            name,
            "spec.expirationSeconds: Invalid value: may not specify a duration larger than 2^32 seconds",
        ));
    }
    let accounts = registry::find_kind("v1", "ServiceAccount").expect("ServiceAccount is served");
    let account = shared
        .store
        .lock()
        .expect("lock")
        .get(accounts, namespace, name)?;
    let uid = account
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let issued_at = now(shared);
    let expires = issued_at + chrono::Duration::seconds(seconds);
    let token = format!(
        "kube-sim-sa.{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    shared.issued.lock().expect("lock").insert(
        token.clone(),
        Issued {
            namespace: namespace.to_string(),
            service_account: name.to_string(),
            uid,
            expires,
        },
    );
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": issued_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        },
        "spec": {
            "audiences": body.pointer("/spec/audiences").cloned().unwrap_or_else(|| json!(["https://kubernetes.default.svc"])),
            "expirationSeconds": seconds,
            "boundObjectRef": body.pointer("/spec/boundObjectRef").cloned().unwrap_or(Value::Null),
        },
        "status": {
            "token": token,
            "expirationTimestamp": expires.to_rfc3339_opts(SecondsFormat::Secs, true),
        },
    }))
}

/// Whether `token` is an issued token still good: not expired, and its
/// ServiceAccount still the one it was issued for.
pub(crate) fn valid(shared: &Shared, token: &str) -> bool {
    let Some(issued) = shared.issued.lock().expect("lock").get(token).cloned() else {
        return false;
    };
    if issued.expires <= now(shared) {
        return false;
    }
    let accounts = registry::find_kind("v1", "ServiceAccount").expect("ServiceAccount is served");
    shared
        .store
        .lock()
        .expect("lock")
        .get(accounts, &issued.namespace, &issued.service_account)
        .ok()
        .and_then(|account| {
            account
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(|uid| uid == issued.uid)
        })
        .unwrap_or(false)
}

/// Who an issued token authenticates as: its ServiceAccount's user name and
/// groups, as the API server's service-account authenticator names them.
pub(crate) fn identity(shared: &Shared, token: &str) -> Option<(String, Vec<String>)> {
    let issued = shared.issued.lock().expect("lock").get(token).cloned()?;
    Some((
        format!(
            "system:serviceaccount:{}:{}",
            issued.namespace, issued.service_account
        ),
        vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", issued.namespace),
            "system:authenticated".into(),
        ],
    ))
}

fn invalid(name: &str, message: &str) -> ApiError {
    ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("TokenRequest.authentication.k8s.io \"{name}\" is invalid: {message}"),
    }
}
