//! A Kubernetes API simulator: a test and demo tool, never on the production
//! path. It serves the REST surface kube-rs and kubectl use (discovery, CRUD,
//! resourceVersion and optimistic concurrency, generateName, label and field
//! selectors, server-side apply, merge patch, the status subresource, watch,
//! finalizers and namespace deletion, `Status` errors, `pods/exec` over a
//! WebSocket answered by a test's handler) from memory, and can play
//! the parts KubeBYON needs: a k3s host whose helm controller turns a vCluster
//! `HelmChart` into a ready control plane with a kubeconfig Secret pointing at a
//! second simulator (the vCluster's own API).
//!
//! Simplifications, on purpose: server-side apply merges maps and replaces lists
//! and does not detect field-ownership conflicts; strategic merge patch is
//! treated as JSON merge patch; RBAC only where a host is started with
//! `Options::rbac` (see `rbac`); no defaulting beyond metadata; of
//! admission, validating webhooks only (see `admission`), called for CREATE
//! and UPDATE. Every simulator serves HTTPS with a CA of its own
//! (`kubeconfig()` pins it); a vCluster's API asks for a bearer token: its admin token, or
//! one the TokenRequest API issued for a ServiceAccount that still exists and
//! has not expired (RBAC is not checked: any such account is an admin, but
//! a webhook authorizer its chart configures is asked first, and its webhooks
//! get the credentials its admission configuration names; see `authz`; both
//! are read from the chart's values and files when it is installed: a later
//! change of the values does not restart the simulated API server). A vCluster
//! also serves the private-node join endpoint (`/node/join`), whose script
//! plays the kubelet's TLS bootstrap (a certificate request approved by
//! kubeadm's auto-approval binding or through the `approval` subresource) and
//! then registers the joining machine as a Ready Node (its webhooks asked
//! first, as for a kubelet's registration); see `join`.

mod admission;
mod api;
mod authz;
mod behaviour;
mod bootstrap;
mod exec;
mod join;
mod kamaji;
mod protobuf;
mod rbac;
pub mod registry;
pub mod store;
mod table;
mod tls;
mod tokens;

pub use authz::{Authorizer, WebhookCredentials};
pub use behaviour::LOAD_BALANCER_IP;
pub use exec::{ExecHandler, ExecOutput, ExecRequest};
pub use rbac::Access;
pub use tls::TlsFront;

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::Router;
use serde_json::Value;
use tokio::{net::TcpListener, sync::Notify, task::AbortHandle};

use crate::store::{ApiError, Store};

/// What the simulator plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A k3s host: `HelmChart`s of the vCluster chart become control planes.
    Host,
    /// A vCluster's own API.
    VCluster,
    /// A Kamaji tenant control plane's own API.
    Kamaji,
}

impl Role {
    /// Whether it plays a cluster's own API (nodes join it, workloads run).
    pub fn is_tenant(self) -> bool {
        matches!(self, Self::VCluster | Self::Kamaji)
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub role: Role,
    /// How long a vCluster chart takes to become ready.
    pub ready_delay: Duration,
    /// How long a terminating namespace takes to disappear.
    pub namespace_delete_delay: Duration,
    /// Bearer token every request must present, if any.
    pub token: Option<String>,
    /// Names the serving certificate is valid for besides `127.0.0.1` and
    /// `localhost` (a vCluster's service names and `controlPlane.proxy.extraSANs`).
    pub names: Vec<String>,
    /// The webhook authorizer the API server asks before RBAC, when its
    /// chart's values configure one (see `authz`).
    pub authorizer: Option<Authorizer>,
    /// What the API server presents to admission webhooks (see `authz`).
    pub webhook_credentials: WebhookCredentials,
    /// Whether service-account tokens are held to RBAC (see `rbac`);
    /// otherwise any such token may do anything, as the admin's may.
    pub rbac: bool,
}

impl Options {
    pub fn host() -> Self {
        Self {
            role: Role::Host,
            ready_delay: Duration::from_millis(300),
            namespace_delete_delay: Duration::from_millis(200),
            // A real host asks for credentials too; `kubeconfig()` carries them.
            token: Some(uuid::Uuid::new_v4().simple().to_string()),
            names: Vec::new(),
            authorizer: None,
            webhook_credentials: WebhookCredentials::default(),
            rbac: false,
        }
    }

