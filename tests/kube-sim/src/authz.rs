//! kube-apiserver's webhook authorizer, as a structured authorization
//! configuration (`--authorization-config`) sets it up ahead of RBAC: for a
//! request of an identity other than the cluster's admin, the API server
//! posts an `authorization.k8s.io/v1` `SubjectAccessReview` to the webhook
//! named in the configuration (its kubeconfig: server, CA, bearer token);
//! `denied` refuses the request with the webhook's reason, anything else
//! goes on to RBAC (which the simulator does not check), and a webhook that
//! cannot be asked refuses it (`failurePolicy: Deny`). Impersonation headers
//! are authorized the same way (`impersonate` on each user and group) before
//! the request is served as the impersonated identity. kube-controller-manager's
//! `csrapproving` controller asks the same chain before it approves.
//!
//! The configuration comes from the flags and files the control plane's API
//! server is started with, as its engine builds them from the object the
//! platform writes (a vCluster chart's values, a Kamaji
//! `TenantControlPlane`; [`ApiServerFiles`]); the admission webhooks'
//! credentials come the same way ([`WebhookCredentials`]). An API server
//! whose flags or files kube-apiserver refuses does not start
//! ([`ApiServerFiles::start_refusal`]).
//! Simplification: the configuration's `matchConditions` (CEL) are not
//! evaluated; every request of such an identity is asked about, and the
//! webhook answers what it does not decide with no opinion.

use base64::Engine;
use serde_json::{Value, json};

use crate::{
    registry,
    store::{Store, secret_text},
};

/// The webhook an API server asks.
#[derive(Debug, Clone)]
pub struct Authorizer {
    url: String,
    token: String,
    client: reqwest::Client,
}

fn yaml(text: &str) -> Option<Value> {
    serde_saphyr::from_str::<Value>(text).ok()
}

/// The API server's command-line flags, and the files mounted into it from
/// host Secrets: from a vCluster chart's values ([`Self::from_chart`]) or a
/// Kamaji `TenantControlPlane` ([`Self::from_tenant_control_plane`]).
pub(crate) struct ApiServerFiles {
    args: Vec<String>,
    /// (mount path, the Secret mounted there)
    mounts: Vec<(String, Value)>,
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A flag's name: `--name` of `--name=value`.
fn flag_name(arg: &str) -> &str {
    arg.split_once('=').map_or(arg, |(name, _)| name)
}

/// The Secrets `mounts` (volume mounts) reach through `volumes`.
fn mounted(
    store: &Store,
    namespace: &str,
    volumes: &[Value],
    mounts: &[Value],
) -> Vec<(String, Value)> {
    let secrets = registry::find_kind("v1", "Secret").expect("registered");
    mounts
        .iter()
        .filter_map(|mount| {
            let secret_name = volumes
                .iter()
                .find(|v| v["name"] == mount["name"])?
                .pointer("/secret/secretName")?
                .as_str()?;
            let secret = store.get(secrets, namespace, secret_name).ok()?;
            Some((mount["mountPath"].as_str()?.to_string(), secret))
        })
        .collect()
}

/// vCluster's k8s distro's kube-apiserver flags (loft-sh/vcluster v0.29.1
/// `pkg/k8s/k8s.go`, embedded kine, private nodes), the paths elided.
const VCLUSTER_API_SERVER_FLAGS: &[&str] = &[
    "--bind-address=127.0.0.1",
    "--allow-privileged=true",
    "--authorization-mode=Node,RBAC",
    "--client-ca-file=/data/pki/client-ca.crt",
    "--enable-bootstrap-token-auth=true",
    "--etcd-servers=unix:///data/kine.sock",
    "--secure-port=6443",
    "--profiling=false",
    "--advertise-address=127.0.0.1",
    "--endpoint-reconciler-type=none",
    "--enable-admission-plugins=NodeRestriction",
];

impl ApiServerFiles {
    /// vCluster: `controlPlane.distro.k8s.apiServer.command` when given
    /// (the whole command line), else the distro's own flags; then
    /// `extraArgs` merged over them by flag name (`command.MergeArgs`: a
    /// flag of the same name is replaced, nothing is removed). Files come
    /// from `controlPlane.statefulSet.persistence.addVolumes` and
    /// `addVolumeMounts`.
    pub(crate) fn from_chart(store: &Store, namespace: &str, values: &Value) -> Self {
        let api_server = values.pointer("/controlPlane/distro/k8s/apiServer");
        let command = strings(api_server.and_then(|a| a.get("command")));
        let base: Vec<String> = match command.split_first() {
            Some((_binary, flags)) => flags.to_vec(),
            None => VCLUSTER_API_SERVER_FLAGS
                .iter()
                .map(|f| f.to_string())
                .collect(),
        };
        let extra = strings(api_server.and_then(|a| a.get("extraArgs")));
        let mut args: Vec<String> = base
            .into_iter()
            .filter(|arg| !extra.iter().any(|e| flag_name(e) == flag_name(arg)))
            .collect();
        args.extend(extra);
        let persistence = values.pointer("/controlPlane/statefulSet/persistence");
        let list = |key: &str| {
            persistence
                .and_then(|p| p[key].as_array().cloned())
                .unwrap_or_default()
        };
        let mounts = mounted(
            store,
            namespace,
            &list("addVolumes"),
            &list("addVolumeMounts"),
        );
        Self { args, mounts }
    }

