//! Settings of the host cluster adapter, from the environment.

use std::{path::PathBuf, time::Duration};

use crate::config::{ConfigError, Source};

/// The `KUBEBYON_HOST_KUBECONFIG` value that means the pod's own service
/// account: its token and CA under `/var/run/secrets/kubernetes.io/serviceaccount`
/// and the API at `KUBERNETES_SERVICE_HOST`.
pub const IN_CLUSTER: &str = "in-cluster";

/// Settings of the host cluster adapter.
#[derive(Debug, Clone)]
pub struct HostSettings {
    /// `KUBEBYON_HOST_KUBECONFIG`: where the host cluster's credentials
    /// are: a kubeconfig file, or [`IN_CLUSTER`] for the service account of
    /// the pod the function runs in (the platform on its host cluster).
    pub kubeconfig: Option<PathBuf>,
    /// `KUBEBYON_CONTROL_PLANE_STORAGE_CLASS` (default `longhorn`).
    pub storage_class: String,
    /// `KUBEBYON_VCLUSTER_CHART_REPO` (default `https://charts.loft.sh`).
    pub chart_repo: String,
    /// `KUBEBYON_VCLUSTER_CHART_VERSION` (default `0.29.1`).
    pub chart_version: String,
    /// `KUBEBYON_HOST_NODE_ADDRESS`: the address nodes reach NodePort endpoints on.
    pub node_address: String,
    /// `KUBEBYON_CONTROL_PLANE_READY_TIMEOUT_MS` (default 15 minutes).
    pub ready_timeout: Duration,
    /// `KUBEBYON_HOST_POLL_MS` (default 2000): how often waits look again.
    pub poll_interval: Duration,
    /// How `loadbalancer` clusters are exposed (`KUBEBYON_LOADBALANCER_PROVIDER`).
    pub load_balancer: LoadBalancerProvider,
    /// `KUBEBYON_HOST_POD_CIDRS` (comma-separated, default k3s's
    /// `10.42.0.0/16`): the host's pod networks, which a control plane may
    /// not reach outside its own namespace.
    pub pod_cidrs: Vec<String>,
    /// `KUBEBYON_ADMISSION_URL`: the HTTPS base (`https://platform.example`)
    /// clusters' API servers call the admission webhook at; unset, the
    /// settings' public base URL when it is HTTPS.
    pub admission_url: Option<String>,
    /// The PEM read from `KUBEBYON_ADMISSION_CA_FILE`: the CA the webhook's
    /// certificate is signed by, when no public CA signs it (the webhook
    /// configuration's `caBundle`).
    pub admission_ca_pem: Option<String>,
    /// The platform's identities on its host, when it runs there
    /// ([`TenantAccess`]): the jobs grant them their rights in each
    /// cluster's namespace.
    pub tenant_access: Option<TenantAccess>,
    /// The shared workload Gateway of the workload edge, when there is one
    /// ([`WorkloadGateway`]).
    pub workload_gateway: Option<super::gateway::WorkloadGateway>,
    /// `KUBEBYON_ENDPOINT_GRACE_SECONDS` (default 3600, at most 604800):
    /// how long a cluster's old public entry keeps serving after its
    /// endpoint moved; 0 removes it as the switch completes.
    pub endpoint_grace: Duration,
    /// The control-plane engines' settings ([`super::engine_settings::Config`]).
    pub engines: super::engine_settings::Config,
}

/// The longest grace period an old endpoint may be given: a week.
pub const MAX_ENDPOINT_GRACE: Duration = Duration::from_secs(7 * 24 * 3600);

/// How a `loadbalancer` cluster's control plane is exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadBalancerProvider {
    /// A Service of type LoadBalancer per cluster (`service`, the default).
    Service,
    /// A TLS-passthrough `TLSRoute` per cluster on one shared Gateway, routed by
    /// SNI host name `<vcluster>-<id prefix>.<base domain>` (`gatewayapi`).
    GatewayApi {
        gateway_name: String,
        gateway_namespace: String,
        base_domain: String,
    },
    /// One shared HAProxy forwarding by SNI host name
    /// `<vcluster>-<id prefix>.<base domain>`, TLS passthrough, the clusters
    /// kept in its map through its Runtime API (`haproxy`).
    Haproxy(super::haproxy::Haproxy),
}

