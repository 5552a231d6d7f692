//! The platform's authorizer inside every cluster: what the tenant's own
//! cluster-admin may not do, because it would switch the platform's limits
//! off.
//!
//! RBAC only adds permissions, so "everything but the platform's objects"
//! cannot be written as a role, and a kubeconfig keeps `cluster-admin` for
//! the tenant's own work. Instead the cluster's API server is started with a
//! structured authorization configuration (`--authorization-config`, a file
//! from a host Secret the tenant cannot reach) whose first authorizer is this
//! webhook, before `Node` and `RBAC`. kube-apiserver asks it a
//! `SubjectAccessReview` for the requests its match conditions select, and a
//! webhook's `denied` ends the chain (kubernetes.io, "Authorization":
//! "Configuring the API Server using an Authorization Config File").
//!
//! It denies, to every identity but the cluster's own components (`system:`
//! users other than service accounts, and the controllers' ServiceAccounts
//! in `kube-system`):
//! - approving or signing certificates (`certificatesigningrequests/approval`,
//!   `signers` `approve`/`sign`): nodes are approved by the platform alone;
//! - the bootstrap auto-approval: kube-controller-manager's `csrapproving`
//!   controller approves a bootstrap request when a SubjectAccessReview for
//!   `create certificatesigningrequests/nodeclient` passes, so denying it to
//!   `system:bootstrappers` makes any binding a tenant adds useless;
//! - changing or deleting the `kubebyon-admission` webhook configuration;
//! - writing Secrets in `kube-system`, where bootstrap tokens live;
//! - minting tokens for ServiceAccounts in `kube-system` (the controllers',
//!   and the platform's `kubebyon-*` of the kubeconfigs, whose tokens would
//!   outlive a kubeconfig's expiry);
//! - writing workloads (Pods, Deployments, StatefulSets, DaemonSets,
//!   ReplicaSets, Jobs, CronJobs) in the namespaces the admission webhook
//!   exempts (`kube-system`, `kube-public`, `kube-node-lease`,
//!   `kubebyon-ingress`), where they would not be weighed;
//! - impersonating the cluster's components (`system:` users other than
//!   service accounts) or its `system:` groups (`system:masters`, which no
//!   authorizer is asked about, `system:nodes`, `system:bootstrappers`).
//!
//! Everything else gets no opinion, and RBAC decides as before.

use serde_json::{Value, json};

use super::{EXEMPT_NAMESPACES, registration, store};
use crate::{
    clusters::Cluster,
    host::{ApiServerFiles, HostCluster},
    jobs::{JobContext, JobError},
};
use registration::CONFIGURATION;

/// The platform's ServiceAccounts in `kube-system` (the kubeconfigs') are
/// named with this prefix.
const PLATFORM_ACCOUNTS: &str = "kubebyon-";

/// The host Secret holding the API server's authorization files, mounted
/// into the control plane at [`MOUNT_PATH`].
pub const SECRET_NAME: &str = "kubebyon-authorization";
pub const MOUNT_PATH: &str = "/etc/kubebyon";
/// The authorization configuration's file in that Secret.
pub const CONFIG_FILE: &str = "authorization.yaml";
/// The kubeconfig the API server reaches the webhook with.
pub const KUBECONFIG_FILE: &str = "authorizer-kubeconfig.yaml";
/// The admission configuration (`--admission-control-config-file`) that
/// gives the API server its credential for the admission webhook.
pub const ADMISSION_CONFIG_FILE: &str = "admission.yaml";
/// The kubeconfig that credential is in.
pub const ADMISSION_KUBECONFIG_FILE: &str = "admission-kubeconfig.yaml";
/// Every file of the Secret: one missing (a Secret written before it was
/// added) makes the files anew.
const FILES: [&str; 4] = [
    CONFIG_FILE,
    KUBECONFIG_FILE,
    ADMISSION_CONFIG_FILE,
    ADMISSION_KUBECONFIG_FILE,
];

/// What the authorizer says of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Deny(&'static str),
    NoOpinion,
}

