//! Validating admission webhooks, called as kube-apiserver calls them for
//! CREATE and UPDATE (the main resource, not its subresources): every
//! `ValidatingWebhookConfiguration`'s webhooks in name order whose rules
//! match (operation, API group, version, resource, scope), whose
//! `namespaceSelector` matches the object's namespace's labels (with
//! `kubernetes.io/metadata.name`; a Namespace its own labels; other
//! cluster-scoped objects always) and whose `objectSelector` matches. Each
//! gets an `admission.k8s.io/v1` `AdmissionReview` over HTTPS, its
//! certificate verified against `caBundle` (else the public roots), within
//! `timeoutSeconds` (default 10), with the bearer token the API server's
//! admission configuration holds for the webhook's host (see
//! `authz::WebhookCredentials`). A refusal answers as the API server
//! would: `admission webhook "<name>" denied the request: <message>` with the
//! webhook's code; a call that fails (unreachable, timed out, not 200, an
//! answer for another uid, a patch) refuses the request with 500 under
//! `failurePolicy: Fail` (the default) and is skipped under `Ignore`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::{
    Shared,
    registry::{self, ResourceType},
    store::ApiError,
};

/// A request the webhooks are asked about.
pub(crate) struct Attributes<'a> {
    pub resource: &'static ResourceType,
    pub namespace: &'a str,
    pub name: &'a str,
    /// `CREATE` or `UPDATE`.
    pub operation: &'static str,
    pub object: &'a Value,
    pub old_object: Option<&'a Value>,
    pub dry_run: bool,
    pub user: Value,
}

/// The `userInfo` of the admin credentials.
pub(crate) fn admin() -> Value {
    json!({"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]})
}

/// The `userInfo` of a kubelet registering its node.
pub(crate) fn kubelet(node: &str) -> Value {
    json!({"username": format!("system:node:{node}"), "groups": ["system:nodes", "system:authenticated"]})
}

fn listed(value: &Value, key: &str, wanted: &str) -> bool {
    value
        .get(key)
        .and_then(Value::as_array)
        .is_some_and(|items| items.iter().any(|i| i == "*" || i == wanted))
}

fn rule_matches(rule: &Value, attrs: &Attributes<'_>) -> bool {
    let scope = rule.get("scope").and_then(Value::as_str).unwrap_or("*");
    let scoped = match scope {
        "Namespaced" => attrs.resource.namespaced,
        "Cluster" => !attrs.resource.namespaced,
        _ => true,
    };
    scoped
        && listed(rule, "operations", attrs.operation)
        && listed(rule, "apiGroups", attrs.resource.group)
        && listed(rule, "apiVersions", attrs.resource.version)
        && listed(rule, "resources", attrs.resource.plural)
}

/// A `LabelSelector` (matchLabels and matchExpressions) against `labels`;
/// an absent selector matches everything.
fn selects(selector: Option<&Value>, labels: &serde_json::Map<String, Value>) -> bool {
    let Some(selector) = selector.filter(|s| s.is_object()) else {
        return true;
    };
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    let exact = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str() {
                Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                Some("Exists") => label(key).is_some(),
                Some("DoesNotExist") => label(key).is_none(),
                _ => false,
            }
        });
    exact && expressions
}

