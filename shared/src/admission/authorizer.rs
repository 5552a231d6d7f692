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
//! Only the control plane's own identities are trusted
//! ([`Identity::ControlPlane`]): the users of the processes that run beside
//! the API server on the platform's host (`system:kube-controller-manager`,
//! `system:kube-scheduler`, `system:apiserver`,
//! `system:konnectivity-server`) and kube-controller-manager's controllers'
//! ServiceAccounts in `kube-system` (`certificate-controller`,
//! `replicaset-controller`, … — their tokens are asked for by the
//! controller manager and never mounted into a pod). The platform itself
//! acts with the cluster's admin credential (`system:masters`), which no
//! authorizer is asked about. A node's kubelet (`system:node:<name>`, group
//! `system:nodes`) is **not** trusted: its client certificate is on a
//! machine the tenant holds root on, and so are the tokens of the pods in
//! `kube-system` that run there (CoreDNS, kube-proxy, the ingress). It is
//! denied what the tenant is ([`Identity::Node`] keeps only what a kubelet
//! does for the pods it runs: tokens for their ServiceAccounts, deleting
//! them when they end).
//!
//! To every other identity it denies:
//! - approving or signing certificates (`certificatesigningrequests/approval`,
//!   `signers` `approve`/`sign`): nodes are approved by the platform alone,
//!   and the control plane approves only kubelets' own renewals — approving
//!   for any other signer (`kube-apiserver-client`, which signs any user
//!   name) is refused to everyone the authorizer is asked about;
//! - the bootstrap auto-approval: kube-controller-manager's `csrapproving`
//!   controller approves a bootstrap request when a SubjectAccessReview for
//!   `create certificatesigningrequests/nodeclient` passes, so denying it to
//!   `system:bootstrappers` makes any binding a tenant adds useless;
//! - changing or deleting the `kubebyon-admission` webhook configuration;
//! - writing Secrets in `kube-system`, where bootstrap tokens live;
//! - minting tokens for ServiceAccounts in `kube-system` (the controllers',
//!   and the platform's `kubebyon-*` of the kubeconfigs, whose tokens would
//!   outlive a kubeconfig's expiry);
//! - in the namespaces the admission webhook exempts (`kube-system`,
//!   `kube-public`, `kube-node-lease`, `kubebyon-ingress`), where nothing is
//!   weighed: writing workloads (Pods, ReplicationControllers, Deployments,
//!   StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs), scaling them,
//!   adding ephemeral containers, and exec, attach or port-forward into
//!   their pods;
//! - impersonating the cluster's components, its nodes or controllers, or
//!   its `system:` groups (`system:masters`, which no authorizer is asked
//!   about, `system:nodes`, `system:bootstrappers`).
//!
//! Bindings that would grant rights to those identities are refused by the
//! admission webhook, which sees their subjects.
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

/// Who asks, as far as the platform trusts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// One of the control plane's own processes or controllers.
    ControlPlane,
    /// A node's kubelet: a credential on a machine the tenant holds.
    Node,
    /// Anyone else: the tenant, its workloads, its kubeconfigs.
    Other,
}

/// The users of the control plane's processes, which run on the platform's
/// host beside the API server: kube-controller-manager and kube-scheduler
/// in every engine, konnectivity's server in Kamaji's control plane, the
/// API server's own loopback client.
const CONTROL_PLANE_USERS: &[&str] = &[
    "system:apiserver",
    "system:kube-controller-manager",
    "system:kube-scheduler",
    "system:konnectivity-server",
];

/// kube-controller-manager's controllers: with
/// `--use-service-account-credentials` (kubeadm's and Kamaji's default)
/// each acts as the ServiceAccount of its name in `kube-system` (kubernetes
/// `plugin/pkg/auth/authorizer/rbac/bootstrappolicy`, `controller_policy.go`
/// and `namespace_policy.go`).
const CONTROLLERS: &[&str] = &[
    "attachdetach-controller",
    "bootstrap-signer",
    "certificate-controller",
    "clusterrole-aggregation-controller",
    "cronjob-controller",
    "daemon-set-controller",
    "deployment-controller",
    "device-taint-eviction-controller",
    "disruption-controller",
    "endpoint-controller",
    "endpointslice-controller",
    "endpointslicemirroring-controller",
    "ephemeral-volume-controller",
    "expand-controller",
    "generic-garbage-collector",
    "horizontal-pod-autoscaler",
    "job-controller",
    "legacy-service-account-token-cleaner",
    "namespace-controller",
    "node-controller",
    "persistent-volume-binder",
    "pod-garbage-collector",
    "pv-protection-controller",
    "pvc-protection-controller",
    "replicaset-controller",
    "replication-controller",
    "resource-claim-controller",
    "resourcequota-controller",
    "root-ca-cert-publisher",
    "route-controller",
    "selinux-warning-controller",
    "service-account-controller",
    "service-cidrs-controller",
    "service-controller",
    "statefulset-controller",
    "token-cleaner",
    "ttl-after-finished-controller",
    "ttl-controller",
    "validatingadmissionpolicy-status-controller",
    "volumeattributesclass-protection-controller",
];

