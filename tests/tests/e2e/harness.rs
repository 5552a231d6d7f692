//! The one harness of the end-to-end tests. [`TestApp::builder`] makes the
//! platform under test: a fresh database, the in-process job backbone with
//! the platform's own job handlers, every HTTP function's routes served in
//! process and over TCP, and what a test asks for on top (the Kubernetes API
//! simulator as the k3s host, the admission webhook behind HTTPS, accounts
//! instead of the development user, a real SMTP exchange, the loopback
//! Stripe API). [`Client`] is how every test calls a platform: through the
//! router in process, or over HTTP to a process (`local`, the fault test's
//! functions), as a browser with cookies, a script with an API key, or the
//! development user.

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, header},
};
use http_body_util::BodyExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_sim::{Options, Simulator};
use queues::inprocess::{self, InProcessDispatcher, InProcessRunner};
use serde_json::Value;
use shared::{
    accounts::users,
    billing::settings::{self as billing_settings, BillingSecretChanges},
    config::{JobSettings, Settings},
    host::{HostCluster, HostSettings, engine},
    http::{AppState, Identity, with_common_layers},
    jobs::{JobMessage, Processed, Worker},
};
use sync_clusters::observe::{Enqueuing, ObservationReport, observe_clusters};
use tests::{database::TestDb, smtp::SmtpSink, stripe::StripeStub};
use tower::ServiceExt;

/// The settings key of every platform that keeps secrets in its settings.
pub const SETTINGS_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
/// The Stripe webhook secret of a platform made with [`Builder::stripe`].
pub const STRIPE_WEBHOOK_SECRET: &str = "whsec_test_9f8e7d6c5b4a";

/// How a [`TestApp`] is made. Every part is off until asked for: no host
/// (cluster jobs fail at once saying so), every request as the development
/// user (an administrator), no mail server, no Stripe.
pub struct Builder {
    worker_id: &'static str,
    env: Vec<(String, String)>,
    host: Option<HostSettings>,
    admission: bool,
    accounts: bool,
    smtp: bool,
    stripe: bool,
    console: bool,
    least_privilege: bool,
}

impl Builder {
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// The simulator as the host cluster, with the tests' host settings
    /// ([`host_settings`]); cluster jobs take a short lease (crash tests wait
    /// it out), and the join function's base URL is the app's own.
    pub fn host(self) -> Self {
        self.host_with(host_settings())
    }

    /// [`Builder::host`] with other host settings.
    pub fn host_with(mut self, settings: HostSettings) -> Self {
        self.host = Some(settings);
        self
    }

    /// A host, and the app served over HTTPS too (a CA of its own): the
    /// cluster jobs register the admission webhook there with that CA as its
    /// `caBundle`.
    pub fn admission(mut self) -> Self {
        self.admission = true;
        if self.host.is_none() {
            self.host = Some(host_settings());
        }
        self
    }

    /// A host that holds service-account tokens to RBAC, with the chart's
    /// ServiceAccounts and roles: the jobs act as its jobs ServiceAccount
    /// and the HTTP functions as its credentials one, with the tenant access
    /// settings its ConfigMap gives.
    pub fn least_privilege(mut self) -> Self {
        self.least_privilege = true;
        if self.host.is_none() {
            self.host = Some(host_settings());
        }
        self
    }

    /// Requests carry their own identity (a session cookie or an API key),
    /// behind one trusted proxy (a [`Client`]'s address arrives as
    /// `X-Forwarded-For`), with `boss@example.com` as the first administrator.
    pub fn accounts(mut self) -> Self {
        self.accounts = true;
        self
    }

    /// A real SMTP server ([`TestApp::mail`]) as the platform's mail server.
    pub fn smtp(mut self) -> Self {
        self.smtp = true;
        self
    }

    /// The loopback Stripe API ([`TestApp::stripe`]) configured as the
    /// platform's, with a secret key and [`STRIPE_WEBHOOK_SECRET`].
    pub fn stripe(mut self) -> Self {
        self.stripe = true;
        self
    }

    /// The console's pages too (they answer any path no API route takes).
    pub fn console(mut self) -> Self {
        self.console = true;
        self
    }

    fn has(&self, key: &str) -> bool {
        self.env.iter().any(|(k, _)| k == key)
    }

    fn default_env(mut self, key: &str, value: &str) -> Self {
        if !self.has(key) {
            self = self.env(key, value);
        }
        self
    }

