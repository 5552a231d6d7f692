//! `local` started as a process, the way the README runs it.

use std::{process::Stdio, time::Duration};

use tests::{broker::TestBroker, database::TestDb, eventually, free_port, workspace_binary};
use tokio::process::{Child, Command};

use crate::harness::Client;

pub(crate) struct Local {
    child: Child,
    pub(crate) base: String,
    /// A client of `base`, nobody signed in.
    pub(crate) client: Client,
}

impl Local {
    /// `local --development`, as `./infra/local/run.sh --development` starts it.
    pub(crate) async fn start(env: &[(&str, &str)]) -> Self {
        Self::start_with(&["--development"], env).await
    }

    pub(crate) async fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        // A free port can be handed out again before `local` binds it (to
        // the simulator it starts first, say): a start that exits is tried
        // again on another port.
        for _ in 0..3 {
            let port = free_port();
            let mut child = Command::new(workspace_binary("local"))
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
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    eprintln!("local exited at start ({status}); starting it on another port");
                    break;
                }
                let client = Client::http(&base, Duration::from_secs(30));
                let healthy = client
                    .try_send("GET", "/healthz", None)
                    .await
                    .is_some_and(|r| r.status.is_success());
                if healthy {
                    return Self {
                        child,
                        base,
                        client,
                    };
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "timed out waiting for local to answer /healthz"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        panic!("local did not start in three tries");
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
    let client = &local.client;
    assert_eq!(client.call("GET", "/readyz", None).await.0, 200);
    let (status, accepted) = client
        .call(
            "POST",
            "/api/console/clusters",
            Some(serde_json::json!({
                "name": "first",
                "workload_cpu_limit_milli_cores": 2000,
                "workload_memory_limit_mib": 4096,
            })),
        )
        .await;
    assert_eq!(status, 202);
    let id = accepted["cluster"]["id"].as_str().unwrap().to_string();

    assert_eq!(accepted["cluster"]["status"], "provisioning");
    let cluster = eventually(30, "the create job to finish", || {
        let path = format!("/api/console/clusters/{id}");
        async move {
            let (_, cluster) = client.call("GET", &path, None).await;
            (cluster["status"] != "provisioning").then_some(cluster)
        }
    })
    .await;
    assert_eq!(cluster["status"], "ready", "{cluster}");
    assert_eq!(cluster["kubeconfig_available"], true);
    let (_, jobs) = client
        .call("GET", &format!("/api/console/clusters/{id}/jobs"), None)
        .await;
    assert_eq!(jobs[0]["status"], "succeeded");
    let (_, operations) = client
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/operations"),
            None,
        )
        .await;
    assert_eq!(operations[0]["stage"], "done");

