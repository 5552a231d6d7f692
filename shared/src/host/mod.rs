//! The host Kubernetes: where each cluster's namespace, quota, network
//! policy, control plane (what its engine makes: a Kamaji
//! `TenantControlPlane` or a vCluster `HelmChart`) and public endpoint live.
//! Every write is a server-side apply with one field manager, so every step
//! is safe to rerun.
//!
//! The adapter returns its own errors ([`HostError`], [`WaitError`]), each
//! telling whether another attempt may help ([`crate::error::Transient`]);
//! the job backbone turns them into job errors. Its parts: [`settings`],
//! [`error`], [`quantity`], [`engine`] (the engines behind one seam) and
//! [`engine_settings`], [`chart`] (the objects and chart values a
//! cluster gets), [`apply`] (the steps, each an idempotent server-side
//! apply), [`access`] (who may act in a cluster's namespace), [`vcluster`]
//! (the clusters' own APIs and the fleet loop), [`doctor`] (the host's
//! prerequisites),
//! [`exec`] and [`metrics`].

use kube::{
    Client, Config,
    api::PatchParams,
    config::{KubeConfigOptions, Kubeconfig},
};

pub mod access;
pub mod apply;
pub mod chart;
pub mod doctor;
pub mod engine;
pub mod engine_settings;
pub mod error;
pub mod exec;
pub mod gateway;
pub mod haproxy;
pub mod metrics;
pub mod objects;
pub mod quantity;
pub mod settings;
pub mod vcluster;

pub use access::ACCESS_REVISION;
pub use apply::{Endpoint, WaitError, endpoint_host};
pub use chart::{
    ApiServerFiles, NETWORK_POLICY, kubernetes_image_tag, network_policy, public_service_name,
    sni_host, vcluster_values,
};
pub use engine::{Advertised, ControlPlaneEngine, ControlPlaneState, Join, KAMAJI_RELEASE};
pub use error::HostError;
pub use gateway::{Https, IssuerRef, WorkloadGateway};
pub use metrics::{ContainerUsage, PodUsage};
pub use quantity::{quantity, quantity_value};
pub use settings::{HostSettings, LoadBalancerProvider, ServiceAccount, TenantAccess};

/// The field manager of every object the platform applies.
pub const FIELD_MANAGER: &str = "kubebyon";

pub struct HostCluster {
    client: Client,
    settings: HostSettings,
    /// Clients for clusters' own APIs kept between observation cycles, by
    /// cluster, with the endpoint they were built for.
    cluster_clients: std::sync::Mutex<std::collections::HashMap<uuid::Uuid, (String, Config)>>,
}

impl HostCluster {
    /// Connects as the settings say: the kubeconfig file they name, or the
    /// pod's service account for [`settings::IN_CLUSTER`].
    pub async fn from_kubeconfig_file(settings: HostSettings) -> Result<Self, HostError> {
        let path = settings
            .kubeconfig
            .clone()
            .ok_or_else(|| HostError::Kubeconfig("KUBEBYON_HOST_KUBECONFIG is not set".into()))?;
        if path.as_os_str() == settings::IN_CLUSTER {
            let config = Config::incluster().map_err(|e| {
                HostError::Kubeconfig(format!(
                    "KUBEBYON_HOST_KUBECONFIG={}: this process runs in no Kubernetes pod with a service account ({e})",
                    settings::IN_CLUSTER
                ))
            })?;
            return Self::with_config(config, settings);
        }
        let kubeconfig = Kubeconfig::read_from(&path).map_err(|e| {
            HostError::Kubeconfig(format!("KUBEBYON_HOST_KUBECONFIG={}: {e}", path.display()))
        })?;
        Self::from_kubeconfig(kubeconfig, settings).await
    }

    /// Connects with a kubeconfig's current context.
    pub async fn from_kubeconfig(
        kubeconfig: Kubeconfig,
        settings: HostSettings,
    ) -> Result<Self, HostError> {
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| HostError::Kubeconfig(e.to_string()))?;
        Self::with_config(config, settings)
    }

    fn with_config(mut config: Config, settings: HostSettings) -> Result<Self, HostError> {
        // The job backbone retries with backoff and keeps the lease meanwhile; the
        // client's own retry layer would hold a job for minutes on a 503.
        config.default_retry = false;
        let client = Client::try_from(config).map_err(|e| HostError::Kubeconfig(e.to_string()))?;
        Ok(Self {
            client,
            settings,
            cluster_clients: Default::default(),
        })
    }

    pub fn settings(&self) -> &HostSettings {
        &self.settings
    }

    fn apply_params() -> PatchParams {
        PatchParams::apply(FIELD_MANAGER).force()
    }
}

