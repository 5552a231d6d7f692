//! How a worker joins a kubeadm-made control plane (Kamaji's), as upstream
//! does it:
//!
//! - **Bootstrap tokens authenticate** (kubernetes
//!   `plugin/pkg/auth/authenticator/token/bootstrap/bootstrap.go`): a bearer
//!   `<id>.<secret>` whose Secret `kube-system/bootstrap-token-<id>` has type
//!   `bootstrap.kubernetes.io/token`, that id and secret, no past
//!   `expiration`, no deletion under way and `usage-bootstrap-authentication`
//!   `true` is the user `system:bootstrap:<id>` in `system:bootstrappers` and
//!   its `auth-extra-groups`; a token naming a group outside
//!   `system:bootstrappers:…` authenticates nobody. RBAC decides the rest.
//! - **Kamaji's bootstrap phase** (clastix/kamaji 26.8.2-edge
//!   `internal/kubeadm/bootstraptoken.go`, `uploadconfig.go`, through
//!   kubeadm's own phases): `kube-public/cluster-info` holds a kubeconfig
//!   naming the control plane's endpoint and CA, readable by
//!   `system:anonymous`; kubeadm's default node-token group may read the
//!   `kubeadm-config` and `kubelet-config` ConfigMaps, get Nodes, file
//!   certificate requests, and has its kubelet client requests approved by
//!   the cluster (`kubeadm:node-autoapprove-bootstrap`). The phase runs
//!   again whenever `cluster-info` changes (its watch predicate,
//!   `internal/resources/kubeadm_phases.go`), bringing back what was deleted.
//! - **kube-controller-manager's bootstrapsigner**
//!   (`pkg/controller/bootstrap/bootstrapsigner.go`,
//!   `k8s.io/cluster-bootstrap/token/jws`): `cluster-info` carries, for each
//!   token with `usage-bootstrap-signing` `true`, `jws-kubeconfig-<id>`: a
//!   detached HS256 JWS of the kubeconfig keyed by the token's secret, header
//!   `{"alg":"HS256","kid":"<id>"}`.
//! - **csrapproving and csrsigning**
//!   (`pkg/controller/certificates/approver/sarapprove.go`, `signer/`): a
//!   kubelet client request (`kubernetes.io/kube-apiserver-client-kubelet`)
//!   is approved at once when its requester may `create
//!   certificatesigningrequests/nodeclient`; an approved one is signed by the
//!   cluster's CA.

use base64::Engine;
use serde_json::{Value, json};

use std::sync::Arc;

use crate::{
    Shared, registry,
    store::{ApiError, secret_text},
};

fn resource(api_version: &str, kind: &str) -> &'static registry::ResourceType {
    registry::find_kind(api_version, kind).expect("registered kind")
}

/// kubeadm's group for the node tokens it makes.
pub(crate) const DEFAULT_NODE_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The ClusterRole whose holders' kubelet client requests are approved by
/// the cluster.
pub(crate) const NODE_CLIENT_ROLE: &str =
    "system:certificates.k8s.io:certificatesigningrequests:nodeclient";
/// The signer of kubelets' client certificates.
pub(crate) const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

fn well_formed(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let valid = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (valid(id, 6) && valid(secret, 16)).then_some((id, secret))
}

