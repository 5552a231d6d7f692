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
//! The configuration comes from the vCluster chart's values, as the platform
//! writes them: `controlPlane.distro.k8s.apiServer.extraArgs` naming the file,
//! and the host Secret mounted by `controlPlane.statefulSet.persistence`
//! ([`ApiServerFiles`]); the admission webhooks' credentials come the same way
//! ([`WebhookCredentials`]).
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

/// The files a vCluster chart's values mount into its API server from a host
/// Secret (`controlPlane.statefulSet.persistence.addVolumes` and
/// `addVolumeMounts`), and the flags they are named by
/// (`controlPlane.distro.k8s.apiServer.extraArgs`).
pub(crate) struct ApiServerFiles {
    args: Vec<String>,
    /// (mount path, the Secret mounted there)
    mounts: Vec<(String, Value)>,
}

impl ApiServerFiles {
    pub(crate) fn from_chart(store: &Store, namespace: &str, values: &Value) -> Self {
        let args = values
            .pointer("/controlPlane/distro/k8s/apiServer/extraArgs")
            .and_then(Value::as_array)
            .map(|args| {
                args.iter()
                    .filter_map(|a| a.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let persistence = values.pointer("/controlPlane/statefulSet/persistence");
        let list = |key: &str| {
            persistence
                .and_then(|p| p[key].as_array().cloned())
                .unwrap_or_default()
        };
        let volumes = list("addVolumes");
        let secrets = registry::find_kind("v1", "Secret").expect("registered");
        let mounts = list("addVolumeMounts")
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
            .collect();
        Self { args, mounts }
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