    pub async fn build(mut self) -> TestApp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let mail = match self.smtp {
            true => Some(SmtpSink::start().await),
            false => None,
        };
        if let Some(mail) = &mail {
            self = self.default_env("SMTP_URL", &mail.url());
        }
        if self.accounts {
            self = self
                .default_env("KUBEBYON_ADMIN_EMAIL", "boss@example.com")
                .default_env("KUBEBYON_TRUSTED_PROXY_HOPS", "1");
        }
        if self.stripe {
            self = self
                .default_env("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY)
                .default_env("KUBEBYON_ALLOW_PRIVATE_OUTBOUND", "true");
        }
        // The suite's clusters run on Kamaji, the platform's default, unless
        // a test names vCluster, which is licensed; the routes and the host
        // read the same.
        self = self
            .default_env("KUBEBYON_ENGINE", "kamaji")
            .default_env("KUBEBYON_VCLUSTER_PLATFORM_HOST", VCLUSTER_PLATFORM_HOST)
            .default_env("KUBEBYON_VCLUSTER_ACCESS_KEY", VCLUSTER_ACCESS_KEY);
        let engines = {
            let source: std::collections::HashMap<&str, &str> = self
                .env
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            <engine::Config as shared::config::Part>::read(&source).unwrap()
        };
        let mut front = None;
        let mut host = None;
        if let Some(mut settings) = self.host.take() {
            settings.engines = engines;
            if self.admission {
                let tls = kube_sim::TlsFront::start(listener.local_addr().unwrap())
                    .await
                    .unwrap();
                settings.admission_url = Some(tls.url.clone());
                settings.admission_ca_pem = Some(tls.ca_pem.clone());
                front = Some(tls);
            }
            host = Some(start_host(settings, self.least_privilege).await);
            self = self.default_env("KUBEBYON_JOIN_BASE_URL", &base_url);
        }
        let db = TestDb::new().await;
        let identity = if self.accounts {
            Identity::Accounts
        } else {
            Identity::Development(users::ensure_development_user(&db.pool).await.unwrap())
        };
        let cluster_host = host.as_ref().map(|host: &Host| host.jobs.clone());
        let job_settings = match cluster_host {
            Some(_) => job_settings(),
            None => JobSettings::default(),
        };
        let source: std::collections::HashMap<&str, &str> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let settings = Settings::from_source(&source).unwrap();
        let worker = Worker::new(
            db.pool.clone(),
            job_settings,
            self.worker_id,
            local::handlers(cluster_host.clone(), settings.secret_box().map(Arc::new)),
        );
        let (dispatcher, runner) = inprocess::channel(worker, 1);
        let state = AppState {
            pool: db.pool.clone(),
            publisher: Arc::new(dispatcher.clone()),
            settings: Arc::new(settings),
            identity,
            host: host.as_ref().map(|host| host.http.clone()),
        };
        let stripe = match self.stripe {
            true => Some(configure_stripe(&state).await),
            false => None,
        };
        let routes = match self.console {
            true => local::routes(),
            false => api_routes(),
        };
        let router = with_common_layers(routes, state.clone());
        let served = router
            .clone()
            .into_make_service_with_connect_info::<std::net::SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, served).await });
        TestApp {
            db,
            dispatcher,
            runner,
            state,
            router,
            console: self.console,
            base_url,
            host,
            front,
            mail,
            stripe,
        }
    }
}

/// The simulated host and the platform's clients of it.
struct Host {
    sim: Arc<Simulator>,
    /// What the jobs and schedules act as.
    jobs: Arc<HostCluster>,
    /// What the HTTP functions act as.
    http: Arc<HostCluster>,
}

