//! What a host cluster needs before the platform can make control planes on
//! it (docs/runbooks/k3s-host.md), checked one by one: `local doctor`.
//! Discovery answers for any authenticated identity; the StorageClass, the
//! nodes and the Gateway are read with the operator's kubeconfig.

use std::net::IpAddr;

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Node, storage::v1::StorageClass};
use kube::{
    Api,
    api::{DynamicObject, ListParams},
};
use serde::Serialize;

use super::engine::KAMAJI_RELEASE;
use super::{HostCluster, LoadBalancerProvider};
use crate::domain::Engine;

/// One prerequisite and whether the host meets it.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub check: String,
    pub ok: bool,
    /// What was found, or what to install or set.
    pub detail: String,
}

fn finding(check: impl Into<String>, ok: bool, detail: impl Into<String>) -> Finding {
    Finding {
        check: check.into(),
        ok,
        detail: detail.into(),
    }
}

/// `address/prefix` as (bits, prefix length, IPv6).
fn parse_cidr(cidr: &str) -> Option<(u128, u8, bool)> {
    let (ip, prefix) = cidr.trim().split_once('/')?;
    let prefix: u8 = prefix.parse().ok()?;
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(v4) if prefix <= 32 => Some((u128::from(u32::from(v4)) << 96, prefix, false)),
        IpAddr::V6(v6) if prefix <= 128 => Some((u128::from(v6), prefix, true)),
        _ => None,
    }
}

/// Whether the network `inner` lies inside `outer`.
pub fn cidr_within(inner: &str, outer: &str) -> bool {
    let (Some((inner, inner_len, inner_v6)), Some((outer, outer_len, outer_v6))) =
        (parse_cidr(inner), parse_cidr(outer))
    else {
        return false;
    };
    if inner_v6 != outer_v6 || inner_len < outer_len {
        return false;
    }
    // IPv4 sits in the top 32 bits: the prefix masks from the top either way.
    let mask = match outer_len {
        0 => 0,
        bits => u128::MAX << (128 - u32::from(bits)),
    };
    inner & mask == outer & mask
}