/// The one signer whose requests the control plane approves: kubelets'
/// client certificates (their renewals; a joining node's is approved by the
/// platform). The API server also asks about `kubernetes.io/*`.
const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

impl Identity {
    /// The identity of `user`.
    pub fn of(user: &str) -> Self {
        if CONTROL_PLANE_USERS.contains(&user) {
            return Self::ControlPlane;
        }
        if user.starts_with("system:node:") {
            return Self::Node;
        }
        match user.strip_prefix("system:serviceaccount:kube-system:") {
            Some(name) if CONTROLLERS.contains(&name) => Self::ControlPlane,
            _ => Self::Other,
        }
    }
}

/// Whether a subject (`User`, `Group` or `ServiceAccount`, as RBAC names
/// them) is an identity the platform relies on: a component, a node, a
/// controller or any of `kube-system`'s accounts, the bootstrappers, the
/// masters or another `system:` group. Impersonating it, or binding rights
/// to it, is refused.
pub fn privileged_subject(kind: &str, namespace: &str, name: &str) -> bool {
    match kind {
        "User" => {
            Identity::of(name) != Identity::Other
                || name.starts_with("system:bootstrap:")
                || name.starts_with("system:serviceaccount:kube-system:")
                || (name.starts_with("system:") && !name.starts_with("system:serviceaccount:"))
        }
        "Group" => {
            name.starts_with("system:")
                && !matches!(name, "system:authenticated" | "system:serviceaccounts")
                && !name.starts_with("system:serviceaccounts:")
        }
        "ServiceAccount" => namespace == "kube-system",
        _ => false,
    }
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
        "create" | "update" | "patch" | "delete" | "deletecollection" | "*"
    );
    if in_group("system:bootstrappers")
        && group == "certificates.k8s.io"
        && kind == "certificatesigningrequests"
        && sub == "nodeclient"
    {
        return Verdict::Deny("the platform approves each joining node itself");
    }
    // Approving for a signer other than the kubelets' is the platform's
    // alone (as `system:masters`), whoever asks.
    if group == "certificates.k8s.io"
        && kind == "signers"
        && matches!(verb, "approve" | "*")
        && !matches!(name, KUBELET_CLIENT_SIGNER | "kubernetes.io/*")
    {
        return Verdict::Deny(
            "certificates in this cluster are approved by the platform; its control plane approves kubelets' renewals only",
        );
    }
    let identity = Identity::of(user);
    // The control plane's own processes and controllers pass: no credential
    // of theirs is on a machine the tenant holds, and the tenant can neither
    // mint nor mount one (denied below).
    if identity == Identity::ControlPlane {
        return Verdict::NoOpinion;
    }
    // Acting as a component, a node or `system:masters` (which no
    // authorizer is asked about) would step around every rule below.
    if verb == "impersonate" && group.is_empty() {
        let subject = match kind {
            "users" => Some("User"),
            "serviceaccounts" => Some("ServiceAccount"),
            "groups" => Some("Group"),
            _ => None,
        };
        if subject.is_some_and(|subject| privileged_subject(subject, namespace, name)) {
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
        if kind == "secrets" && writes {
            return Verdict::Deny(
                "Secrets in kube-system hold the cluster's bootstrap tokens; they are the platform's",
            );
        }
        // A kubelet asks for the tokens of the pods it runs (CoreDNS's,
        // kube-proxy's), never for a controller's or the platform's.
        let a_pods_account = identity == Identity::Node
            && !name.starts_with(PLATFORM_ACCOUNTS)
            && !CONTROLLERS.contains(&name);
        if kind == "serviceaccounts" && sub == "token" && !a_pods_account {
            return Verdict::Deny(
                "tokens for kube-system's ServiceAccounts are the cluster's and the platform's (a kubeconfig's comes with its expiry)",
            );
        }
    }
    if EXEMPT_NAMESPACES.contains(&namespace) && unweighed(identity, verb, group, kind, sub) {
        return Verdict::Deny(
            "the cluster's own namespaces are not weighed against its limits, so they are the platform's: run workloads in a namespace of your own",
        );
    }
    Verdict::NoOpinion
}