fn labels_of(object: &Value) -> serde_json::Map<String, Value> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Asks every matching webhook; the first refusal or failing call under
/// `Fail` refuses the request.
pub(crate) async fn validate(shared: &Shared, attrs: &Attributes<'_>) -> Result<(), ApiError> {
    let (configurations, namespace_labels) = {
        let store = shared.store.lock().expect("lock");
        let kind = registry::find_kind(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
        )
        .expect("registered");
        let configurations = store.list(kind, None, None, None)?;
        let mut labels = if attrs.resource.namespaced {
            let namespace = registry::find_kind("v1", "Namespace").expect("registered");
            store
                .get(namespace, "", attrs.namespace)
                .map(|ns| labels_of(&ns))
                .unwrap_or_default()
        } else {
            labels_of(attrs.object)
        };
        let own_name = if attrs.resource.kind == "Namespace" {
            attrs.name
        } else {
            attrs.namespace
        };
        labels.insert("kubernetes.io/metadata.name".into(), json!(own_name));
        (configurations, labels)
    };
    if configurations.is_empty() {
        return Ok(());
    }
    let mut hooks: Vec<(String, Value)> = configurations
        .iter()
        .flat_map(|c| {
            let config = c["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            c["webhooks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |w| (config.clone(), w))
        })
        .collect();
    hooks.sort_by(|a, b| a.0.cmp(&b.0));
    // The object selector matches when the new or the old object matches.
    let object_labels = [Some(attrs.object), attrs.old_object].map(|o| o.map(labels_of));
    for (_, hook) in hooks {
        let matched = hook["rules"]
            .as_array()
            .is_some_and(|rules| rules.iter().any(|r| rule_matches(r, attrs)));
        let in_namespace = !(attrs.resource.namespaced || attrs.resource.kind == "Namespace")
            || selects(hook.get("namespaceSelector"), &namespace_labels);
        if !matched
            || !in_namespace
            || !object_labels
                .iter()
                .flatten()
                .any(|labels| selects(hook.get("objectSelector"), labels))
        {
            continue;
        }
        let name = hook["name"].as_str().unwrap_or_default().to_string();
        match call(shared, &hook, attrs).await {
            Ok(None) => {}
            Ok(Some(status)) => return Err(denied(&name, &status)),
            Err(reason) if hook["failurePolicy"] == "Ignore" => {
                tracing::warn!(webhook = name, reason, "failed calling webhook, ignoring");
            }
            Err(reason) => {
                return Err(ApiError {
                    code: 500,
                    reason: "InternalError",
                    message: format!(
                        "Internal error occurred: failed calling webhook \"{name}\": {reason}"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The API server's error for a refusal (its `ToStatusErr`).
fn denied(name: &str, status: &Value) -> ApiError {
    let code = status["code"].as_u64().unwrap_or(0) as u16;
    let code = if code < 400 { 400 } else { code };
    let reason = match status["reason"].as_str() {
        Some("Forbidden") => "Forbidden",
        Some("Invalid") => "Invalid",
        Some("Conflict") => "Conflict",
        Some("TooManyRequests") => "TooManyRequests",
        Some("Unauthorized") => "Unauthorized",
        _ if code == 403 => "Forbidden",
        _ => "BadRequest",
    };
    let denied_by = format!("admission webhook \"{name}\" denied the request");
    let message = match (status["message"].as_str(), status["reason"].as_str()) {
        (Some(m), _) if !m.is_empty() => format!("{denied_by}: {m}"),
        (_, Some(r)) if !r.is_empty() => format!("{denied_by}: {r}"),
        _ => format!("{denied_by} without explanation"),
    };
    ApiError {
        code,
        reason,
        message,
    }
}

/// One call: `Ok(None)` allowed, `Ok(Some(status))` refused, `Err` failed.
async fn call(
    shared: &Shared,
    hook: &Value,
    attrs: &Attributes<'_>,
) -> Result<Option<Value>, String> {
    use base64::Engine;
    let client_config = &hook["clientConfig"];
    let url = client_config["url"]
        .as_str()
        .ok_or("the webhook has no clientConfig.url (services are not simulated)")?;
    if !url.starts_with("https://") {
        return Err(format!(
            "failed to call webhook: Post {url:?}: webhook URLs must be https"
        ));
    }
    if !listed(hook, "admissionReviewVersions", "v1") {
        return Err("the webhook does not accept admission.k8s.io/v1".into());
    }
    let timeout = hook["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30);
    let mut builder = reqwest::Client::builder()
        .timeout(Duration::from_secs(timeout))
        .use_rustls_tls();
    if let Some(bundle) = client_config["caBundle"].as_str() {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .map_err(|e| format!("caBundle is not base64: {e}"))?;
        let certificate =
            reqwest::Certificate::from_pem(&pem).map_err(|e| format!("caBundle: {e}"))?;
        builder = builder
            .tls_built_in_root_certs(false)
            .add_root_certificate(certificate);
    }
    let client = builder.build().map_err(|e| e.to_string())?;
    let uid = uuid::Uuid::new_v4().to_string();
    let kind = json!({"group": attrs.resource.group, "version": attrs.resource.version, "kind": attrs.resource.kind});
    let resource = json!({"group": attrs.resource.group, "version": attrs.resource.version, "resource": attrs.resource.plural});
    let mut request = json!({
        "uid": uid, "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
        "name": attrs.name, "operation": attrs.operation, "userInfo": attrs.user,
        "object": attrs.object, "oldObject": attrs.old_object, "dryRun": attrs.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1",
                    "kind": if attrs.operation == "CREATE" { "CreateOptions" } else { "UpdateOptions" }},
    });
    if attrs.resource.namespaced {
        request["namespace"] = json!(attrs.namespace);
    }
    let review =
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
    let mut post = client.post(url);
    if let Some(token) = reqwest::Url::parse(url).ok().and_then(|u| {
        shared
            .options
            .webhook_credentials
            .token_for(&u)
            .map(str::to_string)
    }) {
        post = post.bearer_auth(token);
    }
    let response = post
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(review.to_string())
        .send()
        .await
        .map_err(|e| format!("failed to call webhook: Post {url:?}: {e}"))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .map_err(|e| format!("received invalid webhook response: {e}"))?;
    if status != reqwest::StatusCode::OK {
        return Err(format!(
            "failed to call webhook: the server responded with the status code {}",
            status.as_u16()
        ));
    }
    if body["apiVersion"] != "admission.k8s.io/v1" || body["kind"] != "AdmissionReview" {
        return Err(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview".into(),
        );
    }
    let answer = &body["response"];
    if answer["uid"] != uid.as_str() {
        return Err(format!(
            "expected response.uid={uid:?}, got {}",
            answer["uid"]
        ));
    }
    if answer.get("patch").is_some_and(|p| !p.is_null()) {
        return Err("validating webhook may not return a patch".into());
    }
    match answer["allowed"].as_bool() {
        Some(true) => Ok(None),
        Some(false) => Ok(Some(answer.get("status").cloned().unwrap_or(json!({})))),
        None => Err("the webhook response has no allowed".into()),
    }
}
