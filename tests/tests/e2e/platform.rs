//! The platform under test: the HTTP functions over real PostgreSQL, the
//! in-process job backbone, and the Kubernetes API simulator as the k3s host.

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use http_body_util::BodyExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_sim::{Options, Simulator};
use queues::inprocess::{self, InProcessDispatcher, InProcessRunner};
use shared::{
    accounts::users,
    config::{JobSettings, Settings},
    host::{HostCluster, HostSettings},
    http::{AppState, Identity, with_common_layers},
    jobs::{JobMessage, Processed, Worker},
};
use sync_clusters::observe::{Enqueuing, ObservationReport, observe_clusters};
use tests::database::TestDb;
use tower::ServiceExt;

/// What every harness of these tests stands on: a fresh database, the
/// in-process job backbone with the platform's own job handlers, and the state
/// the routers serve with.
pub struct Base {
    pub db: TestDb,
    pub dispatcher: InProcessDispatcher,
    pub runner: InProcessRunner,
    pub state: AppState,
}

/// How a [`Base`] is made: the settings' environment, the host cluster (none:
/// cluster jobs fail at once saying so), who the console requests act as.
pub struct Builder {
    worker_id: &'static str,
    env: Vec<(String, String)>,
    host: Option<Arc<HostCluster>>,
    accounts: bool,
}