async fn start_host(mut settings: HostSettings, least_privilege: bool) -> Host {
    let sim = Simulator::start(Options {
        ready_delay: Duration::from_millis(100),
        namespace_delete_delay: Duration::from_millis(100),
        rbac: least_privilege,
        ..Options::host()
    })
    .await
    .unwrap();
    let connect = |kubeconfig: String, settings: HostSettings| async move {
        Arc::new(
            HostCluster::from_kubeconfig(Kubeconfig::from_yaml(&kubeconfig).unwrap(), settings)
                .await
                .unwrap(),
        )
    };
    if !least_privilege {
        let host = connect(sim.kubeconfig(None), settings).await;
        return Host {
            sim,
            jobs: host.clone(),
            http: host,
        };
    }
    // The chart as installed in `default`: its identities and roles, and
    // the settings its ConfigMap gives every function.
    let documents = crate::routing::rendered(match settings.engines.default {
        shared::domain::Engine::Vcluster => SUITE_ENGINES,
        // The chart's defaults: Kamaji alone.
        shared::domain::Engine::Kamaji => &[],
    });
    let mut config = std::collections::HashMap::new();
    for document in &documents {
        match document["kind"].as_str().unwrap_or_default() {
            "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding" => {
                let mut object = document.clone();
                if matches!(
                    object["kind"].as_str(),
                    Some("ServiceAccount" | "Role" | "RoleBinding")
                ) {
                    object["metadata"]["namespace"] = "default".into();
                }
                sim.put(object).unwrap();
            }
            "ConfigMap" => {
                for (key, value) in document["data"].as_object().unwrap() {
                    config.insert(key.clone(), value.as_str().unwrap().to_string());
                }
            }
            _ => {}
        }
    }
    let config: std::collections::HashMap<&str, &str> = config
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    settings.tenant_access = shared::host::TenantAccess::from_source(&config).unwrap();
    let access = settings
        .tenant_access
        .clone()
        .expect("the chart names the platform's identities");
    let token = |account: &shared::host::ServiceAccount| {
        sim.issue_token(&account.namespace, &account.name).unwrap()
    };
    let jobs = connect(sim.kubeconfig_as(&token(&access.jobs)), settings.clone()).await;
    let http = connect(sim.kubeconfig_as(&token(&access.credentials)), settings).await;
    Host { sim, jobs, http }
}

/// The loopback Stripe API as the platform's, saved the way the back office
/// saves it.
async fn configure_stripe(state: &AppState) -> StripeStub {
    let stripe = StripeStub::start().await;
    let mut stored = billing_settings::load(&state.pool).await.unwrap();
    stored.fields.stripe_api_base_url = Some(stripe.base_url.clone());
    let secrets = BillingSecretChanges {
        stripe_secret_key: Some(Some("sk_test_51Abc".into())),
        stripe_webhook_secret: Some(Some(STRIPE_WEBHOOK_SECRET.into())),
    };
    billing_settings::save(
        &state.pool,
        state.settings.secret_box().as_ref(),
        &stored.fields,
        &secrets,
    )
    .await
    .unwrap();
    stripe
}

/// The platform under test.
pub struct TestApp {
    pub db: TestDb,
    pub dispatcher: InProcessDispatcher,
    pub runner: InProcessRunner,
    /// What the router serves with.
    pub state: AppState,
    /// Every route, with the layers every function has.
    pub router: Router,
    console: bool,
    /// Where the router is also served over TCP (the join function's base
    /// URL when there is a host).
    pub base_url: String,
    host: Option<Host>,
    /// HTTPS in front of `base_url`, made by [`Builder::admission`].
    pub front: Option<kube_sim::TlsFront>,
    mail: Option<SmtpSink>,
    stripe: Option<StripeStub>,
}

/// The chart's engines for the suite's vCluster clusters (vCluster alone).
pub const SUITE_ENGINES: &[&str] = &[
    "engines.kamaji=false",
    "engines.vcluster=true",
    "config.KUBEBYON_ENGINE=vcluster",
];

/// The licence the suite's vCluster engine is given.
pub const VCLUSTER_PLATFORM_HOST: &str = "platform.vcluster.example";
pub const VCLUSTER_ACCESS_KEY: &str = "test-vcluster-access-key";

pub fn host_settings() -> HostSettings {
    let mut settings = HostSettings::from_source(&std::collections::HashMap::from([
        ("KUBEBYON_ENGINE", "kamaji"),
        ("KUBEBYON_VCLUSTER_PLATFORM_HOST", VCLUSTER_PLATFORM_HOST),
        ("KUBEBYON_VCLUSTER_ACCESS_KEY", VCLUSTER_ACCESS_KEY),
    ]))
    .unwrap();
    // NodePort endpoints use this name, load balancers the simulator's
    // `LOAD_BALANCER_IP`, which no certificate names unless asked to.
    settings.node_address = "localhost".into();
    settings.poll_interval = Duration::from_millis(20);
    settings.ready_timeout = Duration::from_secs(30);
    // A switched endpoint's old entry goes as the switch completes; the
    // grace period has a test of its own (`endpoint_switch`).
    settings.endpoint_grace = Duration::ZERO;
    settings
}

