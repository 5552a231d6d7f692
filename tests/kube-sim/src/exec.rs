//! `POST|GET /api/v1/namespaces/<ns>/pods/<name>/exec` over a WebSocket, as
//! kube-rs and kubectl speak it (subprotocols `v5.channel.k8s.io` and
//! `v4.channel.k8s.io`): one binary frame per write, its first byte the
//! channel — 1 stdout, 2 stderr, 3 the command's `Status` — then a close.
//!
//! The simulator has no containers to run anything in: a test installs the
//! [`ExecHandler`] that answers for them. Without one, every command fails as
//! one would in a container whose image lacks the executable.

use std::sync::Arc;

use axum::{
    extract::{Path, Request, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures_util::SinkExt;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{Message, handshake::derive_accept_key, protocol::Role},
};

use crate::{
    Shared,
    api::{error, query_pairs, refuse},
    registry,
    store::ApiError,
    tls::ClientCertificate,
};

/// What a test's handler is asked to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub command: Vec<String>,
    /// The container's image has no executable but its component's (a
    /// Kamaji control plane's): the handler is not asked.
    pub distroless: bool,
}

/// What the command wrote and how it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

/// Runs a command "in" a container; called on a blocking thread.
pub type ExecHandler = Arc<dyn Fn(&ExecRequest) -> ExecOutput + Send + Sync>;

/// The subprotocols served, in the order of preference.
const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

fn exec_request(
    shared: &Shared,
    namespace: String,
    pod: String,
    request: &Request,
) -> Result<(ExecRequest, bool, bool), ApiError> {
    let pods = registry::find("", "v1", "pods").expect("pods are served");
    let object = shared
        .store
        .lock()
        .expect("lock")
        .get(pods, &namespace, &pod)?;
    let containers: Vec<&str> = object
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let mut command = Vec::new();
    let (mut container, mut stdout, mut stderr) = (None, false, false);
    for (key, value) in query_pairs(request.uri()) {
        match key.as_str() {
            "command" => command.push(value),
            "container" => container = Some(value),
            "stdout" => stdout = value == "true" || value == "1",
            "stderr" => stderr = value == "true" || value == "1",
            _ => {}
        }
    }
    if command.is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    let container = match (container, containers.as_slice()) {
        (Some(name), _) if containers.contains(&name.as_str()) => name,
        (Some(name), _) => {
            return Err(ApiError::bad_request(format!(
                "container {name} is not valid for pod {pod}"
            )));
        }
        (None, [only]) => only.to_string(),
        (None, _) => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod}, choose one of: [{}]",
                containers.join(" ")
            )));
        }
    };
    // Kamaji's control-plane containers run the upstream images, built on
    // go-runner (distroless/static): no shell, nothing but the component.
    let distroless = object
        .pointer("/metadata/labels/kamaji.clastix.io~1name")
        .is_some();
    Ok((
        ExecRequest {
            namespace,
            pod,
            container,
            command,
            distroless,
        },
        stdout,
        stderr,
    ))
}

/// The `Status` the kubelet sends on channel 3 when the command ends.
fn exit_status(request: &ExecRequest, output: &ExecOutput) -> Value {
    if output.exit_code == 0 {
        return json!({ "metadata": {}, "status": "Success" });
    }
    json!({
        "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {}",
            request.command.join(" "), output.exit_code
        ),
        "details": { "causes": [{ "reason": "ExitCode", "message": output.exit_code.to_string() }] },
    })
}

pub async fn handle(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod)): Path<(String, String)>,
    mut request: Request,
) -> Response {
    let client = request.extensions().get::<ClientCertificate>().cloned();
    if let Some(refused) = refuse(&shared, request.headers(), client.as_ref(), || None) {
        return refused;
    }
    if let Some(denied) = crate::api::authorizer_denies_exec(
        &shared,
        request.method(),
        request.headers(),
        client.as_ref(),
        &namespace,
        &pod,
    )
    .await
    {
        return error(denied);
    }
    if let Some(denied) = crate::api::rbac_denies_exec(
        &shared,
        request.method(),
        request.headers(),
        client.is_some(),
        &namespace,
        &pod,
    ) {
        return error(denied);
    }
    let (exec, stdout, stderr) = match exec_request(&shared, namespace, pod, &request) {
        Ok(parsed) => parsed,
        Err(err) => return error(err),
    };
    let headers = request.headers();
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|k| derive_accept_key(k.as_bytes()));
    let offered: Vec<&str> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let protocol = PROTOCOLS.into_iter().find(|p| offered.contains(p));
    let upgrade = headers
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    let (Some(accept), Some(protocol), true) = (key, protocol, upgrade) else {
        return error(ApiError::bad_request(
            "exec needs a WebSocket upgrade with the v5.channel.k8s.io or v4.channel.k8s.io subprotocol",
        ));
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let handler = shared
        .exec
        .lock()
        .expect("lock")
        .clone()
        .filter(|_| !exec.distroless);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let mut socket =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        let output = match handler {
            Some(handler) => {
                let request = exec.clone();
                tokio::task::spawn_blocking(move || handler(&request))
                    .await
                    .unwrap_or_else(|_| ExecOutput {
                        stderr: b"the exec handler panicked".to_vec(),
                        exit_code: 126,
                        ..ExecOutput::default()
                    })
            }
            None => ExecOutput {
                stderr: format!(
                    "exec: \"{}\": executable file not found in $PATH",
                    exec.command[0]
                )
                .into_bytes(),
                exit_code: 127,
                ..ExecOutput::default()
            },
        };
        let frame = |channel: u8, bytes: &[u8]| {
            let mut data = Vec::with_capacity(bytes.len() + 1);
            data.push(channel);
            data.extend_from_slice(bytes);
            Message::binary(data)
        };
        let mut frames = Vec::new();
        if stdout && !output.stdout.is_empty() {
            frames.extend(output.stdout.chunks(32 * 1024).map(|c| frame(1, c)));
        }
        if stderr && !output.stderr.is_empty() {
            frames.push(frame(2, &output.stderr));
        }
        frames.push(frame(3, exit_status(&exec, &output).to_string().as_bytes()));
        for message in frames {
            if socket.send(message).await.is_err() {
                return;
            }
        }
        let _ = socket.close(None).await;
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(
        header::SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&accept).expect("base64 is a header value"),
    );
    headers.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(protocol),
    );
    response
}
