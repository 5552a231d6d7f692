//! Bring your own node, end to end: join tokens and their bootstrap Secrets in
//! the simulated vCluster, the join script run for real by a POSIX shell
//! (`sh`, dash on Debian) in a sandbox directory, the steps it reports, the
//! attempt ledger, and the node sync linking the node that appeared.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};
use sync_nodes::sync::sync_all;

use tests::machine::{Machine, executable, write};

use crate::harness::TestApp;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A platform whose clusters run on vCluster: the tests that call vCluster's
/// own join endpoint (`/node/join`) or its auto-approval directly, as an
/// attacker holding a token would. The platform's side is the same for both
/// engines; `kubeadm_join.rs` joins Kamaji clusters.
async fn on_vcluster() -> TestApp {
    TestApp::builder("worker-b")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host()
        .build()
        .await
}

async fn ready_cluster(
    platform: &TestApp,
    name: &str,
) -> (String, std::sync::Arc<kube_sim::Simulator>) {
    let id = platform.create(name, "nodeport").await;
    platform.drive().await;
    let cluster = platform.cluster(&id).await;
    assert_eq!(cluster["status"], "ready", "{cluster}");
    let vcluster = platform
        .sim()
        .vcluster(cluster["namespace"].as_str().unwrap(), name)
        .unwrap();
    (id, vcluster)
}

async fn create_token(platform: &TestApp, cluster_id: &str, body: Value) -> Value {
    let (status, created) = platform
        .call(
            "POST",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created
}

async fn attempts(platform: &TestApp, cluster_id: &str) -> Vec<Value> {
    let (status, body) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/join-attempts"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().clone()
}

/// A Secret named after the join token's id: a join token is never one.
fn join_token_secret(vcluster: &kube_sim::Simulator, created: &Value) -> Option<Value> {
    let prefix = created["token"]["display_prefix"].as_str().unwrap();
    vcluster.get(
        "v1",
        "Secret",
        "kube-system",
        &format!("bootstrap-token-{prefix}"),
    )
}

/// The bootstrap token Secret made for a join attempt.
fn attempt_secret(vcluster: &kube_sim::Simulator, attempt: &Value) -> Option<Value> {
    vcluster.get(
        "v1",
        "Secret",
        "kube-system",
        attempt["bootstrap_secret_name"].as_str()?,
    )
}

/// What the vCluster's own join endpoint answers a token presented directly.
/// Fetches the script for `plaintext` and reports `join` as running, as the
/// script does once its checks pass. Returns the attempt and the bootstrap
/// token the platform answered.
async fn take_a_use(platform: &TestApp, plaintext: &str) -> (String, String) {
    take_a_use_as(platform, plaintext, "probe").await
}

/// [`take_a_use`] for a machine of the given host name.
pub(crate) async fn take_a_use_as(
    platform: &TestApp,
    plaintext: &str,
    hostname: &str,
) -> (String, String) {
    let machine = platform.machine(plaintext);
    let script = machine.send("GET", "/join", None).await;
    assert_eq!(script.status, 200);
    let attempt = script
        .body
        .as_str()
        .expect("a script")
        .lines()
        .find_map(|line| line.strip_prefix("KB_ATTEMPT="))
        .unwrap()
        .trim_matches('\'')
        .to_string();
    let (_, reply) = machine
        .call(
            "POST",
            "/join/steps",
            Some(json!({ "attempt_id": attempt, "step": "join", "status": "running", "hostname": hostname })),
        )
        .await;
    let bootstrap = reply["bootstrap_token"]
        .as_str()
        .expect("a bootstrap token")
        .to_string();
    (attempt, bootstrap)
}

async fn direct_join_status(vcluster: &kube_sim::Simulator, token: &str) -> u16 {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(vcluster.ca_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    client
        .get(format!("{}/node/join?token={token}", vcluster.url()))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_machine_joins_with_the_script_and_the_node_is_linked_to_its_token() {
    let platform = on_vcluster().await;
    let (cluster_id, vcluster) = ready_cluster(&platform, "nu").await;

    let created = create_token(
        &platform,
        &cluster_id,
        json!({ "ttl_seconds": 1800, "node_labels": { "zone": "eu-1" }, "description": "rack 7" }),
    )
    .await;
    let plaintext = created["plaintext"].as_str().unwrap().to_string();
    assert!(
        shared::nodes::jointoken::well_formed(&plaintext),
        "{plaintext}"
    );
    let url = format!("{}/join", platform.base_url);
    assert_eq!(created["join_url"], url.as_str());
    assert_eq!(
        created["join_command"],
        format!("curl -sS -H 'Authorization: Bearer {plaintext}' {url} | sudo sh"),
        "the token travels in a header, never in a URL"
    );
    assert_eq!(created["token"]["status"], "active");
    assert_eq!(created["token"]["max_uses"], 1);

    // The join token is the platform's credential, not the cluster's: the
    // control plane's join endpoint does not take it.
    assert!(join_token_secret(&vcluster, &created).is_none());
    assert_eq!(direct_join_status(&vcluster, &plaintext).await, 401);
    // The plaintext is shown once: never in a listing, never in the database.
    let (_, listed) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            None,
        )
        .await;
    assert!(!listed.to_string().contains(&plaintext));
    let (stored,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM tokens t WHERE t::text LIKE '%' || $1 || '%'")
            .bind(plaintext.split_once('.').unwrap().1)
            .fetch_one(&platform.db.pool)
            .await
            .unwrap();
    assert_eq!(stored, 0, "the token's secret half is stored nowhere");

    // The machine runs the command: its checks pass, it joins.
    let machine = Machine::healthy("Worker-7");
    let out = machine.run(created["join_command"].as_str().unwrap()).await;
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("kube-sim: node worker-7 registered"),
        "{}",
        text(&out.stdout)
    );

    let ledger = attempts(&platform, &cluster_id).await;
    assert_eq!(ledger.len(), 1);
    let attempt = &ledger[0];
    assert_eq!(attempt["outcome"], "succeeded", "{attempt}");
    assert_eq!(attempt["hostname"], "worker-7");
    assert_eq!(attempt["counted_use"], true);
    assert_eq!(attempt["source_ip"], "127.0.0.1");
    // The attempt got a bootstrap token of its own, gone as soon as the
    // platform approved its node's certificate.
    assert!(
        attempt["bootstrap_secret_name"]
            .as_str()
            .unwrap()
            .starts_with("bootstrap-token-")
    );
    assert_eq!(attempt["bootstrap_secret_deleted"], true);
    assert!(attempt_secret(&vcluster, attempt).is_none());
    // The approval is in the audit stream once, the machine its actor; a
    // second recording of the same attempt's approval (a report the script
    // repeats) records nothing new, so it audits nothing.
    let mut tx = platform.db.pool.begin().await.unwrap();
    let again = shared::nodes::tokens::record_node_approval(
        &mut tx,
        cluster_id.parse().unwrap(),
        attempt["id"].as_str().unwrap().parse().unwrap(),
        "worker-7",
        "csr-again",
        shared::nodes::tokens::JOIN_GRACE,
    )
    .await
    .unwrap();
    assert_eq!(again, Ok(false));
    tx.rollback().await.unwrap();
    let approvals: Vec<(String, String, Value)> = sqlx::query_as(
        "SELECT actor_kind, target_id, metadata FROM audit_events
         WHERE action = 'node.approved' AND cluster_id = $1::uuid",
    )
    .bind(&cluster_id)
    .fetch_all(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    let (actor, node, metadata) = &approvals[0];
    assert_eq!((actor.as_str(), node.as_str()), ("node", "worker-7"));
    assert_eq!(metadata["token_id"], created["token"]["id"]);
    assert_eq!(metadata["attempt_id"], attempt["id"]);
    let csr: Vec<Value> = vcluster
        .list("certificates.k8s.io/v1", "CertificateSigningRequest")
        .into_iter()
        .filter(|c| {
            c["spec"]["username"]
                == format!(
                    "system:bootstrap:{}",
                    attempt["bootstrap_secret_name"]
                        .as_str()
                        .unwrap()
                        .trim_start_matches("bootstrap-token-")
                )
        })
        .collect();
    assert_eq!(csr.len(), 1, "{csr:?}");
    assert_eq!(
        csr[0]["status"]["conditions"][0]["reason"],
        "KubeBYONJoinApproved"
    );
    let steps: Vec<(String, String)> = attempt["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step"].as_str().unwrap().into(),
                s["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expected = [
        ("os", "running"),
        ("os", "ok"),
        ("arch", "ok"),
        ("root", "ok"),
        ("cgroups", "ok"),
        ("swap", "ok"),
        ("existing_kubelet", "ok"),
        ("ports", "ok"),
        ("clock", "ok"),
        ("dns", "ok"),
        ("api", "ok"),
        ("join", "running"),
        ("approval", "running"),
        ("approval", "ok"),
        ("join", "ok"),
        ("done", "ok"),
    ]
    .map(|(a, b)| (a.to_string(), b.to_string()));
    assert_eq!(steps, expected);

    let (_, token) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            None,
        )
        .await;
    assert_eq!(token[0]["status"], "used");
    assert_eq!(token[0]["use_count"], 1);

    // The node the script registered is observed, linked and labelled, and
    // the used token's bootstrap Secret is removed.
    let report = sync_all(
        &platform.db.pool,
        platform.host(),
        4,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(
        (report.linked, report.secrets_deleted),
        (1, 0),
        "{report:?}"
    );
    let (_, nodes) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/nodes"),
            None,
        )
        .await;
    let nodes = nodes["items"].clone();
    assert_eq!(nodes.as_array().unwrap().len(), 1, "{nodes}");
    assert_eq!(
        (nodes[0]["name"].as_str(), nodes[0]["status"].as_str()),
        (Some("worker-7"), Some("ready"))
    );
    let node_id = nodes[0]["id"].as_str().unwrap();
    let (_, token) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            None,
        )
        .await;
    assert_eq!(token[0]["used_by_node_id"], node_id);
    let attempt = &attempts(&platform, &cluster_id).await[0];
    assert_eq!(attempt["node_id"], node_id);
    let node = vcluster.get("v1", "Node", "", "worker-7").unwrap();
    assert_eq!(node["metadata"]["labels"]["zone"], "eu-1");
    // The owner hears of it: a node_joined notification waits for delivery.
    let (kind,): (String,) =
        sqlx::query_as("SELECT kind FROM notification_outbox WHERE kind <> 'cluster_ready'")
            .fetch_one(&platform.db.pool)
            .await
            .unwrap();
    assert_eq!(kind, "node_joined");

    // The timeline covers the node's life so far, all of it ready.
    let (status, timeline) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/nodes/{node_id}/timeline"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{timeline}");
    assert_eq!(
        timeline["events"].as_array().unwrap().len(),
        2,
        "{timeline}"
    );
    assert_eq!(timeline["ready_seconds"], timeline["observed_seconds"]);

    // A one-time token does not join a second machine.
    let second = Machine::healthy("worker-8");
    let out = second.run(created["join_command"].as_str().unwrap()).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("kubebyon: this join token has been used up"),
        "{}",
        text(&out.stderr)
    );
    let ledger = attempts(&platform, &cluster_id).await;
    assert_eq!(
        (ledger[0]["outcome"].as_str(), ledger[0]["reason"].as_str()),
        (Some("refused"), Some("this join token has been used up"))
    );
    // The same as a code, for the console to word.
    assert_eq!(
        (&ledger[0]["reason_code"], &ledger[0]["reason_params"]),
        (&json!("token_used_up"), &json!({}))
    );
    assert!(vcluster.get("v1", "Node", "", "worker-8").is_none());
}

