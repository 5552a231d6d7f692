//! `local` started as a process, the way the README runs it.

use std::{process::Stdio, time::Duration};

use tests::{broker::TestBroker, database::TestDb, eventually, free_port, workspace_binary};
use tokio::process::{Child, Command};

pub(crate) struct Local {
    child: Child,
    pub(crate) base: String,
    http: reqwest::Client,
}

impl Local {
    /// `local --development`, as `./infra/local/run.sh --development` starts it.
    pub(crate) async fn start(env: &[(&str, &str)]) -> Self {
        Self::start_with(&["--development"], env).await
    }

    pub(crate) async fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let child = Command::new(workspace_binary("local"))
            .args(args)
            .env("PORT", port.to_string())
            .env("SWEEP_INTERVAL_MS", "200")
            .env_remove("AMQP_URL")
            .envs(env.iter().copied())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("local starts");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually(30, "local to answer /healthz", || {
            let http = http.clone();
            let url = format!("{base}/healthz");
            async move {
                http.get(url)
                    .send()
                    .await
                    .ok()
                    .filter(|r| r.status().is_success())
            }
        })
        .await;
        Self { child, base, http }
    }

    async fn get(&self, path: &str) -> serde_json::Value {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub(crate) async fn stop(mut self) {
        let pid = self.child.id().expect("running");
        tests::interrupt(pid);
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("local stops within 20 s of Ctrl-C")
            .unwrap();
        assert!(status.success(), "local exited with {status}");
    }
}

/// With no host kubeconfig, `local` runs the simulator as its host: a create
/// goes from `provisioning` to `ready` with a kubeconfig.
async fn create_and_watch_it_become_ready(local: &Local) {
    assert_eq!(
        local
            .http
            .get(format!("{}/readyz", local.base))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let response = local
        .http
        .post(format!("{}/api/console/clusters", local.base))
        .json(&serde_json::json!({
            "name": "first",
            "workload_cpu_limit_milli_cores": 2000,
            "workload_memory_limit_mib": 4096,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let accepted: serde_json::Value = response.json().await.unwrap();
    let id = accepted["cluster"]["id"].as_str().unwrap().to_string();

    assert_eq!(accepted["cluster"]["status"], "provisioning");
    let cluster = eventually(30, "the create job to finish", || {
        let path = format!("/api/console/clusters/{id}");
        async move {
            let cluster = local.get(&path).await;
            (cluster["status"] != "provisioning").then_some(cluster)
        }
    })
    .await;
    assert_eq!(cluster["status"], "ready", "{cluster}");
    assert_eq!(cluster["kubeconfig_available"], true);
    let jobs = local.get(&format!("/api/console/clusters/{id}/jobs")).await;
    assert_eq!(jobs[0]["status"], "succeeded");
    let operations = local
        .get(&format!("/api/console/clusters/{id}/operations"))
        .await;
    assert_eq!(operations[0]["stage"], "done");

    let response = local
        .http
        .post(format!(
            "{}/api/console/clusters/{id}/kubeconfigs",
            local.base
        ))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let kubeconfig: serde_json::Value = response.json().await.unwrap();
    let server = kubeconfig["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap();
    assert_eq!(server, cluster["api_endpoint"].as_str().unwrap());
    let token = kubeconfig["users"][0]["user"]["token"].as_str().unwrap();
    let ca = kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("the kubeconfig pins the cluster's CA");
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .unwrap();
    let vcluster = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .build()
        .unwrap();
    let namespaces: serde_json::Value = vcluster
        .get(format!("{server}/api/v1/namespaces"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        namespaces["kind"], "NamespaceList",
        "the kubeconfig reaches the vCluster API"
    );

    let openapi = local.get("/api/openapi.json").await;
    assert!(openapi["paths"]["/api/console/clusters"].is_object());
}

#[tokio::test]
async fn local_runs_the_platform_with_in_process_jobs() {
    let db = TestDb::new().await;
    let local = Local::start(&[("DATABASE_URL", &db.url)]).await;
    create_and_watch_it_become_ready(&local).await;
    local.stop().await;
}

#[tokio::test]
async fn local_runs_the_platform_through_rabbitmq() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let amqp_url = tests::broker::amqp_url();
    let local = Local::start(&[
        ("DATABASE_URL", &db.url),
        ("AMQP_URL", &amqp_url),
        ("AMQP_EXCHANGE", &broker.topology.exchange),
    ])
    .await;
    create_and_watch_it_become_ready(&local).await;
    local.stop().await;
}

#[tokio::test]
async fn the_development_identity_answers_loopback_names_and_same_site_writes_only() {
    let db = TestDb::new().await;
    let local = Local::start(&[("DATABASE_URL", &db.url)]).await;
    let clusters = format!("{}/api/console/clusters", local.base);
    // A DNS-rebinding page reaches the server under its own name.
    let rebound = local
        .http
        .get(&clusters)
        .header("host", "attacker.example:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    let body: serde_json::Value = rebound.json().await.unwrap();
    assert_eq!(body["code"], "forbidden");
    // A page elsewhere posting a form (or nothing) at it.
    for (name, value) in [
        ("origin", "https://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let forged = local
            .http
            .post(format!("{}/api/console/admin/settings", local.base))
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(forged.status(), 403, "{name}: {value}");
    }
    // The console itself (same origin) works.
    let own = local
        .http
        .get(&clusters)
        .header("origin", local.base.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 200);
    // It listens on loopback only (what the kernel lists for its port).
    let port: u16 = local.base.rsplit(':').next().unwrap().parse().unwrap();
    let listening: Vec<String> = std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (addr, local_port) = fields.get(1)?.split_once(':')?;
            (u16::from_str_radix(local_port, 16).ok()? == port && fields.get(3) == Some(&"0A"))
                .then(|| addr.to_string())
        })
        .collect();
    assert_eq!(listening, ["0100007F"], "127.0.0.1 only");
    local.stop().await;
}

#[tokio::test]
async fn without_the_flag_local_asks_every_caller_to_authenticate() {
    let db = TestDb::new().await;
    let local = Local::start_with(&[], &[("DATABASE_URL", &db.url)]).await;
    let anonymous = local
        .http
        .get(format!("{}/api/console/admin/settings", local.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    local.stop().await;
    // An empty or development mode variable stops the process at start.
    for value in ["", "development"] {
        let status = Command::new(workspace_binary("local"))
            .env("DATABASE_URL", &db.url)
            .env("PORT", free_port().to_string())
            .env("KUBEBYON_AUTH_MODE", value)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .unwrap();
        assert!(!status.success(), "KUBEBYON_AUTH_MODE={value:?} started");
    }
}