    /// Kamaji (clastix/kamaji 26.8.2-edge,
    /// `internal/builders/controlplane/deployment.go`,
    /// `buildKubeAPIServerCommand`): managed flags always win over the
    /// user's `extraArgs.apiServer`; safe defaults fill in only flags the
    /// user did not give, and `--authorization-mode=Node,RBAC` is one only
    /// when `extraArgs` carry no `--authorization-config` (kubeadm's rule).
    /// Files come from `additionalVolumes` and
    /// `additionalVolumeMounts.apiServer`.
    pub(crate) fn from_tenant_control_plane(store: &Store, namespace: &str, tcp: &Value) -> Self {
        let deployment = tcp.pointer("/spec/controlPlane/deployment");
        let extras = strings(deployment.and_then(|d| d.pointer("/extraArgs/apiServer")));
        let plugins = strings(tcp.pointer("/spec/kubernetes/admissionControllers"));
        let plugins = if plugins.is_empty() {
            crate::kamaji::KAMAJI_ADMISSION_CONTROLLERS.join(",")
        } else {
            plugins.join(",")
        };
        let port = tcp
            .pointer("/spec/networkProfile/port")
            .and_then(Value::as_i64)
            .unwrap_or(6443);
        let managed = [
            format!("--enable-admission-plugins={plugins}"),
            format!("--secure-port={port}"),
            "--client-ca-file=/etc/kubernetes/pki/ca.crt".into(),
        ];
        let mut defaults = vec![
            "--allow-privileged=true".to_string(),
            "--enable-bootstrap-token-auth=true".into(),
        ];
        if !extras
            .iter()
            .any(|e| flag_name(e) == "--authorization-config")
        {
            defaults.push("--authorization-mode=Node,RBAC".into());
        }
        let mut args: Vec<String> = managed.to_vec();
        let user: Vec<String> = extras
            .into_iter()
            .filter(|e| !managed.iter().any(|m| flag_name(m) == flag_name(e)))
            .collect();
        args.extend(
            defaults
                .into_iter()
                .filter(|d| !user.iter().any(|u| flag_name(u) == flag_name(d))),
        );
        args.extend(user);
        let list = |pointer: &str| {
            deployment
                .and_then(|d| d.pointer(pointer))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let mounts = mounted(
            store,
            namespace,
            &list("/additionalVolumes"),
            &list("/additionalVolumeMounts/apiServer"),
        );
        Self { args, mounts }
    }

    /// The flags the API server is started with.
    pub(crate) fn args(&self) -> &[String] {
        &self.args
    }

    /// Why kube-apiserver exits at start with these flags and files, as its
    /// options' validation and the loading of its configuration files
    /// refuse them (kubernetes/kubernetes v1.34,
    /// `pkg/kubeapiserver/options/authorization.go` `Validate`, and
    /// `staging/src/k8s.io/apiserver/pkg/apis/apiserver/load`): structured
    /// authorization beside the legacy flags, a configuration file that
    /// cannot be read or is not the kind it must be, a webhook whose
    /// kubeconfig file is missing.
    pub(crate) fn start_refusal(&self) -> Option<String> {
        let has = |prefix: &str| {
            self.args
                .iter()
                .any(|a| flag_name(a) == prefix || flag_name(a).starts_with(&format!("{prefix}-")))
        };
        if self.flag("authorization-config").is_some()
            && (has("--authorization-mode") || has("--authorization-webhook"))
        {
            return Some(
                "--authorization-config can not be specified when --authorization-mode or \
                 --authorization-webhook-* flags are defined"
                    .into(),
            );
        }
        if let Some(path) = self.flag("authorization-config") {
            let Some(text) = self.read(path) else {
                return Some(format!(
                    "failed to read authorization configuration file {path:?}: open {path}: no such file or directory"
                ));
            };
            let config = yaml(&text).unwrap_or(Value::Null);
            if config["kind"] != "AuthorizationConfiguration"
                || !config["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("apiserver.config.k8s.io/"))
            {
                return Some(format!(
                    "failed to load authorization configuration file {path:?}: not an apiserver.config.k8s.io AuthorizationConfiguration"
                ));
            }
            let authorizers = config["authorizers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if authorizers.is_empty() {
                return Some(
                    "authorizers: Required value: at least one authorization mode must be defined"
                        .into(),
                );
            }
            for authorizer in &authorizers {
                if authorizer["type"] == "Webhook"
                    && authorizer.pointer("/webhook/connectionInfo/type")
                        == Some(&json!("KubeConfigFile"))
                {
                    let file = authorizer
                        .pointer("/webhook/connectionInfo/kubeConfigFile")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if self.read(file).is_none() {
                        return Some(format!(
                            "authorizers[0].webhook.connectionInfo.kubeConfigFile: Invalid value: {file:?}: error loading file: no such file or directory"
                        ));
                    }
                }
            }
        }
        if let Some(path) = self.flag("admission-control-config-file") {
            let Some(text) = self.read(path) else {
                return Some(format!(
                    "failed to read plugin config: unable to read admission control configuration from {path:?} [open {path}: no such file or directory]"
                ));
            };
            if yaml(&text).is_none_or(|c| c["kind"] != "AdmissionConfiguration") {
                return Some(format!(
                    "failed to read plugin config: unable to decode {path:?}: not an AdmissionConfiguration"
                ));
            }
        }
        None
    }

    /// The value of the API server's flag `--{flag}=`.
    fn flag(&self, flag: &str) -> Option<&str> {
        let prefix = format!("--{flag}=");
        self.args.iter().find_map(|a| a.strip_prefix(&prefix))
    }

    /// The text of the file at `path`, when a mounted Secret holds it.
    fn read(&self, path: &str) -> Option<String> {
        self.mounts
            .iter()
            .find_map(|(dir, secret)| secret_text(secret, path.strip_prefix(&format!("{dir}/"))?))
    }

    /// A YAML file the flag `--{flag}=` names.
    fn flagged_yaml(&self, flag: &str) -> Option<Value> {
        yaml(&self.read(self.flag(flag)?)?)
    }
}

impl Authorizer {
    /// The authorizer the API server's `--authorization-config` configures,
    /// if it names a webhook.
    pub(crate) fn from_files(files: &ApiServerFiles) -> Option<Self> {
        let config = files.flagged_yaml("authorization-config")?;
        let webhook = config["authorizers"]
            .as_array()?
            .iter()
            .find(|a| a["type"] == "Webhook")?;
        let kubeconfig = yaml(
            &files.read(
                webhook
                    .pointer("/webhook/connectionInfo/kubeConfigFile")?
                    .as_str()?,
            )?,
        )?;
        let cluster = kubeconfig.pointer("/clusters/0/cluster")?;
        let mut client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(5));
        if let Some(ca) = cluster["certificate-authority-data"].as_str() {
            let pem = base64::engine::general_purpose::STANDARD.decode(ca).ok()?;
            client = client.add_root_certificate(reqwest::Certificate::from_pem(&pem).ok()?);
        }
        Some(Self {
            url: cluster["server"].as_str()?.to_string(),
            token: kubeconfig
                .pointer("/users/0/user/token")?
                .as_str()?
                .to_string(),
            client: client.build().ok()?,
        })
    }

    /// Asks the webhook; `Some(reason)` when the request is refused.
    pub(crate) async fn denies(
        &self,
        user: &str,
        groups: &[String],
        attributes: Value,
    ) -> Option<String> {
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": { "user": user, "groups": groups, "resourceAttributes": attributes },
        });
        let answer = async {
            let response = self
                .client
                .post(&self.url)
                .bearer_auth(&self.token)
                .json(&review)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("the webhook answered {}", response.status()));
            }
            response.json::<Value>().await.map_err(|e| e.to_string())
        };
        match answer.await {
            Ok(review) if review.pointer("/status/denied") == Some(&Value::Bool(true)) => Some(
                review
                    .pointer("/status/reason")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            Ok(_) => None,
            Err(error) => Some(format!("the authorization webhook failed: {error}")),
        }
    }
}