/// Whether a request would run something the admission webhook does not
/// weigh (in an exempt namespace): a workload written or scaled, an
/// ephemeral container added, a command run in a pod. A kubelet still
/// deletes the pods it ran.
fn unweighed(identity: Identity, verb: &str, group: &str, kind: &str, sub: &str) -> bool {
    let workload = matches!(
        (group, kind),
        ("", "pods" | "replicationcontrollers")
            | (
                "apps",
                "deployments" | "statefulsets" | "daemonsets" | "replicasets"
            )
            | ("batch", "jobs" | "cronjobs")
    );
    let writes = match identity {
        Identity::Node => matches!(verb, "create" | "update" | "patch" | "*"),
        _ => matches!(
            verb,
            "create" | "update" | "patch" | "delete" | "deletecollection" | "*"
        ),
    };
    let runs_in_pod = group.is_empty()
        && kind == "pods"
        && matches!(
            sub,
            "exec" | "attach" | "portforward" | "ephemeralcontainers"
        );
    (workload && writes && matches!(sub, "" | "scale")) || runs_in_pod
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

    fn denied(user: &str, groups: &[&str], attributes: &Value) -> bool {
        matches!(
            decide(&review(user, groups, attributes.clone())),
            Verdict::Deny(_)
        )
    }

    #[test]
    fn a_nodes_credential_and_kube_systems_pods_are_the_tenants_not_the_control_planes() {
        // What root on a node yields: the kubelet's certificate, and the
        // tokens of the kube-system pods it runs.
        let node = (
            "system:node:worker-1",
            &["system:nodes", "system:authenticated"][..],
        );
        let coredns = (
            "system:serviceaccount:kube-system:coredns",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
            ][..],
        );
        let levers = [
            json!({"verb": "update", "group": "certificates.k8s.io", "resource": "certificatesigningrequests", "subresource": "approval", "name": "csr-masters"}),
            json!({"verb": "approve", "group": "certificates.k8s.io", "resource": "signers", "name": "kubernetes.io/kube-apiserver-client"}),
            json!({"verb": "approve", "group": "certificates.k8s.io", "resource": "signers", "name": "kubernetes.io/kube-apiserver-client-kubelet"}),
            json!({"verb": "sign", "group": "certificates.k8s.io", "resource": "signers", "name": "kubernetes.io/kube-apiserver-client"}),
            json!({"verb": "delete", "group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations", "name": "kubebyon-admission"}),
            json!({"verb": "create", "resource": "secrets", "namespace": "kube-system", "name": "bootstrap-token-abcdef"}),
            json!({"verb": "create", "resource": "serviceaccounts", "subresource": "token", "namespace": "kube-system", "name": "certificate-controller"}),
            json!({"verb": "create", "resource": "serviceaccounts", "subresource": "token", "namespace": "kube-system", "name": "kubebyon-user-0a"}),
            json!({"verb": "create", "resource": "pods", "namespace": "kube-system"}),
            json!({"verb": "impersonate", "resource": "groups", "name": "system:masters"}),
            json!({"verb": "impersonate", "resource": "users", "name": "system:kube-controller-manager"}),
        ];
        for attributes in &levers {
            for (user, groups) in [node, coredns] {
                assert!(denied(user, groups, attributes), "{user}: {attributes}");
            }
        }
        // What a kubelet does for the pods it runs stays open to it.
        for attributes in [
            json!({"verb": "create", "resource": "serviceaccounts", "subresource": "token", "namespace": "kube-system", "name": "coredns"}),
            json!({"verb": "delete", "resource": "pods", "namespace": "kube-system", "name": "coredns-1"}),
            json!({"verb": "patch", "resource": "pods", "subresource": "status", "namespace": "kube-system", "name": "coredns-1"}),
            json!({"verb": "create", "group": "certificates.k8s.io", "resource": "certificatesigningrequests", "subresource": "selfnodeclient"}),
        ] {
            assert!(!denied(node.0, node.1, &attributes), "{attributes}");
        }
        // A pod's token is no kubelet's.
        let coredns_token = json!({"verb": "create", "resource": "serviceaccounts", "subresource": "token", "namespace": "kube-system", "name": "coredns"});
        assert!(denied(coredns.0, coredns.1, &coredns_token));
    }

    #[test]
    fn the_control_plane_approves_kubelets_renewals_and_no_other_signer() {
        let controller = "system:serviceaccount:kube-system:certificate-controller";
        let approve = |signer: &str| json!({"verb": "approve", "group": "certificates.k8s.io", "resource": "signers", "name": signer});
        for signer in [
            "kubernetes.io/kube-apiserver-client-kubelet",
            "kubernetes.io/*",
        ] {
            assert!(!denied(controller, &[], &approve(signer)), "{signer}");
        }
        for signer in [
            "kubernetes.io/kube-apiserver-client",
            "kubernetes.io/kubelet-serving",
            "example.com/anything",
            "*",
        ] {
            for user in [controller, "system:kube-controller-manager", TENANT] {
                assert!(denied(user, &[], &approve(signer)), "{user}: {signer}");
            }
        }
        // A controller's name outside kube-system is the tenant's.
        assert!(denied(
            "system:serviceaccount:shop:certificate-controller",
            &[],
            &approve("kubernetes.io/kube-apiserver-client-kubelet")
        ));
    }

    #[test]
    fn nothing_runs_unweighed_in_the_exempt_namespaces() {
        for namespace in ["kube-system", "kubebyon-ingress"] {
            for attributes in [
                json!({"verb": "create", "resource": "replicationcontrollers", "namespace": namespace}),
                json!({"verb": "update", "group": "apps", "resource": "deployments", "subresource": "scale", "namespace": namespace, "name": "coredns"}),
                json!({"verb": "patch", "resource": "replicationcontrollers", "subresource": "scale", "namespace": namespace, "name": "x"}),
                json!({"verb": "patch", "resource": "pods", "subresource": "ephemeralcontainers", "namespace": namespace, "name": "coredns-1"}),
                json!({"verb": "create", "resource": "pods", "subresource": "exec", "namespace": namespace, "name": "coredns-1"}),
                json!({"verb": "get", "resource": "pods", "subresource": "exec", "namespace": namespace, "name": "coredns-1"}),
                json!({"verb": "create", "resource": "pods", "subresource": "attach", "namespace": namespace, "name": "coredns-1"}),
                json!({"verb": "create", "resource": "pods", "subresource": "portforward", "namespace": namespace, "name": "coredns-1"}),
            ] {
                assert!(denied(TENANT, &[], &attributes), "{attributes}");
            }
        }
        for attributes in [
            json!({"verb": "create", "resource": "pods", "subresource": "exec", "namespace": "shop", "name": "web-1"}),
            json!({"verb": "update", "group": "apps", "resource": "deployments", "subresource": "scale", "namespace": "shop", "name": "web"}),
            json!({"verb": "get", "group": "apps", "resource": "deployments", "subresource": "scale", "namespace": "kube-system", "name": "coredns"}),
            json!({"verb": "get", "resource": "pods", "subresource": "log", "namespace": "kube-system", "name": "coredns-1"}),
        ] {
            assert!(!denied(TENANT, &[], &attributes), "{attributes}");
        }
    }

    #[test]
    fn the_identities_the_platform_relies_on_are_privileged_subjects() {
        for (kind, namespace, name) in [
            ("Group", "", "system:nodes"),
            ("Group", "", "system:masters"),
            ("Group", "", "system:bootstrappers"),
            (
                "Group",
                "",
                "system:bootstrappers:kubeadm:default-node-token",
            ),
            ("User", "", "system:node:worker-1"),
            ("User", "", "system:kube-controller-manager"),
            ("User", "", "system:bootstrap:abcdef"),
            (
                "User",
                "",
                "system:serviceaccount:kube-system:certificate-controller",
            ),
            ("User", "", "system:serviceaccount:kube-system:coredns"),
            ("ServiceAccount", "kube-system", "certificate-controller"),
            ("ServiceAccount", "kube-system", "kubebyon-user-0a"),
        ] {
            assert!(privileged_subject(kind, namespace, name), "{kind} {name}");
        }
        for (kind, namespace, name) in [
            ("Group", "", "system:authenticated"),
            ("Group", "", "system:serviceaccounts:shop"),
            ("Group", "", "developers"),
            ("User", "", "alice"),
            ("User", "", "system:serviceaccount:shop:ci"),
            ("ServiceAccount", "shop", "certificate-controller"),
        ] {
            assert!(!privileged_subject(kind, namespace, name), "{kind} {name}");
        }
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