pub fn job_settings() -> JobSettings {
    JobSettings {
        lease: Duration::from_millis(600),
        ..JobSettings::default()
    }
}

impl TestApp {
    /// `worker_id` names the in-process job worker in the jobs it leases.
    pub fn builder(worker_id: &'static str) -> Builder {
        Builder {
            worker_id,
            env: Vec::new(),
            host: None,
            admission: false,
            accounts: false,
            smtp: false,
            stripe: false,
            console: false,
            least_privilege: false,
        }
    }

    /// The simulator serving as the host cluster.
    pub fn sim(&self) -> &Arc<Simulator> {
        &self
            .host
            .as_ref()
            .expect("a platform built with a host")
            .sim
    }

    /// The host cluster the cluster jobs act on.
    pub fn host(&self) -> &Arc<HostCluster> {
        &self
            .host
            .as_ref()
            .expect("a platform built with a host")
            .jobs
    }

    /// The SMTP server the platform mails through.
    pub fn mail(&self) -> &SmtpSink {
        self.mail.as_ref().expect("a platform built with smtp()")
    }

    /// The loopback Stripe API the platform pays through.
    pub fn stripe(&self) -> &StripeStub {
        self.stripe
            .as_ref()
            .expect("a platform built with stripe()")
    }

    /// The development user every request acts as.
    pub fn development_user(&self) -> uuid::Uuid {
        match self.state.identity {
            Identity::Development(user) => user,
            Identity::Accounts => unreachable!("a platform built with accounts() has none"),
        }
    }

    /// A client as the platform's identity: the development user, or (with
    /// accounts) nobody signed in.
    pub fn client(&self) -> Client {
        Client::new(Transport::Router(self.router.clone()))
    }

    /// A client acting as another user (a platform without accounts).
    pub fn client_as(&self, user: uuid::Uuid) -> Client {
        self.client_with(Identity::Development(user))
    }

    /// A client through a router that serves with `identity`.
    pub fn client_with(&self, identity: Identity) -> Client {
        self.client_serving(AppState {
            identity,
            ..self.state.clone()
        })
    }

    /// A client through a router that serves with `state` (another pool,
    /// other settings).
    pub fn client_serving(&self, state: AppState) -> Client {
        let routes = match self.console {
            true => local::routes(),
            false => api_routes(),
        };
        Client::new(Transport::Router(with_common_layers(routes, state)))
    }

    /// A machine running the join script: over TCP to the platform, the
    /// join token its bearer token.
    pub fn machine(&self, join_token: &str) -> Client {
        Client::http(&self.base_url, Duration::from_secs(30)).bearer(join_token)
    }