/// `^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$`
fn valid_group(group: &str) -> bool {
    group
        .strip_prefix("system:bootstrappers:")
        .is_some_and(|rest| {
            !rest.is_empty()
                && rest.len() <= 256
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
                && rest
                    .bytes()
                    .last()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// Who a bootstrap token authenticates as (user and groups, with
/// `system:authenticated`), when it authenticates.
pub(crate) fn identity(shared: &Shared, token: &str) -> Option<(String, Vec<String>)> {
    let (id, secret) = well_formed(token)?;
    let stored = shared
        .store
        .lock()
        .expect("lock")
        .get(
            resource("v1", "Secret"),
            "kube-system",
            &format!("bootstrap-token-{id}"),
        )
        .ok()?;
    if stored.pointer("/metadata/deletionTimestamp").is_some()
        || stored["type"] != "bootstrap.kubernetes.io/token"
        || secret_text(&stored, "token-id").as_deref() != Some(id)
        || secret_text(&stored, "token-secret").as_deref() != Some(secret)
        || secret_text(&stored, "usage-bootstrap-authentication").as_deref() != Some("true")
    {
        return None;
    }
    if let Some(expiration) = secret_text(&stored, "expiration") {
        let expires = chrono::DateTime::parse_from_rfc3339(&expiration).ok()?;
        if expires <= crate::tokens::now(shared) {
            return None;
        }
    }
    let mut groups = vec!["system:bootstrappers".to_string()];
    for group in secret_text(&stored, "auth-extra-groups")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
    {
        if !valid_group(group) {
            return None;
        }
        groups.push(group.to_string());
    }
    groups.push("system:authenticated".into());
    Some((format!("system:bootstrap:{id}"), groups))
}

/// The kubeconfig `cluster-info` holds: the endpoint and the CA, nothing else.
fn cluster_info_kubeconfig(server: &str, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n"
    )
}

/// Kamaji's bootstrap-token and upload-config phases: makes what is
/// missing, and `cluster-info` again when it names another endpoint.
pub(crate) fn run_phase(shared: &Shared) {
    let Some(server) = shared.kubeadm_server.lock().expect("lock").clone() else {
        return;
    };
    let kubeconfig = cluster_info_kubeconfig(&server, &shared.ca_pem);
    let config_maps = resource("v1", "ConfigMap");
    let mut store = shared.store.lock().expect("lock");
    match store.get(config_maps, "kube-public", "cluster-info") {
        Ok(current) if current.pointer("/data/kubeconfig") == Some(&json!(kubeconfig)) => {}
        Ok(_) => {
            // Its data replaced whole: the signatures go, and come back
            // from the signer.
            let _ = store.replace(
                config_maps,
                "kube-public",
                "cluster-info",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "cluster-info", "namespace": "kube-public"},
                       "data": {"kubeconfig": kubeconfig}}),
                false,
            );
        }
        Err(_) => {
            let _ = store.create(
                config_maps,
                "kube-public",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "cluster-info", "namespace": "kube-public"},
                       "data": {"kubeconfig": kubeconfig}}),
            );
        }
    }
    let group = |name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name});
    let cluster_role = |name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name});
    let objects = [
        (
            "kube-system",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
                   "data": {"ClusterConfiguration": format!(
                       "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrolPlaneEndpoint: {}\n",
                       server.trim_start_matches("https://"))}}),
        ),
        (
            "kube-system",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "kubelet-config", "namespace": "kube-system"},
                   "data": {"kubelet": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"}}),
        ),
        (
            "kube-public",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "kubeadm:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
                   "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cluster-info"], "verbs": ["get"]}]}),
        ),
        (
            "kube-public",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "kubeadm:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeadm:bootstrap-signer-clusterinfo"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}]}),
        ),
        (
            "kube-system",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "kubeadm:nodes-kubeadm-config", "namespace": "kube-system"},
                   "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kubeadm-config"], "verbs": ["get"]}]}),
        ),
        (
            "kube-system",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "kubeadm:nodes-kubeadm-config", "namespace": "kube-system"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeadm:nodes-kubeadm-config"},
                   "subjects": [group(DEFAULT_NODE_TOKEN_GROUP), group("system:nodes")]}),
        ),
        (
            "kube-system",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "kubeadm:kubelet-config", "namespace": "kube-system"},
                   "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kubelet-config"], "verbs": ["get"]}]}),
        ),
        (
            "kube-system",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "kubeadm:kubelet-config", "namespace": "kube-system"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeadm:kubelet-config"},
                   "subjects": [group(DEFAULT_NODE_TOKEN_GROUP), group("system:nodes")]}),
        ),
        (
            "",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "system:node-bootstrapper"},
                   "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["create", "get", "list", "watch"]}]}),
        ),
        (
            "",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "kubeadm:kubelet-bootstrap"},
                   "roleRef": cluster_role("system:node-bootstrapper"),
                   "subjects": [group(DEFAULT_NODE_TOKEN_GROUP)]}),
        ),
        (
            "",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "kubeadm:get-nodes"},
                   "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}),
        ),
        (
            "",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "kubeadm:get-nodes"},
                   "roleRef": cluster_role("kubeadm:get-nodes"),
                   "subjects": [group(DEFAULT_NODE_TOKEN_GROUP)]}),
        ),
        (
            "",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": NODE_CLIENT_ROLE},
                   "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/nodeclient"], "verbs": ["create"]}]}),
        ),
        (
            "",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "kubeadm:node-autoapprove-bootstrap"},
                   "roleRef": cluster_role(NODE_CLIENT_ROLE),
                   "subjects": [group(DEFAULT_NODE_TOKEN_GROUP)]}),
        ),
    ];
    for (namespace, object) in objects {
        let kind = resource(
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
        );
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if store.get(kind, namespace, name).is_err() {
            let _ = store.create(kind, namespace, object);
        }
    }
}

