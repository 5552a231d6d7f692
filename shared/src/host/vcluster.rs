//! The clusters' own APIs: their kubeconfig and CA from the host, a client
//! for each (kept between cycles), and the loop over every ready cluster.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

use super::{HostCluster, HostError};
use crate::clusters::Cluster;

impl HostCluster {
    /// The admin kubeconfig the cluster's engine wrote into its Secret, parsed.
    pub(super) async fn stored_kubeconfig(
        &self,
        cluster: &Cluster,
    ) -> Result<Option<Kubeconfig>, HostError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let (name, key) = super::engine::of(cluster.engine).admin_kubeconfig(cluster);
        let Some(secret) = secrets.get_opt(&name).await? else {
            return Ok(None);
        };
        let data: BTreeMap<_, _> = secret.data.unwrap_or_default();
        let raw = data.get(key).ok_or_else(|| {
            HostError::Invalid(format!("the kubeconfig Secret has no `{key}` key"))
        })?;
        let text = std::str::from_utf8(&raw.0)
            .map_err(|e| HostError::Invalid(format!("the kubeconfig is not UTF-8: {e}")))?;
        Kubeconfig::from_yaml(text)
            .map(Some)
            .map_err(|e| HostError::Invalid(format!("the kubeconfig does not parse: {e}")))
    }

    /// The admin kubeconfig vCluster wrote, with its server rewritten to the public
    /// endpoint. Returned as JSON, which every kubeconfig reader accepts as YAML.
    pub async fn kubeconfig(
        &self,
        cluster: &Cluster,
        server: &str,
    ) -> Result<Option<String>, HostError> {
        let Some(mut kubeconfig) = self.stored_kubeconfig(cluster).await? else {
            return Ok(None);
        };
        for named in &mut kubeconfig.clusters {
            if let Some(cluster) = named.cluster.as_mut() {
                cluster.server = Some(server.to_string());
            }
        }
        serde_json::to_string_pretty(&kubeconfig)
            .map(Some)
            .map_err(|e| HostError::Invalid(e.to_string()))
    }

    /// The PEM of the CA the cluster's API certificate is signed by, when its
    /// kubeconfig carries one (what a joining node pins).
    pub async fn certificate_authority(
        &self,
        cluster: &Cluster,
    ) -> Result<Option<String>, HostError> {
        use base64::Engine;
        let Some(kubeconfig) = self.stored_kubeconfig(cluster).await? else {
            return Ok(None);
        };
        let Some(data) = kubeconfig
            .clusters
            .iter()
            .find_map(|c| c.cluster.as_ref()?.certificate_authority_data.clone())
        else {
            return Ok(None);
        };
        let pem = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| {
                HostError::Invalid(format!("certificate-authority-data is not base64: {e}"))
            })?;
        String::from_utf8(pem)
            .map(Some)
            .map_err(|e| HostError::Invalid(format!("the CA is not PEM text: {e}")))
    }

    /// A client for the cluster's own API (the vCluster), through its public
    /// endpoint with the admin credentials. No retries: callers decide.
    pub async fn vcluster_client(
        &self,
        cluster: &Cluster,
        server: &str,
    ) -> Result<Client, HostError> {
        Client::try_from(self.vcluster_config(cluster, server).await?)
            .map_err(|e| HostError::Kubeconfig(e.to_string()))
    }

    /// The client configuration for the cluster's own API, from its kubeconfig Secret.
    pub(super) async fn vcluster_config(
        &self,
        cluster: &Cluster,
        server: &str,
    ) -> Result<Config, HostError> {
        let text = self
            .kubeconfig(cluster, server)
            .await?
            .ok_or_else(|| HostError::Invalid("the kubeconfig Secret does not exist".into()))?;
        let kubeconfig =
            Kubeconfig::from_yaml(&text).map_err(|e| HostError::Invalid(e.to_string()))?;
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| HostError::Kubeconfig(e.to_string()))?;
        config.default_retry = false;
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(Duration::from_secs(10));
        Ok(config)
    }

    /// Calls `call` with every ready cluster and a client for its own API,
    /// `concurrency` clusters at a time, each within `timeout` when given
    /// (building the client included). The shared loop of the observation
    /// schedules; a cluster whose call failed comes back with the reason.
    /// Clients are kept between calls (so a cycle reads no kubeconfig Secret),
    /// and rebuilt after a failure or when the endpoint changed.
    pub async fn across_ready_clusters<T, F, Fut>(
        &self,
        pool: &sqlx::PgPool,
        concurrency: usize,
        timeout: Option<Duration>,
        call: F,
    ) -> Result<Vec<(Cluster, Result<T, String>)>, sqlx::Error>
    where
        F: Fn(Cluster, Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        use futures_util::{StreamExt, stream};
        let clusters = crate::clusters::list_observable(pool).await?;
        let live: std::collections::HashSet<_> = clusters.iter().map(|c| c.id).collect();
        self.cluster_clients
            .lock()
            .expect("lock")
            .retain(|id, _| live.contains(id));
        let call = &call;
        Ok(stream::iter(clusters)
            .map(|cluster| async move {
                let attempt = async {
                    let server = cluster
                        .api_endpoint
                        .as_deref()
                        .ok_or("the cluster has no endpoint")?;
                    let client = self
                        .cached_cluster_client(&cluster, server)
                        .await
                        .map_err(|e| e.to_string())?;
                    call(cluster.clone(), client).await
                };
                let result = match timeout {
                    Some(limit) => tokio::time::timeout(limit, attempt)
                        .await
                        .unwrap_or_else(|_| Err("the control plane did not answer in time".into())),
                    None => attempt.await,
                };
                if result.is_err() {
                    // Next time, read the kubeconfig again: it may have changed.
                    self.cluster_clients
                        .lock()
                        .expect("lock")
                        .remove(&cluster.id);
                }
                (cluster, result)
            })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await)
    }

    /// The kept client for the cluster's own API, or a new one (kept) when
    /// there is none for this endpoint.
    pub(super) async fn cached_cluster_client(
        &self,
        cluster: &Cluster,
        server: &str,
    ) -> Result<Client, HostError> {
        let kept = match self.cluster_clients.lock().expect("lock").get(&cluster.id) {
            Some((kept_for, config)) if kept_for == server => Some(config.clone()),
            _ => None,
        };
        let config = match kept {
            Some(config) => config,
            None => {
                let config = self.vcluster_config(cluster, server).await?;
                self.cluster_clients
                    .lock()
                    .expect("lock")
                    .insert(cluster.id, (server.to_string(), config.clone()));
                config
            }
        };
        Client::try_from(config).map_err(|e| HostError::Kubeconfig(e.to_string()))
    }
}