impl HostSettings {
    pub fn from_source(source: &dyn Source) -> Result<Self, ConfigError> {
        let millis = |name: &'static str, default: u64| -> Result<Duration, ConfigError> {
            match source.get(name) {
                None => Ok(Duration::from_millis(default)),
                Some(raw) => raw
                    .parse::<u64>()
                    .ok()
                    .filter(|v| *v > 0)
                    .map(Duration::from_millis)
                    .ok_or(ConfigError::Invalid {
                        name,
                        reason: "must be a positive number of milliseconds".into(),
                    }),
            }
        };
        Ok(Self {
            kubeconfig: source.get("KUBEBYON_HOST_KUBECONFIG").map(PathBuf::from),
            storage_class: source
                .get("KUBEBYON_CONTROL_PLANE_STORAGE_CLASS")
                .unwrap_or_else(|| "longhorn".into()),
            chart_repo: source
                .get("KUBEBYON_VCLUSTER_CHART_REPO")
                .unwrap_or_else(|| "https://charts.loft.sh".into()),
            chart_version: source
                .get("KUBEBYON_VCLUSTER_CHART_VERSION")
                .unwrap_or_else(|| "0.29.1".into()),
            node_address: source
                .get("KUBEBYON_HOST_NODE_ADDRESS")
                .unwrap_or_else(|| "127.0.0.1".into()),
            ready_timeout: millis("KUBEBYON_CONTROL_PLANE_READY_TIMEOUT_MS", 15 * 60 * 1000)?,
            poll_interval: millis("KUBEBYON_HOST_POLL_MS", 2000)?,
            pod_cidrs: pod_cidrs(
                &source
                    .get("KUBEBYON_HOST_POD_CIDRS")
                    .unwrap_or_else(|| "10.42.0.0/16".into()),
            )?,
            admission_url: source
                .get("KUBEBYON_ADMISSION_URL")
                .map(|url| admission_url(&url))
                .transpose()?,
            admission_ca_pem: source
                .get("KUBEBYON_ADMISSION_CA_FILE")
                .map(|path| admission_ca(&path))
                .transpose()?,
            tenant_access: TenantAccess::from_source(source)?,
            engines: <super::engine_settings::Config as crate::config::Part>::read(source)?,
            workload_gateway: super::gateway::WorkloadGateway::from_source(source)?,
            endpoint_grace: match source.get("KUBEBYON_ENDPOINT_GRACE_SECONDS") {
                None => Duration::from_secs(3600),
                Some(raw) => raw
                    .parse::<u64>()
                    .ok()
                    .map(Duration::from_secs)
                    .filter(|grace| *grace <= MAX_ENDPOINT_GRACE)
                    .ok_or(ConfigError::Invalid {
                        name: "KUBEBYON_ENDPOINT_GRACE_SECONDS",
                        reason: "must be a whole number of seconds from 0 to 604800".into(),
                    })?,
            },
            load_balancer: match source.get("KUBEBYON_LOADBALANCER_PROVIDER").as_deref() {
                None | Some("service") => LoadBalancerProvider::Service,
                Some("gatewayapi") => LoadBalancerProvider::GatewayApi {
                    gateway_name: source.get("KUBEBYON_GATEWAY_NAME").ok_or(
                        ConfigError::Missing {
                            name: "KUBEBYON_GATEWAY_NAME",
                        },
                    )?,
                    gateway_namespace: source
                        .get("KUBEBYON_GATEWAY_NAMESPACE")
                        .unwrap_or_else(|| "kubebyon-system".into()),
                    base_domain: source.get("KUBEBYON_GATEWAY_BASE_DOMAIN").ok_or(
                        ConfigError::Missing {
                            name: "KUBEBYON_GATEWAY_BASE_DOMAIN",
                        },
                    )?,
                },
                Some("haproxy") => {
                    LoadBalancerProvider::Haproxy(super::haproxy::Haproxy::from_source(source)?)
                }
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        name: "KUBEBYON_LOADBALANCER_PROVIDER",
                        reason: format!("expected service, gatewayapi or haproxy, got {other:?}"),
                    });
                }
            },
        })
    }
}