fn base64_field(secret: &Value, key: &str) -> String {
    use base64::Engine;
    let raw = secret["data"][key].as_str().unwrap();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(raw)
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_script_puts_no_token_on_a_command_line_and_no_file_in_a_shared_place() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (cluster_id, _) = ready_cluster(&platform, "argv").await;
    let created = create_token(&platform, &cluster_id, json!({})).await;
    let plaintext = created["plaintext"].as_str().unwrap();

    // Every curl the script runs is recorded with its arguments, as `ps`
    // would show them to any user of the machine.
    let machine = Machine::healthy("worker-9");
    let argv = machine.dir().join("curl-argv");
    let curl = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v curl"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    executable(
        &machine.dir().join("bin/curl"),
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> {}\nexec {} \"$@\"\n",
            argv.display(),
            curl.trim()
        ),
    );
    let out = machine.run(created["join_command"].as_str().unwrap()).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let calls = std::fs::read_to_string(&argv).unwrap();
    let mut calls = calls.lines();
    assert!(
        calls.next().unwrap().contains(plaintext),
        "the command the owner pasted carries the token"
    );
    let attempt = &attempts(&platform, &cluster_id).await[0];
    let secret = attempt["bootstrap_secret_name"].as_str().unwrap();
    let bootstrap_id = secret.trim_start_matches("bootstrap-token-");
    let rest: Vec<&str> = calls.collect();
    assert!(rest.len() > 5, "{rest:?}");
    for call in rest {
        assert!(
            !call.contains(plaintext),
            "the join token on a command line: {call}"
        );
        assert!(
            !call.contains(bootstrap_id),
            "the bootstrap token on a command line: {call}"
        );
    }

    // Without a private temporary directory the script stops; it never falls
    // back to a name in /tmp that another user could have made first.
    let machine = Machine::healthy("worker-10");
    executable(&machine.dir().join("bin/mktemp"), "#!/bin/sh\nexit 1\n");
    let second = create_token(&platform, &cluster_id, json!({})).await;
    let out = machine.run(second["join_command"].as_str().unwrap()).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot make a private temporary directory"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_check_stops_the_script_with_its_reason_and_keeps_the_token() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (cluster_id, vcluster) = ready_cluster(&platform, "xi").await;
    let created = create_token(&platform, &cluster_id, json!({})).await;

    let machine = Machine::healthy("worker-1");
    write(
        &machine.root().join("proc/swaps"),
        "Filename\tType\tSize\tUsed\tPriority\n/swapfile file 1048572 0 -2\n",
    );
    let out = machine.run(created["join_command"].as_str().unwrap()).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("FAIL  swap: swap is on (1 device(s))"),
        "{stderr}"
    );
    assert!(
        !text(&out.stdout).contains("ports"),
        "the script stopped at the failing check"
    );

    let ledger = attempts(&platform, &cluster_id).await;
    assert_eq!(ledger[0]["outcome"], "failed");
    assert!(
        ledger[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("swap: swap is on"),
        "{}",
        ledger[0]
    );
    assert_eq!(ledger[0]["counted_use"], false);
    let last = ledger[0]["steps"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["step"].as_str(), last["status"].as_str()),
        (Some("swap"), Some("failed"))
    );
    // What it found, as a code with its parameters; the attempt's reason
    // names the step alone, whose own code says what it found.
    assert_eq!(
        (&last["code"], &last["params"]),
        (&json!("swap_on"), &json!({"devices": "1"}))
    );
    assert_eq!(
        (&ledger[0]["reason_code"], &ledger[0]["reason_params"]),
        (&json!("step_failed"), &json!({"step": "swap"}))
    );
    // Every step the script reported carries a code.
    let steps = ledger[0]["steps"].as_array().unwrap();
    assert!(steps.iter().all(|s| s["code"].is_string()), "{steps:?}");
    // What a machine holding the token could send instead is refused whole,
    // before anything is recorded.
    let reporter = platform.machine(created["plaintext"].as_str().unwrap());
    let attempt = ledger[0]["id"].as_str().unwrap();
    let many: serde_json::Map<String, Value> =
        (0..9).map(|i| (format!("p{i}"), json!("x"))).collect();
    let step = |extra: Value| {
        let mut report = json!({ "attempt_id": attempt, "step": "swap", "status": "ok" });
        report
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        report
    };
    for (report, why) in [
        (
            step(json!({ "code": "swap_offf" })),
            "a code outside the enum",
        ),
        (step(json!({ "code": "Swap_On" })), "a code in capitals"),
        (
            step(json!({ "code": "swap_on", "params": { "d\u{435}vices": "1" } })),
            "a param named with a Cyrillic е",
        ),
        (
            step(json!({ "params": { "devices": "1" } })),
            "params without a code",
        ),
        (
            step(json!({ "code": "swap_on", "params": many })),
            "nine params",
        ),
        (
            step(json!({ "code": "swap_on", "params": { "devices": "x".repeat(301) } })),
            "a param of 301 characters",
        ),
        (
            step(json!({ "code": "swap_on", "params": { "devices": 1 } })),
            "a param that is a number",
        ),
    ] {
        let (status, body) = reporter.call("POST", "/join/steps", Some(report)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{why}: {body}");
    }
    assert_eq!(
        attempts(&platform, &cluster_id).await[0]["steps"]
            .as_array()
            .unwrap()
            .len(),
        steps.len(),
        "nothing was recorded"
    );

    // A machine joined to another cluster is stopped too, and told how to move.
    write(
        &machine.root().join("proc/swaps"),
        "Filename\tType\tSize\tUsed\tPriority\n",
    );
    write(
        &machine.root().join("etc/kubernetes/kubelet.conf"),
        "apiVersion: v1\nclusters:\n- cluster:\n    server: https://elsewhere.example:6443\n  name: default\n",
    );
    let out = machine.run(created["join_command"].as_str().unwrap()).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("joined to https://elsewhere.example:6443"),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains("--force-join"));

    // The failed checks did not use the one-time token up.
    let (_, tokens) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            None,
        )
        .await;
    assert_eq!(
        (
            tokens[0]["status"].as_str(),
            tokens[0]["use_count"].as_i64()
        ),
        (Some("active"), Some(0))
    );
    assert!(
        attempts(&platform, &cluster_id)
            .await
            .iter()
            .all(|a| a["bootstrap_secret_name"].is_null()),
        "no attempt got as far as a bootstrap token"
    );
    assert!(join_token_secret(&vcluster, &created).is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_control_plane_that_cannot_prove_itself_against_the_pinned_ca_is_not_joined() {
    let platform = on_vcluster().await;
    let (cluster_id, vcluster) = ready_cluster(&platform, "omicron").await;
    let created = create_token(&platform, &cluster_id, json!({})).await;
    // The platform pins another CA than the one that signed the endpoint's
    // certificate: what a machine sees when something else answers there.
    let cluster = platform.cluster(&cluster_id).await;
    let namespace = cluster["namespace"].as_str().unwrap();
    let stranger = kube_sim::Simulator::start(kube_sim::Options::host())
        .await
        .unwrap();
    use base64::Engine;
    let kubeconfig = vcluster.kubeconfig(None).replace(
        &base64::engine::general_purpose::STANDARD.encode(vcluster.ca_pem()),
        &base64::engine::general_purpose::STANDARD.encode(stranger.ca_pem()),
    );
    platform
        .sim()
        .put(json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": "vc-omicron", "namespace": namespace},
                    "data": {"config": base64::engine::general_purpose::STANDARD.encode(kubeconfig)}}))
        .unwrap();

    let machine = Machine::healthy("worker-9");
    let out = machine.run(created["join_command"].as_str().unwrap()).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("FAIL  api: TLS with https://") && stderr.contains("did not prove"),
        "{stderr}"
    );
    assert!(
        vcluster.get("v1", "Node", "", "worker-9").is_none(),
        "no node registered"
    );
    let (_, tokens) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            None,
        )
        .await;
    assert_eq!(tokens[0]["use_count"], 0, "the token was not used up");
}