    pub fn vcluster(token: String) -> Self {
        Self {
            role: Role::VCluster,
            ready_delay: Duration::ZERO,
            namespace_delete_delay: Duration::from_millis(50),
            token: Some(token),
            names: Vec::new(),
            authorizer: None,
            webhook_credentials: WebhookCredentials::default(),
            rbac: false,
        }
    }
}

/// Failures a test can inject.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// Every request answers 503.
    pub api_down: bool,
    /// vCluster chart installs fail with this message.
    pub chart_install_error: Option<String>,
    /// Control planes' API servers exit at start, logging this (a DataStore
    /// that does not answer, say), as they do for flags they refuse.
    pub api_server_exits: Option<String>,
    /// Overrides `Options::ready_delay`.
    pub ready_delay: Option<Duration>,
    /// Pod evictions answer 429, as when a PodDisruptionBudget forbids them.
    pub evictions_blocked: bool,
    /// How far the simulator's clock runs ahead of the real one: what expires
    /// (issued tokens, bootstrap tokens) expires that much sooner.
    pub clock_ahead: Duration,
    /// API groups the server does not serve (a CRD not installed, no
    /// metrics-server): their discovery and objects answer 404.
    pub unserved_groups: Vec<String>,
    /// Resources of a group version the server does not serve,
    /// `<group>/<version>/<plural>`: one release of a CRD serving some of its
    /// versions (Gateway API v1.5's standard channel serves TLSRoute `v1`
    /// and not `v1alpha2`; releases before v1.5 serve `v1alpha2` alone).
    pub unserved_resources: Vec<String>,
}

pub(crate) struct Shared {
    pub store: Mutex<Store>,
    pub faults: Mutex<Faults>,
    pub token: Option<String>,
    pub options: Options,
    pub default_watch_timeout: Duration,
    pub wake: Notify,
    /// vCluster APIs started for charts, by (namespace, release).
    pub children: Mutex<HashMap<(String, String), Arc<Simulator>>>,
    /// What answers `pods/exec`.
    pub exec: Mutex<Option<ExecHandler>>,
    /// The PEM of the CA the serving certificate is signed by.
    pub ca_pem: String,
    /// Service-account tokens issued through the TokenRequest API.
    pub issued: Mutex<tokens::IssuedTokens>,
    /// What RBAC decided, request by request (`Options::rbac`).
    pub access: Mutex<Vec<Access>>,
    /// kube-proxy's part: each NodePort or LoadBalancer Service of a
    /// vCluster, by (namespace, name), forwarded from a port of its own
    /// (its node port) while the Service exists.
    pub node_ports: Mutex<HashMap<(String, String), behaviour::NodePort>>,
    /// Why a control plane's API server exited at start, by (namespace,
    /// name): what its log would say.
    pub startup_logs: Mutex<HashMap<(String, String), String>>,
    /// Its certificate authority, which also signs approved kubelet
    /// certificate requests (kube-controller-manager's signer).
    pub authority: Arc<tls::Authority>,
    /// In a Kamaji control plane: the API server `cluster-info` names,
    /// from the TenantControlPlane's endpoint (kubeadm's bootstrap phase).
    pub kubeadm_server: Mutex<Option<String>>,
}

/// A simulator being started.
pub type Starting =
    std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Arc<Simulator>>> + Send>>;

pub struct Simulator {
    shared: Arc<Shared>,
    authority: Arc<tls::Authority>,
    addr: SocketAddr,
    tasks: Vec<AbortHandle>,
}