impl HostCluster {
    /// Kamaji's part (docs/runbooks/kamaji.md): its `TenantControlPlane`
    /// kind served, its controller running in `KUBEBYON_KAMAJI_NAMESPACE`,
    /// and the DataStore control planes keep their state in ready.
    async fn kamaji_findings(&self, findings: &mut Vec<Finding>) {
        let engines = &self.settings.engines;
        let check = "TenantControlPlane (kamaji.clastix.io/v1alpha1)";
        findings.push(
            match self
                .serves("kamaji.clastix.io/v1alpha1", "tenantcontrolplanes")
                .await
            {
                Ok(true) => finding(
                    check,
                    true,
                    format!("served (the platform is written against Kamaji {KAMAJI_RELEASE})"),
                ),
                Ok(false) => finding(
                    check,
                    false,
                    "not served: install Kamaji (its chart brings the CRDs) and cert-manager",
                ),
                Err(error) => finding(check, false, format!("discovery failed: {error}")),
            },
        );
        let namespace = &engines.kamaji_namespace;
        let check = format!("Kamaji's controller in {namespace}");
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let running = ListParams::default().labels("app.kubernetes.io/name=kamaji");
        findings.push(match deployments.list(&running).await {
            Ok(list) => {
                let ready = list.items.iter().any(|d| {
                    d.status
                        .as_ref()
                        .and_then(|s| s.ready_replicas)
                        .unwrap_or(0)
                        >= 1
                });
                match (list.items.is_empty(), ready) {
                    (_, true) => finding(check, true, "running"),
                    (true, _) => finding(
                        check,
                        false,
                        "missing: install Kamaji's chart there, or set KUBEBYON_KAMAJI_NAMESPACE to where it runs",
                    ),
                    (false, false) => finding(check, false, "installed, but no replica is ready"),
                }
            }
            Err(error) => finding(check, false, error.to_string()),
        });
        let name = engines.kamaji_datastore.as_deref().unwrap_or("default");
        let check = format!("Kamaji DataStore {name}");
        let stores: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &kube::api::ApiResource {
                group: "kamaji.clastix.io".into(),
                version: "v1alpha1".into(),
                api_version: "kamaji.clastix.io/v1alpha1".into(),
                kind: "DataStore".into(),
                plural: "datastores".into(),
            },
        );
        findings.push(match stores.get_opt(name).await {
            Ok(Some(store)) if store.data.pointer("/status/ready") == Some(&true.into()) => {
                finding(check, true, "ready")
            }
            Ok(Some(_)) => finding(check, false, "not ready: control planes wait for it"),
            Ok(None) => finding(
                check,
                false,
                "missing: Kamaji's chart makes `default`; or set KUBEBYON_KAMAJI_DATASTORE to yours",
            ),
            Err(error) => finding(check, false, error.to_string()),
        });
    }

    /// Whether the API serves `resource` under `api_version`.
    pub(super) async fn serves(
        &self,
        api_version: &str,
        resource: &str,
    ) -> Result<bool, kube::Error> {
        match self.client.list_api_group_resources(api_version).await {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == resource)),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Every prerequisite of the platform on this host, in order; the first
    /// finding is whether the API answers at all (nothing else is checked
    /// when it does not).
    pub async fn doctor(&self) -> Vec<Finding> {
        let mut findings = Vec::new();
        match self.client.apiserver_version().await {
            Ok(version) => findings.push(finding(
                "the host's API answers",
                true,
                format!("Kubernetes {}", version.git_version),
            )),
            Err(error) => {
                findings.push(finding(
                    "the host's API answers",
                    false,
                    format!("{error}: check KUBEBYON_HOST_KUBECONFIG"),
                ));
                return findings;
            }
        }
        let served = |found: Result<bool, kube::Error>, missing: &str| match found {
            Ok(true) => (true, "served".to_string()),
            Ok(false) => (false, missing.to_string()),
            Err(error) => (false, format!("discovery failed: {error}")),
        };
        match self.settings.engines.default {
            Engine::Kamaji => self.kamaji_findings(&mut findings).await,
            Engine::Vcluster => {
                let (ok, detail) = served(
                    self.serves("helm.cattle.io/v1", "helmcharts").await,
                    "not served: vCluster control planes are HelmCharts, which k3s's helm-controller installs (on another distribution, install helm-controller and its CRD)",
                );
                findings.push(finding("HelmChart (helm.cattle.io/v1)", ok, detail));
            }
        }

        let class = &self.settings.storage_class;
        let classes: Api<StorageClass> = Api::all(self.client.clone());
        findings.push(match classes.get_opt(class).await {
            Ok(Some(found)) => finding(
                format!("StorageClass {class}"),
                true,
                format!("provisioner {}", found.provisioner),
            ),
            Ok(None) => finding(
                format!("StorageClass {class}"),
                false,
                "missing: install it (Longhorn by default) or set KUBEBYON_CONTROL_PLANE_STORAGE_CLASS to one the host has",
            ),
            Err(error) => finding(format!("StorageClass {class}"), false, error.to_string()),
        });

        let (ok, detail) = served(
            self.serves("metrics.k8s.io/v1beta1", "pods").await,
            "not served: install metrics-server (control-plane usage snapshots say why they are empty without it)",
        );
        findings.push(finding("metrics API (metrics.k8s.io)", ok, detail));

        if let LoadBalancerProvider::GatewayApi {
            gateway_name,
            gateway_namespace,
            ..
        } = &self.settings.load_balancer
        {
            let (ok, detail) = served(
                self.tls_route().await.map(|route| route.is_some()),
                "not served: install the Gateway API (v1.5 or later: TLSRoute v1; before: its experimental channel, TLSRoute v1alpha2) and a Gateway implementation that passes TLS through",
            );
            findings.push(finding(
                "TLSRoute (gateway.networking.k8s.io v1 or v1alpha2)",
                ok,
                detail,
            ));
            let gateways: Api<DynamicObject> = Api::namespaced_with(
                self.client.clone(),
                gateway_namespace,
                &kube::api::ApiResource {
                    group: "gateway.networking.k8s.io".into(),
                    version: "v1".into(),
                    api_version: "gateway.networking.k8s.io/v1".into(),
                    kind: "Gateway".into(),
                    plural: "gateways".into(),
                },
            );
            let check = format!("Gateway {gateway_namespace}/{gateway_name}");
            findings.push(match gateways.get_opt(gateway_name).await {
                Ok(Some(_)) => finding(check, true, "found"),
                Ok(None) => finding(
                    check,
                    false,
                    "missing: make it, with a TLS Passthrough listener on 443 that allows routes from the clusters' namespaces",
                ),
                Err(error) => finding(check, false, error.to_string()),
            });
        }

        if let LoadBalancerProvider::Haproxy(haproxy) = &self.settings.load_balancer {
            let check = format!("HAProxy's Runtime API {}", haproxy.runtime_api);
            findings.push(match haproxy.replicas().await {
                Err(error) => finding(check, false, error.to_string()),
                Ok(replicas) => {
                    let mut failed = Vec::new();
                    let mut entries = 0;
                    for replica in &replicas {
                        match haproxy.show(*replica).await {
                            Ok(map) => entries += map.len(),
                            Err(error) => failed.push(error.to_string()),
                        }
                    }
                    match failed.is_empty() {
                        true => finding(
                            check,
                            true,
                            format!(
                                "{} replica(s) answer, {entries} entries of {} in all",
                                replicas.len(),
                                haproxy.map
                            ),
                        ),
                        false => finding(check, false, failed.join("; ")),
                    }
                }
            });
        }

        let wanted = self.settings.pod_cidrs.join(", ");
        let check = format!("the nodes' pod networks inside KUBEBYON_HOST_POD_CIDRS ({wanted})");
        let nodes: Api<Node> = Api::all(self.client.clone());
        findings.push(match nodes.list(&ListParams::default()).await {
            Err(error) => finding(check, false, error.to_string()),
            Ok(list) => {
                let mut seen = Vec::new();
                let mut outside = Vec::new();
                for node in &list.items {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    let spec = node.spec.clone().unwrap_or_default();
                    let cidrs = spec
                        .pod_cidrs
                        .filter(|c| !c.is_empty())
                        .or(spec.pod_cidr.map(|c| vec![c]))
                        .unwrap_or_default();
                    for cidr in cidrs {
                        if self
                            .settings
                            .pod_cidrs
                            .iter()
                            .any(|outer| cidr_within(&cidr, outer))
                        {
                            seen.push(cidr);
                        } else {
                            outside.push(format!("{name} {cidr}"));
                        }
                    }
                }
                match (seen.is_empty(), outside.is_empty()) {
                    (_, false) => finding(
                        check,
                        false,
                        format!(
                            "outside: {}; set KUBEBYON_HOST_POD_CIDRS to the host's pod networks, or the control planes' NetworkPolicy fences the wrong ones",
                            outside.join(", ")
                        ),
                    ),
                    (true, true) => finding(
                        check,
                        false,
                        "no node reports a pod network (spec.podCIDRs): compare KUBEBYON_HOST_POD_CIDRS with the CNI's configuration by hand",
                    ),
                    (false, true) => finding(check, true, seen.join(", ")),
                }
            }
        });
        findings
    }
}

#[cfg(test)]
mod tests {
    use super::cidr_within;

    #[test]
    fn a_network_lies_within_another_by_its_prefix() {
        assert!(cidr_within("10.42.3.0/24", "10.42.0.0/16"));
        assert!(cidr_within("10.42.0.0/16", "10.42.0.0/16"));
        assert!(!cidr_within("10.43.0.0/24", "10.42.0.0/16"));
        assert!(!cidr_within("10.42.0.0/15", "10.42.0.0/16"));
        assert!(cidr_within("10.244.1.0/24", "0.0.0.0/0"));
        assert!(cidr_within("fd00:42::/64", "fd00:42::/56"));
        assert!(!cidr_within("fd00:43::/64", "fd00:42::/56"));
        assert!(!cidr_within("10.42.3.0/24", "::/0"), "families differ");
        assert!(!cidr_within("10.42.3.0", "10.42.0.0/16"));
    }
}