#[tokio::test(flavor = "multi_thread")]
async fn revoked_and_expired_tokens_are_refused_and_their_secrets_go() {
    let platform = on_vcluster().await;
    let (cluster_id, vcluster) = ready_cluster(&platform, "omicron").await;
    let fetch = |plaintext: String| {
        let machine = platform.machine(&plaintext);
        async move {
            let script = machine.send("GET", "/join", None).await;
            let text = match script.body {
                Value::String(text) => text,
                json => json.to_string(),
            };
            (script.status.as_u16(), text)
        }
    };

    // Revoked: the bootstrap Secret of a join under way is deleted at once,
    // and the script is refused.
    let revoked = create_token(&platform, &cluster_id, json!({ "max_uses": 3 })).await;
    let (attempt_id, attempt_token) =
        take_a_use(&platform, revoked["plaintext"].as_str().unwrap()).await;
    // One use per attempt: `join running` again takes no second use and
    // makes no second bootstrap token.
    let machine = platform.machine(revoked["plaintext"].as_str().unwrap());
    for _ in 0..3 {
        let (status, reply) = machine
            .call(
                "POST",
                "/join/steps",
                Some(json!({ "attempt_id": attempt_id, "step": "join", "status": "running", "hostname": "probe" })),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{reply}");
        assert!(reply.get("bootstrap_token").is_none(), "{reply}");
    }
    let (_, listed) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            None,
        )
        .await;
    assert_eq!(listed[0]["use_count"], 1, "{listed}");
    // A detail the owner reads hides nothing.
    for hiding in ["ok\u{202e}kcah", "zero\u{200b}width", "line\u{2028}break"] {
        let (status, reply) = machine
            .call(
                "POST",
                "/join/steps",
                Some(json!({ "attempt_id": attempt_id, "step": "os", "status": "ok", "detail": hiding })),
            )
            .await;
        assert_eq!(status, 422, "{hiding:?}: {reply}");
    }
    assert_eq!(direct_join_status(&vcluster, &attempt_token).await, 200);
    let token_id = revoked["token"]["id"].as_str().unwrap();
    let (status, body) = platform
        .call(
            "DELETE",
            &format!("/api/console/clusters/{cluster_id}/tokens/{token_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "revoked");
    let attempt = &attempts(&platform, &cluster_id).await[0];
    assert_eq!(attempt["bootstrap_secret_deleted"], true);
    assert!(attempt_secret(&vcluster, attempt).is_none());
    assert_eq!(direct_join_status(&vcluster, &attempt_token).await, 401);
    // The ledger keeps the first 20 refusals of the hour a token gets; the
    // rest are answered alike and not recorded.
    let ledger = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM join_attempts WHERE token_id = $1::uuid AND outcome = 'refused'",
        )
        .bind(revoked["token"]["id"].as_str().unwrap())
        .fetch_one(&platform.db.pool)
        .await
        .unwrap()
    };
    crate::harness::clear_of_window_edge(join::REFUSALS_RECORDED_PER_TOKEN.window).await;
    for _ in 0..30 {
        let (status, _) = fetch(revoked["plaintext"].as_str().unwrap().into()).await;
        assert_eq!(status, 410);
    }
    assert_eq!(ledger().await, 20);
    let (status, body) = fetch(revoked["plaintext"].as_str().unwrap().into()).await;
    assert_eq!(
        (status, body.as_str()),
        (
            410,
            "echo 'kubebyon: this join token was revoked' >&2\nexit 1\n"
        )
    );
    // Revoking again changes nothing.
    let (status, _) = platform
        .call(
            "DELETE",
            &format!("/api/console/clusters/{cluster_id}/tokens/{token_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    // Expired: refused at use even before the sweep records it, then recorded.
    let expired = create_token(&platform, &cluster_id, json!({ "ttl_seconds": 60 })).await;
    let expiring = create_token(&platform, &cluster_id, json!({ "ttl_seconds": 60 })).await;
    sqlx::query("UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id IN ($1::uuid, $2::uuid)")
        .bind(expired["token"]["id"].as_str().unwrap())
        .bind(expiring["token"]["id"].as_str().unwrap())
        .execute(&platform.db.pool)
        .await
        .unwrap();
    let (status, body) = fetch(expired["plaintext"].as_str().unwrap().into()).await;
    assert_eq!(
        (status, body.contains("this join token has expired")),
        (410, true),
        "{body}"
    );
    let report = sweep::run(&queues::runtime::ScheduleContext::new(
        platform.db.pool.clone(),
        platform.state.settings.clone(),
        None,
        Some(platform.state.publisher.clone()),
    ))
    .await
    .unwrap();
    assert_eq!(
        report.tokens_expired, 1,
        "the other one was recorded at its use"
    );
    let (status, _) = platform
        .call(
            "DELETE",
            &format!(
                "/api/console/clusters/{cluster_id}/tokens/{}",
                expired["token"]["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Unknown and malformed tokens get the same answer.
    for unknown in ["abcdef.0123456789abcdef", "not-a-token"] {
        let (status, body) = fetch(unknown.into()).await;
        assert_eq!(
            (status, body.as_str()),
            (
                404,
                "echo 'kubebyon: this join token is not valid' >&2\nexit 1\n"
            )
        );
    }
    // A step report needs the attempt's own token.
    let other = create_token(&platform, &cluster_id, json!({})).await;
    let attempt = attempts(&platform, &cluster_id).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let other = platform.machine(other["plaintext"].as_str().unwrap());
    let (status, _) = other
        .call(
            "POST",
            "/join/steps",
            Some(json!({ "attempt_id": attempt, "step": "os", "status": "ok" })),
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = other
        .call(
            "POST",
            "/join/steps",
            Some(json!({ "attempt_id": attempt, "step": "Bad Step", "status": "ok" })),
        )
        .await;
    assert_eq!(status, 422);
}

#[tokio::test]
async fn token_input_is_validated_and_other_clusters_are_not_found() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (cluster_id, _) = ready_cluster(&platform, "pi").await;
    let (status, body) = platform
        .call(
            "POST",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            Some(json!({ "ttl_seconds": 10, "max_uses": 0, "node_labels": { "kubernetes.io/hostname": "x" } })),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let fields = crate::harness::problem_fields(&body);
    assert_eq!(fields, ["ttl_seconds", "max_uses", "node_labels"]);
    let (status, body) = platform
        .call(
            "POST",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            Some(json!({ "uses": 2 })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // A cluster of another user, and one that does not exist, are both 404.
    let other_user = uuid::Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, email, display_name, password_hash, status, role) VALUES ($1, 'other@example.com', 'Other', NULL, 'active', 'user')")
        .bind(other_user)
        .execute(&platform.db.pool)
        .await
        .unwrap();
    let (others,): (uuid::Uuid,) = sqlx::query_as(
        "INSERT INTO clusters (owner_user_id, name, namespace, vcluster_name, status, kubernetes_version,
                               public_access_mode, workload_cpu_limit_milli_cores, workload_memory_limit_mib,
                               control_plane_cpu_request_milli_cores, control_plane_memory_request_mib)
         SELECT $1, name, 'kb-other', 'other', status, kubernetes_version, public_access_mode,
                workload_cpu_limit_milli_cores, workload_memory_limit_mib, control_plane_cpu_request_milli_cores,
                control_plane_memory_request_mib
         FROM clusters WHERE id = $2::uuid RETURNING id",
    )
    .bind(other_user)
    .bind(&cluster_id)
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    for id in [others, uuid::Uuid::new_v4()] {
        for (method, path) in [
            ("POST", format!("/api/console/clusters/{id}/tokens")),
            ("GET", format!("/api/console/clusters/{id}/tokens")),
            ("GET", format!("/api/console/clusters/{id}/join-attempts")),
            ("GET", format!("/api/console/clusters/{id}/nodes")),
        ] {
            let (status, body) = platform
                .call(method, &path, (method == "POST").then(|| json!({})))
                .await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
        }
    }
}

/// The nodes list pages by name: every node once over the pages, removed
/// ones only when asked for, and a cursor that is not a node's name (a
/// look-alike letter, a path, an empty one) or a limit out of range refused
/// with its code.
#[tokio::test]
async fn a_cluster_s_nodes_are_listed_a_page_at_a_time_by_name() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (cluster_id, _) = ready_cluster(&platform, "many").await;
    // Seven nodes as the node sync records them, the third one removed.
    sqlx::query(
        "INSERT INTO nodes (cluster_id, name, status, source, deleted_at)
         SELECT $1::uuid, 'node-' || i, CASE WHEN i = 3 THEN 'deleted' ELSE 'ready' END, 'sync',
                CASE WHEN i = 3 THEN now() END
         FROM generate_series(1, 7) i",
    )
    .bind(&cluster_id)
    .execute(&platform.db.pool)
    .await
    .unwrap();
    let pages = |query: &'static str| {
        let platform = &platform;
        let cluster_id = &cluster_id;
        async move {
            let (mut names, mut sizes, mut cursor) = (Vec::new(), Vec::new(), None::<String>);
            loop {
                let after = cursor.map(|c| format!("&cursor={c}")).unwrap_or_default();
                let (status, page) = platform
                    .call(
                        "GET",
                        &format!("/api/console/clusters/{cluster_id}/nodes?limit=2{query}{after}"),
                        None,
                    )
                    .await;
                assert_eq!(status, StatusCode::OK, "{page}");
                let items = page["items"].as_array().unwrap();
                sizes.push(items.len());
                names.extend(
                    items
                        .iter()
                        .map(|n| n["name"].as_str().unwrap().to_string()),
                );
                match page["next_cursor"].as_str() {
                    Some(next) => cursor = Some(next.to_string()),
                    None => return (names, sizes),
                }
            }
        }
    };
    let (live, sizes) = pages("").await;
    assert_eq!(
        live,
        ["node-1", "node-2", "node-4", "node-5", "node-6", "node-7"]
    );
    assert_eq!(
        sizes,
        [2, 2, 2],
        "no empty last page when the rows end on one"
    );
    let (all, _) = pages("&include_deleted=true").await;
    assert_eq!(all.len(), 7);
    assert!(all.is_sorted(), "{all:?}");

    for (query, status, code) in [
        (
            "?cursor=n%D0%BEde-1",
            StatusCode::BAD_REQUEST,
            "invalid_cursor",
        ),
        (
            "?cursor=..%2Fnode-1",
            StatusCode::BAD_REQUEST,
            "invalid_cursor",
        ),
        ("?cursor=", StatusCode::BAD_REQUEST, "invalid_cursor"),
        (
            "?limit=0",
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        ),
        (
            "?limit=501",
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        ),
    ] {
        let (got, body) = platform
            .call(
                "GET",
                &format!("/api/console/clusters/{cluster_id}/nodes{query}"),
                None,
            )
            .await;
        assert_eq!(
            (got, body["code"].as_str()),
            (status, Some(code)),
            "{query}: {body}"
        );
    }
}

/// A node's timeline: uptime from every transition of the period and the
/// one before it (ready before the period, offline 15 of its 60 minutes;
/// time before joining and after deletion not observed), and at most the
/// period's newest 1,000 events listed, with how many were left out.
#[tokio::test]
async fn a_timeline_counts_every_transition_and_lists_the_newest_thousand() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (cluster_id, _) = ready_cluster(&platform, "flappy").await;
    let node = |name: &'static str| {
        let platform = &platform;
        let cluster_id = &cluster_id;
        async move {
            sqlx::query_scalar::<_, uuid::Uuid>(
                "INSERT INTO nodes (cluster_id, name, status, source) VALUES ($1::uuid, $2, 'ready', 'sync')
                 RETURNING id",
            )
            .bind(cluster_id)
            .bind(name)
            .fetch_one(&platform.db.pool)
            .await
            .unwrap()
        }
    };
    // Minutes after 2026-11-01T10:00:00Z.
    let events = |node: uuid::Uuid, at: Vec<(i64, &'static str)>| {
        let platform = &platform;
        let cluster_id = &cluster_id;
        async move {
            for (minute, status) in at {
                sqlx::query(
                    "INSERT INTO node_events (cluster_id, node_id, node_name, type, new_status, observed_at)
                     VALUES ($1::uuid, $2, 'n', CASE $3 WHEN 'ready' THEN 'ready' WHEN 'offline' THEN 'offline'
                                                       WHEN 'deleted' THEN 'deleted' ELSE 'joined' END,
                             $3, '2026-11-01T10:00:00Z'::timestamptz + make_interval(mins => $4::int))",
                )
                .bind(cluster_id)
                .bind(node)
                .bind(status)
                .bind(minute as i32)
                .execute(&platform.db.pool)
                .await
                .unwrap();
            }
        }
    };
    let timeline = |node: uuid::Uuid| {
        let platform = &platform;
        let cluster_id = &cluster_id;
        async move {
            let (status, body) = platform
                .call(
                    "GET",
                    &format!(
                        "/api/console/clusters/{cluster_id}/nodes/{node}/timeline\
                         ?from=2026-11-01T10:00:00Z&to=2026-11-01T11:00:00Z"
                    ),
                    None,
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body
        }
    };
    let summary = |t: &Value| {
        (
            t["observed_seconds"].as_i64().unwrap(),
            t["ready_seconds"].as_i64().unwrap(),
            t["events"].as_array().unwrap().len(),
            t["events_omitted"].as_i64().unwrap(),
        )
    };

    let steady = node("steady").await;
    events(steady, vec![(-10, "ready"), (20, "offline"), (35, "ready")]).await;
    assert_eq!(summary(&timeline(steady).await), (3600, 2700, 3, 0));

    let brief = node("brief").await;
    events(brief, vec![(30, "pending"), (40, "ready"), (50, "deleted")]).await;
    let t = timeline(brief).await;
    assert_eq!(summary(&t), (1200, 600, 3, 0));
    assert_eq!(t["uptime_ratio"], 0.5);

    // 1,200 transitions in the hour, every three seconds, alternating
    // offline and ready after a ready start before the period.
    let flapping = node("flapping").await;
    events(flapping, vec![(-5, "ready")]).await;
    sqlx::query(
        "INSERT INTO node_events (cluster_id, node_id, node_name, type, new_status, observed_at)
         SELECT $1::uuid, $2, 'n', s, s, '2026-11-01T10:00:00Z'::timestamptz + make_interval(secs => 3 * i)
         FROM generate_series(0, 1199) i, LATERAL (SELECT CASE WHEN i % 2 = 0 THEN 'offline' ELSE 'ready' END) x(s)",
    )
    .bind(&cluster_id)
    .bind(flapping)
    .execute(&platform.db.pool)
    .await
    .unwrap();
    let t = timeline(flapping).await;
    assert_eq!(summary(&t), (3600, 1800, 1000, 200));
    let listed = t["events"].as_array().unwrap();
    assert_eq!(
        (
            listed[0]["observed_at"].as_str(),
            listed[999]["observed_at"].as_str()
        ),
        (Some("2026-11-01T10:10:00Z"), Some("2026-11-01T10:59:57Z")),
        "the newest thousand, oldest first, without the state before the period"
    );
}

fn pod(name: &str, node: &str, daemon_set: bool) -> Value {
    let owners = if daemon_set {
        json!([{ "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "kube-flannel", "uid": "u1", "controller": true }])
    } else {
        json!([{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u2", "controller": true }])
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": "default", "ownerReferences": owners },
        "spec": { "nodeName": node, "containers": [{ "name": "c", "image": "nginx" }] },
    })
}

#[tokio::test]
async fn removing_a_node_cordons_drains_and_deletes_it() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (cluster_id, vcluster) = ready_cluster(&platform, "rho").await;
    let now = chrono::Utc::now();
    for name in ["worker-1", "worker-2"] {
        vcluster
            .put(crate::harness::node(name, "True", now))
            .unwrap();
        vcluster
            .put(pod(&format!("web-{name}"), name, false))
            .unwrap();
        vcluster
            .put(pod(&format!("flannel-{name}"), name, true))
            .unwrap();
    }
    sync_all(
        &platform.db.pool,
        platform.host(),
        4,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let (_, nodes) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/nodes"),
            None,
        )
        .await;
    let nodes = nodes["items"].clone();
    let id_of = |name: &str| {
        nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (one, two) = (id_of("worker-1"), id_of("worker-2"));
    let remove = |node: String, query: &'static str| {
        let platform = &platform;
        let cluster_id = cluster_id.clone();
        async move {
            platform
                .call(
                    "DELETE",
                    &format!("/api/console/clusters/{cluster_id}/nodes/{node}{query}"),
                    None,
                )
                .await
        }
    };

    let (status, accepted) = remove(one.clone(), "").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(accepted["operation"]["type"], "node_remove");
    // A second request while the first is pending is refused.
    let (status, body) = remove(one.clone(), "").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("node_removal_in_progress"))
    );
    platform.drive().await;
    assert!(vcluster.get("v1", "Node", "", "worker-1").is_none());
    assert!(
        vcluster
            .get("v1", "Pod", "default", "web-worker-1")
            .is_none(),
        "evicted"
    );
    assert!(
        vcluster
            .get("v1", "Pod", "default", "flannel-worker-1")
            .is_some(),
        "DaemonSet pods stay"
    );
    let (_, events) = platform
        .call(
            "GET",
            &format!("/api/console/node-events?cluster_id={cluster_id}&node_id={one}"),
            None,
        )
        .await;
    assert_eq!(
        (events[0]["type"].as_str(), events[0]["message"].as_str()),
        (
            Some("deleted"),
            Some("removed: cordoned, drained and deleted")
        )
    );
    let (status, _) = remove(one.clone(), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a removed node is gone");
    // The next sync agrees and writes nothing more.
    let report = sync_all(
        &platform.db.pool,
        platform.host(),
        4,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(report.events, 0, "{report:?}");

    // A disruption budget blocks the drain: the removal fails within its
    // timeout, naming the pod, and the node stays cordoned; the cluster is fine.
    vcluster.set_faults(kube_sim::Faults {
        evictions_blocked: true,
        ..Default::default()
    });
    let (status, accepted) = remove(two.clone(), "?drain_timeout_seconds=1").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    platform.drive().await;
    let (_, operations) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/operations"),
            None,
        )
        .await;
    let failed = &operations[0];
    assert_eq!(failed["status"], "failed", "{operations}");
    let reason = failed["error_message"].as_str().unwrap();
    assert!(
        reason.contains("did not finish within 1 s") && reason.contains("default/web-worker-2"),
        "{reason}"
    );
    assert!(reason.contains("disruption budget"), "{reason}");
    let node = vcluster.get("v1", "Node", "", "worker-2").unwrap();
    assert_eq!(node["spec"]["unschedulable"], true);
    assert_eq!(platform.cluster(&cluster_id).await["status"], "ready");

    // Forced: no drain, the Node object goes.
    let (status, _) = remove(two.clone(), "?force=true").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    platform.drive().await;
    assert!(vcluster.get("v1", "Node", "", "worker-2").is_none());
    assert!(
        vcluster
            .get("v1", "Pod", "default", "web-worker-2")
            .is_some(),
        "not drained"
    );
    let (_, nodes) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/nodes?include_deleted=true"),
            None,
        )
        .await;
    let nodes = nodes["items"].clone();
    assert!(
        nodes
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["status"] == "deleted"),
        "{nodes}"
    );
    let (status, body) = remove(uuid::Uuid::new_v4().to_string(), "?drain_timeout_seconds=0").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}

#[tokio::test]
async fn a_removal_asked_during_an_update_waits_its_turn() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (cluster_id, vcluster) = ready_cluster(&platform, "sigma").await;
    vcluster
        .put(crate::harness::node("worker-q", "True", chrono::Utc::now()))
        .unwrap();
    sync_all(
        &platform.db.pool,
        platform.host(),
        4,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let (_, nodes) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/nodes"),
            None,
        )
        .await;
    let nodes = nodes["items"].clone();
    let node_id = nodes[0]["id"].as_str().unwrap().to_string();

    let (status, body) = platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{cluster_id}"),
            Some(json!({ "workload_cpu_limit_milli_cores": 6000 })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, accepted) = platform
        .call(
            "DELETE",
            &format!("/api/console/clusters/{cluster_id}/nodes/{node_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(
        accepted["operation"]["stage"],
        "queued behind the running operation"
    );
    platform.drive().await;
    assert!(
        vcluster.get("v1", "Node", "", "worker-q").is_some(),
        "not before its turn"
    );

    let report = tests::handlers::sweep(
        &platform.db.pool,
        &platform.dispatcher,
        &shared::config::JobSettings::default(),
    )
    .await
    .unwrap();
    assert_eq!(report.promoted, 1);
    platform.drive().await;
    assert!(vcluster.get("v1", "Node", "", "worker-q").is_none());
    let (_, operations) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/operations"),
            None,
        )
        .await;
    assert_eq!(
        (
            operations[0]["type"].as_str(),
            operations[0]["status"].as_str()
        ),
        (Some("node_remove"), Some("succeeded")),
        "{operations}"
    );
    assert_eq!(platform.cluster(&cluster_id).await["status"], "ready");
}

#[tokio::test]
async fn a_join_token_never_reaches_the_logs() {
    let (captured, _guard) = tests::logs::capture();

    let platform = TestApp::builder("worker-b").host().build().await;
    let (cluster_id, _) = ready_cluster(&platform, "tau").await;
    let created = create_token(&platform, &cluster_id, json!({})).await;
    let plaintext = created["plaintext"].as_str().unwrap().to_string();
    let machine = platform.client().bearer(&plaintext);
    let script = machine.send("GET", "/join", None).await;
    assert_eq!(script.status, StatusCode::OK);
    let attempt = attempts(&platform, &cluster_id).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for (step, status) in [("os", "running"), ("swap", "failed")] {
        let (answered, _) = machine
            .call(
                "POST",
                "/join/steps",
                Some(
                    json!({ "attempt_id": attempt, "step": step, "status": status, "detail": "x" }),
                ),
            )
            .await;
        assert_eq!(answered, StatusCode::OK);
    }
    let token_id = created["token"]["id"].as_str().unwrap();
    let (status, _) = platform
        .call(
            "DELETE",
            &format!("/api/console/clusters/{cluster_id}/tokens/{token_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // A refused fetch, logged as such, still without the token.
    let refused = machine.send("GET", "/join", None).await;
    assert_eq!(refused.status, StatusCode::GONE);

    let logs = captured.text();
    assert!(
        logs.contains("\"/join\""),
        "the requests were logged under their route: {} bytes",
        logs.len()
    );
    let secret = plaintext.split_once('.').unwrap().1;
    assert!(
        !logs.contains(secret),
        "the token's secret half is in the logs"
    );
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(secret);
    assert!(
        !logs.contains(&encoded),
        "the bootstrap Secret's data is in the logs"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_use_the_cluster_could_not_serve_is_given_back_and_revocation_catches_up() {
    let platform = on_vcluster().await;
    let (cluster_id, vcluster) = ready_cluster(&platform, "upsilon").await;
    // Tokens are the platform's: making one does not need the cluster.
    vcluster.set_faults(kube_sim::Faults {
        api_down: true,
        ..Default::default()
    });
    let created = create_token(&platform, &cluster_id, json!({ "max_uses": 2 })).await;
    let plaintext = created["plaintext"].as_str().unwrap();

    // The cluster does not take the attempt's bootstrap token: the script
    // stops with the reason and the one-time token keeps its use.
    let machine = Machine::healthy("worker-2");
    let out = machine.run(created["join_command"].as_str().unwrap()).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("did not take a bootstrap token"),
        "{}",
        text(&out.stderr)
    );
    let attempt = &attempts(&platform, &cluster_id).await[0];
    assert_eq!(attempt["outcome"], "failed");
    assert_eq!(attempt["counted_use"], false);
    let (_, tokens) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            None,
        )
        .await;
    assert_eq!(
        (
            tokens[0]["status"].as_str(),
            tokens[0]["use_count"].as_i64()
        ),
        (Some("active"), Some(0))
    );

    // Revoking while the cluster is unreachable still revokes; the node sync
    // deletes the running attempt's Secret once the cluster answers again.
    vcluster.set_faults(kube_sim::Faults::default());
    let (_, attempt_token) = take_a_use(&platform, plaintext).await;
    vcluster.set_faults(kube_sim::Faults {
        api_down: true,
        ..Default::default()
    });
    let token_id = created["token"]["id"].as_str().unwrap();
    let (status, body) = platform
        .call(
            "DELETE",
            &format!("/api/console/clusters/{cluster_id}/tokens/{token_id}"),
            None,
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("revoked"))
    );
    vcluster.set_faults(kube_sim::Faults::default());
    let attempt = &attempts(&platform, &cluster_id).await[0];
    assert_eq!(attempt["bootstrap_secret_deleted"], false);
    assert!(attempt_secret(&vcluster, attempt).is_some());
    let report = sync_all(
        &platform.db.pool,
        platform.host(),
        4,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    // Two: the running attempt's, and the one the cluster may or may not
    // have made for the attempt that failed (a lost answer looks the same).
    assert_eq!(report.secrets_deleted, 2);
    assert!(attempt_secret(&vcluster, attempt).is_none());
    assert_eq!(direct_join_status(&vcluster, &attempt_token).await, 401);
}

#[tokio::test]
async fn a_machine_past_the_plan_s_node_limit_is_told_why_by_the_script() {
    let platform = TestApp::builder("worker-b").host().build().await;
    tests::handlers::default_plan(&platform.db.pool, "Starter", 1, 1).await;
    let (cluster_id, _) = ready_cluster(&platform, "xi").await;
    let created = create_token(&platform, &cluster_id, json!({})).await;
    // The plan shrinks once the token exists: the join decides.
    sqlx::query("UPDATE plans SET max_nodes = 0")
        .execute(&platform.db.pool)
        .await
        .unwrap();
    let machine = Machine::healthy("worker-9");
    let out = machine.run(created["join_command"].as_str().unwrap()).await;
    assert!(!out.status.success());
    let printed = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        printed.contains(
            "the platform refused this join: the Starter plan allows 0 node(s) and 0 are in use or joining; remove a node or upgrade at "
        ),
        "{printed}"
    );
    assert!(!printed.contains("registered"), "{printed}");
    // The ledger keeps the same as a code with what the console words it
    // with (the console links its own plans page, not the URL).
    let ledger = attempts(&platform, &cluster_id).await;
    assert_eq!(
        (
            ledger[0]["outcome"].as_str(),
            &ledger[0]["reason_code"],
            &ledger[0]["reason_params"]
        ),
        (
            Some("refused"),
            &json!("plan_node_limit"),
            &json!({ "plan": "Starter", "limit": "0", "usage": "0" })
        )
    );
}

/// Registers a node the way the control plane's join script does, straight
/// at the cluster with a bootstrap token, as an attacker holding one would.
/// The answer comes once the kubelet's certificate request is decided.
async fn direct_register(vcluster: &kube_sim::Simulator, token: &str, node: &str) -> (u16, String) {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(vcluster.ca_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let response = client
        .post(format!(
            "{}/node/join?token={token}&node={node}",
            vcluster.url()
        ))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The kubelet certificate requests filed in the cluster, by requester.
fn certificate_requests(vcluster: &kube_sim::Simulator, username: &str) -> usize {
    vcluster
        .list("certificates.k8s.io/v1", "CertificateSigningRequest")
        .into_iter()
        .filter(|csr| csr["spec"]["username"] == username)
        .count()
}

/// Reports `approval` for an attempt, as the script does while its node waits.
async fn ask_approval(platform: &TestApp, plaintext: &str, attempt: &str) -> (u16, Value) {
    let (status, body) = platform
        .machine(plaintext)
        .call(
            "POST",
            "/join/steps",
            Some(json!({ "attempt_id": attempt, "step": "approval", "status": "running" })),
        )
        .await;
    (status.as_u16(), body)
}

/// The review's attack: a one-use token, one attempt's bootstrap token, and
/// four more nodes registered with it straight at the cluster, plus nodes
/// named like existing ones re-registered. Kubernetes' bootstrap tokens are
/// reusable until they expire and kubeadm's auto-approval would sign every
/// request; the platform approves one node per attempt.
#[tokio::test(flavor = "multi_thread")]
async fn one_join_attempt_joins_one_node_under_the_name_it_reported() {
    let platform = on_vcluster().await;
    let (cluster_id, vcluster) = ready_cluster(&platform, "pi").await;
    assert!(
        vcluster
            .get(
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                "",
                "kubeadm:node-autoapprove-bootstrap"
            )
            .is_some(),
        "the cluster starts with kubeadm's auto-approval, as a real one does"
    );
    let created = create_token(&platform, &cluster_id, json!({ "max_uses": 1 })).await;
    let plaintext = created["plaintext"].as_str().unwrap();
    let (attempt, bootstrap) = take_a_use(&platform, plaintext).await;
    assert!(
        vcluster
            .get(
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                "",
                "kubeadm:node-autoapprove-bootstrap"
            )
            .is_none(),
        "taking a use removed the cluster's own approval of bootstrap requests"
    );
    let secret = attempt_secret(&vcluster, &attempts(&platform, &cluster_id).await[0])
        .expect("the attempt's bootstrap Secret exists until its node is approved");
    let expiration =
        chrono::DateTime::parse_from_rfc3339(&base64_field(&secret, "expiration")).unwrap();
    let window = expiration.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(
        window > chrono::Duration::minutes(14) && window <= chrono::Duration::minutes(15),
        "{window}"
    );

    // The attacker registers the reported machine and four more with the
    // attempt's bootstrap token, straight at the cluster.
    let vc = vcluster.clone();
    let registrations: Vec<_> = ["probe", "worker-1", "worker-2", "worker-3", "worker-4"]
        .into_iter()
        .map(|node| {
            let vcluster = vc.clone();
            let token = bootstrap.clone();
            tokio::spawn(async move { (node, direct_register(&vcluster, &token, node).await) })
        })
        .collect();
    let requester = format!("system:bootstrap:{}", bootstrap.split_once('.').unwrap().0);
    for _ in 0..200 {
        if certificate_requests(&vcluster, &requester) == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(certificate_requests(&vcluster, &requester), 5);
    // Nothing joins before the platform approves.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(vcluster.get("v1", "Node", "", "probe").is_none());

    let (status, reply) = ask_approval(&platform, plaintext, &attempt).await;
    assert_eq!(status, 200, "{reply}");
    let mut outcomes = Vec::new();
    for registration in registrations {
        let (node, (status, body)) = registration.await.unwrap();
        outcomes.push((node, status, body));
    }
    for (node, status, body) in &outcomes {
        if *node == "probe" {
            assert_eq!(*status, 201, "{node}: {body}");
        } else {
            assert_eq!(*status, 403, "{node}: {body}");
            assert!(
                body.contains("one node, under the host name it reported"),
                "{body}"
            );
            assert!(
                vcluster.get("v1", "Node", "", node).is_none(),
                "{node} joined"
            );
        }
    }
    assert!(vcluster.get("v1", "Node", "", "probe").is_some());
    // The attempt's bootstrap token went with the approval: nothing more is
    // filed with it.
    let ledger = attempts(&platform, &cluster_id).await;
    assert_eq!(ledger[0]["bootstrap_secret_deleted"], true, "{}", ledger[0]);
    assert!(attempt_secret(&vcluster, &ledger[0]).is_none());
    assert_eq!(
        direct_register(&vcluster, &bootstrap, "worker-5").await.0,
        401
    );
    // Asking again is answered from the record, and changes nothing.
    assert_eq!(ask_approval(&platform, plaintext, &attempt).await.0, 200);

    // Existing names: the node sync records `probe`; a second one-use token
    // cannot join a machine under that name, and cannot take it over with a
    // request filed under an attempt that reported another name.
    sync_all(
        &platform.db.pool,
        platform.host(),
        4,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    // The sync saw the node and ended the attempt as succeeded; the script's
    // last reports, sent after that, still finish its checklist, and
    // nothing else is taken.
    let report = |step: &'static str, status: &'static str| {
        let (machine, attempt) = (platform.machine(plaintext), attempt.clone());
        async move {
            machine
                .call(
                    "POST",
                    "/join/steps",
                    Some(json!({ "attempt_id": attempt, "step": step, "status": status, "hostname": "probe" })),
                )
                .await
                .0
                .as_u16()
        }
    };
    assert_eq!(report("join", "ok").await, 200);
    assert_eq!(report("done", "ok").await, 200);
    assert_eq!(report("os", "running").await, 409);
    let ledger = attempts(&platform, &cluster_id).await;
    assert_eq!(ledger[0]["outcome"], "succeeded");
    let steps: Vec<(&str, &str)> = ledger[0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps[steps.len() - 2..],
        [("join", "ok"), ("done", "ok")],
        "{steps:?}"
    );
    let node_before = vcluster.get("v1", "Node", "", "probe").unwrap();
    let second = create_token(&platform, &cluster_id, json!({ "max_uses": 1 })).await;
    let second_plaintext = second["plaintext"].as_str().unwrap();
    let machine = platform.machine(second_plaintext);
    let script = machine.send("GET", "/join", None).await;
    let reused_name = script
        .body
        .as_str()
        .expect("a script")
        .lines()
        .find_map(|line| line.strip_prefix("KB_ATTEMPT="))
        .unwrap()
        .trim_matches('\'')
        .to_string();
    let (status, refused) = machine
        .call(
            "POST",
            "/join/steps",
            Some(json!({ "attempt_id": reused_name, "step": "join", "status": "running", "hostname": "probe" })),
        )
        .await;
    assert_eq!(status, 409);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("a node named probe is already part of this cluster"),
        "{refused}"
    );
    let refused_attempt = attempts(&platform, &cluster_id)
        .await
        .into_iter()
        .find(|a| a["id"] == reused_name.as_str())
        .unwrap();
    assert_eq!(
        (
            &refused_attempt["reason_code"],
            &refused_attempt["reason_params"]
        ),
        (&json!("node_exists"), &json!({ "hostname": "probe" }))
    );
    let (_, tokens) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{cluster_id}/tokens"),
            None,
        )
        .await;
    let second_token = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == second["token"]["id"])
        .unwrap();
    assert_eq!(second_token["use_count"], 0, "a refused name takes no use");

    // Reporting a fresh name, then filing the request for `probe`.
    let (takeover_attempt, takeover_token) =
        take_a_use_as(&platform, second_plaintext, "fresh").await;
    let vc = vcluster.clone();
    let takeover =
        tokio::spawn(async move { direct_register(&vc, &takeover_token, "probe").await });
    let requester = {
        let ledger = attempts(&platform, &cluster_id).await;
        let name = ledger[0]["bootstrap_secret_name"]
            .as_str()
            .unwrap()
            .to_string();
        format!(
            "system:bootstrap:{}",
            name.trim_start_matches("bootstrap-token-")
        )
    };
    for _ in 0..200 {
        if certificate_requests(&vcluster, &requester) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (status, reply) = ask_approval(&platform, second_plaintext, &takeover_attempt).await;
    assert_eq!(status, 202, "no request for the reported name: {reply}");
    let (status, body) = takeover.await.unwrap();
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        vcluster.get("v1", "Node", "", "probe").unwrap(),
        node_before
    );
}