/// A detached JWS (`<header>..<signature>`) of `content`, HS256 keyed by
/// the token's secret, as `jws.ComputeDetachedSignature` makes it.
pub(crate) fn detached_signature(content: &str, id: &str, secret: &str) -> String {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = b64(format!(r#"{{"alg":"HS256","kid":"{id}"}}"#).as_bytes());
    let payload = b64(content.as_bytes());
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let signature = ring::hmac::sign(&key, format!("{header}.{payload}").as_bytes());
    format!("{header}..{}", b64(signature.as_ref()))
}

/// The bootstrapsigner: `cluster-info` signed by every signing token still
/// good, and by no other.
pub(crate) fn sign_cluster_info(shared: &Shared) {
    let now = crate::tokens::now(shared);
    let config_maps = resource("v1", "ConfigMap");
    let mut store = shared.store.lock().expect("lock");
    let Ok(current) = store.get(config_maps, "kube-public", "cluster-info") else {
        return;
    };
    let Some(kubeconfig) = current.pointer("/data/kubeconfig").and_then(Value::as_str) else {
        return;
    };
    let secrets = store
        .list(resource("v1", "Secret"), Some("kube-system"), None, None)
        .unwrap_or_default();
    let mut data = serde_json::Map::new();
    data.insert("kubeconfig".into(), json!(kubeconfig));
    for secret in secrets {
        let expired = secret_text(&secret, "expiration")
            .and_then(|e| chrono::DateTime::parse_from_rfc3339(&e).ok())
            .is_some_and(|e| e <= now);
        let (Some(id), Some(token_secret)) = (
            secret_text(&secret, "token-id"),
            secret_text(&secret, "token-secret"),
        ) else {
            continue;
        };
        if secret["type"] == "bootstrap.kubernetes.io/token"
            && secret_text(&secret, "usage-bootstrap-signing").as_deref() == Some("true")
            && !expired
        {
            data.insert(
                format!("jws-kubeconfig-{id}"),
                json!(detached_signature(kubeconfig, &id, &token_secret)),
            );
        }
    }
    if current.get("data") != Some(&Value::Object(data.clone())) {
        let mut next = current.clone();
        next["data"] = Value::Object(data);
        let _ = store.replace(config_maps, "kube-public", "cluster-info", next, false);
    }
}

fn requester(csr: &Value) -> (String, Vec<String>) {
    let user = csr
        .pointer("/spec/username")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let groups = csr
        .pointer("/spec/groups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(str::to_string))
        .collect();
    (user, groups)
}

fn condition(csr: &Value, kind: &str) -> bool {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind))
}

/// Whether kube-controller-manager's `csrapproving` controller approves a
/// kubelet client request of `user` in `groups` by itself: they may `create
/// certificatesigningrequests/nodeclient`, as its SubjectAccessReview asks
/// the API server's authorizers (the webhook authorizer when there is one,
/// then RBAC).
pub(crate) async fn auto_approves(shared: &Shared, user: &str, groups: &[String]) -> bool {
    if let Some(authorizer) = &shared.options.authorizer {
        let attributes = json!({
            "verb": "create", "group": "certificates.k8s.io", "version": "v1",
            "resource": "certificatesigningrequests", "subresource": "nodeclient",
            "namespace": "", "name": "",
        });
        if authorizer.denies(user, groups, attributes).await.is_some() {
            return false;
        }
    }
    let request = crate::rbac::Attributes {
        verb: "create".into(),
        group: "certificates.k8s.io".into(),
        resource: "certificatesigningrequests".into(),
        subresource: "nodeclient".into(),
        namespace: String::new(),
        name: String::new(),
    };
    crate::rbac::allows(&shared.store.lock().expect("lock"), user, groups, &request)
}

/// Writes the controller's approval of the request `name`.
pub(crate) fn record_auto_approval(shared: &Shared, name: &str) -> Result<Value, ApiError> {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let approval = json!({"status": {"conditions": [{
        "type": "Approved", "status": "True", "reason": "AutoApproved",
        "message": "Auto approving kubelet client certificate after SubjectAccessReview.",
        "lastUpdateTime": now, "lastTransitionTime": now,
    }]}});
    shared.store.lock().expect("lock").merge_patch(
        resource("certificates.k8s.io/v1", "CertificateSigningRequest"),
        "",
        name,
        &approval,
        true,
    )
}

/// csrapproving: a new kubelet client request is approved at once when its
/// requester may be ([`auto_approves`]).
pub(crate) async fn approve(shared: Arc<Shared>, name: String) {
    let csrs = resource("certificates.k8s.io/v1", "CertificateSigningRequest");
    let Ok(csr) = shared.store.lock().expect("lock").get(csrs, "", &name) else {
        return;
    };
    if csr.pointer("/spec/signerName") != Some(&json!(KUBELET_CLIENT_SIGNER))
        || condition(&csr, "Approved")
        || condition(&csr, "Denied")
    {
        return;
    }
    let (user, groups) = requester(&csr);
    if auto_approves(&shared, &user, &groups).await {
        let _ = record_auto_approval(&shared, &name);
    }
}

/// csrsigning: an approved kubelet client request gets its certificate
/// from the cluster's CA; one that cannot be signed is marked `Failed`.
pub(crate) fn sign(shared: &Shared, name: &str) {
    let csrs = resource("certificates.k8s.io/v1", "CertificateSigningRequest");
    let mut store = shared.store.lock().expect("lock");
    let Ok(csr) = store.get(csrs, "", name) else {
        return;
    };
    if csr.pointer("/spec/signerName") != Some(&json!(KUBELET_CLIENT_SIGNER))
        || !condition(&csr, "Approved")
        || condition(&csr, "Denied")
        || condition(&csr, "Failed")
        || csr.pointer("/status/certificate").is_some()
    {
        return;
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let signed = csr
        .pointer("/spec/request")
        .and_then(Value::as_str)
        .and_then(|b64| engine.decode(b64).ok())
        .and_then(|pem| String::from_utf8(pem).ok())
        .ok_or_else(|| "the request is not base64 PEM".to_string())
        .and_then(|pem| {
            let der = pem
                .lines()
                .filter(|l| !l.starts_with("-----"))
                .collect::<String>();
            engine.decode(der).map_err(|e| e.to_string())
        })
        .and_then(|der| {
            shared
                .authority
                .sign_request(&der)
                .map_err(|e| e.to_string())
        });
    let status = match signed {
        Ok(certificate) => json!({"status": {"certificate": engine.encode(certificate)}}),
        Err(message) => {
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let mut conditions = csr
                .pointer("/status/conditions")
                .cloned()
                .unwrap_or(json!([]));
            if let Some(list) = conditions.as_array_mut() {
                list.push(json!({"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                                 "message": message, "lastUpdateTime": now, "lastTransitionTime": now}));
            }
            json!({"status": {"conditions": conditions}})
        }
    };
    let _ = store.merge_patch(csrs, "", name, &status, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_follow_the_authenticator_s_pattern() {
        assert!(valid_group(DEFAULT_NODE_TOKEN_GROUP));
        assert!(valid_group("system:bootstrappers:kubebyon:join"));
        for bad in [
            "system:masters",
            "system:bootstrappers:",
            "system:bootstrappers:Upper",
            "system:bootstrappers:ends-",
            "system:bootstrappers:with space",
        ] {
            assert!(!valid_group(bad), "{bad}");
        }
    }

    #[test]
    fn the_signature_is_a_detached_hs256_jws_over_the_kubeconfig() {
        // RFC 7515's HS256 construction, checked against an independent
        // HMAC of the signing input.
        let jws = detached_signature("kubeconfig", "abcdef", "0123456789abcdef");
        let (header, signature) = jws.split_once("..").expect("detached");
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(header)
            .unwrap();
        assert_eq!(decoded, br#"{"alg":"HS256","kid":"abcdef"}"#);
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("kubeconfig");
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"0123456789abcdef");
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(signature)
            .unwrap();
        ring::hmac::verify(&key, format!("{header}.{payload}").as_bytes(), &raw).unwrap();
        assert_ne!(
            jws,
            detached_signature("kubeconfig", "abcdef", "0123456789abcdeg")
        );
    }
}