impl Builder {
    /// No host, no environment, every request as the development user (an
    /// administrator).
    pub fn new(worker_id: &'static str) -> Self {
        Self {
            worker_id,
            env: Vec::new(),
            host: None,
            accounts: false,
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Cluster jobs act on `host`, with a short lease (crash tests wait it out).
    pub fn host(mut self, host: Arc<HostCluster>) -> Self {
        self.host = Some(host);
        self
    }

    /// Requests carry their own identity: a session cookie or an API key.
    pub fn accounts(mut self) -> Self {
        self.accounts = true;
        self
    }

    pub async fn build(self) -> Base {
        let db = TestDb::new().await;
        let identity = if self.accounts {
            Identity::Accounts
        } else {
            Identity::Development(users::ensure_development_user(&db.pool).await.unwrap())
        };
        let job_settings = match self.host {
            Some(_) => job_settings(),
            None => JobSettings::default(),
        };
        let worker = Worker::new(
            db.pool.clone(),
            job_settings,
            self.worker_id,
            local::handlers(self.host.clone()),
        );
        let (dispatcher, runner) = inprocess::channel(worker, 1);
        let source: std::collections::HashMap<&str, &str> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let state = AppState {
            pool: db.pool.clone(),
            publisher: Arc::new(dispatcher.clone()),
            settings: Arc::new(Settings::from_source(&source).unwrap()),
            identity,
            host: self.host,
        };
        Base {
            db,
            dispatcher,
            runner,
            state,
        }
    }
}

pub struct Platform {
    pub db: TestDb,
    pub sim: Arc<Simulator>,
    pub host: Arc<HostCluster>,
    pub dispatcher: InProcessDispatcher,
    pub runner: InProcessRunner,
    pub router: Router,
    /// What the router serves with (its identity: the development user).
    pub state: AppState,
    /// Where the router is also served over TCP (the join function's base URL).
    pub base_url: String,
    /// HTTPS in front of `base_url`, where the admission webhook is
    /// registered, when the platform was made with one.
    pub front: Option<kube_sim::TlsFront>,
}

pub fn host_settings() -> HostSettings {
    let mut settings = HostSettings::from_source(&std::collections::HashMap::new()).unwrap();
    // NodePort endpoints use this name, load balancers the simulator's 127.0.0.1.
    settings.node_address = "localhost".into();
    settings.poll_interval = Duration::from_millis(20);
    settings.ready_timeout = Duration::from_secs(30);
    settings
}

pub fn job_settings() -> JobSettings {
    JobSettings {
        lease: Duration::from_millis(600),
        ..JobSettings::default()
    }
}

impl Platform {
    pub async fn new() -> Self {
        Self::with_host_settings(host_settings()).await
    }

    pub async fn with_host_settings(settings: HostSettings) -> Self {
        Self::with_settings(settings, &[], false).await
    }

    /// With more of the platform's environment (a settings key, an SMTP server).
    pub async fn with_env(env: &[(&str, &str)]) -> Self {
        Self::with_settings(host_settings(), env, false).await
    }

    /// Served over HTTPS too (a CA of its own), the cluster jobs registering
    /// the admission webhook there with that CA as its `caBundle`.
    pub async fn with_admission() -> Self {
        Self::with_settings(host_settings(), &[], true).await
    }

    async fn with_settings(mut settings: HostSettings, env: &[(&str, &str)], https: bool) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let front = if https {
            let front = kube_sim::TlsFront::start(listener.local_addr().unwrap())
                .await
                .unwrap();
            settings.admission_url = Some(front.url.clone());
            settings.admission_ca_pem = Some(front.ca_pem.clone());
            Some(front)
        } else {
            None
        };
        let sim = Simulator::start(Options {
            ready_delay: Duration::from_millis(100),
            namespace_delete_delay: Duration::from_millis(100),
            ..Options::host()
        })
        .await
        .unwrap();
        let host = Arc::new(
            HostCluster::from_kubeconfig(
                Kubeconfig::from_yaml(&sim.kubeconfig(None)).unwrap(),
                settings,
            )
            .await
            .unwrap(),
        );
        let Base {
            db,
            dispatcher,
            runner,
            state,
        } = env
            .iter()
            .fold(Builder::new("worker-b"), |builder, (key, value)| {
                builder.env(key, value)
            })
            .host(host.clone())
            .env("KUBEBYON_JOIN_BASE_URL", &base_url)
            .build()
            .await;
        let router = with_common_layers(api_routes(), state.clone());
        let served = router
            .clone()
            .into_make_service_with_connect_info::<std::net::SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, served).await });
        Self {
            base_url,
            db,
            sim,
            host,
            dispatcher,
            runner,
            router,
            state,
            front,
        }
    }

    /// Calls as another user, every API route.
    pub async fn call_as(
        &self,
        user_id: uuid::Uuid,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (StatusCode, serde_json::Value) {
        let state = AppState {
            identity: Identity::Development(user_id),
            ..self.state.clone()
        };
        let router = with_common_layers(api_routes(), state);
        send(router, method, path, body).await
    }

    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (StatusCode, serde_json::Value) {
        send(self.router.clone(), method, path, body).await
    }

    pub async fn create(&self, name: &str, mode: &str) -> String {
        let (status, body) = self
            .call(
                "POST",
                "/api/console/clusters",
                Some(serde_json::json!({
                    "name": name, "workload_cpu_limit_milli_cores": 4000, "workload_memory_limit_mib": 8192,
                    "control_plane_cpu_request_milli_cores": 750, "public_access_mode": mode,
                })),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        body["cluster"]["id"].as_str().unwrap().to_string()
    }

    /// Asks for a cluster with the managed ingress switched on; its id. Its
    /// jobs wait for [`Platform::drive`].
    pub async fn create_with_ingress(&self, name: &str) -> String {
        let (status, body) = self
            .call(
                "POST",
                "/api/console/clusters",
                Some(serde_json::json!({
                    "name": name, "workload_cpu_limit_milli_cores": 2000, "workload_memory_limit_mib": 4096,
                    "public_access_mode": "nodeport", "managed_workload_ingress_enabled": true,
                })),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        body["cluster"]["id"].as_str().unwrap().to_string()
    }

    /// Creates a cluster, runs its jobs until it is ready, and returns its id
    /// and namespace.
    pub async fn create_ready(&self, name: &str, mode: &str) -> (String, String) {
        let id = self.create(name, mode).await;
        self.drive().await;
        let namespace = self.cluster(&id).await["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        (id, namespace)
    }

    pub async fn cluster(&self, id: &str) -> serde_json::Value {
        let (status, body) = self
            .call("GET", &format!("/api/console/clusters/{id}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    pub async fn drive(&self) -> Vec<(JobMessage, Processed)> {
        self.runner.run_until_idle().await
    }

    /// One `sync-clusters` observation of every ready cluster; the jobs it
    /// enqueues wait for [`Platform::drive`].
    pub async fn observe(&self) -> ObservationReport {
        let enqueuing = Enqueuing {
            publisher: &self.dispatcher,
            max_attempts: self.state.settings.jobs.max_attempts,
        };
        observe_clusters(&self.db.pool, &self.host, enqueuing, 4)
            .await
            .unwrap()
    }

    /// Issues a kubeconfig and returns its text.
    pub async fn issue_kubeconfig(&self, id: &str, body: serde_json::Value) -> String {
        let (status, body) = self
            .call(
                "POST",
                &format!("/api/console/clusters/{id}/kubeconfigs"),
                Some(body),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        match body {
            serde_json::Value::String(text) => text,
            json => json.to_string(),
        }
    }

    pub async fn kube_client_from_kubeconfig(&self, id: &str) -> kube::Client {
        let text = self.issue_kubeconfig(id, serde_json::json!({})).await;
        let kubeconfig = Kubeconfig::from_yaml(&text).expect("the kubeconfig parses");
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        kube::Client::try_from(config).unwrap()
    }
}

pub fn self_worker(db: &TestDb, host: &Arc<HostCluster>, id: &str) -> Worker {
    Worker::new(
        db.pool.clone(),
        job_settings(),
        id,
        local::handlers(Some(host.clone())),
    )
}

/// A Node object as a kubelet would post it.
pub fn node(
    name: &str,
    ready: &str,
    heartbeat: chrono::DateTime<chrono::Utc>,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "",
                            "lastHeartbeatTime": heartbeat.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                            "lastTransitionTime": heartbeat.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)}],
            "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"osImage": "Debian GNU/Linux 12 (bookworm)", "kubeletVersion": "v1.33.5",
                         "containerRuntimeVersion": "containerd://1.7.27", "architecture": "amd64",
                         "bootID": "", "kernelVersion": "6.1.0", "kubeProxyVersion": "", "machineID": "",
                         "operatingSystem": "linux", "systemUUID": ""},
            "allocatable": {"cpu": "3800m", "memory": "16384Ki", "ephemeral-storage": "20Gi", "pods": "110"},
        },
    })
}

