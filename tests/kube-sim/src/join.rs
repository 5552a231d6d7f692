//! vCluster's private-node join endpoint, played by a simulated vCluster API,
//! with the kubelet's TLS bootstrap behind it.
//!
//! `GET /node/join?token=<id>.<secret>` answers, for a valid bootstrap token
//! (Secret `kube-system/bootstrap-token-<id>`, matching secret, not expired),
//! a shell script standing in for the real one (which installs containerd and
//! kubelet and runs `kubeadm join`). It calls `POST /node/join?token=…&node=<name>`,
//! which plays the kubelet's TLS bootstrap as upstream does it: authenticated
//! by the bootstrap token as `system:bootstrap:<id>` (groups
//! `system:bootstrappers` and the Secret's `auth-extra-groups`), it files a
//! CertificateSigningRequest for `CN=system:node:<name>, O=system:nodes` with
//! signer `kubernetes.io/kube-apiserver-client-kubelet`, then waits for it on
//! the connection it opened (as the kubelet's watch does: deleting the token
//! afterwards does not end it). kube-controller-manager's `csrapproving`
//! controller is played too: a request whose requester holds the ClusterRole
//! `system:certificates.k8s.io:certificatesigningrequests:nodeclient` through a
//! ClusterRoleBinding (kubeadm's `kubeadm:node-autoapprove-bootstrap`, seeded in
//! every simulated vCluster) is approved at once; any other waits for someone to
//! approve or deny it through the `approval` subresource. Once approved, the
//! certificate is issued and the kubelet registers its Node (the webhooks
//! asked first for a new one; an existing Node of that name is taken over, as a
//! kubelet holding a certificate for that name would). A denied request fails
//! the join, and so does one left waiting past the kubelet's timeout.