/// An HTTPS base URL an API server accepts for a webhook: no credentials,
/// query or fragment. Without a trailing slash.
fn admission_url(raw: &str) -> Result<String, ConfigError> {
    let invalid = |reason: &str| ConfigError::Invalid {
        name: "KUBEBYON_ADMISSION_URL",
        reason: format!("{raw:?} {reason}"),
    };
    let rest = raw.strip_prefix("https://").ok_or_else(|| {
        invalid("must start with https://: API servers call webhooks over HTTPS only")
    })?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(invalid("must name a host and no credentials"));
    }
    if raw.contains(['?', '#']) || raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("may hold no query, fragment or whitespace"));
    }
    Ok(raw.trim_end_matches('/').to_string())
}

/// The PEM of a CA certificate file.
fn admission_ca(path: &str) -> Result<String, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        name: "KUBEBYON_ADMISSION_CA_FILE",
        reason,
    };
    let pem = std::fs::read_to_string(path).map_err(|e| invalid(format!("{path}: {e}")))?;
    if !pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err(invalid(format!("{path} holds no PEM certificate")));
    }
    Ok(pem)
}

/// Parses a comma-separated list of CIDRs (`10.42.0.0/16`, `fd00:42::/56`).
pub(super) fn pod_cidrs(raw: &str) -> Result<Vec<String>, ConfigError> {
    raw.split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|cidr| {
            let (ip, prefix) = cidr.split_once('/').unwrap_or((cidr, ""));
            let max = match ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(_)) => 32,
                Ok(std::net::IpAddr::V6(_)) => 128,
                Err(_) => 0,
            };
            match prefix.parse::<u8>() {
                Ok(p) if max > 0 && p <= max => Ok(cidr.to_string()),
                _ => Err(ConfigError::Invalid {
                    name: "KUBEBYON_HOST_POD_CIDRS",
                    reason: format!("{cidr:?} is not a CIDR such as 10.42.0.0/16"),
                }),
            }
        })
        .collect()
}

/// A ServiceAccount, as `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
}

/// The identities of a platform running on its host cluster
/// (`KUBEBYON_HOST_TENANT_CLUSTER_ROLE`, `KUBEBYON_HOST_JOBS_SERVICE_ACCOUNT`,
/// `KUBEBYON_HOST_CREDENTIALS_SERVICE_ACCOUNT`, all three or none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantAccess {
    /// The ClusterRole of what the jobs do in a cluster's namespace.
    pub cluster_role: String,
    pub jobs: ServiceAccount,
    pub credentials: ServiceAccount,
}

impl TenantAccess {
    pub fn from_source(source: &dyn Source) -> Result<Option<Self>, ConfigError> {
        const ROLE: &str = "KUBEBYON_HOST_TENANT_CLUSTER_ROLE";
        const JOBS: &str = "KUBEBYON_HOST_JOBS_SERVICE_ACCOUNT";
        const CREDENTIALS: &str = "KUBEBYON_HOST_CREDENTIALS_SERVICE_ACCOUNT";
        let (role, jobs, credentials) =
            match (source.get(ROLE), source.get(JOBS), source.get(CREDENTIALS)) {
                (None, None, None) => return Ok(None),
                (Some(role), Some(jobs), Some(credentials)) => (role, jobs, credentials),
                _ => {
                    return Err(ConfigError::Invalid {
                        name: ROLE,
                        reason: format!(
                            "{ROLE}, {JOBS} and {CREDENTIALS} go together: set all three or none"
                        ),
                    });
                }
            };
        let account = |name: &'static str, raw: String| {
            raw.split_once('/')
                .filter(|(ns, sa)| !ns.is_empty() && !sa.is_empty() && !sa.contains('/'))
                .map(|(ns, sa)| ServiceAccount {
                    namespace: ns.to_string(),
                    name: sa.to_string(),
                })
                .ok_or(ConfigError::Invalid {
                    name,
                    reason: format!("expected namespace/name, got {raw:?}"),
                })
        };
        if role.trim().is_empty() {
            return Err(ConfigError::Invalid {
                name: ROLE,
                reason: "must name a ClusterRole".into(),
            });
        }
        Ok(Some(Self {
            cluster_role: role,
            jobs: account(JOBS, jobs)?,
            credentials: account(CREDENTIALS, credentials)?,
        }))
    }
}
