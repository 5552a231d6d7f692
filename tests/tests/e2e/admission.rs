//! The admission webhook: registered by the cluster jobs inside the
//! simulated vCluster, whose API server calls it over HTTPS as kube-apiserver
//! does; the real `kubectl` with a downloaded kubeconfig sees its refusals;
//! recorded AdmissionReviews answered over HTTP and under the Lambda runtime.

use std::{path::PathBuf, process::Stdio};

use crate::harness::{Client, TestApp};
use axum::http::StatusCode;
use serde_json::{Value, json};
use shared::admission::registration::{BINDINGS, CONFIGURATION, NODES, PODS, WORKLOADS};

fn fixture(name: &str) -> Value {
    let path = format!("{}/fixtures/admission/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture exists"))
        .expect("fixture is JSON")
}

/// The simulated control plane of the cluster `id`.
async fn vcluster(platform: &TestApp, id: &str) -> std::sync::Arc<kube_sim::Simulator> {
    let cluster = platform.cluster(id).await;
    platform
        .sim()
        .vcluster(
            cluster["namespace"].as_str().unwrap(),
            cluster["vcluster_name"].as_str().unwrap(),
        )
        .expect("the control plane runs")
}

/// Records `secret` as the cluster's webhook URL secret, as a registration
/// made before its API server had a token left it.
async fn registered_with_url_secret(platform: &TestApp, id: &str, secret: &str) {
    sqlx::query(
        "INSERT INTO cluster_admission_secrets (cluster_id, secret_hash) VALUES ($1::uuid, $2)",
    )
    .bind(id)
    .bind(shared::secretbox::hash(secret))
    .execute(&platform.db.pool)
    .await
    .unwrap();
}

/// The webhook configuration inside the cluster `id`.
async fn registered(platform: &TestApp, id: &str) -> Value {
    vcluster(platform, id)
        .await
        .get(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            "",
            CONFIGURATION,
        )
        .expect("the webhook is registered inside the cluster")
}

/// The path of the registered webhook URL (`/api/admission/<id>`).
fn webhook_path(configuration: &Value) -> String {
    let url = configuration["webhooks"][0]["clientConfig"]["url"]
        .as_str()
        .unwrap();
    url[url.find("/api/admission/").unwrap()..].to_string()
}

pub(crate) struct Kubectl {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    pub(crate) async fn for_cluster(platform: &TestApp, id: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("admission-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("config");
        std::fs::write(&kubeconfig, platform.issue_kubeconfig(id, json!({})).await).unwrap();
        Self { dir, kubeconfig }
    }

    /// kubectl with `kubeconfig` (its text).
    pub(crate) fn with(kubeconfig: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("admission-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config");
        std::fs::write(&path, kubeconfig).unwrap();
        Self {
            dir,
            kubeconfig: path,
        }
    }

    /// Runs kubectl with `stdin` as the manifest; (succeeded, stdout + stderr).
    pub(crate) async fn run(&self, args: &[&str], stdin: &str) -> (bool, String) {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HOME", &self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl is installed (scripts/test.sh installs it)");
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).await.unwrap();
        drop(input);
        let output = child.wait_with_output().await.unwrap();
        (
            output.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    }

    /// `kubectl patch` of the Deployment's `spec.replicas` in `shop`.
    async fn replicas(&self, deployment: &str, replicas: u32) -> (bool, String) {
        let patch = format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#);
        self.run(
            &[
                "patch",
                "deployment",
                deployment,
                "-n",
                "shop",
                "--type",
                "merge",
                "-p",
                &patch,
            ],
            "",
        )
        .await
    }

    pub(crate) async fn apply(&self, manifest: &str) -> (bool, String) {
        self.run(&["apply", "--validate=false", "-f", "-"], manifest)
            .await
    }
}

pub(crate) fn deployment(name: &str, replicas: i64, cpu: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n        resources:\n          requests: {{cpu: {cpu}, memory: 256Mi}}\n"
    )
}

pub(crate) fn pod(name: &str, namespace: &str, cpu: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  containers:\n  - name: app\n    image: nginx:1.27\n    resources:\n      requests: {{cpu: {cpu}, memory: 128Mi}}\n"
    )
}

fn node(name: &str) -> String {
    format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n")
}