use axum::{
    http::{HeaderMap, Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::{Shared, registry, store::ApiError};

/// Answers the join endpoint.
pub(crate) async fn handle(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Response {
    let params = crate::api::query(uri);
    let token = params.get("token").map(String::as_str).unwrap_or_default();
    let Some((username, groups)) = crate::bootstrap::identity(shared, token) else {
        return (StatusCode::UNAUTHORIZED, "invalid bootstrap token\n").into_response();
    };
    match *method {
        Method::GET => {
            let host = headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("127.0.0.1");
            // The real script pins the control plane's CA (kubeadm's discovery
            // hash); this one pins it for its single call back.
            let script = format!(
                "#!/bin/sh\nset -e\nname=$(uname -n | tr '[:upper:]' '[:lower:]')\n\
                 echo \"kube-sim: kubeadm join as $name\"\n\
                 ca=$(mktemp)\ntrap 'rm -f \"$ca\"' EXIT\n\
                 cat > \"$ca\" <<'KUBE_SIM_CA'\n{ca}\nKUBE_SIM_CA\n\
                 conf=$(mktemp)\ntrap 'rm -f \"$ca\" \"$conf\"' EXIT\n\
                 printf 'url = \"https://{host}/node/join?token={token}&node=%s\"\\n' \"$name\" > \"$conf\"\n\
                 if ! out=$(curl -sS --fail-with-body --cacert \"$ca\" -X POST -K \"$conf\"); then echo \"kube-sim: the node was not registered: $out\" >&2; exit 1; fi\n\
                 echo \"kube-sim: node $name registered\"\n",
                ca = shared.ca_pem.trim_end(),
            );
            (StatusCode::OK, script).into_response()
        }
        Method::POST => {
            let Some(name) = params.get("node").filter(|n| !n.is_empty()) else {
                return (StatusCode::BAD_REQUEST, "node is required\n").into_response();
            };
            let requester = Requester { username, groups };
            if let Err(refused) = bootstrap_certificate(shared, &requester, name).await {
                return refused;
            }
            match register_node(shared, name).await {
                Ok(()) => (StatusCode::CREATED, "registered\n").into_response(),
                Err(err) => (
                    StatusCode::from_u16(err.code).unwrap_or(StatusCode::CONFLICT),
                    format!("{}\n", err.message),
                )
                    .into_response(),
            }
        }
        _ => (StatusCode::METHOD_NOT_ALLOWED, "").into_response(),
    }
}

/// How long the kubelet waits for its certificate (kubeadm's TLS bootstrap
/// timeout is longer; tests do not wait that long).
const CERTIFICATE_WAIT: Duration = Duration::from_secs(60);

/// Who a bootstrap token authenticates as.
struct Requester {
    username: String,
    groups: Vec<String>,
}

fn condition(csr: &Value, kind: &str) -> Option<String> {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| c["message"].as_str().unwrap_or_default().to_string())
}

/// The kubelet's TLS bootstrap: files the certificate request and waits for
/// it to be approved (then issued) or denied.
#[allow(clippy::result_large_err)]
async fn bootstrap_certificate(
    shared: &Shared,
    requester: &Requester,
    node: &str,
) -> Result<(), Response> {
    let refused =
        |code: StatusCode, message: String| (code, format!("{message}\n")).into_response();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
        .map_err(|e| refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let key = rcgen::KeyPair::generate()
        .map_err(|e| refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let request = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let name = format!("node-csr-{}", uuid::Uuid::new_v4().simple());
    let resource = registry::find_kind("certificates.k8s.io/v1", "CertificateSigningRequest")
        .expect("registered");
    shared
        .store
        .lock()
        .expect("lock")
        .create(
            resource,
            "",
            json!({
                "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": { "name": name },
                "spec": {
                    "request": b64(request.as_bytes()),
                    "signerName": crate::bootstrap::KUBELET_CLIENT_SIGNER,
                    "usages": ["digital signature", "client auth"],
                    "username": requester.username,
                    "groups": requester.groups,
                },
            }),
        )
        .map_err(|e| {
            refused(
                StatusCode::from_u16(e.code).unwrap_or(StatusCode::CONFLICT),
                e.message,
            )
        })?;
    shared.wake.notify_waiters();
    // The controller decides a request when it is filed.
    let mut auto_approve =
        crate::bootstrap::auto_approves(shared, &requester.username, &requester.groups).await;
    let deadline = tokio::time::Instant::now() + CERTIFICATE_WAIT;
    loop {
        let csr = shared
            .store
            .lock()
            .expect("lock")
            .get(resource, "", &name)
            .map_err(|e| refused(StatusCode::CONFLICT, e.message))?;
        if let Some(message) = condition(&csr, "Denied") {
            return Err(refused(
                StatusCode::FORBIDDEN,
                format!("certificate signing request {name} was denied: {message}"),
            ));
        }
        if condition(&csr, "Approved").is_some() {
            // The signer issues the certificate; the kubelet reads it.
            let certificate = rcgen::CertificateParams::new(Vec::<String>::new())
                .and_then(|mut p| {
                    p.distinguished_name
                        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
                    p.self_signed(&key)
                })
                .map_err(|e| refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            let issued = json!({ "status": { "certificate": b64(certificate.pem().as_bytes()) } });
            shared
                .store
                .lock()
                .expect("lock")
                .merge_patch(resource, "", &name, &issued, true)
                .map_err(|e| refused(StatusCode::CONFLICT, e.message))?;
            return Ok(());
        }
        if std::mem::take(&mut auto_approve) {
            crate::bootstrap::record_auto_approval(shared, &name)
                .map_err(|e| refused(StatusCode::CONFLICT, e.message))?;
            continue;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(refused(
                StatusCode::GATEWAY_TIMEOUT,
                format!("timed out waiting for certificate signing request {name} to be approved"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Registers the Node as its kubelet would: the webhooks are asked first.
async fn register_node(shared: &Shared, name: &str) -> Result<(), ApiError> {
    let resource = registry::find_kind("v1", "Node").expect("registered");
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name },
    });
    let status = json!({ "status": {
        "conditions": [{ "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                         "lastHeartbeatTime": now, "lastTransitionTime": now }],
        "addresses": [{ "type": "InternalIP", "address": "192.0.2.50" }, { "type": "Hostname", "address": name }],
        "nodeInfo": { "osImage": "Debian GNU/Linux 12 (bookworm)", "kubeletVersion": "v1.33.5",
                      "containerRuntimeVersion": "containerd://1.7.27", "architecture": "amd64",
                      "operatingSystem": "linux" },
        "allocatable": { "cpu": "2", "memory": "4Gi", "ephemeral-storage": "20Gi", "pods": "110" },
    }});
    let mut registered = node.clone();
    crate::store::merge(&mut registered, &status);
    let exists = shared
        .store
        .lock()
        .expect("lock")
        .get(resource, "", name)
        .is_ok();
    if !exists {
        let attributes = crate::admission::Attributes {
            resource,
            namespace: "",
            name,
            operation: "CREATE",
            object: &registered,
            old_object: None,
            dry_run: false,
            user: crate::admission::kubelet(name),
        };
        crate::admission::validate(shared, &attributes).await?;
    }
    let mut store = shared.store.lock().expect("lock");
    store.apply(resource, "", name, &node, "kubelet", false)?;
    store.merge_patch(resource, "", name, &status, true)?;
    Ok(())
}
