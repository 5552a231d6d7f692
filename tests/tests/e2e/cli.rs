//! The `kubebyon` command line, run as a process the way a user runs it:
//! signed in through the device grant (approved in Chromium by the
//! console), a cluster created with `--wait`, kubectl reaching it through
//! the `exec` credential plugin and renewing its token, a machine joined
//! with the join command `tokens create` prints, and everything refused
//! once the key is revoked. Then what goes wrong, each one line and its
//! exit code; and the device grant's rules on the server (single use,
//! expiry, polling speed, the limits on asking and guessing).

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use axum::http::StatusCode;
use serde_json::{Value, json};
use tests::{database::TestDb, machine::Machine, smtp::SmtpSink, workspace_binary};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{
    harness::{Client, TestApp},
    local_process::Local,
};

const PASSWORD: &str = "correct horse battery staple 42";
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// The command line with a configuration directory and a home of its own.
struct Cli {
    dir: PathBuf,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<std::process::Output> for Run {
    fn from(output: std::process::Output) -> Self {
        Self {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Cli {
    fn new() -> Self {
        let dir =
            std::env::temp_dir().join(format!("kubebyon-cli-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    fn config_dir(&self) -> PathBuf {
        self.dir.join("config")
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(workspace_binary("kubebyon"));
        command
            .args(args)
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .env("KUBEBYON_CONFIG_DIR", self.config_dir())
            .env_remove("KUBEBYON_URL")
            .env_remove("KUBEBYON_API_KEY")
            .env_remove("KUBEBYON_CONTEXT")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    async fn run(&self, args: &[&str]) -> Run {
        let output = tokio::time::timeout(Duration::from_secs(120), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubebyon {args:?} finished within two minutes"))
            .unwrap();
        Run::from(output)
    }

    /// `kubebyon login` started: the process, and the user code it shows.
    async fn start_login(&self, url: &str, device: &str) -> (tokio::process::Child, String) {
        let mut child = self
            .command(&["login", "--url", url, "--device-name", device])
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let code = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let line = lines
                    .next_line()
                    .await
                    .unwrap()
                    .expect("login prints its code");
                if let Some(rest) = line.split("enter the code ").nth(1) {
                    return rest.split_whitespace().next().unwrap().to_string();
                }
            }
        })
        .await
        .expect("the code is shown within 30 s");
        // The rest of standard error is read, so the process never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        (child, code)
    }

    /// Kubectl with `kubeconfig`, from this command line's home.
    async fn kubectl(&self, kubeconfig: &Path, args: &[&str]) -> Run {
        let output = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .env("KUBEBYON_CONFIG_DIR", self.config_dir())
            .stdin(Stdio::null())
            .output()
            .await
            .expect("kubectl runs (scripts/test.sh installs it into target/tools/bin)");
        Run::from(output)
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The only cached kubectl credential: its path and its token.
fn cached_credential(cli: &Cli) -> (PathBuf, Value) {
    let dir = cli.config_dir().join("credentials");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let entry: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    (files[0].clone(), entry)
}

// Multi-threaded: the command line, Chromium, kubectl and the join script
// run as child processes while `local` serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_signs_in_by_the_console_and_renews_kubectl_until_its_key_is_revoked() {
    let db = TestDb::new().await;
    let smtp = SmtpSink::start().await;
    let local = Local::start_with(
        &[],
        &[
            ("DATABASE_URL", &db.url),
            ("SMTP_URL", &smtp.url()),
            ("KUBEBYON_INSECURE_COOKIES", "true"),
            ("SYNC_NODES_INTERVAL_MS", "500"),
        ],
    )
    .await;
    let email = "terminal@example.test";
    let browser = local.client.sign_up(&smtp, email, PASSWORD).await;
    let cli = Cli::new();

    // Sign in: the code the terminal shows, approved in Chromium.
    let (mut login, code) = cli.start_login(&local.base, "build-box").await;
    assert!(
        code.len() == 9 && code.chars().nth(4) == Some('-'),
        "a code like BCDF-GHJK: {code}"
    );
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/console-shots");
    crate::console::journey(
        "device",
        "en",
        &[
            ("BASE_URL", local.base.clone()),
            ("MAILDIR", smtp.dir().display().to_string()),
            ("SHOTS", shots.display().to_string()),
            ("USER_EMAIL", email.to_string()),
            ("USER_CODE", code.clone()),
            ("DEVICE_NAME", "build-box".to_string()),
        ],
    )
    .await;
    let status = tokio::time::timeout(Duration::from_secs(30), login.wait())
        .await
        .expect("login ends once the code is approved")
        .unwrap();
    assert!(status.success(), "login exits 0 once approved: {status}");
    // Another sign-in, denied in Chinese: that one exits 3 and saves nothing.
    let (mut denied, code) = cli.start_login(&local.base, "kiosk").await;
    crate::console::journey(
        "device",
        "zh-CN",
        &[
            ("BASE_URL", local.base.clone()),
            ("MAILDIR", smtp.dir().display().to_string()),
            ("SHOTS", shots.display().to_string()),
            ("USER_EMAIL", email.to_string()),
            ("USER_CODE", code),
            ("DEVICE_NAME", "kiosk".to_string()),
            ("DECISION", "deny".to_string()),
        ],
    )
    .await;
    let status = tokio::time::timeout(Duration::from_secs(30), denied.wait())
        .await
        .expect("login ends once the code is denied")
        .unwrap();
    assert_eq!(status.code(), Some(3), "a denied sign-in exits 3");
    let config_path = cli.config_dir().join("config.json");
    assert_eq!(mode(&config_path), 0o600, "the key is the user's alone");
    assert_eq!(mode(&cli.config_dir()), 0o700);
    let config: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    let context = config["current_context"].as_str().unwrap().to_string();
    let key = config["contexts"][&context]["api_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(key.starts_with("kb_"), "{config}");
    // The key is the account's, named for the device, revocable from the console.
    let (status, keys) = browser
        .call("GET", "/api/console/account/api-keys", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let device_key = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| key.starts_with(&format!("{}_", k["prefix"].as_str().unwrap())))
        .unwrap_or_else(|| panic!("the device's key is listed: {keys}"))
        .clone();
    assert_eq!(device_key["name"], "build-box (signed in from a terminal)");
    assert_eq!(device_key["scope"], "write");
    let whoami = cli.run(&["whoami", "-o", "json"]).await;
    assert_eq!(whoami.code, 0, "{}", whoami.stderr);
    assert_eq!(
        serde_json::from_str::<Value>(&whoami.stdout).unwrap()["email"],
        email
    );

    // A cluster, followed stage by stage until it is ready.
    let created = cli
        .run(&[
            "clusters", "create", "demo", "--cpu", "1000", "--memory", "2048", "--wait",
        ])
        .await;
    assert_eq!(created.code, 0, "{}\n{}", created.stdout, created.stderr);
    let stages: Vec<&str> = created
        .stderr
        .lines()
        .filter(|l| l.trim_start().starts_with('['))
        .collect();
    assert!(
        stages.len() >= 3,
        "each stage on a line of its own:\n{}",
        created.stderr
    );
    assert!(stages[0].trim_start().starts_with("[ 1] "), "{stages:?}");
    assert!(
        created.stderr.contains("demo create succeeded"),
        "{}",
        created.stderr
    );
    let listed = cli.run(&["clusters", "list", "-o", "json"]).await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let clusters: Value = serde_json::from_str(&listed.stdout).expect("--output json is JSON");
    let demo = clusters
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "demo")
        .expect("demo is listed")
        .clone();
    assert_eq!(demo["status"], "ready");
    let cluster_id = demo["id"].as_str().unwrap().to_string();
    let yaml = cli.run(&["clusters", "get", "demo", "-o", "yaml"]).await;
    assert_eq!(yaml.code, 0, "{}", yaml.stderr);
    assert!(
        yaml.stdout.contains(&format!("id: {cluster_id}")),
        "{}",
        yaml.stdout
    );
    // By name, through the API's order; an order it lacks is its refusal.
    let by_name = cli
        .run(&["clusters", "list", "--sort", "name", "-o", "json"])
        .await;
    assert_eq!(by_name.code, 0, "{}", by_name.stderr);
    let by_name: Value = serde_json::from_str(&by_name.stdout).unwrap();
    let names: Vec<&str> = by_name
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    let unknown = cli.run(&["clusters", "list", "--sort", "size"]).await;
    assert_ne!(unknown.code, 0);
    assert!(
        unknown.stderr.contains("invalid_query"),
        "{}",
        unknown.stderr
    );
    let table = cli.run(&["clusters", "list"]).await;
    assert!(table.stdout.starts_with("NAME "), "{}", table.stdout);
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.starts_with("demo ") && l.contains("ready")),
        "{}",
        table.stdout
    );

    // kubectl through the exec plugin: no token in the kubeconfig.
    let kubeconfig = cli.dir.join("demo.yaml");
    let written = cli
        .run(&["kubeconfig", "demo", "--file", kubeconfig.to_str().unwrap()])
        .await;
    assert_eq!(written.code, 0, "{}", written.stderr);
    assert_eq!(mode(&kubeconfig), 0o600);
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(
        text.contains("client.authentication.k8s.io/v1") && text.contains("credential"),
        "{text}"
    );
    assert!(
        !text.contains("token"),
        "no credential in the kubeconfig:\n{text}"
    );
    let namespaces = cli.kubectl(&kubeconfig, &["get", "namespaces"]).await;
    assert_eq!(namespaces.code, 0, "{}", namespaces.stderr);
    assert!(
        namespaces.stdout.contains("kube-system"),
        "{}",
        namespaces.stdout
    );
    let (cache, first) = cached_credential(&cli);
    assert_eq!(mode(&cache), 0o600);
    let first_token = first["credential"]["status"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let expires = chrono::DateTime::parse_from_rfc3339(
        first["credential"]["status"]["expirationTimestamp"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let minutes = (expires.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_minutes();
    assert!((8..=10).contains(&minutes), "a token of minutes: {minutes}");
    // A second kubectl uses the cached token: no new one is asked for.
    assert_eq!(
        cli.kubectl(&kubeconfig, &["get", "namespaces"]).await.code,
        0
    );
    assert_eq!(cached_credential(&cli).1, first, "the cached token is used");

    // Past its expiry (the cache says so), the plugin renews it: a new token
    // for the same ServiceAccount.
    let mut expired = first.clone();
    expired["credential"]["status"]["expirationTimestamp"] = "2020-01-01T00:00:00Z".into();
    std::fs::write(&cache, expired.to_string()).unwrap();
    let renewed = cli.kubectl(&kubeconfig, &["get", "namespaces"]).await;
    assert_eq!(renewed.code, 0, "{}", renewed.stderr);
    let second = cached_credential(&cli).1;
    assert_ne!(
        second["credential"]["status"]["token"].as_str().unwrap(),
        first_token
    );
    let (status, credentials) = browser
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/kubeconfigs"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let exec: Vec<&Value> = credentials
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "exec")
        .collect();
    assert_eq!(
        exec.len(),
        1,
        "renewals reuse the key's credential: {credentials}"
    );
    assert_eq!(exec[0]["status"], "active");

    // A join token: the command it prints joins a machine.
    let token = cli
        .run(&[
            "tokens",
            "create",
            "demo",
            "--uses",
            "2",
            "--label",
            "tier=build",
        ])
        .await;
    assert_eq!(token.code, 0, "{}", token.stderr);
    let join_command = token.stdout.trim();
    assert!(
        join_command.starts_with("curl -sS -H 'Authorization: Bearer "),
        "{join_command}"
    );
    let machine = Machine::healthy("cli-worker");
    let joined = machine.run(join_command).await;
    assert!(
        joined.status.success(),
        "{}",
        String::from_utf8_lossy(&joined.stderr)
    );
    tests::eventually(30, "the joined node is listed", || async {
        let nodes = cli.run(&["nodes", "list", "demo", "-o", "json"]).await;
        let listed: Value = serde_json::from_str(&nodes.stdout).ok()?;
        listed
            .as_array()?
            .iter()
            .any(|n| n["name"] == "cli-worker")
            .then_some(())
    })
    .await;
    let tokens = cli.run(&["tokens", "list", "demo"]).await;
    assert!(
        tokens.stdout.lines().any(|l| l.contains("1/2")),
        "{}",
        tokens.stdout
    );

    // --verbose names requests, never the key or a token.
    let verbose = cli.run(&["--verbose", "credential", &cluster_id]).await;
    assert_eq!(verbose.code, 0, "{}", verbose.stderr);
    let verbose_list = cli.run(&["-v", "clusters", "list"]).await;
    for run in [&verbose, &verbose_list] {
        assert!(run.stderr.contains("> GET ") || run.stderr.contains("> POST ") || run.code == 0);
        assert!(
            !run.stderr.contains(&key),
            "the key stays out of --verbose:\n{}",
            run.stderr
        );
        assert!(!run.stderr.contains(&first_token[..40]), "{}", run.stderr);
    }
    assert!(
        verbose_list.stderr.contains("> GET ") && verbose_list.stderr.contains("< 200"),
        "{}",
        verbose_list.stderr
    );

    // The key revoked in the console: kubectl is refused at once (its
    // ServiceAccount is gone), and so is the command line.
    let revoked = browser
        .send(
            "DELETE",
            &format!(
                "/api/console/account/api-keys/{}",
                device_key["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    let refused = cli.kubectl(&kubeconfig, &["get", "namespaces"]).await;
    assert_ne!(
        refused.code, 0,
        "kubectl is refused once the key is revoked:\n{}",
        refused.stdout
    );
    let _ = std::fs::remove_file(&cache);
    let renewal = cli.run(&["credential", &cluster_id]).await;
    assert_eq!(renewal.code, 3, "{}", renewal.stderr);
    assert_eq!(
        renewal.stderr.lines().count(),
        1,
        "one line: {}",
        renewal.stderr
    );
    let (_, credentials) = browser
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/kubeconfigs"),
            None,
        )
        .await;
    let exec = credentials
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "exec")
        .unwrap();
    assert_eq!(exec["status"], "revoked", "{exec}");
    assert_eq!(exec["revoke_reason"], "api_key_revoked");

    local.stop().await;
}

/// A device sign-in asked for on `app`: its device and user codes.
async fn ask(client: &Client) -> (String, String) {
    let reply = client
        .send_bytes(
            "POST",
            "/api/auth/device/code",
            "application/x-www-form-urlencoded",
            "client_id=kubebyon-cli&device_name=ci-runner",
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    (
        reply.body["device_code"].as_str().unwrap().to_string(),
        reply.body["user_code"].as_str().unwrap().to_string(),
    )
}

async fn poll(client: &Client, device_code: &str) -> (StatusCode, Value) {
    let reply = client
        .send_bytes(
            "POST",
            "/api/auth/device/token",
            "application/x-www-form-urlencoded",
            format!(
                "grant_type={}&client_id=kubebyon-cli&device_code={device_code}",
                GRANT_TYPE.replace(':', "%3A")
            ),
        )
        .await;
    (reply.status, reply.body)
}

/// The grant's rules on the server, RFC 8628's and ours.
#[tokio::test]
async fn device_codes_are_single_use_expire_slow_pollers_down_and_are_limited() {
    let app = TestApp::builder("worker-a").accounts().smtp().build().await;
    let user = app
        .client()
        .ip("198.51.100.7")
        .sign_up(app.mail(), "grant@example.test", PASSWORD)
        .await;
    let device = app.client().ip("203.0.113.9");

    let (device_code, user_code) = ask(&device).await;
    let (status, body) = poll(&device, &device_code).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("authorization_pending"))
    );
    // Sooner than the interval: slow down.
    let (_, body) = poll(&device, &device_code).await;
    assert_eq!(body["error"], "slow_down", "{body}");

    // The console reads it: which device, from where.
    let (status, request) = user
        .call(
            "POST",
            "/api/console/account/device/inspect",
            Some(json!({ "user_code": user_code.to_lowercase().replace('-', " ") })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{request}");
    assert_eq!(
        (request["device_name"].as_str(), request["ip"].as_str()),
        (Some("ci-runner"), Some("203.0.113.9"))
    );
    assert_eq!(
        request["from_your_address"], false,
        "asked from another address than the reader's: the console warns"
    );
    let (_, same) = user
        .clone()
        .ip("203.0.113.9")
        .call(
            "POST",
            "/api/console/account/device/inspect",
            Some(json!({ "user_code": user_code })),
        )
        .await;
    assert_eq!(same["from_your_address"], true, "{same}");
    // Approving asks the password again.
    let (status, _) = user
        .call(
            "POST",
            "/api/console/account/device/approve",
            Some(json!({ "user_code": user_code, "password": "wrong" })),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = user
        .call(
            "POST",
            "/api/console/account/device/approve",
            Some(json!({ "user_code": user_code, "password": PASSWORD, "scope": "read" })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // Approved once: a second approval finds nothing pending.
    let (status, _) = user
        .call(
            "POST",
            "/api/console/account/device/approve",
            Some(json!({ "user_code": user_code, "password": PASSWORD })),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, token) = poll(&device, &device_code).await;
    assert_eq!(status, StatusCode::OK, "{token}");
    assert_eq!(
        (token["token_type"].as_str(), token["scope"].as_str()),
        (Some("Bearer"), Some("read"))
    );
    let key = token["access_token"].as_str().unwrap();
    let (status, me) = app
        .client()
        .bearer(key)
        .call("GET", "/api/auth/me", None)
        .await;
    assert_eq!(
        (status, me["email"].as_str()),
        (StatusCode::OK, Some("grant@example.test"))
    );
    // A read key reads only.
    let (status, _) = app
        .client()
        .bearer(key)
        .call("POST", "/api/console/clusters", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // An API key approves nothing: only a signed-in person does.
    let (status, _) = app
        .client()
        .bearer(key)
        .call(
            "POST",
            "/api/console/account/device/inspect",
            Some(json!({ "user_code": user_code })),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Single use: the same device code again is no grant.
    let (status, body) = poll(&device, &device_code).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_grant"))
    );

    // Denied, then expired.
    let (denied, denied_user) = ask(&device).await;
    let (status, _) = user
        .call(
            "POST",
            "/api/console/account/device/deny",
            Some(json!({ "user_code": denied_user })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = poll(&device, &denied).await;
    assert_eq!(body["error"], "access_denied");
    let (expiring, expiring_user) = ask(&device).await;
    sqlx::query("UPDATE device_authorizations SET expires_at = now() WHERE device_name = 'ci-runner' AND status = 'pending'")
        .execute(&app.db.pool)
        .await
        .unwrap();
    let (_, body) = poll(&device, &expiring).await;
    assert_eq!(body["error"], "expired_token");
    let (status, _) = user
        .call(
            "POST",
            "/api/console/account/device/inspect",
            Some(json!({ "user_code": expiring_user })),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "an expired code names nothing"
    );
    // A day past its expiry, `sweep` removes a request, and only such.
    sqlx::query(
        "UPDATE device_authorizations SET expires_at = now() - interval '25 hours'
         WHERE device_name = 'ci-runner' AND status = 'pending'",
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM device_authorizations")
            .fetch_one(&app.db.pool)
            .await
            .unwrap()
    };
    let before = count().await;
    let context = queues::runtime::ScheduleContext::new(
        app.db.pool.clone(),
        app.state.settings.clone(),
        None,
        Some(std::sync::Arc::new(app.dispatcher.clone())),
    );
    let report = ::sweep::run(&context).await.unwrap();
    assert!(report.pruned >= 1, "{report:?}");
    assert_eq!(count().await, before - 1, "the expired one alone");

    // The codes are kept as hashes only.
    let stored: Vec<(Vec<u8>, Vec<u8>)> =
        sqlx::query_as("SELECT device_code_hash, user_code_hash FROM device_authorizations")
            .fetch_all(&app.db.pool)
            .await
            .unwrap();
    for (device_hash, user_hash) in &stored {
        for raw in [&device_code, &user_code] {
            assert!(!device_hash.windows(raw.len()).any(|w| w == raw.as_bytes()));
            assert!(!user_hash.windows(raw.len()).any(|w| w == raw.as_bytes()));
        }
    }

    // Not the platform's client, not a form, a NUL: refused.
    let reply = device
        .send_bytes(
            "POST",
            "/api/auth/device/code",
            "application/x-www-form-urlencoded",
            "client_id=someone-else",
        )
        .await;
    assert_eq!(
        (reply.status, reply.body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_client"))
    );
    let reply = device
        .send(
            "POST",
            "/api/auth/device/code",
            Some(json!({ "client_id": "kubebyon-cli" })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let reply = device
        .send_bytes(
            "POST",
            "/api/auth/device/code",
            "application/x-www-form-urlencoded",
            "client_id=kubebyon-cli&device_name=laptop%E2%80%AE",
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "a direction mark in a device's name"
    );
    let reply = device
        .send_bytes(
            "POST",
            "/api/auth/device/token",
            "application/x-www-form-urlencoded",
            "grant_type=password&client_id=kubebyon-cli&device_code=x",
        )
        .await;
    assert_eq!(reply.body["error"], "unsupported_grant_type");
    let reply = device
        .send_bytes(
            "POST",
            "/api/auth/device/token",
            "application/x-www-form-urlencoded",
            "client_id=kubebyon-cli&client_id=kubebyon-cli&grant_type=x&device_code=x",
        )
        .await;
    assert_eq!(reply.body["error"], "invalid_request", "a parameter twice");

    // Asking is limited per address: 20 an hour (3 asked above).
    let mut statuses = Vec::new();
    for _ in 0..20 {
        let reply = device
            .send_bytes(
                "POST",
                "/api/auth/device/code",
                "application/x-www-form-urlencoded",
                "client_id=kubebyon-cli",
            )
            .await;
        statuses.push(reply.status.as_u16());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        17,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        3,
        "{statuses:?}"
    );

    // Guessing is limited per account: 10 misses an hour (two above: the
    // second approval, the expired code), then 429 even for a code that
    // exists.
    let (_, real) = ask(&app.client().ip("192.0.2.1")).await;
    let mut misses = Vec::new();
    for i in 0..10 {
        let guess = format!(
            "BCDF-{}",
            [
                "GHJK", "GHJL", "GHJM", "GHJN", "GHJP", "GHJQ", "GHJR", "GHJS", "GHJT", "GHJV"
            ][i]
        );
        let (status, _) = user
            .call(
                "POST",
                "/api/console/account/device/inspect",
                Some(json!({ "user_code": guess })),
            )
            .await;
        misses.push(status.as_u16());
    }
    assert_eq!(
        misses.iter().filter(|s| **s == 404).count(),
        8,
        "{misses:?}"
    );
    let (status, _) = user
        .call(
            "POST",
            "/api/console/account/device/inspect",
            Some(json!({ "user_code": real })),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "the limit holds whatever the code"
    );

    // Guesses sent at once are each counted as they arrive: a burst of 30
    // gets 10 answers at most, the rest 429.
    let racer = app
        .client()
        .ip("192.0.2.77")
        .sign_up(app.mail(), "racer@example.test", PASSWORD)
        .await;
    let answers = futures_util::future::join_all((0..30).map(|_| {
        let racer = racer.clone();
        async move {
            let guess = shared::accounts::device::new_user_code();
            racer
                .call(
                    "POST",
                    "/api/console/account/device/inspect",
                    Some(json!({ "user_code": guess })),
                )
                .await
                .0
                .as_u16()
        }
    }))
    .await;
    assert_eq!(
        answers.iter().filter(|s| **s == 404).count(),
        10,
        "{answers:?}"
    );
    assert_eq!(
        answers.iter().filter(|s| **s == 429).count(),
        20,
        "{answers:?}"
    );
}

/// What goes wrong, from the terminal: one line each, an exit code scripts
/// rely on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_goes_wrong_is_one_line_and_an_exit_code() {
    // On vCluster, whose chart install fails at once (`chart_install_failed`).
    let app = TestApp::builder("worker-b")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host()
        .accounts()
        .smtp()
        .build()
        .await;
    let user = app
        .client()
        .sign_up(app.mail(), "errors@example.test", PASSWORD)
        .await;
    let cli = Cli::new();

    // No platform, then one that does not answer.
    let run = cli.run(&["clusters", "list"]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    let closed = format!("http://127.0.0.1:{}", tests::free_port());
    let run = cli
        .run(&[
            "--url",
            &closed,
            "--api-key",
            "kb_00000000_x",
            "clusters",
            "list",
        ])
        .await;
    assert_eq!(run.code, 7, "{}", run.stderr);
    assert!(
        run.stderr
            .starts_with("error: cannot reach the platform at "),
        "{}",
        run.stderr
    );
    // Not signed in; a key that is not one.
    let run = cli.run(&["--url", &app.base_url, "clusters", "list"]).await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    let forged = "kb_deadbeef_notakeyatallnotakeyatallnotakeyatall";
    let run = cli
        .run(&[
            "--url",
            &app.base_url,
            "--api-key",
            forged,
            "clusters",
            "list",
        ])
        .await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(!run.stderr.contains(forged));

    // Denied in the console.
    let (mut login, code) = cli.start_login(&app.base_url, "laptop").await;
    let (status, _) = user
        .call(
            "POST",
            "/api/console/account/device/deny",
            Some(json!({ "user_code": code })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let status = tokio::time::timeout(Duration::from_secs(30), login.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(3), "denied: exit 3");
    // Expired before anyone approved.
    let (mut login, _) = cli.start_login(&app.base_url, "laptop").await;
    sqlx::query("UPDATE device_authorizations SET expires_at = now() WHERE status = 'pending'")
        .execute(&app.db.pool)
        .await
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), login.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(8), "expired: exit 8");

    // An expired key, an unknown cluster, a bad field.
    let (status, created) = user
        .call(
            "POST",
            "/api/console/account/api-keys",
            Some(json!({ "name": "ci", "scope": "write", "password": PASSWORD })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let key = created["key"].as_str().unwrap();
    let with_key = |args: &[&str]| {
        let mut all = vec!["--url", app.base_url.as_str(), "--api-key", key];
        all.extend_from_slice(args);
        all.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let args = with_key(&["clusters", "get", "nope"]);
    let run = cli
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert_eq!(
        (run.code, run.stderr.trim()),
        (4, "error: no cluster named nope")
    );
    let args = with_key(&["clusters", "get", "Ｎope"]);
    let run = cli
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert_eq!(
        run.code, 4,
        "a look-alike name is no cluster's: {}",
        run.stderr
    );
    let args = with_key(&["clusters", "create", "ok-name", "--cpu", "5"]);
    let run = cli
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert_eq!(run.code, 5, "{}", run.stderr);
    assert!(
        run.stderr.contains("workload_cpu_limit_milli_cores")
            && run.stderr.contains("[validation_failed]"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    // A create that fails, followed with --wait: exit 6 with the failure's
    // code, the stage it stopped at and how to retry; the retry, followed
    // too, succeeds.
    app.sim().set_faults(kube_sim::Faults {
        chart_install_error: Some("Error: INSTALLATION FAILED: image pull timed out".into()),
        ..kube_sim::Faults::default()
    });
    let args = with_key(&["clusters", "create", "doomed", "--wait"]);
    let failed = follow_driven(&app, &cli, &args).await;
    assert_eq!(failed.code, 6, "{}", failed.stderr);
    let last = failed.stderr.lines().last().unwrap();
    assert!(
        last.starts_with(
            "error: doomed create failed at waiting for the control plane to become ready: "
        ) && last.contains("[chart_install_failed]")
            && last.ends_with("`kubebyon clusters retry doomed` runs it again"),
        "{}",
        failed.stderr
    );
    assert!(
        failed.stderr.contains("] installing the control plane"),
        "{}",
        failed.stderr
    );
    app.sim().set_faults(kube_sim::Faults::default());
    // Run on a terminal (`script` gives it one): the live line under the
    // stages is drawn, and erased before each line and at the end.
    let args = with_key(&["clusters", "retry", "doomed", "--wait"]);
    let line = std::iter::once(workspace_binary("kubebyon").display().to_string())
        .chain(args.iter().map(|a| format!("'{a}'")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut script = tokio::process::Command::new("script");
    script
        .args(["-qec", &line, "/dev/null"])
        .current_dir(&cli.dir)
        .env("HOME", &cli.dir)
        .env("KUBEBYON_CONFIG_DIR", cli.config_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let retried = follow_driven_with(&app, script, &args).await;
    // On the terminal standard error and output are one stream, which
    // `script` writes out.
    let retried = Run {
        stderr: retried.stdout.clone(),
        ..retried
    };
    assert!(
        retried.stderr.contains("\r\x1b[2K⠋ ") && retried.stderr.contains("\r\x1b[2K  ["),
        "the live line is drawn and erased: {:?}",
        retried.stderr
    );
    assert_eq!(retried.code, 0, "{}", retried.stderr);
    assert!(
        retried.stderr.contains("doomed create succeeded"),
        "{}",
        retried.stderr
    );

    // The platform stops answering while --wait follows (a restart, a
    // network blip): the command line says so, asks again, and goes on
    // once it answers.
    let upstream: std::net::SocketAddr =
        app.base_url.trim_start_matches("http://").parse().unwrap();
    let proxy = tests::proxy::TcpProxy::start(upstream).await;
    let through = format!("http://{}", proxy.addr);
    let mut child = cli
        .command(&[
            "--url",
            &through,
            "--api-key",
            key,
            "clusters",
            "create",
            "blip",
            "--wait",
        ])
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        let following = line.starts_with("Following ");
        seen.push(line);
        if following {
            break;
        }
    }
    proxy.down();
    tokio::time::sleep(Duration::from_secs(3)).await;
    app.drive().await;
    proxy.up();
    let status = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push(line);
        }
        child.wait().await.unwrap()
    })
    .await
    .expect("--wait ends once the platform answers again");
    let stderr = seen.join("\n");
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot reach the platform at ")
            && stderr.contains("asking again for up to 60s"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the platform answers again") && stderr.contains("blip create succeeded"),
        "{stderr}"
    );

    sqlx::query("UPDATE api_keys SET expires_at = now() WHERE prefix = $1")
        .bind(&key[..11])
        .execute(&app.db.pool)
        .await
        .unwrap();
    let args = with_key(&["clusters", "list"]);
    let run = cli
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert_eq!(run.code, 3, "an expired key: {}", run.stderr);

    // Completions for each shell.
    for shell in ["bash", "zsh", "fish"] {
        let run = cli.run(&["completions", shell]).await;
        assert_eq!(run.code, 0);
        assert!(
            run.stdout.contains("kubebyon") && run.stdout.contains("clusters"),
            "{shell}"
        );
    }
}

/// The rest of a user's and an administrator's tasks from the terminal, as
/// `-o json` gives them to scripts: hostnames, the plan and an order's
/// checkout, organisations (switch, invite, members), the join checklist
/// followed while a machine joins, and the back office's users and jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostnames_plans_orders_organisations_joins_and_the_back_office_from_the_terminal() {
    let app = TestApp::builder("worker-c")
        .host()
        .accounts()
        .smtp()
        .stripe()
        .build()
        .await;
    let boss = app
        .client()
        .sign_up(app.mail(), "boss@example.com", PASSWORD)
        .await;
    let user = app
        .client()
        .sign_up(app.mail(), "dev@example.test", PASSWORD)
        .await;
    let key_of = |client: Client| async move {
        let (status, created) = client
            .call(
                "POST",
                "/api/console/account/api-keys",
                Some(json!({ "name": "cli", "scope": "write", "password": PASSWORD })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        created["key"].as_str().unwrap().to_string()
    };
    let (boss_key, user_key) = (key_of(boss.clone()).await, key_of(user.clone()).await);
    let cli = Cli::new();
    // A context, as `kubebyon login` leaves one.
    std::fs::create_dir_all(cli.config_dir()).unwrap();
    std::fs::write(
        cli.config_dir().join("config.json"),
        json!({ "current_context": "dev", "contexts": {
            "dev": { "url": app.base_url, "api_key": user_key },
            "boss": { "url": app.base_url, "api_key": boss_key },
        }})
        .to_string(),
    )
    .unwrap();
    let json_of = |run: &Run| -> Value {
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
    };

    // A plan to order, made in the back office; the user's plan and usage.
    let (status, plan) = boss
        .call(
            "POST",
            "/api/console/admin/plans",
            Some(json!({ "name": "Team", "max_clusters": 3, "max_nodes": 5, "max_cpu_milli_cores": 8000,
                         "max_memory_mib": 16384, "max_hostnames": 4, "price_minor_units": 1900, "currency": "usd" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{plan}");
    let plans = json_of(&cli.run(&["plan", "list", "-o", "json"]).await);
    assert!(
        plans
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "Team"),
        "{plans}"
    );
    let ordered = cli.run(&["orders", "create", "Team"]).await;
    assert_eq!(ordered.code, 0, "{}", ordered.stderr);
    assert!(
        ordered.stdout.trim().starts_with("https://"),
        "the checkout URL: {}",
        ordered.stdout
    );
    let orders = json_of(&cli.run(&["orders", "list", "-o", "json"]).await);
    assert_eq!(orders[0]["plan_name"], "Team");
    assert_eq!(orders[0]["status"], "pending", "{orders}");
    let cancelled = cli
        .run(&["orders", "cancel", orders[0]["id"].as_str().unwrap()])
        .await;
    assert_eq!(cancelled.code, 0, "{}", cancelled.stderr);
    let table = cli.run(&["plan", "show"]).await;
    assert!(table.stdout.starts_with("RESOURCE"), "{}", table.stdout);

    // A cluster with the managed ingress, and a hostname of the user's own.
    let created = cli
        .run(&["clusters", "create", "shop", "--ingress", "-o", "json"])
        .await;
    let accepted = json_of(&created);
    let cluster_id = accepted["cluster"]["id"].as_str().unwrap().to_string();
    app.drive().await;
    let usage = json_of(&cli.run(&["plan", "show", "-o", "json"]).await);
    assert_eq!(usage["usage"]["clusters"], 1, "{usage}");
    let added = cli
        .run(&["hostnames", "add", "shop", "www.shop-owner.example"])
        .await;
    assert_eq!(added.code, 0, "{}", added.stderr);
    let listed = json_of(&cli.run(&["hostnames", "list", "shop", "-o", "json"]).await);
    assert_eq!(listed[0]["hostname"], "www.shop-owner.example", "{listed}");
    let bad = cli
        .run(&["hostnames", "add", "shop", "wWw.ѕhop.example"])
        .await;
    assert_eq!(
        bad.code, 5,
        "a look-alike hostname is refused: {}",
        bad.stderr
    );
    let removed = cli
        .run(&["hostnames", "remove", "shop", "WWW.shop-owner.example"])
        .await;
    assert_eq!(removed.code, 0, "{}", removed.stderr);
    assert_eq!(
        json_of(&cli.run(&["hostnames", "list", "shop", "-o", "json"]).await),
        json!([])
    );

    // The join checklist followed while a machine joins.
    let token = cli.run(&["tokens", "create", "shop"]).await;
    assert_eq!(token.code, 0, "{}", token.stderr);
    let watch = cli
        .command(&["join", "watch", "shop", "--timeout", "60"])
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let machine = Machine::healthy("edge-7");
    let joined = machine.run(token.stdout.trim()).await;
    assert!(
        joined.status.success(),
        "{}",
        String::from_utf8_lossy(&joined.stderr)
    );
    let watched = tokio::time::timeout(Duration::from_secs(60), watch.wait_with_output())
        .await
        .expect("join watch ends once the machine has joined")
        .unwrap();
    let out = String::from_utf8_lossy(&watched.stdout);
    assert!(
        watched.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&watched.stderr)
    );
    assert!(
        out.contains("edge-7 (") && out.contains("✓ "),
        "each step as it came:\n{out}"
    );
    assert!(out.contains("edge-7 joined shop"), "{out}");
    // The node's timeline, its removal; the token's revocation; the
    // cluster's update (nothing to change, then a change) and deletion.
    sync_nodes::sync::sync_all(&app.db.pool, app.host(), 4, Duration::from_secs(60))
        .await
        .unwrap();
    let timeline = json_of(
        &cli.run(&["nodes", "timeline", "shop", "edge-7", "-o", "json"])
            .await,
    );
    assert_eq!(timeline["node"]["name"], "edge-7", "{timeline}");
    let unknown = cli.run(&["nodes", "timeline", "shop", "edge-8"]).await;
    assert_eq!(
        (unknown.code, unknown.stderr.trim()),
        (4, "error: no node named edge-8")
    );
    let removed = cli.run(&["nodes", "remove", "shop", "edge-7"]).await;
    assert_eq!(removed.code, 0, "{}", removed.stderr);
    let spare = json_of(
        &cli.run(&[
            "tokens",
            "create",
            "shop",
            "--description",
            "spare",
            "-o",
            "json",
        ])
        .await,
    );
    assert!(
        spare["join_command"].as_str().unwrap().starts_with("curl "),
        "{spare}"
    );
    let prefix = spare["token"]["display_prefix"]
        .as_str()
        .unwrap()
        .to_string();
    let revoked = cli.run(&["tokens", "revoke", "shop", &prefix]).await;
    assert_eq!(revoked.code, 0, "{}", revoked.stderr);
    let tokens = json_of(&cli.run(&["tokens", "list", "shop", "-o", "json"]).await);
    assert_eq!(tokens[0]["status"], "revoked", "{tokens}");
    app.drive().await;
    let same = cli
        .run(&["clusters", "update", "shop", "--cpu", "2000"])
        .await;
    assert_eq!(same.code, 0, "{}", same.stderr);
    assert!(
        same.stderr.contains("Nothing to change."),
        "{}",
        same.stderr
    );
    let args: Vec<String> = ["clusters", "update", "shop", "--cpu", "3000", "--wait"]
        .map(String::from)
        .into();
    let updated = follow_driven(&app, &cli, &args).await;
    assert_eq!(updated.code, 0, "{}", updated.stderr);
    assert!(
        updated.stderr.contains("shop update succeeded"),
        "{}",
        updated.stderr
    );
    let shop = json_of(&cli.run(&["clusters", "get", "shop", "-o", "json"]).await);
    assert_eq!(shop["workload_cpu_limit_milli_cores"], 3000);
    let unasked = cli.run(&["clusters", "delete", "shop"]).await;
    assert_eq!(unasked.code, 2, "no terminal, no --yes: {}", unasked.stderr);
    let args: Vec<String> = ["clusters", "delete", "shop", "--yes", "--wait"]
        .map(String::from)
        .into();
    let deleted = follow_driven(&app, &cli, &args).await;
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    assert!(
        deleted.stderr.contains("shop is deleted")
            || deleted.stderr.contains("shop delete succeeded"),
        "{}",
        deleted.stderr
    );
    let gone = cli.run(&["clusters", "get", "shop"]).await;
    assert_eq!(gone.code, 4, "{}", gone.stderr);

    // Organisations: make one, act in it, invite someone.
    let made = cli.run(&["org", "create", "acme"]).await;
    assert_eq!(made.code, 0, "{}", made.stderr);
    assert_eq!(cli.run(&["org", "switch", "acme"]).await.code, 0);
    let orgs = json_of(&cli.run(&["org", "list", "-o", "json"]).await);
    let acme = orgs
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "acme")
        .unwrap()
        .clone();
    let config: Value =
        serde_json::from_slice(&std::fs::read(cli.config_dir().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(
        config["contexts"]["dev"]["organization"], acme["id"],
        "{config}"
    );
    let listed = json_of(&cli.run(&["clusters", "list", "-o", "json"]).await);
    assert_eq!(listed, json!([]), "acme's clusters, not the personal ones");
    let invited = cli
        .run(&["org", "invite", "friend@example.test", "--role", "viewer"])
        .await;
    assert_eq!(invited.code, 0, "{}", invited.stderr);
    let invitations = json_of(&cli.run(&["org", "invitations", "-o", "json"]).await);
    assert_eq!(
        (
            invitations[0]["email"].as_str(),
            invitations[0]["role"].as_str()
        ),
        (Some("friend@example.test"), Some("viewer"))
    );
    let members = json_of(&cli.run(&["org", "members", "-o", "json"]).await);
    assert_eq!(members[0]["role"], "owner", "{members}");
    let wrong = cli
        .run(&["org", "role", "nobody@example.test", "admin"])
        .await;
    assert_eq!(wrong.code, 4, "{}", wrong.stderr);

    // The back office: the user is not an administrator; the boss is.
    let refused = cli.run(&["admin", "users", "list"]).await;
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    let users = json_of(
        &cli.run(&["--context", "boss", "admin", "users", "list", "-o", "json"])
            .await,
    );
    assert!(
        users
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["email"] == "dev@example.test"),
        "{users}"
    );
    let jobs = json_of(
        &cli.run(&["--context", "boss", "admin", "jobs", "list", "-o", "json"])
            .await,
    );
    let create_job = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["cluster_id"] == cluster_id.as_str() && j["type"] == "cluster_create")
        .unwrap_or_else(|| panic!("the create job is listed: {jobs}"))
        .clone();
    let retry = cli
        .run(&[
            "--context",
            "boss",
            "admin",
            "jobs",
            "retry",
            create_job["id"].as_str().unwrap(),
        ])
        .await;
    assert_eq!(
        retry.code, 5,
        "a succeeded job is not retried: {}",
        retry.stderr
    );
    let disabled = cli
        .run(&[
            "--context",
            "boss",
            "admin",
            "users",
            "disable",
            "dev@example.test",
        ])
        .await;
    assert_eq!(disabled.code, 0, "{}", disabled.stderr);
    let after = cli.run(&["clusters", "list"]).await;
    assert_eq!(
        after.code, 3,
        "a disabled user's key stops at once: {}",
        after.stderr
    );
    let enabled = cli
        .run(&[
            "--context",
            "boss",
            "admin",
            "users",
            "enable",
            "dev@example.test",
        ])
        .await;
    assert_eq!(enabled.code, 0, "{}", enabled.stderr);

    // Signing out revokes the key itself, then forgets it.
    let out = cli.run(&["--context", "boss", "logout"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (_, keys) = boss
        .call("GET", "/api/console/account/api-keys", None)
        .await;
    assert!(
        keys[0]["revoked_at"].is_string(),
        "the key is revoked on the platform: {keys}"
    );
    let gone = cli.run(&["--context", "boss", "whoami"]).await;
    assert_eq!(gone.code, 3, "{}", gone.stderr);
    let revoked = app
        .client()
        .bearer(&boss_key)
        .call("GET", "/api/auth/me", None)
        .await;
    assert_eq!(revoked.0, StatusCode::UNAUTHORIZED);
}

/// Runs the command line while the platform's jobs are driven (a
/// [`TestApp`] runs them only when asked), until it exits.
async fn follow_driven(app: &TestApp, cli: &Cli, args: &[String]) -> Run {
    follow_driven_with(
        app,
        cli.command(&args.iter().map(String::as_str).collect::<Vec<_>>()),
        args,
    )
    .await
}

/// [`follow_driven`] of a command of one's own (the command line under a
/// pseudo-terminal, say).
async fn follow_driven_with(
    app: &TestApp,
    mut command: tokio::process::Command,
    args: &[String],
) -> Run {
    let child = command.spawn().unwrap();
    let output = tokio::spawn(child.wait_with_output());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !output.is_finished() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kubebyon {args:?} ended within a minute"
        );
        app.drive().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let output = output.await.unwrap().unwrap();
    Run::from(output)
}