/// Decides a `SubjectAccessReview`'s `spec`.
pub fn decide(spec: &Value) -> Verdict {
    let user = spec["user"].as_str().unwrap_or_default();
    let in_group = |group: &str| {
        spec["groups"]
            .as_array()
            .is_some_and(|groups| groups.iter().any(|g| g == group))
    };
    let Some(resource) = spec.get("resourceAttributes").filter(|r| r.is_object()) else {
        return Verdict::NoOpinion;
    };
    let field = |name: &str| resource[name].as_str().unwrap_or_default();
    let (verb, group, kind, sub, namespace, name) = (
        field("verb"),
        field("group"),
        field("resource"),
        field("subresource"),
        field("namespace"),
        field("name"),
    );
    let writes = matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    );
    if in_group("system:bootstrappers")
        && group == "certificates.k8s.io"
        && kind == "certificatesigningrequests"
        && sub == "nodeclient"
    {
        return Verdict::Deny("the platform approves each joining node itself");
    }
    // The cluster's own components (kube-controller-manager, kubelets, and
    // the controllers' ServiceAccounts in `kube-system`) pass: their
    // credentials are certificates only the platform approves, or tokens the
    // tenant can neither mint nor mount (both denied below).
    if component_user(user) {
        return Verdict::NoOpinion;
    }
    // Acting as a component or as `system:masters` (which no authorizer is
    // asked about) would step around every rule below.
    if verb == "impersonate" && group.is_empty() {
        let privileged = match kind {
            "users" => component_user(name),
            "serviceaccounts" => namespace == "kube-system" && !name.starts_with(PLATFORM_ACCOUNTS),
            "groups" => {
                name.starts_with("system:")
                    && !matches!(name, "system:authenticated" | "system:serviceaccounts")
                    && !name.starts_with("system:serviceaccounts:")
            }
            _ => false,
        };
        if privileged {
            return Verdict::Deny(
                "acting as the cluster's components or its masters is the platform's alone",
            );
        }
    }
    if group == "certificates.k8s.io"
        && ((kind == "certificatesigningrequests" && sub == "approval")
            || (kind == "signers" && matches!(verb, "approve" | "sign" | "*")))
    {
        return Verdict::Deny("certificates in this cluster are approved by the platform");
    }
    if group == "admissionregistration.k8s.io"
        && kind == "validatingwebhookconfigurations"
        && ((writes && name == CONFIGURATION) || verb == "deletecollection" || verb == "*")
    {
        return Verdict::Deny("the platform's admission webhook enforces the cluster's limits");
    }
    if group.is_empty() && namespace == "kube-system" {
        if kind == "secrets" && (writes || verb == "*") {
            return Verdict::Deny(
                "Secrets in kube-system hold the cluster's bootstrap tokens; they are the platform's",
            );
        }
        if kind == "serviceaccounts" && sub == "token" {
            return Verdict::Deny(
                "tokens for kube-system's ServiceAccounts are the cluster's and the platform's (a kubeconfig's comes with its expiry)",
            );
        }
    }
    let workload = matches!(
        (group, kind),
        ("", "pods")
            | (
                "apps",
                "deployments" | "statefulsets" | "daemonsets" | "replicasets"
            )
            | ("batch", "jobs" | "cronjobs")
    );
    if workload
        && sub.is_empty()
        && (writes || verb == "*")
        && EXEMPT_NAMESPACES.contains(&namespace)
    {
        return Verdict::Deny(
            "the cluster's own namespaces are not weighed against its limits, so they are the platform's: run workloads in a namespace of your own",
        );
    }
    Verdict::NoOpinion
}

/// Whether `user` is one of the cluster's components: a `system:` user that
/// is not a service account, or a ServiceAccount of `kube-system` other
/// than the platform's (the controllers').
fn component_user(user: &str) -> bool {
    match user.strip_prefix("system:serviceaccount:") {
        Some(account) => account
            .strip_prefix("kube-system:")
            .is_some_and(|name| !name.starts_with(PLATFORM_ACCOUNTS)),
        None => user.starts_with("system:"),
    }
}

/// The `SubjectAccessReview` answered for `verdict`.
pub fn answer(verdict: &Verdict) -> Value {
    let status = match verdict {
        Verdict::Deny(reason) => json!({ "allowed": false, "denied": true, "reason": reason }),
        Verdict::NoOpinion => json!({ "allowed": false }),
    };
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "status": status,
    })
}