/// The host adapter configured by `KUBEBYON_HOST_KUBECONFIG`, or `None` when
/// no host cluster is configured (cluster jobs then fail and say so).
pub async fn from_env() -> anyhow::Result<Option<std::sync::Arc<HostCluster>>> {
    crate::config::fetch_secrets().await?;
    let settings = HostSettings::from_source(&crate::config::ProcessEnv)?;
    if settings.kubeconfig.is_none() {
        return Ok(None);
    }
    Ok(Some(std::sync::Arc::new(
        HostCluster::from_kubeconfig_file(settings).await?,
    )))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{chart::isolation, *};
    use crate::config::ConfigError;

    fn settings(cidrs: &str) -> Result<HostSettings, ConfigError> {
        HostSettings::from_source(&std::collections::HashMap::from([(
            "KUBEBYON_HOST_POD_CIDRS",
            cidrs,
        )]))
    }

    #[tokio::test]
    async fn an_unusable_host_setting_names_the_variable_and_what_is_wrong() {
        let at = |value: &str| {
            HostSettings::from_source(&std::collections::HashMap::from([(
                "KUBEBYON_HOST_KUBECONFIG",
                value,
            )]))
            .unwrap()
        };
        let missing = HostCluster::from_kubeconfig_file(at("/nowhere/host.yaml"))
            .await
            .err()
            .expect("no such file")
            .to_string();
        assert!(
            missing.contains("KUBEBYON_HOST_KUBECONFIG=/nowhere/host.yaml"),
            "{missing}"
        );
        // These tests run in no pod: no KUBERNETES_SERVICE_HOST, no token.
        let outside = HostCluster::from_kubeconfig_file(at("in-cluster"))
            .await
            .err()
            .expect("not in a pod")
            .to_string();
        assert!(
            outside.contains(
                "KUBEBYON_HOST_KUBECONFIG=in-cluster: this process runs in no Kubernetes pod"
            ),
            "{outside}"
        );
    }

    #[test]
    fn the_admission_url_is_https_without_credentials_query_or_fragment() {
        let at = |value: &str| {
            HostSettings::from_source(&std::collections::HashMap::from([(
                "KUBEBYON_ADMISSION_URL",
                value,
            )]))
        };
        assert_eq!(
            at("https://platform.example/")
                .unwrap()
                .admission_url
                .as_deref(),
            Some("https://platform.example")
        );
        for bad in [
            "http://platform.example",
            "https://",
            "https://user:pw@platform.example",
            "https://platform.example/?x=1",
            "https://platform.example/#top",
            "https://platform.example/a b",
        ] {
            let err = at(bad).expect_err(bad).to_string();
            assert!(err.contains("KUBEBYON_ADMISSION_URL"), "{err}");
        }
        let missing = HostSettings::from_source(&std::collections::HashMap::from([(
            "KUBEBYON_ADMISSION_CA_FILE",
            "/nowhere/ca.pem",
        )]))
        .expect_err("no such file")
        .to_string();
        assert!(missing.contains("KUBEBYON_ADMISSION_CA_FILE"), "{missing}");
    }

    #[test]
    fn quantities_in_every_suffix() {
        assert_eq!(quantity("4", 1000.0), Some(4000));
        assert_eq!(quantity("3800m", 1000.0), Some(3800));
        assert_eq!(quantity("16Gi", 1.0), Some(16 * 1024 * 1024 * 1024));
        assert_eq!(quantity("16384Ki", 1.0), Some(16 * 1024 * 1024));
        assert_eq!(quantity("1e3", 1.0), Some(1000));
        assert_eq!(quantity("2G", 1.0), Some(2_000_000_000));
        assert_eq!(quantity("1Ei", 1.0), Some(1 << 60));
        assert_eq!(quantity("2E", 1.0), Some(2_000_000_000_000_000_000));
        assert_eq!(quantity("2E3", 1.0), Some(2000));
        assert_eq!(quantity("lots", 1.0), None);
        assert_eq!(
            quantity("1e400", 1.0),
            None,
            "a kubelet's infinity is no figure"
        );
        assert_eq!(quantity("250000000n", 1000.0), Some(250));
        assert_eq!(quantity("1500u", 1e6), Some(1500));
    }

    #[test]
    fn pod_networks_are_cidrs_and_each_family_is_kept_out_of_its_own_block() {
        let dual = settings("10.42.0.0/16, fd00:42::/56").unwrap();
        assert_eq!(dual.pod_cidrs, ["10.42.0.0/16", "fd00:42::/56"]);
        let blocks = &isolation(&dual.pod_cidrs)["egress"][2]["to"];
        assert_eq!(
            blocks[0]["ipBlock"]["except"],
            json!(["10.42.0.0/16", "169.254.0.0/16"])
        );
        assert_eq!(
            blocks[1]["ipBlock"]["except"],
            json!(["fd00:42::/56", "fe80::/10", "fd00:ec2::254/128"])
        );
        for bad in [
            "10.42.0.0",
            "10.42.0.0/33",
            "fd00::/129",
            "pods/16",
            "10.42.0.0/x",
        ] {
            assert!(settings(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_platforms_identities_are_named_together_or_not_at_all() {
        let read = |pairs: &[(&str, &str)]| {
            TenantAccess::from_source(&std::collections::HashMap::from_iter(pairs.iter().copied()))
        };
        let role = ("KUBEBYON_HOST_TENANT_CLUSTER_ROLE", "kb-tenant");
        let jobs = ("KUBEBYON_HOST_JOBS_SERVICE_ACCOUNT", "kubebyon/kb-host");
        let credentials = (
            "KUBEBYON_HOST_CREDENTIALS_SERVICE_ACCOUNT",
            "kubebyon/kb-credentials",
        );
        assert_eq!(read(&[]).unwrap(), None);
        let access = read(&[role, jobs, credentials]).unwrap().unwrap();
        assert_eq!(access.cluster_role, "kb-tenant");
        assert_eq!(
            (access.jobs.namespace.as_str(), access.jobs.name.as_str()),
            ("kubebyon", "kb-host")
        );
        assert_eq!(access.credentials.name, "kb-credentials");
        // One missing: refused, naming the three.
        let partial = read(&[role, jobs]).unwrap_err().to_string();
        assert!(partial.contains("all three or none"), "{partial}");
        for bad in ["kb-host", "/kb-host", "kubebyon/", "a/b/c"] {
            let wrong = read(&[
                role,
                ("KUBEBYON_HOST_JOBS_SERVICE_ACCOUNT", bad),
                credentials,
            ]);
            assert!(wrong.is_err(), "{bad}");
        }
        assert!(
            read(&[
                ("KUBEBYON_HOST_TENANT_CLUSTER_ROLE", " "),
                jobs,
                credentials
            ])
            .is_err()
        );
    }
}