    /// Calls as the platform's identity.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.client().call(method, path, body).await
    }

    /// Calls as another user.
    pub async fn call_as(
        &self,
        user: uuid::Uuid,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.client_as(user).call(method, path, body).await
    }

    /// The rows of `table`.
    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
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
    /// jobs wait for [`TestApp::drive`].
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

    pub async fn cluster(&self, id: &str) -> Value {
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
    /// enqueues wait for [`TestApp::drive`].
    pub async fn observe(&self) -> ObservationReport {
        let enqueuing = Enqueuing {
            publisher: &self.dispatcher,
            max_attempts: self.state.settings.jobs.max_attempts,
        };
        observe_clusters(&self.db.pool, self.host(), enqueuing, 4)
            .await
            .unwrap()
    }

    /// The stages the cluster's newest operation recorded, in order.
    pub async fn latest_stages(&self, id: &str) -> Vec<String> {
        let (_, operations) = self
            .call(
                "GET",
                &format!("/api/console/clusters/{id}/operations"),
                None,
            )
            .await;
        operations[0]["stages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["stage"].as_str().map(str::to_string))
            .collect()
    }

    /// Issues a kubeconfig and returns its text.
    pub async fn issue_kubeconfig(&self, id: &str, body: Value) -> String {
        let (status, body) = self
            .call(
                "POST",
                &format!("/api/console/clusters/{id}/kubeconfigs"),
                Some(body),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        match body {
            Value::String(text) => text,
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

    /// A second worker on this platform's database and host, as another
    /// process's would be.
    pub fn worker(&self, id: &str) -> Worker {
        Worker::new(
            self.db.pool.clone(),
            job_settings(),
            id,
            local::handlers(
                Some(self.host().clone()),
                self.state.settings.secret_box().map(Arc::new),
            ),
        )
    }
}

/// How a [`Client`]'s requests reach the platform.
#[derive(Clone)]
enum Transport {
    /// Through the router, in process.
    Router(Router),
    /// Over HTTP to `base`.
    Http { base: String, http: reqwest::Client },
}

/// A caller of the platform: a browser (its session cookie and CSRF token),
/// a script (an API key), or nobody signed in; from an address, with the
/// headers it adds to every request.
#[derive(Clone)]
pub struct Client {
    transport: Transport,
    session: Option<String>,
    csrf: Option<String>,
    bearer: Option<String>,
    ip: Option<String>,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The cookies' names' prefix: `__Host-`, or none on a platform with
    /// insecure cookies (`KUBEBYON_INSECURE_COOKIES`).
    cookie_prefix: &'static str,
}

/// An answer: its status, headers and body (JSON, or the text as a JSON
/// string).
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    fn new(status: StatusCode, headers: HeaderMap, bytes: &[u8]) -> Self {
        let body = serde_json::from_slice(bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(bytes).into()));
        Self {
            status,
            headers,
            body,
        }
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap())
            .unwrap_or_default()
    }

    /// The value of the cookie `name` the answer sets.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| {
                v.strip_prefix(&format!("{name}="))
                    .map(|rest| rest.split(';').next().unwrap().to_string())
            })
    }
}

impl Client {
    fn new(transport: Transport) -> Self {
        Self {
            transport,
            session: None,
            csrf: None,
            bearer: None,
            ip: None,
            headers: Vec::new(),
            cookie_prefix: "__Host-",
        }
    }

    /// Over HTTP to a platform at `base` (a process), giving up on an answer
    /// after `timeout`. Redirects are answers, as through the router.
    pub fn http(base: &str, timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client");
        Self::new(Transport::Http {
            base: base.trim_end_matches('/').to_string(),
            http,
        })
    }

    /// From another address (sent as `X-Forwarded-For`, which a platform
    /// built with accounts trusts one hop of).
    pub fn ip(mut self, ip: &str) -> Self {
        self.ip = Some(ip.to_string());
        self
    }

    /// With an API key.
    pub fn bearer(mut self, key: &str) -> Self {
        self.bearer = Some(key.to_string());
        self
    }