/// The API server's `AuthorizationConfiguration`: this webhook first, asked
/// only about what it decides (failing closed for those), then `Node` and
/// `RBAC` as vCluster's API server has them.
pub fn configuration() -> String {
    format!(
        r#"apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
- type: Webhook
  name: kubebyon
  webhook:
    timeout: 5s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: Deny
    authorizedTTL: 1s
    unauthorizedTTL: 1s
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: {MOUNT_PATH}/{KUBECONFIG_FILE}
    matchConditions:
    - expression: has(request.resourceAttributes)
    - expression: >-
        request.resourceAttributes.verb == 'impersonate'
        || request.resourceAttributes.group in ['certificates.k8s.io', 'admissionregistration.k8s.io']
        || (has(request.resourceAttributes.namespace)
            && request.resourceAttributes.namespace in ['kube-system', 'kube-public', 'kube-node-lease', 'kubebyon-ingress'])
- type: Node
  name: node
- type: RBAC
  name: rbac
"#
    )
}

/// The kubeconfig the API server calls the webhook with: the platform's URL
/// for the cluster, its bearer token, and the CA to trust when given.
pub fn kubeconfig(url: &str, token: &str, ca_pem: Option<&str>) -> String {
    use base64::Engine;
    let ca = ca_pem
        .map(|pem| {
            format!(
                "\n    certificate-authority-data: {}",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubebyon\n  cluster:\n    server: {url}{ca}\nusers:\n- name: kubebyon\n  user:\n    token: {token}\ncontexts:\n- name: kubebyon\n  context:\n    cluster: kubebyon\n    user: kubebyon\ncurrent-context: kubebyon\n"
    )
}

/// The API server's `AdmissionConfiguration`: `ValidatingAdmissionWebhook`
/// presents the credentials of [`ADMISSION_KUBECONFIG_FILE`] to webhooks
/// (kubernetes.io, "Dynamic Admission Control": "Authenticate API servers").
pub fn admission_configuration() -> String {
    format!(
        r#"apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: {MOUNT_PATH}/{ADMISSION_KUBECONFIG_FILE}
"#
    )
}

/// The `host:port` of the platform's URL `base` as kube-apiserver names a
/// webhook's credentials: an exact match of the webhook URL's host and port,
/// 443 when it has none (k8s.io/apiserver `pkg/util/webhook`, client.go and
/// authentication.go). `None` for what is not a URL with a host.
pub fn webhook_host(base: &str) -> Option<String> {
    let url = url::Url::parse(base).ok()?;
    let host = match url.host()? {
        url::Host::Ipv6(address) => format!("[{address}]"),
        host => host.to_string(),
    };
    Some(format!("{host}:{}", url.port().unwrap_or(443)))
}

/// The kubeconfig of the admission webhook's credential: one user named by
/// the webhook's [`webhook_host`]. No wildcard: a webhook the tenant
/// registers at another host never receives the token.
pub fn admission_kubeconfig(webhook_host: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nusers:\n- name: '{webhook_host}'\n  user:\n    token: {token}\n"
    )
}

/// Where a cluster's API server sends its access reviews.
pub fn url(base: &str, cluster_id: uuid::Uuid) -> String {
    format!(
        "{}/api/admission/{cluster_id}/authorize",
        base.trim_end_matches('/')
    )
}

// The stage the create and update jobs record while they configure the
// authorizer (a job that calls [`prepare`] names it in its handler's stages).
crate::stages! {
    CONFIGURING = "configuring the platform's authorizer";
}

/// Makes sure the cluster's host namespace holds the API server's files —
/// the authorizer's configuration and the admission configuration, both
/// with the cluster's own token and the platform's current webhook host
/// (made anew only when a file is missing or they name another host: the
/// API server reads them when it starts) — and says what to start the API
/// server with. `None` when the platform has no HTTPS URL to be called at,
/// as for the webhook.
pub async fn prepare(
    ctx: &JobContext,
    host: &HostCluster,
    cluster: &Cluster,
) -> Result<Option<ApiServerFiles>, JobError> {
    let Some(base) = registration::base_url(&ctx.pool, host).await? else {
        return Ok(None);
    };
    let Some(webhook_host) = webhook_host(&base) else {
        return Ok(None);
    };
    let files = ApiServerFiles {
        secret: SECRET_NAME,
        mount_path: MOUNT_PATH,
        args: vec![
            format!("--authorization-config={MOUNT_PATH}/{CONFIG_FILE}"),
            format!("--admission-control-config-file={MOUNT_PATH}/{ADMISSION_CONFIG_FILE}"),
        ],
    };
    let keys = ctx
        .step(CONFIGURING, host.secret_keys(cluster, SECRET_NAME))
        .await?
        .unwrap_or_default();
    let complete = FILES.iter().all(|file| keys.iter().any(|k| k == file));
    if complete && store::has_authorizer(&ctx.pool, cluster.id, &webhook_host).await? {
        return Ok(Some(files));
    }
    let token = store::issue_authorizer_token(&ctx.pool, cluster.id, &webhook_host).await?;
    let connection = kubeconfig(
        &url(&base, cluster.id),
        &token,
        host.settings().admission_ca_pem.as_deref(),
    );
    ctx.step(
        CONFIGURING,
        host.apply_secret(
            cluster,
            SECRET_NAME,
            &[
                (CONFIG_FILE, configuration()),
                (KUBECONFIG_FILE, connection),
                (ADMISSION_CONFIG_FILE, admission_configuration()),
                (
                    ADMISSION_KUBECONFIG_FILE,
                    admission_kubeconfig(&webhook_host, &token),
                ),
            ],
        ),
    )
    .await?;
    Ok(Some(files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admission_credential_is_named_by_the_webhooks_exact_host_and_port() {
        assert_eq!(
            webhook_host("https://platform.example/").as_deref(),
            Some("platform.example:443")
        );
        assert_eq!(
            webhook_host("https://platform.example:8443/kubebyon").as_deref(),
            Some("platform.example:8443")
        );
        assert_eq!(
            webhook_host("https://[2001:db8::1]/").as_deref(),
            Some("[2001:db8::1]:443")
        );
        assert_eq!(webhook_host("not a url"), None);
        let kubeconfig = admission_kubeconfig("platform.example:443", "t0ken");
        assert!(kubeconfig.contains("- name: 'platform.example:443'\n  user:\n    token: t0ken\n"));
        assert!(!kubeconfig.contains('*'), "no wildcard user");
        assert!(admission_configuration().contains(&format!(
            "kubeConfigFile: {MOUNT_PATH}/{ADMISSION_KUBECONFIG_FILE}"
        )));
    }

    fn review(user: &str, groups: &[&str], attributes: Value) -> Value {
        json!({ "user": user, "groups": groups, "resourceAttributes": attributes })
    }

    const TENANT: &str = "system:serviceaccount:kube-system:kubebyon-user-0a";

    #[test]
    fn the_tenant_keeps_its_workloads_and_loses_the_platforms_levers() {
        let allowed = [
            json!({"verb": "create", "group": "apps", "resource": "deployments", "namespace": "shop"}),
            json!({"verb": "create", "resource": "secrets", "namespace": "shop"}),
            json!({"verb": "get", "resource": "secrets", "namespace": "kube-system", "name": "x"}),
            json!({"verb": "create", "group": "rbac.authorization.k8s.io", "resource": "clusterrolebindings"}),
            json!({"verb": "create", "group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations"}),
            json!({"verb": "delete", "group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations", "name": "theirs"}),
            json!({"verb": "create", "group": "certificates.k8s.io", "resource": "certificatesigningrequests"}),
            json!({"verb": "create", "resource": "serviceaccounts", "subresource": "token", "namespace": "shop", "name": "ci"}),
            json!({"verb": "impersonate", "resource": "users", "name": "alice"}),
            json!({"verb": "impersonate", "resource": "users", "name": "system:serviceaccount:shop:ci"}),
            json!({"verb": "impersonate", "resource": "groups", "name": "system:authenticated"}),
            json!({"verb": "impersonate", "resource": "serviceaccounts", "namespace": "shop", "name": "ci"}),
        ];
        for attributes in allowed {
            assert_eq!(
                decide(&review(
                    TENANT,
                    &["system:serviceaccounts"],
                    attributes.clone()
                )),
                Verdict::NoOpinion,
                "{attributes}"
            );
        }
        let denied = [
            json!({"verb": "delete", "group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations", "name": "kubebyon-admission"}),
            json!({"verb": "patch", "group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations", "name": "kubebyon-admission"}),
            json!({"verb": "deletecollection", "group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations"}),
            json!({"verb": "create", "resource": "secrets", "namespace": "kube-system"}),
            json!({"verb": "delete", "resource": "secrets", "namespace": "kube-system", "name": "bootstrap-token-abcdef"}),
            json!({"verb": "update", "group": "certificates.k8s.io", "resource": "certificatesigningrequests", "subresource": "approval", "name": "node-csr-1"}),
            json!({"verb": "approve", "group": "certificates.k8s.io", "resource": "signers", "name": "kubernetes.io/kube-apiserver-client-kubelet"}),
            json!({"verb": "create", "resource": "serviceaccounts", "subresource": "token", "namespace": "kube-system", "name": "kubebyon-user-0a"}),
            json!({"verb": "impersonate", "resource": "users", "name": "system:kube-controller-manager"}),
            json!({"verb": "impersonate", "resource": "users", "name": "system:node:worker-1"}),
            json!({"verb": "impersonate", "resource": "groups", "name": "system:masters"}),
            json!({"verb": "impersonate", "resource": "groups", "name": "system:bootstrappers"}),
            json!({"verb": "impersonate", "resource": "users", "name": "system:serviceaccount:kube-system:certificate-controller"}),
            json!({"verb": "impersonate", "resource": "serviceaccounts", "namespace": "kube-system", "name": "certificate-controller"}),
            json!({"verb": "create", "resource": "serviceaccounts", "subresource": "token", "namespace": "kube-system", "name": "coredns"}),
            json!({"verb": "create", "group": "apps", "resource": "deployments", "namespace": "kube-system"}),
            json!({"verb": "create", "resource": "pods", "namespace": "kubebyon-ingress"}),
            json!({"verb": "patch", "group": "batch", "resource": "cronjobs", "namespace": "kube-public", "name": "x"}),
        ];
        for attributes in denied {
            assert!(
                matches!(
                    decide(&review(
                        TENANT,
                        &["system:serviceaccounts"],
                        attributes.clone()
                    )),
                    Verdict::Deny(_)
                ),
                "{attributes}"
            );
            // A user the tenant names itself is no component.
            assert!(matches!(
                decide(&review("alice", &[], attributes.clone())),
                Verdict::Deny(_)
            ));
        }
    }

    #[test]
    fn bootstrap_requests_are_never_auto_approved_and_components_pass() {
        let nodeclient = json!({"verb": "create", "group": "certificates.k8s.io",
            "resource": "certificatesigningrequests", "subresource": "nodeclient"});
        assert!(matches!(
            decide(&review(
                "system:bootstrap:abcdef",
                &[
                    "system:bootstrappers",
                    "system:bootstrappers:kubeadm:default-node-token"
                ],
                nodeclient.clone()
            )),
            Verdict::Deny(_)
        ));
        // A node renewing its own certificate, the controller manager
        // approving: components are not the tenant.
        let renew = json!({"verb": "create", "group": "certificates.k8s.io",
            "resource": "certificatesigningrequests", "subresource": "selfnodeclient"});
        assert_eq!(
            decide(&review("system:node:w1", &["system:nodes"], renew)),
            Verdict::NoOpinion
        );
        let approve = json!({"verb": "update", "group": "certificates.k8s.io",
            "resource": "certificatesigningrequests", "subresource": "approval"});
        for controller in [
            "system:kube-controller-manager",
            "system:serviceaccount:kube-system:certificate-controller",
        ] {
            assert_eq!(
                decide(&review(controller, &[], approve.clone())),
                Verdict::NoOpinion,
                "{controller}"
            );
        }
        let pods = json!({"verb": "create", "resource": "pods", "namespace": "kube-system"});
        assert_eq!(
            decide(&review(
                "system:serviceaccount:kube-system:replicaset-controller",
                &[],
                pods
            )),
            Verdict::NoOpinion
        );
        assert_eq!(
            decide(
                &json!({"user": TENANT, "nonResourceAttributes": {"path": "/api", "verb": "get"}})
            ),
            Verdict::NoOpinion
        );
    }

    #[test]
    fn the_files_name_each_other_and_the_answer_is_a_review() {
        let config = configuration();
        assert!(config.contains(&format!("kubeConfigFile: {MOUNT_PATH}/{KUBECONFIG_FILE}")));
        assert!(config.find("type: Webhook") < config.find("type: RBAC"));
        assert!(config.contains("failurePolicy: Deny"));
        let kubeconfig = kubeconfig(
            "https://p.example/api/admission/x/authorize",
            "t0k",
            Some("PEM"),
        );
        assert!(kubeconfig.contains("token: t0k"));
        assert!(kubeconfig.contains("certificate-authority-data: UEVN"));
        assert_eq!(
            answer(&Verdict::Deny("no"))["status"],
            json!({"allowed": false, "denied": true, "reason": "no"})
        );
        assert_eq!(
            answer(&Verdict::NoOpinion)["status"],
            json!({"allowed": false})
        );
    }
}