    let (status, kubeconfig) = client
        .call(
            "POST",
            &format!("/api/console/clusters/{id}/kubeconfigs"),
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(status, 201);
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

    let (_, openapi) = client.call("GET", "/api/openapi.json", None).await;
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
    let metrics_port = free_port().to_string();
    let local = Local::start(&[
        ("DATABASE_URL", &db.url),
        ("AMQP_URL", &amqp_url),
        ("AMQP_EXCHANGE", &broker.topology.exchange),
        ("METRICS_PORT", &metrics_port),
    ])
    .await;
    create_and_watch_it_become_ready(&local).await;

    // A caller cannot grow the number of series: any method token and any
    // path count as one label each.
    for (method, path) in [
        ("BREW", "/api/console/clusters"),
        ("GET", "/no/such/route/7f3a"),
    ] {
        local.client.send(method, path, None).await;
    }

    // What that did, as Prometheus scrapes it from the metrics port.
    let metrics = Client::http(
        &format!("http://127.0.0.1:{metrics_port}"),
        Duration::from_secs(30),
    );
    let scrape = || async {
        let reply = metrics.send("GET", "/metrics", None).await;
        assert_eq!(
            reply.content_type(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        reply.body.as_str().expect("text").to_string()
    };
    let text = scrape().await;
    let parsed = parse_openmetrics(&text).await;
    assert_eq!(
        parsed["kubebyon_http_requests"]["type"], "counter",
        "{parsed}"
    );
    assert!(
        parsed["kubebyon_http_requests"]["samples"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "kubebyon_http_requests_total"
                && s["labels"]["route"] == "/api/console/clusters"
                && s["labels"]["status"] == "202"
                && s["value"] == 1.0),
        "{parsed}"
    );
    assert_eq!(
        parsed["kubebyon_job_attempt_duration_seconds"]["type"], "histogram",
        "{parsed}"
    );
    let value = |text: &str, series: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    };
    for (series, expected) in [
        (
            r#"kubebyon_http_requests_total{route="/api/console/clusters",method="POST",status="202"}"#,
            1.0,
        ),
        (
            r#"kubebyon_http_requests_total{route="/api/console/clusters/{cluster_id}/kubeconfigs",method="POST",status="201"}"#,
            1.0,
        ),
        (
            r#"kubebyon_jobs_claimed_total{job_type="cluster_create"}"#,
            1.0,
        ),
        (
            r#"kubebyon_job_attempts_total{job_type="cluster_create",outcome="succeeded"}"#,
            1.0,
        ),
        (
            r#"kubebyon_job_attempt_duration_seconds_count{job_type="cluster_create"}"#,
            1.0,
        ),
        // Read from PostgreSQL at the scrape (absent had nobody set it).
        (r#"kubebyon_jobs_pending{job_type="cluster_create"}"#, 0.0),
    ] {
        assert_eq!(value(&text, series), Some(expected), "{series} in\n{text}");
    }
    assert!(
        value(
            &text,
            r#"kubebyon_schedule_runs_total{schedule="sweep",result="succeeded"}"#
        )
        .is_some_and(|runs| runs >= 1.0),
        "{text}"
    );
    assert!(
        !text.contains("/healthz") && !text.contains("/metrics"),
        "probes and scrapes are not counted"
    );
    assert!(!text.contains("BREW") && !text.contains("7f3a"), "{text}");
    assert!(
        text.contains(r#"route="/api/console/clusters",method="other""#),
        "{text}"
    );
    assert!(
        text.contains(r#"route="unmatched",method="GET",status="404""#),
        "{text}"
    );
    local.stop().await;
}

/// The scrape as Prometheus's own Python client parses OpenMetrics text
/// (strictly: a malformed line, a missing `# EOF`, a counter without its
/// `_total` fail it): each family's type and samples, by family name.
async fn parse_openmetrics(text: &str) -> serde_json::Value {
    let mut child = Command::new(tests::moto::python())
        .args([
            "-c",
            "import json, sys\n\
             from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse\n\
             print(json.dumps({f.name: {'type': f.type, 'samples': [\n\
                 {'name': s.name, 'labels': s.labels, 'value': s.value} for s in f.samples]}\n\
                 for f in parse(sys.stdin.read())}))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the test venv's python runs");
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "prometheus_client refuses the scrape: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test]
async fn the_development_identity_answers_loopback_names_and_same_site_writes_only() {
    let db = TestDb::new().await;
    let local = Local::start(&[("DATABASE_URL", &db.url)]).await;
    let clusters = "/api/console/clusters";
    // A DNS-rebinding page reaches the server under its own name.
    let (status, body) = local
        .client
        .clone()
        .header("host", "attacker.example:8080")
        .call("GET", clusters, None)
        .await;
    assert_eq!(status, 403);
    assert_eq!(body["code"], "forbidden");
    // A page elsewhere posting a form (or nothing) at it.
    // The review's case: a page of another local server, whose browser sent
    // no Sec-Fetch-Site, is another origin all the same.
    for (name, value) in [
        ("origin", "https://evil.example"),
        ("sec-fetch-site", "cross-site"),
        ("origin", "http://localhost:3000"),
        ("origin", "http://127.0.0.1:1"),
    ] {
        let (status, _) = local
            .client
            .clone()
            .header(name, value)
            .call("POST", "/api/console/admin/settings", None)
            .await;
        assert_eq!(status, 403, "{name}: {value}");
    }
    // The console itself (same origin) works.
    let (status, _) = local
        .client
        .clone()
        .header("origin", &local.base)
        .call("GET", clusters, None)
        .await;
    assert_eq!(status, 200);
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
    let (status, _) = local
        .client
        .call("GET", "/api/console/admin/settings", None)
        .await;
    assert_eq!(status, 401);
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

/// `local reseal-settings`, run as an operator would during a key rotation.
async fn reseal(db: &TestDb, env: &[(&str, &str)]) -> std::process::Output {
    Command::new(workspace_binary("local"))
        .arg("reseal-settings")
        .env("DATABASE_URL", &db.url)
        .env_remove("KUBEBYON_SETTINGS_KEY")
        .env_remove("KUBEBYON_SETTINGS_KEY_PREVIOUS")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("local runs")
}

#[tokio::test]
async fn a_settings_key_rotation_reseals_every_secret_under_the_new_key() {
    use secrecy::{ExposeSecret, SecretString};
    use shared::{
        accounts::settings as accounts,
        secretbox::SecretBox,
        settings::{self, PlatformSecretChanges},
    };
    const OLD: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const NEW: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
    const OTHER: &str = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY=";
    let key = |k: &str| SecretBox::new(&SecretString::from(k.to_string())).unwrap();
    let db = TestDb::new().await;
    // Two parts of the row: the platform's mail password and accounts' captcha secret.
    settings::save(
        &db.pool,
        Some(&key(OLD)),
        &settings::load(&db.pool).await.unwrap().fields,
        &PlatformSecretChanges {
            smtp_password: Some(Some("smtp-hunter2".into())),
        },
    )
    .await
    .unwrap();
    accounts::save(
        &db.pool,
        Some(&key(OLD)),
        &accounts::load(&db.pool).await.unwrap().fields,
        &accounts::AccountsSecretChanges {
            captcha_secret: Some(Some("captcha-hunter2".into())),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    async fn sealed(db: &TestDb) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        (
            settings::load(&db.pool).await.unwrap().smtp_password,
            accounts::load(&db.pool).await.unwrap().captcha_secret,
        )
    }
    let before = sealed(&db).await;

    // A previous key that did not seal them stops the command, changing nothing.
    let wrong = reseal(
        &db,
        &[
            ("KUBEBYON_SETTINGS_KEY", NEW),
            ("KUBEBYON_SETTINGS_KEY_PREVIOUS", OTHER),
        ],
    )
    .await;
    assert!(!wrong.status.success());
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("opens under neither"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
    assert_eq!(sealed(&db).await, before);
    // Without the new key there is nothing to seal under.
    assert!(
        !reseal(&db, &[("KUBEBYON_SETTINGS_KEY_PREVIOUS", OLD)])
            .await
            .status
            .success()
    );

    let done = reseal(
        &db,
        &[
            ("KUBEBYON_SETTINGS_KEY", NEW),
            ("KUBEBYON_SETTINGS_KEY_PREVIOUS", &format!("{OTHER},{OLD}")),
        ],
    )
    .await;
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let after = sealed(&db).await;
    for (column, value, plain) in [
        (
            settings::column::SMTP_PASSWORD,
            after.0.as_deref(),
            "smtp-hunter2",
        ),
        (
            accounts::column::CAPTCHA_SECRET,
            after.1.as_deref(),
            "captcha-hunter2",
        ),
    ] {
        let value = value.expect("still set");
        assert_eq!(
            key(NEW).open(column, value).unwrap().expose_secret(),
            plain,
            "the new key alone opens {column}"
        );
        assert!(
            key(OLD).open(column, value).is_err(),
            "the old key no longer opens {column}"
        );
    }
    let audited: serde_json::Value = sqlx::query_scalar(
        "SELECT metadata FROM audit_events WHERE action = 'system.settings.resealed'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(audited["resealed"], 2);
    // Run again: nothing left to re-seal, and the old key is not needed.
    let again = reseal(&db, &[("KUBEBYON_SETTINGS_KEY", NEW)]).await;
    assert!(again.status.success());
    assert_eq!(sealed(&db).await, after);
}

/// `local create-admin EMAIL`, the password on standard input, as an
/// operator runs it (or a Job does) on a platform with no mail yet.
async fn create_admin(db: &TestDb, email: &str, password: &str) -> std::process::Output {
    use tokio::io::AsyncWriteExt;
    let mut child = Command::new(workspace_binary("local"))
        .args(["create-admin", email])
        .env("DATABASE_URL", &db.url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("local runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(password.as_bytes()).await.unwrap();
    drop(stdin);
    child.wait_with_output().await.unwrap()
}

#[tokio::test]
async fn create_admin_makes_the_first_administrator_without_mail() {
    let db = TestDb::new().await;
    let weak = create_admin(&db, "root@example.com", "password123\n").await;
    assert!(!weak.status.success());
    assert!(
        String::from_utf8_lossy(&weak.stderr).contains("the password is too easy to guess"),
        "{}",
        String::from_utf8_lossy(&weak.stderr)
    );
    let bad = create_admin(&db, "not an address", "grown trusty lantern sofa\n").await;
    assert!(!bad.status.success());
    let users = || async {
        sqlx::query_as::<_, (String, String, bool)>(
            "SELECT email::text, role, email_verified_at IS NOT NULL FROM users ORDER BY email",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    assert_eq!(users().await, vec![], "nothing half-made stays behind");

    let made = create_admin(&db, "Root@Example.com", "grown trusty lantern sofa\n").await;
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    assert_eq!(
        users().await,
        vec![("root@example.com".into(), "admin".into(), true)]
    );

    // The admin signs in with that password, in accounts mode.
    let local = Local::start_with(&[], &[("DATABASE_URL", &db.url)]).await;
    let login = |password: &'static str| {
        local.client.send(
            "POST",
            "/api/auth/login",
            Some(serde_json::json!({ "email": "root@example.com", "password": password })),
        )
    };
    let signed_in = login("grown trusty lantern sofa").await;
    assert_eq!(signed_in.status, 200);
    let session = local.client.signed_in(&signed_in);
    let (_, answer) = session.call("GET", "/api/auth/me", None).await;
    assert_eq!(answer["role"], "admin", "{answer}");

    // Run again for the same account (a forgotten password): the new
    // password works, the old one and its sessions do not.
    let again = create_admin(&db, "root@example.com", "seven amber kettles hum\r\n").await;
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(session.call("GET", "/api/auth/me", None).await.0, 401);
    assert_eq!(login("grown trusty lantern sofa").await.status, 401);
    assert_eq!(login("seven amber kettles hum").await.status, 200);
    local.stop().await;

    let audited: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_events WHERE actor_kind = 'system' ORDER BY created_at, id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(audited, ["user.admin_created", "user.admin_promoted"]);
}