/// The credentials the API server presents to admission webhooks: the
/// kubeconfig that `--admission-control-config-file`'s
/// `WebhookAdmissionConfiguration` names (for `ValidatingAdmissionWebhook`),
/// its `users` keyed by the webhook's `host:port`. As kube-apiserver's
/// `defaultAuthenticationInfoResolver.ClientConfigFor` (k8s.io/apiserver,
/// pkg/util/webhook/authentication.go): an exact match of `host:port` (the
/// port 443 added when the URL has none), then `*.` and each shorter domain
/// suffix, then `*`; no match, no credentials. Only bearer tokens are
/// simulated.
#[derive(Debug, Clone, Default)]
pub struct WebhookCredentials {
    tokens: Vec<(String, String)>,
}

impl WebhookCredentials {
    pub(crate) fn from_files(files: &ApiServerFiles) -> Self {
        let tokens = (|| {
            let config = files.flagged_yaml("admission-control-config-file")?;
            let plugin = config["plugins"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == "ValidatingAdmissionWebhook")?;
            let kubeconfig =
                yaml(&files.read(plugin.pointer("/configuration/kubeConfigFile")?.as_str()?)?)?;
            Some(
                kubeconfig["users"]
                    .as_array()?
                    .iter()
                    .filter_map(|u| {
                        Some((
                            u["name"].as_str()?.to_string(),
                            u.pointer("/user/token")?.as_str()?.to_string(),
                        ))
                    })
                    .collect(),
            )
        })()
        .unwrap_or_default();
        Self { tokens }
    }

    /// The bearer token sent to a webhook at `url`, if any.
    pub(crate) fn token_for(&self, url: &reqwest::Url) -> Option<&str> {
        let host = url.host_str()?;
        let server = format!("{host}:{}", url.port_or_known_default()?);
        let find = |name: &str| {
            self.tokens
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.as_str())
        };
        let steps: Vec<&str> = server.split('.').collect();
        find(&server)
            .or_else(|| (1..steps.len()).find_map(|i| find(&format!("*.{}", steps[i..].join(".")))))
            .or_else(|| find("*"))
    }
}