impl Simulator {
    /// Starts on a free loopback port.
    pub fn start(options: Options) -> Starting {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), options)
    }

    /// Boxed rather than `async fn`: a host's controller starts further
    /// simulators, whose controllers would otherwise make the future's type recursive.
    pub fn start_on(addr: SocketAddr, options: Options) -> Starting {
        Box::pin(Self::boot(addr, options))
    }

    async fn boot(addr: SocketAddr, options: Options) -> std::io::Result<Arc<Self>> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let common_name = match options.role {
            Role::Host => "kube-sim-host",
            Role::VCluster => "kube-sim-vcluster",
            Role::Kamaji => "kube-sim-kamaji",
        };
        let authority = Arc::new(tls::Authority::new(common_name, &options.names)?);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new()),
            faults: Mutex::new(Faults::default()),
            token: options.token.clone(),
            options: options.clone(),
            default_watch_timeout: Duration::from_secs(300),
            wake: Notify::new(),
            children: Mutex::new(HashMap::new()),
            exec: Mutex::new(None),
            ca_pem: authority.ca_pem.clone(),
            issued: Mutex::new(HashMap::new()),
            access: Mutex::new(Vec::new()),
            node_ports: Mutex::new(HashMap::new()),
            startup_logs: Mutex::new(HashMap::new()),
            authority: authority.clone(),
            kubeadm_server: Mutex::new(None),
        });
        behaviour::seed(&shared);
        let app = Router::new()
            .route(
                "/api/v1/namespaces/{namespace}/pods/{name}/exec",
                axum::routing::any(exec::handle),
            )
            .fallback(api::handle)
            .with_state(shared.clone());
        let server =
            tokio::spawn(tls::serve(listener, authority.acceptor.clone(), app)).abort_handle();
        let events = shared.store.lock().expect("lock").subscribe();
        let controller = tokio::spawn(behaviour::run(shared.clone(), events)).abort_handle();
        Ok(Arc::new(Self {
            shared,
            authority,
            addr,
            tasks: vec![server, controller],
        }))
    }

    /// Where clients reach it: its address, or 127.0.0.1 when it listens on
    /// every address.
    pub fn url(&self) -> String {
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        format!("https://{addr}")
    }

    /// Serves a certificate for `names` (besides loopback's) from the same CA
    /// from now on, as a control plane restarted with other names does.
    pub(crate) fn reissue_certificate(&self, names: &[String]) -> std::io::Result<()> {
        self.authority.reissue(names)
    }

    /// A client certificate from this API's CA for `user` in `groups`, and
    /// its key (PEM): a kubelet's, say (`system:node:<name>` in
    /// `system:nodes`), as root on its node finds it.
    pub fn client_certificate(
        &self,
        user: &str,
        groups: &[&str],
    ) -> std::io::Result<(String, String)> {
        self.authority.client_certificate(user, groups)
    }

    /// A kubeconfig for this API at `server` that authenticates with a
    /// client certificate for `user` in `groups` (what kubeadm writes into
    /// `admin.conf`).
    pub fn kubeconfig_with_certificate(
        &self,
        server: &str,
        user: &str,
        groups: &[&str],
    ) -> std::io::Result<String> {
        use base64::Engine;
        let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        let (certificate, key) = self.client_certificate(user, groups)?;
        Ok(format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {user}@kubernetes\n  context:\n    cluster: kubernetes\n    user: {user}\ncurrent-context: {user}@kubernetes\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {certificate}\n    client-key-data: {key}\n",
            ca = encode(&self.shared.ca_pem),
            certificate = encode(&certificate),
            key = encode(&key),
        ))
    }

    /// Kamaji's bootstrap phase for a control plane at `endpoint`
    /// (`host:port`): `cluster-info` names it from now on.
    pub(crate) fn start_kubeadm_phase(&self, endpoint: &str) {
        *self.shared.kubeadm_server.lock().expect("lock") = Some(format!("https://{endpoint}"));
        bootstrap::run_phase(&self.shared);
        bootstrap::sign_cluster_info(&self.shared);
    }

    /// What a control plane's API server logged as it exited at start, when
    /// kube-apiserver refused its flags or files.
    pub fn startup_log(&self, namespace: &str, name: &str) -> Option<String> {
        self.shared
            .startup_logs
            .lock()
            .expect("lock")
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// The PEM of the CA the simulator's serving certificate is signed by.
    pub fn ca_pem(&self) -> &str {
        &self.shared.ca_pem
    }

    /// A kubeconfig for this API at `server` (default `url()`): the CA pinned,
    /// and the bearer token when the simulator asks for one. What a vCluster
    /// writes into its `vc-<name>` Secret, and what clients of the host use.
    pub fn kubeconfig(&self, server: Option<&str>) -> String {
        self.kubeconfig_with(server, self.shared.token.as_deref())
    }

    /// A kubeconfig for this API at its `url()` with another bearer token (a
    /// ServiceAccount's, say).
    pub fn kubeconfig_as(&self, token: &str) -> String {
        self.kubeconfig_with(None, Some(token))
    }

    fn kubeconfig_with(&self, server: Option<&str>, token: Option<&str>) -> String {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.shared.ca_pem);
        let user = match token {
            Some(token) => format!("\n    token: {token}"),
            None => " {}".to_string(),
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-sim\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: kube-sim\n  context:\n    cluster: kube-sim\n    user: admin\ncurrent-context: kube-sim\nusers:\n- name: admin\n  user:{user}\n",
            server = server.map(str::to_string).unwrap_or_else(|| self.url()),
        )
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn faults(&self) -> Faults {
        self.shared.faults.lock().expect("lock").clone()
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.shared.faults.lock().expect("lock") = faults;
    }

    /// A token for the ServiceAccount `namespace/name`, as the TokenRequest
    /// API issues it (an hour).
    pub fn issue_token(&self, namespace: &str, name: &str) -> Result<String, ApiError> {
        let issued = tokens::request(&self.shared, namespace, name, &serde_json::json!({}))?;
        Ok(issued["status"]["token"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// What RBAC decided so far about service-account tokens, request by
    /// request (`Options::rbac`).
    pub fn access_log(&self) -> Vec<Access> {
        self.shared.access.lock().expect("lock").clone()
    }

    /// Installs what runs the commands `pods/exec` is asked for.
    pub fn set_exec(&self, handler: ExecHandler) {
        *self.shared.exec.lock().expect("lock") = Some(handler);
    }

    /// The cluster API started for a vCluster chart release or a Kamaji
    /// `TenantControlPlane`, once it is ready.
    pub fn vcluster(&self, namespace: &str, release: &str) -> Option<Arc<Simulator>> {
        self.shared
            .children
            .lock()
            .expect("lock")
            .get(&(namespace.to_string(), release.to_string()))
            .cloned()
    }

    /// Reads an object, as a test would with a client.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = registry::find_kind(api_version, kind)?;
        self.shared
            .store
            .lock()
            .expect("lock")
            .get(resource, namespace, name)
            .ok()
    }

    /// Every object of a cluster-scoped kind, or of a namespaced one in all
    /// namespaces.
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let Some(resource) = registry::find_kind(api_version, kind) else {
            return Vec::new();
        };
        self.shared
            .store
            .lock()
            .expect("lock")
            .list(resource, None, None, None)
            .unwrap_or_default()
    }

    /// Creates or merges an object, as a controller of the simulated cluster would.
    pub fn put(&self, object: Value) -> Result<Value, ApiError> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let resource = registry::find_kind(api_version, kind)
            .ok_or_else(|| ApiError::bad_request(format!("unknown kind {api_version}/{kind}")))?;
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut store = self.shared.store.lock().expect("lock");
        let result = store.apply(resource, &namespace, &name, &object, "kube-sim", false)?;
        if let Some(status) = object.get("status") {
            let patch = serde_json::json!({ "status": status });
            return store.merge_patch(resource, &namespace, &name, &patch, true);
        }
        Ok(result)
    }

    /// Removes an object outright (a node that disappears, say).
    pub fn remove(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> bool {
        let Some(resource) = registry::find_kind(api_version, kind) else {
            return false;
        };
        self.shared
            .store
            .lock()
            .expect("lock")
            .remove(resource, namespace, name)
            .is_some()
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