// Multi-threaded: kubectl runs as a child process while the platform answers
// the simulated API server's webhook calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_is_refused_past_the_clusters_limits_and_the_plan_and_a_raised_limit_lets_it_through()
 {
    let mut platform = TestApp::builder("worker-b").admission().build().await;
    let front_url = platform.front.as_ref().unwrap().url.clone();
    // 4000m of CPU and 8192 MiB for workloads.
    let (id, _) = platform.create_ready("shop", "nodeport").await;
    let configuration = registered(&platform, &id).await;
    let path = webhook_path(&configuration);
    for hook in configuration["webhooks"].as_array().unwrap() {
        let url = hook["clientConfig"]["url"].as_str().unwrap();
        assert_eq!(
            url,
            format!("{front_url}/api/admission/{id}"),
            "no secret in the URL"
        );
        assert!(hook["clientConfig"]["caBundle"].is_string());
    }
    // The API server's credential is in its admission configuration, a host
    // file: a user named by the webhook's host:port, with the cluster's token.
    let cluster = platform.cluster(&id).await;
    let files = platform
        .sim()
        .get(
            "v1",
            "Secret",
            cluster["namespace"].as_str().unwrap(),
            shared::admission::authorizer::SECRET_NAME,
        )
        .expect("the API server's files");
    let file = |name: &str| {
        use base64::Engine;
        let encoded = files["data"][name].as_str().unwrap();
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap(),
        )
        .unwrap()
    };
    assert!(file("admission.yaml").contains("kind: WebhookAdmissionConfiguration"));
    let credentials = file("admission-kubeconfig.yaml");
    let front_host = front_url.strip_prefix("https://").unwrap();
    assert!(
        credentials.contains(&format!("- name: '{front_host}'")),
        "{credentials}"
    );
    let token = credentials.rsplit("token: ").next().unwrap().trim();
    let stored: Vec<u8> = sqlx::query_scalar(
        "SELECT token_hash FROM cluster_authorizers WHERE cluster_id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(
        stored,
        shared::secretbox::hash(token),
        "only the hash is kept"
    );
    // The tenant's cluster-admin reads the webhook's URL; calling it without
    // the API server's token is refused.
    let (status, answer) = platform
        .call("POST", &path, Some(fixture("node-create.json")))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        answer["response"]["status"]["message"],
        admission::NOT_REGISTERED
    );

    let kubectl = Kubectl::for_cluster(&platform, &id).await;
    let (ok, out) = kubectl.run(&["create", "namespace", "shop"], "").await;
    assert!(ok, "{out}");

    // Within the limit: 2 × 1000m.
    let (ok, out) = kubectl.apply(&deployment("web", 2, "1000m")).await;
    assert!(ok, "a deployment within the limit is created: {out}");
    // A bare pod of 1500m is admitted and counted at once.
    let (ok, out) = kubectl.apply(&pod("batch", "shop", "1500m")).await;
    assert!(ok, "{out}");

    // 2 × 1500m on top of the 1500m in use passes 4000m by 500m.
    let big = deployment("big", 2, "1500m");
    let (ok, out) = kubectl.apply(&big).await;
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("admission webhook \"{WORKLOADS}\" denied the request: the cluster \"shop\" allows 4000m of CPU requests; 1500m are in use and Deployment \"big\" (2 pod(s) × 1500m CPU, 256Mi memory) asks for 3000m more: 500m over the limit")),
        "{out}"
    );
    assert!(out.contains("Error from server (Forbidden)"), "{out}");

    // Scaling past the limit: 2 → 5 replicas adds 3000m.
    let (ok, out) = kubectl.replicas("web", 5).await;
    assert!(!ok, "{out}");
    assert!(
        out.contains("asks for 3000m more: 500m over the limit"),
        "{out}"
    );
    // Scaling down always passes.
    let (ok, out) = kubectl.replicas("web", 1).await;
    assert!(ok, "{out}");

    // A pod past the limit, and one in an exempt namespace (not even sent).
    let (ok, out) = kubectl.apply(&pod("huge", "shop", "3")).await;
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("admission webhook \"{PODS}\" denied the request")),
        "{out}"
    );
    assert!(
        out.contains("1500m are in use and Pod \"huge\" asks for 3000m more: 500m over"),
        "{out}"
    );
    // kube-system is exempt from weighing (the cluster's own components run
    // there), so the tenant may not run workloads in it: a 64-CPU pod there
    // was a way past the limit. The platform's authorizer refuses it.
    let (ok, out) = kubectl.apply(&pod("system", "kube-system", "64")).await;
    assert!(!ok, "{out}");
    assert!(
        out.contains("is forbidden") && out.contains("run workloads in a namespace of your own"),
        "{out}"
    );

    // A webhook registered before the API server had a token, with a secret
    // in its URL, is answered at that URL until the next registration.
    let legacy = format!("/api/admission/{id}/legacy-url-secret");
    registered_with_url_secret(&platform, &id, "legacy-url-secret").await;
    // Scaled to nothing: it asks for no room, so only the credential counts.
    let mut small = fixture("deployment-create.json");
    small["request"]["object"]["spec"]["replicas"] = json!(0);
    let (status, answer) = platform.call("POST", &legacy, Some(small.clone())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");

    // Raising the cluster's limit lets the same deployment through, and the
    // update registered the webhook again, retiring the URL's secret.
    let (status, body) = platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(json!({ "workload_cpu_limit_milli_cores": 8000 })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    platform.drive().await;
    assert_eq!(webhook_path(&registered(&platform, &id).await), path);
    let (ok, out) = kubectl.apply(&big).await;
    assert!(ok, "the raised limit admits it: {out}");
    let (status, answer) = platform.call("POST", &legacy, Some(small)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        answer["response"]["allowed"], false,
        "the retired secret is refused"
    );
    assert_eq!(
        answer["response"]["status"]["message"],
        admission::NOT_REGISTERED
    );

    // The plan: one node. The first registers, the second is refused, and the
    // join script of a token the tenant made themselves reports why.
    tests::handlers::default_plan(&platform.db.pool, "Starter", 5, 1).await;
    let (ok, out) = kubectl.apply(&node("first")).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl.apply(&node("second")).await;
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("admission webhook \"{NODES}\" denied the request: the Starter plan allows 1 node(s) and 1 are in use or joining: Node \"second\" would be 1 over; remove a node or upgrade at ")),
        "{out}"
    );
    // A bootstrap token the tenant makes itself (the review joined a node
    // with one): refused by the platform's authorizer, ahead of RBAC.
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: bootstrap-token-abcdef\n  namespace: kube-system\ntype: bootstrap.kubernetes.io/token\ndata:\n  token-id: YWJjZGVm\n  token-secret: MDEyMzQ1Njc4OWFiY2RlZg==\n  auth-extra-groups: c3lzdGVtOmJvb3RzdHJhcHBlcnM6a3ViZWFkbTpkZWZhdWx0LW5vZGUtdG9rZW4=\n";
    let (ok, out) = kubectl.apply(secret).await;
    assert!(!ok, "{out}");
    assert!(
        out.contains("is forbidden") && out.contains("they are the platform's"),
        "{out}"
    );

    // The platform down: deploys fail (Fail), pods are still created (Ignore).
    drop(platform.front.take());
    let (ok, out) = kubectl.apply(&deployment("later", 1, "100m")).await;
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("failed calling webhook \"{WORKLOADS}\"")),
        "{out}"
    );
    let (ok, out) = kubectl.apply(&pod("meanwhile", "shop", "100m")).await;
    assert!(ok, "pods are not stopped by the platform's outage: {out}");
}

