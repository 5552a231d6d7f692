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
//! and the host Secret mounted by `controlPlane.statefulSet.persistence`.
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

impl Authorizer {
    /// The authorizer a vCluster chart's values configure, with the files of
    /// the host Secret they mount, if they configure one.
    pub(crate) fn from_chart(store: &Store, namespace: &str, values: &Value) -> Option<Self> {
        let path = values
            .pointer("/controlPlane/distro/k8s/apiServer/extraArgs")?
            .as_array()?
            .iter()
            .find_map(|a| a.as_str()?.strip_prefix("--authorization-config="))?
            .to_string();
        let persistence = values.pointer("/controlPlane/statefulSet/persistence")?;
        let mount = persistence["addVolumeMounts"]
            .as_array()?
            .iter()
            .find(|m| {
                m["mountPath"]
                    .as_str()
                    .is_some_and(|dir| path.starts_with(&format!("{dir}/")))
            })?;
        let dir = mount["mountPath"].as_str()?;
        let secret_name = persistence["addVolumes"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == mount["name"])?
            .pointer("/secret/secretName")?
            .as_str()?;
        let secrets = registry::find_kind("v1", "Secret")?;
        let secret = store.get(secrets, namespace, secret_name).ok()?;
        let in_secret = |path: &str| secret_text(&secret, path.strip_prefix(&format!("{dir}/"))?);
        let config = yaml(&in_secret(&path)?)?;
        let webhook = config["authorizers"]
            .as_array()?
            .iter()
            .find(|a| a["type"] == "Webhook")?;
        let kubeconfig = yaml(&in_secret(
            webhook
                .pointer("/webhook/connectionInfo/kubeConfigFile")?
                .as_str()?,
        )?)?;
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