/// Sends one request through `router`; the status and the body (JSON, or
/// the text as a JSON string).
pub async fn send(
    router: Router,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (StatusCode, serde_json::Value) {
    let (status, _, json) = send_with_headers(router, method, path, body).await;
    (status, json)
}

/// [`send`], with the answer's headers too.
pub async fn send_with_headers(
    router: Router,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
    let mut request = Request::builder().method(method).uri(path);
    let body = match body {
        Some(json) => {
            request = request.header(header::CONTENT_TYPE, "application/json");
            Body::from(json.to_string())
        }
        None => Body::empty(),
    };
    let response = router.oneshot(request.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::String(
        String::from_utf8_lossy(&bytes).into(),
    ));
    (status, headers, json)
}

/// The fields a problem+json answer's `errors` name, in order.
pub fn problem_fields(body: &serde_json::Value) -> Vec<&str> {
    body["errors"]
        .as_array()
        .expect("a problem with errors")
        .iter()
        .map(|e| e["field"].as_str().expect("a field"))
        .collect()
}

/// Every function's routes but the console's (its pages answer any other
/// path): what `functions.toml` lists, so a new function is here too.
pub fn api_routes() -> Router<AppState> {
    local::ROUTERS
        .iter()
        .filter(|(name, _)| *name != "console")
        .fold(Router::new(), |all, (_, router)| all.merge(router()))
}