/// `body` with `content_type` to `path`: (status, content type, JSON or text).
/// A review posted as an API server posts it: with `token` as bearer
/// credential, when there is one.
/// Posts `review` to `path` as the API server does, `token` its bearer token.
async fn post_as(
    client: &Client,
    path: &str,
    token: Option<&str>,
    review: Value,
) -> (StatusCode, Value) {
    let client = match token {
        Some(token) => client.clone().bearer(token),
        None => client.clone(),
    };
    client.call("POST", path, Some(review)).await
}

/// Posts `body` as `content_type`; the status, the answer's content type and
/// its body.
async fn post_raw(
    client: &Client,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (StatusCode, String, Value) {
    let reply = client.send_bytes("POST", path, content_type, body).await;
    (reply.status, reply.content_type().to_string(), reply.body)
}

/// The review answer's `response`, checked to be a v1 AdmissionReview that
/// echoes `uid`.
fn answered(answer: &Value, uid: &str) -> Value {
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1", "{answer}");
    assert_eq!(answer["kind"], "AdmissionReview", "{answer}");
    assert_eq!(answer["response"]["uid"], uid, "{answer}");
    assert!(answer["response"].get("patch").is_none(), "never mutates");
    answer["response"].clone()
}

fn with_uid(mut review: Value, uid: &str) -> Value {
    review["request"]["uid"] = uid.into();
    review
}

#[tokio::test]
async fn recorded_reviews_are_weighed_against_the_observed_usage_and_the_pods_admitted_since() {
    use shared::admission::{demand::Requests, store};
    let app = TestApp::builder("admission").build().await;
    let (db, client) = (&app.db, app.client());
    let id = tests::handlers::seed_cluster(&db.pool).await;
    sqlx::query(
        "UPDATE clusters SET workload_cpu_limit_milli_cores = 4000,
                             workload_memory_limit_mib = 8192 WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    let name: String = sqlx::query_scalar("SELECT name FROM clusters WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let token = store::issue_authorizer_token(&db.pool, id, "platform.example:443")
        .await
        .unwrap();
    let path = format!("/api/admission/{id}");
    let post = |review: Value| post_as(&client, &path, Some(&token), review);

    // 3 × 1 CPU of 4000m, nothing in use.
    let review = fixture("deployment-create.json");
    let (status, answer) = post(review).await;
    assert_eq!(status, StatusCode::OK);
    let response = answered(&answer, "0df28fbd-5f5f-11e8-bc74-36e6bb280816");
    assert_eq!(response["allowed"], true, "{answer}");

    // sync-nodes saw 2000m in use: scaling 3 → 6 adds 3000m, 1000m over.
    store::record_usage(
        &db.pool,
        id,
        &store::Observed {
            requests: Requests {
                cpu_milli_cores: 2000,
                memory_mib: 2048,
            },
            pods: 2,
            nodes: 1,
            at: chrono::Utc::now(),
        },
    )
    .await
    .unwrap();
    let (_, answer) = post(fixture("deployment-update.json")).await;
    let response = answered(&answer, "b9a5c6d2-7e1f-4a3b-8c9d-0e1f2a3b4c5d");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(response["status"]["reason"], "Forbidden");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("the cluster {name:?} allows 4000m of CPU requests; 2000m are in use and Deployment \"api\" (6 pod(s) × 1000m CPU, 1024Mi memory) asks for 3000m more: 1000m over the limit")),
        "{message}"
    );

    // A pod of 1500m passes (3500m) and is reserved; a second does not
    // (5000m); the API server sending the first again counts it once.
    let pod = fixture("pod-create.json");
    let (_, answer) = post(with_uid(pod.clone(), "first")).await;
    assert_eq!(answered(&answer, "first")["allowed"], true, "{answer}");
    let (_, answer) = post(with_uid(pod.clone(), "second")).await;
    let response = answered(&answer, "second");
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"].as_str().unwrap().contains(
            "3500m are in use and Pod \"web-7d4b9c-x2x9f\" asks for 1500m more: 1000m over"
        ),
        "{response}"
    );
    let (_, answer) = post(with_uid(pod.clone(), "first")).await;
    assert_eq!(answered(&answer, "first")["allowed"], true, "{answer}");
    let reserved: Vec<String> =
        sqlx::query_scalar("SELECT review_uid FROM admission_reservations WHERE cluster_id = $1")
            .bind(id)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        reserved,
        ["first"],
        "the refused pod's reservation is dropped"
    );
    // A dry run is weighed as the real thing, and reserves nothing whether
    // it passes or not.
    let mut dry = with_uid(pod.clone(), "dry");
    dry["request"]["dryRun"] = true.into();
    let (_, answer) = post(dry.clone()).await;
    let response = answered(&answer, "dry");
    assert_eq!(response["allowed"], false, "{answer}");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("3500m are in use and Pod \"web-7d4b9c-x2x9f\" asks for 1500m more"),
        "{response}"
    );
    dry["request"]["object"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
        "100m".into();
    let (_, answer) = post(dry).await;
    assert_eq!(answered(&answer, "dry")["allowed"], true, "{answer}");
    let count: i64 =
        sqlx::query_scalar("SELECT count(*) FROM admission_reservations WHERE cluster_id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(count, 1);
    // Hostile figures saturate rather than wrap or fail the statement: a pod
    // asking for 9e15 CPUs and 8 EiB is refused with the numbers and
    // reserves nothing; an observation at i64::MAX still leaves the sum
    // readable.
    let mut huge = with_uid(pod.clone(), "huge");
    huge["request"]["object"]["spec"]["containers"][0]["resources"]["requests"] =
        json!({"cpu": "9e15", "memory": "8Ei"});
    let (status, answer) = post(huge).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let response = answered(&answer, "huge");
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        response["status"]["message"].as_str().unwrap().contains(
            "3500m are in use and Pod \"web-7d4b9c-x2x9f\" asks for 9000000000000000000m more"
        ),
        "{response}"
    );
    let sum: (i64, i64) = sqlx::query_as(
        "SELECT cpu_milli_cores, memory_mib FROM admission_reserved WHERE cluster_id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(sum, (1500, 256), "only the first pod is reserved");
    // A newer observation covers the reservations made before it began.
    store::record_usage(
        &db.pool,
        id,
        &store::Observed {
            requests: Requests {
                cpu_milli_cores: 500,
                memory_mib: 512,
            },
            pods: 1,
            nodes: 1,
            at: chrono::Utc::now() + chrono::Duration::seconds(10),
        },
    )
    .await
    .unwrap();
    let (_, answer) = post(with_uid(pod.clone(), "third")).await;
    assert_eq!(answered(&answer, "third")["allowed"], true, "{answer}");

    // 500m observed and the third pod's 1500m: the scale to 6 replicas
    // (3000m more) passes 4000m. The cluster's limit is read by the next
    // review, the webhook as registered: raised to 6000m, the same passes.
    let scale = fixture("deployment-update.json");
    let scale_uid = "b9a5c6d2-7e1f-4a3b-8c9d-0e1f2a3b4c5d";
    let (_, answer) = post(scale.clone()).await;
    let response = answered(&answer, scale_uid);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("allows 4000m of CPU requests; 2000m are in use and Deployment \"api\" (6 pod(s) × 1000m CPU, 1024Mi memory) asks for 3000m more: 1000m over"),
        "{response}"
    );
    sqlx::query("UPDATE clusters SET workload_cpu_limit_milli_cores = 6000 WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let (_, answer) = post(scale).await;
    assert_eq!(answered(&answer, scale_uid)["allowed"], true, "{answer}");

    // A Node with no plan to stop it is recorded as joining, once.
    let node = fixture("node-create.json");
    for _ in 0..2 {
        let (_, answer) = post(node.clone()).await;
        assert_eq!(
            answered(&answer, "3c7d9e2a-1b4f-4d6e-8a9b-7c6d5e4f3a2b")["allowed"],
            true,
            "{answer}"
        );
    }
    let joined: Vec<(String, String)> =
        sqlx::query_as("SELECT n.name, n.status::text FROM nodes n WHERE n.cluster_id = $1")
            .bind(id)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(joined, [("worker-7".to_string(), "pending".to_string())]);
    let events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM node_events WHERE cluster_id = $1 AND type = 'joined'",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(events, 1);

    // What is not a v1 review is a problem, not an answer.
    for (body, code) in [
        (json!({ "kind": "Pod" }), "invalid_admission_review"),
        (
            {
                let mut old = fixture("pod-create.json");
                old["apiVersion"] = "admission.k8s.io/v1beta1".into();
                old
            },
            "invalid_admission_review",
        ),
        (
            {
                let mut long = fixture("pod-create.json");
                long["request"]["uid"] = "u".repeat(129).into();
                long
            },
            "invalid_admission_review",
        ),
    ] {
        let (status, kind, answer) =
            post_raw(&client, &path, "application/json", body.to_string().into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(kind, "application/problem+json");
        assert_eq!(answer["code"], code, "{answer}");
    }
    let (status, kind, _) = post_raw(
        &client,
        &path,
        "text/plain",
        fixture("pod-create.json").to_string().into(),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(kind, "application/problem+json");
    let mut huge = fixture("pod-create.json");
    huge["request"]["object"]["metadata"]["annotations"] =
        json!({ "padding": "x".repeat(10 * 1024 * 1024) });
    let (status, kind, _) =
        post_raw(&client, &path, "application/json", huge.to_string().into()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(kind, "application/problem+json");
    // Past the 1 MiB other routes take: an UPDATE carries its object twice.
    let mut large = with_uid(fixture("pod-create.json"), "large");
    large["request"]["dryRun"] = true.into();
    large["request"]["object"]["metadata"]["annotations"] =
        json!({ "padding": "x".repeat(3 * 1024 * 1024) });
    let (status, _, answer) =
        post_raw(&client, &path, "application/json", large.to_string().into()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answered(&answer, "large");

    // A missing or wrong token, another cluster's, an unknown cluster, a
    // deleted one, and the token put where a URL secret went, are told
    // alike, and reserve nothing.
    let other = tests::handlers::seed_cluster(&db.pool).await;
    let other_token = store::issue_authorizer_token(&db.pool, other, "platform.example:443")
        .await
        .unwrap();
    sqlx::query("UPDATE clusters SET status = 'deleted', deleted_at = now() WHERE id = $1")
        .bind(other)
        .execute(&db.pool)
        .await
        .unwrap();
    let upper = token.to_uppercase();
    let refusals = [
        (path.clone(), None),
        (path.clone(), Some(other_token.as_str())),
        (path.clone(), Some(upper.as_str())),
        (
            format!("/api/admission/{}", uuid::Uuid::new_v4()),
            Some(token.as_str()),
        ),
        (
            format!("/api/admission/{other}"),
            Some(other_token.as_str()),
        ),
        (format!("/api/admission/{id}/{token}"), None),
        (format!("/api/admission/{id}/{token}"), Some(token.as_str())),
    ];
    let mut answers = Vec::new();
    for (path, token) in &refusals {
        for review in [fixture("pod-create.json"), fixture("node-create.json")] {
            let uid = review["request"]["uid"].as_str().unwrap().to_string();
            let (status, answer) = post_as(&client, path, *token, review).await;
            assert_eq!(status, StatusCode::OK, "{path}: {answer}");
            let response = answered(&answer, &uid);
            assert_eq!(response["allowed"], false, "{path} {token:?}");
            answers.push(response["status"].clone());
        }
    }
    assert!(answers.iter().all(|a| a == &answers[0]), "{answers:?}");
    assert_eq!(answers[0]["message"], admission::NOT_REGISTERED);
    let written: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM admission_reservations WHERE review_uid <> 'first' AND review_uid <> 'third')
              + (SELECT count(*) FROM nodes WHERE cluster_id = $1)",
    )
    .bind(other)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(written, 0, "a refused credential writes nothing");

    // Once the cluster is deleted, sweep removes what it had reserved.
    sqlx::query("UPDATE clusters SET status = 'deleted', deleted_at = now() WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    assert!(store::prune(&mut conn).await.unwrap() >= 2, "rows and sum");
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM admission_reservations WHERE cluster_id = $1)
              + (SELECT count(*) FROM admission_reserved WHERE cluster_id = $1)",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(left, 0);
}

/// Pods of 1000m each, 20 at once, to a cluster with 4000m free: exactly
/// four admitted (each weighed under the cluster's sum row lock, after the
/// others), each reserved once, and the fifth refused after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_admitted_at_once_never_pass_the_limit_together() {
    use shared::admission::store;
    let app = TestApp::builder("admission_race").build().await;
    let (db, client) = (&app.db, app.client());
    let id = tests::handlers::seed_cluster(&db.pool).await;
    sqlx::query("UPDATE clusters SET workload_cpu_limit_milli_cores = 4000 WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let token = store::issue_authorizer_token(&db.pool, id, "platform.example:443")
        .await
        .unwrap();
    let path = format!("/api/admission/{id}");
    let mut pod = fixture("pod-create.json");
    pod["request"]["object"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "1", "memory": "1Mi"}});
    let review = |uid: String| {
        let (client, path, pod, token) = (client.clone(), path.clone(), pod.clone(), token.clone());
        tokio::spawn(async move {
            let (status, answer) = post_as(&client, &path, Some(&token), with_uid(pod, &uid)).await;
            assert_eq!(status, StatusCode::OK, "{answer}");
            let allowed = answered(&answer, &uid)["allowed"] == true;
            (uid, allowed)
        })
    };
    let pool = db.pool.clone();
    let reserved = move || {
        let pool = pool.clone();
        async move {
            let mut uids: Vec<String> = sqlx::query_scalar(
                "SELECT review_uid FROM admission_reservations WHERE cluster_id = $1",
            )
            .bind(id)
            .fetch_all(&pool)
            .await
            .unwrap();
            uids.sort();
            uids
        }
    };

    let at_once: Vec<_> = (0..20).map(|n| review(format!("race-{n:02}"))).collect();
    let mut admitted = Vec::new();
    for task in at_once {
        let (uid, allowed) = task.await.unwrap();
        if allowed {
            admitted.push(uid);
        }
    }
    admitted.sort();
    assert_eq!(admitted.len(), 4, "{admitted:?}");
    assert_eq!(reserved().await, admitted, "reserved exactly the admitted");
    let (_, allowed) = review("one-more".into()).await.unwrap();
    assert!(!allowed, "the fifth 1000m pod passes 4000m");
    assert_eq!(reserved().await.len(), 4);

    // Under a plan that leaves 500m (4500m, 4000m given to the cluster),
    // raising the limit by the 1000m excess is not possible: the refusal
    // names the plan and where to upgrade.
    let plan = tests::handlers::default_plan(&db.pool, "Starter", 5, 5).await;
    sqlx::query("UPDATE plans SET max_cpu_milli_cores = 4500 WHERE id = $1")
        .bind(plan)
        .execute(&db.pool)
        .await
        .unwrap();
    let (status, answer) = post_as(
        &client,
        &path,
        Some(&token),
        with_uid(pod.clone(), "past-the-plan"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let message = answered(&answer, "past-the-plan")["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("asks for 1000m more: 1000m over the limit; the Starter plan leaves 500m to raise the cluster's limit by: upgrade at ")
            && message.ends_with("/billing"),
        "{message}"
    );
}

#[tokio::test]
async fn under_lambda_a_recorded_review_is_answered_through_api_gateway() {
    use crate::lambda::{post_event, response, spawn_function};
    let db = tests::database::TestDb::new().await;
    let api = tests::lambda_runtime_api::RuntimeApi::start().await;
    // As deployed: every function has the broker's URL (this one publishes nothing).
    let amqp_url = tests::broker::amqp_url();
    let _function = spawn_function(
        "admission",
        &api,
        &[("DATABASE_URL", &db.url), ("AMQP_URL", &amqp_url)],
    );
    let id = tests::handlers::seed_cluster(&db.pool).await;
    let token =
        shared::admission::store::issue_authorizer_token(&db.pool, id, "platform.example:443")
            .await
            .unwrap();
    let path = format!("/api/admission/{id}");
    // As the API server sends it: the cluster's token as bearer credential.
    let post_event = |path: &str, body: Value| {
        let mut event = post_event(path, body);
        event["headers"]["authorization"] = format!("Bearer {token}").into();
        event
    };

    // 1500m of the seeded cluster's 1000m.
    let answer = response(
        api.invoke(post_event(&path, fixture("pod-create.json")))
            .await,
    );
    assert_eq!(answer["statusCode"], 200, "{answer}");
    let body: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    let review = answered(&body, "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(review["allowed"], false);
    assert!(
        review["status"]["message"]
            .as_str()
            .unwrap()
            .contains("allows 1000m of CPU requests; 0m are in use and Pod \"web-7d4b9c-x2x9f\" asks for 1500m more: 500m over the limit"),
        "{review}"
    );
    let answer = response(
        api.invoke(post_event(&path, fixture("node-create.json")))
            .await,
    );
    let body: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        answered(&body, "3c7d9e2a-1b4f-4d6e-8a9b-7c6d5e4f3a2b")["allowed"],
        true
    );
    let answer = response(
        api.invoke(post_event(&path, json!({ "apiVersion": "v1" })))
            .await,
    );
    assert_eq!(answer["statusCode"], 400, "{answer}");
    assert_eq!(
        answer["headers"]["content-type"],
        "application/problem+json"
    );
}

/// The review's second finding: the tenant's kubeconfig is `cluster-admin`
/// of its own cluster and used that against the platform. The platform's
/// authorizer, which the API server asks before RBAC, refuses each lever;
/// the tenant's own work stays its own.
/// A kubeconfig for `server` trusting `ca` that authenticates with a
/// client certificate.
fn certificate_kubeconfig(server: &str, ca: &str, certificate: &str, key: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        b64(ca),
        b64(certificate),
        b64(key)
    )
}

// Root on a node holds its kubelet's client certificate (signed by the
// cluster's CA, `CN=system:node:<name>, O=system:nodes`). Through kubectl
// with it, the tenant reaches none of the levers the platform keeps: the
// authorizer trusts the control plane, not nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_certificate_on_the_tenants_machine_is_no_key_to_the_platforms_levers() {
    let platform = TestApp::builder("worker-b").admission().build().await;
    let (id, _) = platform.create_ready("fort", "nodeport").await;
    let vcluster = vcluster(&platform, &id).await;
    let (certificate, key) = vcluster
        .client_certificate("system:node:worker-1", &["system:nodes"])
        .unwrap();
    let node = Kubectl::with(&certificate_kubeconfig(
        &vcluster.url(),
        vcluster.ca_pem(),
        &certificate,
        &key,
    ));
    // Authenticated as the node: what a kubelet reads, it reads.
    let (ok, out) = node.run(&["get", "nodes"], "").await;
    assert!(ok, "{out}");
    // A certificate for the masters the cluster's CA never signed is no one.
    let forged = rcgen::CertificateParams::new(Vec::<String>::new())
        .and_then(|mut params| {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, "admin");
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, "system:masters");
            let key = rcgen::KeyPair::generate()?;
            Ok((params.self_signed(&key)?.pem(), key.serialize_pem()))
        })
        .unwrap();
    let (ok, out) = Kubectl::with(&certificate_kubeconfig(
        &vcluster.url(),
        vcluster.ca_pem(),
        &forged.0,
        &forged.1,
    ))
    .run(
        &["delete", "validatingwebhookconfiguration", CONFIGURATION],
        "",
    )
    .await;
    assert!(!ok, "{out}");
    // A request for a certificate a controller would be taken for, filed by
    // the tenant's cluster-admin; the node may not approve it.
    let csr = certificate_request("system:kube-controller-manager", None);
    use base64::Engine;
    let tenant = Kubectl::for_cluster(&platform, &id).await;
    let (ok, out) = tenant
        .apply(&format!(
            "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: be-the-controller\nspec:\n  signerName: kubernetes.io/kube-apiserver-client\n  usages: [client auth]\n  request: {}\n",
            base64::engine::general_purpose::STANDARD.encode(&csr)
        ))
        .await;
    assert!(ok, "{out}");
    // CoreDNS, as the engine runs it in kube-system.
    vcluster
        .put(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "coredns", "namespace": "kube-system" },
            "spec": { "replicas": 1, "selector": { "matchLabels": { "k8s-app": "kube-dns" } },
                      "template": { "metadata": { "labels": { "k8s-app": "kube-dns" } },
                                    "spec": { "containers": [{ "name": "coredns", "image": "coredns/coredns:1.12.0" }] } } },
        }))
        .unwrap();
    let levers: [&[&str]; 7] = [
        &["delete", "validatingwebhookconfiguration", CONFIGURATION],
        &["certificate", "approve", "be-the-controller"],
        &[
            "create",
            "secret",
            "generic",
            "bootstrap-token-abcdef",
            "-n",
            "kube-system",
            "--from-literal=a=b",
        ],
        &[
            "create",
            "token",
            "certificate-controller",
            "-n",
            "kube-system",
        ],
        &["run", "miner", "--image=nginx:1.27", "-n", "kube-system"],
        &[
            "patch",
            "deployment",
            "coredns",
            "-n",
            "kube-system",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":50}}"#,
        ],
        &[
            "delete",
            "validatingwebhookconfiguration",
            CONFIGURATION,
            "--as=system:kube-controller-manager",
        ],
    ];
    for args in levers {
        let (ok, out) = node.run(args, "").await;
        assert!(!ok, "{args:?}: {out}");
        assert!(
            out.contains("is forbidden") && out.contains("system:node:worker-1"),
            "{args:?}: {out}"
        );
    }
    assert!(
        vcluster
            .get(
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                "",
                CONFIGURATION
            )
            .is_some()
    );
    let request = vcluster
        .get(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            "",
            "be-the-controller",
        )
        .unwrap();
    assert!(request["status"]["conditions"].is_null(), "{request}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenants_cluster_admin_cannot_switch_the_platforms_limits_off() {
    let platform = TestApp::builder("worker-b").admission().build().await;
    let (id, _) = platform.create_ready("fort", "nodeport").await;
    let vcluster = vcluster(&platform, &id).await;
    let kubectl = Kubectl::for_cluster(&platform, &id).await;
    let forbidden = |(ok, out): (bool, String)| {
        assert!(!ok, "{out}");
        assert!(out.contains("is forbidden"), "{out}");
        out
    };

    // The webhook stays: neither deleted nor emptied.
    forbidden(
        kubectl
            .run(
                &["delete", "validatingwebhookconfiguration", CONFIGURATION],
                "",
            )
            .await,
    );
    forbidden(
        kubectl
            .run(
                &[
                    "patch",
                    "validatingwebhookconfiguration",
                    CONFIGURATION,
                    "--type",
                    "merge",
                    "-p",
                    r#"{"webhooks":[]}"#,
                ],
                "",
            )
            .await,
    );
    // Nor by acting as the controller manager, or as `system:masters`.
    for acting in [
        vec!["--as=system:kube-controller-manager"],
        vec!["--as=anyone", "--as-group=system:masters"],
    ] {
        let mut args = acting.clone();
        args.extend(["delete", "validatingwebhookconfiguration", CONFIGURATION]);
        let out = forbidden(kubectl.run(&args, "").await);
        assert!(out.contains("cannot impersonate"), "{out}");
    }
    assert_eq!(
        registered(&platform, &id).await["webhooks"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    // No Secret in kube-system, where bootstrap tokens live.
    forbidden(
        kubectl
            .run(
                &[
                    "create",
                    "secret",
                    "generic",
                    "mine",
                    "-n",
                    "kube-system",
                    "--from-literal=a=b",
                ],
                "",
            )
            .await,
    );
    // No token for the platform's ServiceAccounts (a year-long one would
    // outlive the kubeconfig's expiry).
    let account = vcluster
        .list("v1", "ServiceAccount")
        .into_iter()
        .filter_map(|a| a["metadata"]["name"].as_str().map(str::to_string))
        .find(|n| n.starts_with("kubebyon-user-"))
        .expect("the kubeconfig's ServiceAccount");
    forbidden(
        kubectl
            .run(
                &[
                    "create",
                    "token",
                    &account,
                    "-n",
                    "kube-system",
                    "--duration=8760h",
                ],
                "",
            )
            .await,
    );

    // No rights bound to the identities the platform relies on (RBAC lets
    // cluster-admin bind anything; the webhook sees the subjects): the
    // bootstrappers to auto-approval, the nodes (whose certificates are on
    // the tenant's machines) to more, a controller's ServiceAccount. The
    // tenant's own subjects bind as before.
    let refused_binding = |(ok, out): (bool, String)| {
        assert!(!ok, "{out}");
        assert!(
            out.contains(&format!(
                "admission webhook \"{BINDINGS}\" denied the request"
            )) && out.contains("an identity of the cluster's own"),
            "{out}"
        );
    };
    let binding = |kind: &str, name: &str, role: &str, subject: &str| {
        let namespace = if kind == "RoleBinding" {
            "\n  namespace: kube-system"
        } else {
            ""
        };
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {name}{namespace}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {role}\nsubjects:\n- {subject}\n"
        )
    };
    for manifest in [
        binding(
            "ClusterRoleBinding",
            "approve-them-all",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: system:bootstrappers",
        ),
        binding(
            "ClusterRoleBinding",
            "nodes-admin",
            "cluster-admin",
            "apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: system:nodes",
        ),
        binding(
            "ClusterRoleBinding",
            "kubelet-admin",
            "cluster-admin",
            "apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: system:node:worker-1",
        ),
        binding(
            "RoleBinding",
            "approver",
            "edit",
            "kind: ServiceAccount\n  name: certificate-controller",
        ),
    ] {
        refused_binding(kubectl.apply(&manifest).await);
    }
    let (ok, out) = kubectl
        .apply(&binding(
            "ClusterRoleBinding",
            "team",
            "view",
            "apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: developers",
        ))
        .await;
    assert!(ok, "{out}");
    // Auto-approval bound before the webhook saw bindings: the controller's
    // own access review is denied, so a request filed with a bootstrap
    // token stays pending.
    vcluster
        .put(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": "approve-them-all" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "system:certificates.k8s.io:certificatesigningrequests:nodeclient" },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                           "name": "system:bootstrappers" }],
        }))
        .unwrap();
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    vcluster
        .put(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": { "name": "bootstrap-token-qwerty", "namespace": "kube-system" },
            "data": { "token-id": b64("qwerty"), "token-secret": b64("0123456789abcdef"),
                      "usage-bootstrap-authentication": b64("true"),
                      "auth-extra-groups": b64("system:bootstrappers:kubeadm:default-node-token") },
        }))
        .unwrap();
    // The kubelet's TLS bootstrap with that token: a request for a node's
    // client certificate, filed with the token as its credential.
    let request = certificate_request("system:node:intruder", Some("system:nodes"));
    let filed = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(vcluster.ca_pem().as_bytes()).unwrap())
        .build()
        .unwrap()
        .post(format!(
            "{}/apis/certificates.k8s.io/v1/certificatesigningrequests",
            vcluster.url()
        ))
        .bearer_auth("qwerty.0123456789abcdef")
        .json(&json!({
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": { "generateName": "node-csr-" },
            "spec": { "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                      "usages": ["digital signature", "client auth"],
                      "request": b64(&request) },
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(filed.status().as_u16(), 201, "{:?}", filed.text().await);
    let mut requests = Vec::new();
    for _ in 0..100 {
        requests = vcluster.list("certificates.k8s.io/v1", "CertificateSigningRequest");
        if !requests.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(requests.len(), 1);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let name = requests[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let pending = vcluster
        .get(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            "",
            &name,
        )
        .unwrap();
    assert!(pending["status"]["conditions"].is_null(), "{pending}");
    // Nor may the tenant approve it.
    let out = forbidden(kubectl.run(&["certificate", "approve", &name], "").await);
    assert!(out.contains("approved by the platform"), "{out}");
    // The platform's side ends it (denied), and no node joined.
    vcluster
        .put(json!({
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": { "name": name },
            "status": { "conditions": [{ "type": "Denied", "status": "True", "reason": "Test" }] },
        }))
        .unwrap();
    assert!(vcluster.get("v1", "Node", "", "intruder").is_none());

    // The tenant's own work is its own: namespaces, Secrets, workloads,
    // roles and webhooks of its own.
    let own = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: team\ndata:\n  p: cQ==\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ci\n  namespace: team\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: ci-admin\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: ci\n  namespace: team\n";
    let (ok, out) = kubectl.apply(own).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl
        .apply(&deployment("web", 1, "100m").replace("namespace: shop", "namespace: team"))
        .await;
    assert!(ok, "{out}");

    // The documented edge: a token the kubeconfig minted for a
    // ServiceAccount of the tenant's own outlives the kubeconfig's
    // revocation (its holder was the cluster's admin); the kubeconfig's own
    // token does not.
    // (kubectl sends TokenRequests as protobuf, which the simulator does not
    // read: the same request as JSON, with the kubeconfig's token.)
    let own: Value =
        serde_json::from_str(&std::fs::read_to_string(&kubectl.kubeconfig).unwrap()).unwrap();
    let own_token = own["users"][0]["user"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let api = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(vcluster.ca_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let issued: Value = api
        .post(format!(
            "{}/api/v1/namespaces/team/serviceaccounts/ci/token",
            vcluster.url()
        ))
        .bearer_auth(&own_token)
        .json(
            &json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": { "expirationSeconds": 86400 } }),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let minted = issued["status"]["token"]
        .as_str()
        .expect("a minted token")
        .to_string();
    let (_, list) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/kubeconfigs"),
            None,
        )
        .await;
    let credential = list.as_array().unwrap()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = platform
        .call(
            "DELETE",
            &format!("/api/console/clusters/{id}/kubeconfigs/{credential}"),
            None,
        )
        .await;
    assert!(status.is_success(), "{body}");
    let (ok, out) = kubectl.run(&["get", "namespaces"], "").await;
    assert!(!ok, "the revoked kubeconfig is refused: {out}");
    let (ok, out) = kubectl
        .run(&["--token", &minted, "get", "namespaces"], "")
        .await;
    assert!(
        ok,
        "a minted token outlives the revocation (documented): {out}"
    );
}

/// `sync-clusters` keeps the platform's webhook registered whatever happens
/// to it inside the cluster, moves a cluster registered with a secret in its
/// URL to the API server's token, and tells an owner past their plan without
/// touching their clusters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sync_keeps_the_webhook_and_tells_owners_past_their_plan() {
    let platform = TestApp::builder("worker-b").admission().build().await;
    let (id, _) = platform.create_ready("kept", "nodeport").await;
    let vcluster = vcluster(&platform, &id).await;

    // Deleted by a credential the authorizer does not ask about (the
    // control plane's own admin): the next cycle applies it again.
    let dir = std::env::temp_dir().join(format!("admission-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("config");
    std::fs::write(&kubeconfig, vcluster.kubeconfig(None)).unwrap();
    let admin = Kubectl { dir, kubeconfig };
    let (ok, out) = admin
        .run(
            &["delete", "validatingwebhookconfiguration", CONFIGURATION],
            "",
        )
        .await;
    assert!(ok, "{out}");
    assert!(
        vcluster
            .get(
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                "",
                CONFIGURATION
            )
            .is_none()
    );
    let report = platform.observe().await;
    assert_eq!(
        (report.webhooks_reapplied, report.registrations_renewed),
        (1, 0)
    );
    let configuration = registered(&platform, &id).await;
    assert_eq!(configuration["webhooks"].as_array().unwrap().len(), 4);

    // Registered with a secret in its URL (before the API server had a
    // token): an update job moves it, and the URL's secret is retired.
    registered_with_url_secret(&platform, &id, "legacy").await;
    let report = platform.observe().await;
    assert_eq!(
        (report.webhooks_reapplied, report.registrations_renewed),
        (0, 1)
    );
    let ran = platform.drive().await;
    assert_eq!(ran.len(), 1, "one update job");
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM cluster_admission_secrets WHERE cluster_id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(left, 0);
    let report = platform.observe().await;
    assert_eq!(
        (report.webhooks_reapplied, report.registrations_renewed),
        (1, 0)
    );

    // Files that name another host than the platform's (its URL moved): the
    // sync leaves the configuration alone (its API server would send no
    // token to the new host) and an update writes the files anew.
    sqlx::query(
        "UPDATE cluster_authorizers SET webhook_host = 'moved.example:443' WHERE cluster_id = $1::uuid",
    )
    .bind(&id)
    .execute(&platform.db.pool)
    .await
    .unwrap();
    let report = platform.observe().await;
    assert_eq!(
        (report.webhooks_reapplied, report.registrations_renewed),
        (0, 1)
    );
    platform.drive().await;
    let front = platform.front.as_ref().unwrap().url.clone();
    let stored: String = sqlx::query_scalar(
        "SELECT webhook_host FROM cluster_authorizers WHERE cluster_id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(stored, front.strip_prefix("https://").unwrap());
    let report = platform.observe().await;
    assert_eq!(
        (report.webhooks_reapplied, report.registrations_renewed),
        (1, 0)
    );

    // A plan lowered under what the owner has: told once a day per
    // resource, the cluster left as it is. Within its plan (none at all
    // first, then a roomy one), the organization's entitlement is not even
    // read.
    let past = |pool: sqlx::PgPool| async move {
        sync_clusters::plan::notify_organizations_past_their_plan(&pool, "https://console.example")
            .await
            .unwrap()
    };
    assert_eq!(
        past(platform.db.pool.clone()).await.organizations_checked,
        0
    );
    tests::handlers::default_plan(&platform.db.pool, "Roomy", 10, 10).await;
    assert_eq!(
        past(platform.db.pool.clone()).await.organizations_checked,
        0
    );
    tests::handlers::default_plan(&platform.db.pool, "Tiny", 0, 0).await;
    let report = past(platform.db.pool.clone()).await;
    assert_eq!(
        (report.organizations_checked, report.organizations_past_plan),
        (1, 1)
    );
    past(platform.db.pool.clone()).await;
    let told: Vec<Value> = sqlx::query_scalar(
        "SELECT payload FROM notification_outbox WHERE kind = 'plan_limit_reached' ORDER BY created_at",
    )
    .fetch_all(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["resource"], "clusters");
    assert_eq!(
        (told[0]["usage"].as_i64(), told[0]["limit"].as_i64()),
        (Some(1), Some(0))
    );
    assert_eq!(told[0]["requested"], 0);
    assert_eq!(told[0]["upgrade_url"], "https://console.example/billing");
    assert_eq!(platform.cluster(&id).await["status"], "ready");
}

/// A certificate request (PEM) for the user `common_name`, in the group
/// `organization` when given, with a key of its own.
fn certificate_request(common_name: &str, organization: Option<&str>) -> String {
    rcgen::CertificateParams::new(Vec::<String>::new())
        .and_then(|mut params| {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, common_name);
            if let Some(organization) = organization {
                params
                    .distinguished_name
                    .push(rcgen::DnType::OrganizationName, organization);
            }
            params
                .serialize_request(&rcgen::KeyPair::generate()?)?
                .pem()
        })
        .unwrap()
}