    /// With `value` as `name` on every request, byte for byte (an
    /// attacker's header need not be ASCII).
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers.push((
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(value.as_ref()).unwrap(),
        ));
        self
    }

    /// Signed in by `reply`: the session and CSRF cookies it set, from the
    /// same address; no API key.
    pub fn signed_in(&self, reply: &Reply) -> Self {
        let cookie_prefix = if reply.cookie("kb_session").is_some() {
            ""
        } else {
            "__Host-"
        };
        Self {
            session: reply.cookie(&format!("{cookie_prefix}kb_session")),
            csrf: reply.cookie(&format!("{cookie_prefix}kb_csrf")),
            bearer: None,
            cookie_prefix,
            ..self.clone()
        }
    }

    /// With `csrf` as its CSRF cookie and header (none: neither).
    pub fn csrf_token(mut self, csrf: Option<String>) -> Self {
        self.csrf = csrf;
        self
    }

    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    pub fn csrf(&self) -> Option<&str> {
        self.csrf.as_deref()
    }

    /// Registers `email` with `password`, reads the code `mail` received and
    /// confirms it: this client, signed in.
    pub async fn sign_up(&self, mail: &SmtpSink, email: &str, password: &str) -> Self {
        let reply = self
            .send(
                "POST",
                "/api/auth/register",
                Some(serde_json::json!({ "email": email, "password": password, "display_name": "Alice" })),
            )
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
        let code = mail.code_for(email).await;
        let reply = self
            .send(
                "POST",
                "/api/auth/verify-email",
                Some(serde_json::json!({ "email": email, "code": code, "password": password })),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        self.signed_in(&reply)
    }

    /// Sends `body` as JSON (none: no body); the status and the body.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let reply = self.send(method, path, body).await;
        (reply.status, reply.body)
    }

    /// Sends `body` as JSON (none: no body).
    pub async fn send(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        match body {
            Some(json) => {
                self.send_bytes(method, path, "application/json", json.to_string())
                    .await
            }
            None => self.exchange(method, path, None).await.expect("an answer"),
        }
    }

    /// Sends `body` as `content_type`, byte for byte.
    pub async fn send_bytes(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: impl Into<Vec<u8>>,
    ) -> Reply {
        self.exchange(method, path, Some((content_type, body.into())))
            .await
            .expect("an answer")
    }

    /// [`Client::send`], where no answer (refused, or none within the
    /// timeout of [`Client::http`]) is `None`.
    pub async fn try_send(&self, method: &str, path: &str, body: Option<Value>) -> Option<Reply> {
        let body = body.map(|json| ("application/json", json.to_string().into_bytes()));
        self.exchange(method, path, body).await
    }

    fn headers_for(&self) -> Vec<(HeaderName, HeaderValue)> {
        let value = |text: &str| HeaderValue::from_str(text).unwrap();
        let mut headers = self.headers.clone();
        if let Some(ip) = &self.ip {
            headers.push((HeaderName::from_static("x-forwarded-for"), value(ip)));
        }
        if !headers.iter().any(|(name, _)| name == header::USER_AGENT) {
            headers.push((header::USER_AGENT, value("kubebyon-tests/1.0")));
        }
        let mut cookies = Vec::new();
        let prefix = self.cookie_prefix;
        if let Some(session) = &self.session {
            cookies.push(format!("{prefix}kb_session={session}"));
        }
        if let Some(csrf) = &self.csrf {
            cookies.push(format!("{prefix}kb_csrf={csrf}"));
            headers.push((HeaderName::from_static("x-csrf-token"), value(csrf)));
        }
        if !cookies.is_empty() {
            headers.push((header::COOKIE, value(&cookies.join("; "))));
        }
        if let Some(key) = &self.bearer {
            headers.push((header::AUTHORIZATION, value(&format!("Bearer {key}"))));
        }
        headers
    }

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Option<Reply> {
        let mut headers = self.headers_for();
        if let Some((content_type, _)) = &body {
            headers.push((
                header::CONTENT_TYPE,
                HeaderValue::from_str(content_type).unwrap(),
            ));
        }
        let bytes = body.map(|(_, bytes)| bytes).unwrap_or_default();
        let (status, headers, bytes) = match &self.transport {
            Transport::Router(router) => {
                let mut request = Request::builder().method(method).uri(path);
                for (name, value) in headers {
                    request = request.header(name, value);
                }
                return Some(through(router, request.body(Body::from(bytes)).unwrap()).await);
            }
            Transport::Http { base, http } => {
                let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
                let mut request = http.request(method, format!("{base}{path}")).body(bytes);
                for (name, value) in headers {
                    request = request.header(name.as_str(), value.as_bytes());
                }
                let response = request.send().await.ok()?;
                let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
                let mut answer_headers = HeaderMap::new();
                for (name, value) in response.headers() {
                    answer_headers.append(
                        HeaderName::from_bytes(name.as_str().as_bytes()).unwrap(),
                        HeaderValue::from_bytes(value.as_bytes()).unwrap(),
                    );
                }
                let bytes = response.bytes().await.ok()?;
                (status, answer_headers, bytes)
            }
        };
        Some(Reply::new(status, headers, &bytes))
    }

    /// Sends `request` as it is (its body streamed, its headers as made),
    /// with this client's credentials added; through the router only.
    pub async fn raw(&self, request: Request<Body>) -> Reply {
        let Transport::Router(router) = &self.transport else {
            panic!("a request made by hand goes through the router");
        };
        let (mut parts, body) = request.into_parts();
        for (name, value) in self.headers_for() {
            parts.headers.append(name, value);
        }
        through(router, Request::from_parts(parts, body)).await
    }
}

async fn through(router: &Router, request: Request<Body>) -> Reply {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply::new(status, headers, &bytes)
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

/// Waits, when the current window of a fixed-window rate limit (aligned to
/// the epoch) ends within 30 s, until the next one starts: requests that
/// straddle its edge would count in two windows.
pub async fn clear_of_window_edge(window: Duration) {
    let window = window.as_secs();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if window - now % window < 30 {
        tokio::time::sleep(Duration::from_secs(window - now % window + 1)).await;
    }
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
