//! The metrics API's view of a control plane's pods.

use kube::{
    Api,
    api::{DynamicObject, ListParams},
    core::{ApiResource, GroupVersionKind},
};

use super::{HostCluster, HostError, quantity::quantity_value};
use crate::clusters::Cluster;

/// One pod's usage as the metrics API reports it.
#[derive(Debug, Clone)]
pub struct PodUsage {
    pub pod: String,
    pub containers: Vec<ContainerUsage>,
}

#[derive(Debug, Clone)]
pub struct ContainerUsage {
    pub name: String,
    pub cpu_cores: f64,
    pub memory_bytes: i64,
}

impl HostCluster {
    /// The metrics API's view (`metrics.k8s.io/v1beta1` PodMetrics, from
    /// metrics-server) of the cluster's control-plane pods: per pod, each
    /// container's CPU (cores) and memory working set (bytes).
    pub async fn control_plane_metrics(
        &self,
        cluster: &Cluster,
    ) -> Result<Vec<PodUsage>, HostError> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics"),
            "pods",
        );
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &cluster.namespace, &resource);
        let selector = super::engine::of(cluster.engine).api_pod_selector(cluster);
        let list = api.list(&ListParams::default().labels(&selector)).await?;
        Ok(list
            .items
            .into_iter()
            .map(|pod| PodUsage {
                pod: pod.metadata.name.clone().unwrap_or_default(),
                containers: pod.data["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| ContainerUsage {
                        name: c["name"].as_str().unwrap_or_default().to_string(),
                        cpu_cores: c["usage"]["cpu"]
                            .as_str()
                            .and_then(quantity_value)
                            .unwrap_or(0.0),
                        memory_bytes: c["usage"]["memory"]
                            .as_str()
                            .and_then(quantity_value)
                            .unwrap_or(0.0) as i64,
                    })
                    .collect(),
            })
            .collect())
    }
}
