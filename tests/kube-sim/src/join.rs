//! vCluster's private-node join endpoint, played by a simulated vCluster API.
//!
//! `GET /node/join?token=<id>.<secret>` answers, for a valid bootstrap token
//! (Secret `kube-system/bootstrap-token-<id>`, matching secret, not expired),
//! a shell script standing in for the real one (which installs containerd and
//! kubelet and runs `kubeadm join`): it registers the machine as a Ready Node
//! by calling `POST /node/join?token=…&node=<name>`, which checks the token
//! again — so a revoked or expired token fails the join as it would for real.

use axum::{
    http::{HeaderMap, Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
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
    if let Err(reason) = check_token(shared, token) {
        return (StatusCode::UNAUTHORIZED, format!("{reason}\n")).into_response();
    }
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

fn check_token(shared: &Shared, token: &str) -> Result<(), &'static str> {
    let (id, secret) = token.split_once('.').ok_or("malformed bootstrap token")?;
    let resource = registry::find_kind("v1", "Secret").ok_or("no Secret kind")?;
    let stored = shared
        .store
        .lock()
        .expect("lock")
        .get(resource, "kube-system", &format!("bootstrap-token-{id}"))
        .map_err(|_| "unknown bootstrap token")?;
    let field = |key: &str| {
        stored
            .pointer(&format!("/data/{key}"))
            .and_then(Value::as_str)
            .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
            .and_then(|v| String::from_utf8(v).ok())
    };
    if field("token-secret").as_deref() != Some(secret) {
        return Err("wrong bootstrap token secret");
    }
    if let Some(expiration) = field("expiration") {
        let expires =
            chrono::DateTime::parse_from_rfc3339(&expiration).map_err(|_| "bad expiration")?;
        if expires <= crate::tokens::now(shared) {
            return Err("expired bootstrap token");
        }
    }
    Ok(())
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
