//! A deployment rehearsal: the Helm chart's rendered manifests run as
//! containers of the platform's image (`scripts/image.sh`) on this machine,
//! podman with the host's network. Every workload's command, environment,
//! user, read-only root file system and mounts are read from `helm template`
//! (its ConfigMap, the Secret it names, its own variables, the host
//! kubeconfig Secret's mount), each Deployment runs as many containers as its
//! replicas, behind a router that sends each request where the
//! HTTPRoute's rules send it. The migration hook runs first, the first admin
//! comes from the admin command, and a user goes from registering to a
//! deleted cluster. Every job runs exactly once, the create's request and
//! job are one trace across the two functions, and a schedule run that finds
//! another holding its lock steps aside. The control planes' shared HAProxy
//! (the `haproxy` provider) runs too, from its rendered Deployment and
//! ConfigMap (Debian's HAProxy, as no image can be pulled here): the
//! journey's cluster is reached through it by SNI with `kubectl`, and
//! switches to `nodeport` and back, each switch verified from the update
//! job's container before it is recorded, the old address serving
//! meanwhile.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, StatusCode},
    response::Response,
};
use serde_json::{Value, json};
use tests::{
    broker::TestBroker, database::TestDb, eventually, free_port, smtp::SmtpSink, workspace_binary,
};
use tokio::{
    io::AsyncWriteExt,
    process::{Child, Command},
};

use crate::{
    haproxy::HostsEntry,
    harness::{Client, SETTINGS_KEY},
    journey::Journey,
    routing::{PathMatch, backend_of, httproute_rules, rendered},
};

/// Where the chart mounts the host kubeconfig Secret (`host.kubeconfigSecret`).
const HOST_SECRET: &str = "host";
/// The Secret the workloads read (`existingSecret`).
const SECRET: &str = "kubebyon";
/// The base domain of the clusters behind the chart's HAProxy.
const HAPROXY_DOMAIN: &str = "clusters.rehearsal.test";

/// A Deployment, CronJob or Job as the chart renders it.
#[derive(Debug, Clone)]
struct Workload {
    kind: String,
    name: String,
    binary: String,
    args: Vec<String>,
    /// Kubernetes order: `envFrom` first, `env` over it.
    env: BTreeMap<String, String>,
    replicas: usize,
    /// The container's HTTP probes as rendered.
    probes: Vec<Probe>,
    /// `uid:gid` from the pod's security context.
    user: String,
    /// Whether the container's root file system is read-only.
    read_only: bool,
    /// Mounted Secrets: the test's copy of each, and where it is mounted.
    mounts: Vec<(PathBuf, String)>,
}

/// `podman run` of the image as the workload's pod runs it, with the host's
/// network, explicit ulimits and a label that `Containers` removes by.
fn podman_run(workload: &Workload, env: &BTreeMap<String, String>, args: &[String]) -> Command {
    let mut command = Command::from(tests::podman::podman());
    command
        .args(tests::podman::RUN)
        .args(["--label", "kubebyon-rehearsal=1"])
        .args(["--user", &workload.user]);
    if workload.read_only {
        command.arg("--read-only");
    }
    for (local, path) in &workload.mounts {
        command.args(["-v", &format!("{}:{path}:ro", local.display())]);
    }
    // Cluster DNS, as the containers see it: this machine's /etc/hosts,
    // where the rehearsal names the Runtime API's Service and a cluster's
    // SNI host (the base domain's wildcard record) as it learns them.
    command.args(["-v", "/etc/hosts:/etc/hosts:ro"]);
    for (name, value) in env {
        command.args(["-e", &format!("{name}={value}")]);
    }
    command
        .arg(tests::podman::IMAGE)
        .arg(format!("/usr/local/bin/{}", workload.binary))
        .args(args);
    command
}

/// Removes the rehearsal's containers when it ends, however it ends (a
/// killed `podman run` leaves its container running).
struct Containers;

impl Drop for Containers {
    fn drop(&mut self) {
        if let Ok(listed) = tests::podman::podman()
            .args(["ps", "-aq", "--filter", "label=kubebyon-rehearsal=1"])
            .output()
        {
            let ids = String::from_utf8_lossy(&listed.stdout).to_string();
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let _ = tests::podman::podman()
                    .args(["rm", "-f"])
                    .args(ids)
                    .output();
            }
        }
    }
}

/// A probe of a container: `startupProbe`, `livenessProbe` or
/// `readinessProbe`, its path and its port's name.
#[derive(Debug, Clone)]
struct Probe {
    kind: &'static str,
    path: String,
    port: String,
}

/// The pod template's spec of a Deployment, Job or CronJob.
fn pod_spec(document: &Value) -> &Value {
    match document["kind"].as_str() {
        Some("CronJob") => &document["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        _ => &document["spec"]["template"]["spec"],
    }
}

/// Every workload, its environment resolved as the kubelet would: the
/// ConfigMap, `secret` for the Secret, the pod's name for `metadata.name`
/// (`{pod}`, filled in per copy), and paths under a Secret's mount to the
/// test's copy of that Secret in `mounted`.
fn workloads(
    documents: &[Value],
    secret: &HashMap<String, String>,
    mounted: &HashMap<String, PathBuf>,
) -> Vec<Workload> {
    let config_maps: HashMap<&str, &Value> = documents
        .iter()
        .filter(|d| d["kind"] == "ConfigMap")
        .map(|d| (d["metadata"]["name"].as_str().unwrap(), &d["data"]))
        .collect();
    let mut workloads = Vec::new();
    for document in documents {
        let kind = document["kind"].as_str().unwrap_or_default();
        if !matches!(kind, "Deployment" | "CronJob" | "Job")
            || document["metadata"]["labels"]["app.kubernetes.io/component"] == "haproxy"
        {
            // HAProxy's image is not the platform's: [`ChartHaproxy`].
            continue;
        }
        let spec = pod_spec(document);
        let containers = spec["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1, "one container per pod");
        let container = &containers[0];
        let mut env = BTreeMap::new();
        for from in container["envFrom"].as_array().into_iter().flatten() {
            if let Some(name) = from["configMapRef"]["name"].as_str() {
                for (k, v) in config_maps[name].as_object().unwrap() {
                    env.insert(k.clone(), v.as_str().unwrap().to_string());
                }
            }
            if let Some(name) = from["secretRef"]["name"].as_str() {
                assert_eq!(name, SECRET);
                env.extend(secret.clone());
            }
        }
        for var in container["env"].as_array().into_iter().flatten() {
            let name = var["name"].as_str().unwrap().to_string();
            let value = if let Some(value) = var["value"].as_str() {
                value.to_string()
            } else if let Some(key) = var["valueFrom"]["secretKeyRef"]["key"].as_str() {
                assert_eq!(var["valueFrom"]["secretKeyRef"]["name"], SECRET);
                secret[key].clone()
            } else if var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" {
                "{pod}".to_string()
            } else {
                panic!("an environment variable this rehearsal cannot resolve: {var}");
            };
            env.insert(name, value);
        }
        // Each mounted Secret: the test's copy of it, at the rendered path.
        let volumes: HashMap<&str, &str> = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some((v["name"].as_str()?, v["secret"]["secretName"].as_str()?)))
            .collect();
        let mut mounts = Vec::new();
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let path = mount["mountPath"].as_str().unwrap();
            if let Some(secret_name) = volumes.get(mount["name"].as_str().unwrap()) {
                mounts.push((mounted[*secret_name].clone(), path.to_string()));
            }
        }
        let context = &spec["securityContext"];
        let user = format!(
            "{}:{}",
            context["runAsUser"]
                .as_u64()
                .expect("the pod names its user"),
            context["runAsGroup"]
                .as_u64()
                .expect("the pod names its group")
        );
        let read_only = container["securityContext"]["readOnlyRootFilesystem"] == true;
        assert!(
            read_only && user == "65532:65532",
            "{} runs read-only as 65532 ({user})",
            document["metadata"]["name"]
        );
        // A long-running pod's liveness reads nothing (a slow database or a
        // full pod is not a dead process): tests/e2e/probes.rs.
        if kind == "Deployment" {
            for probe in ["startupProbe", "livenessProbe"] {
                assert_eq!(
                    container[probe]["httpGet"]["path"], "/livez",
                    "{probe} of {}",
                    document["metadata"]["name"]
                );
            }
        }
        let command = container["command"].as_array().unwrap();
        assert_eq!(command.len(), 1, "{command:?}");
        let binary = command[0]
            .as_str()
            .unwrap()
            .strip_prefix("/usr/local/bin/")
            .expect("the image's binaries lie in /usr/local/bin")
            .to_string();
        workloads.push(Workload {
            kind: kind.to_string(),
            name: document["metadata"]["name"].as_str().unwrap().to_string(),
            binary,
            args: container["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| a.as_str().unwrap().to_string())
                .collect(),
            env,
            user,
            read_only,
            mounts,
            replicas: document["spec"]["replicas"].as_u64().unwrap_or(1) as usize,
            probes: ["startupProbe", "livenessProbe", "readinessProbe"]
                .into_iter()
                .filter_map(|kind| {
                    let get = &container[kind]["httpGet"];
                    Some(Probe {
                        kind,
                        path: get["path"].as_str()?.to_string(),
                        port: get["port"].as_str()?.to_string(),
                    })
                })
                .collect(),
        });
    }
    workloads
}

/// A free port no other copy of this rehearsal was given: containers take
/// a second or so to bind theirs, and two copies given one port would both
/// pass the probes the first answers.
fn unused_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = free_port();
        let mut given = GIVEN.lock().unwrap();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// One copy of a workload as a container; `PORT` and `METRICS_PORT` moved to
/// free ports (every copy shares this machine's network).
struct Running {
    workload: String,
    port: Option<u16>,
    metrics_port: Option<u16>,
    child: Child,
}

fn start(workload: &Workload, copy: usize) -> Running {
    let pod = format!("{}-{copy}", workload.name);
    let mut env = workload.env.clone();
    let port = env.contains_key("PORT").then(unused_port);
    if let Some(port) = port {
        env.insert("PORT".into(), port.to_string());
    }
    let metrics_port = env.contains_key("METRICS_PORT").then(unused_port);
    if let Some(port) = metrics_port {
        env.insert("METRICS_PORT".into(), port.to_string());
    }
    for value in env.values_mut() {
        *value = value.replace("{pod}", &pod);
    }
    let child = podman_run(workload, &env, &workload.args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{} starts: {e}", workload.binary));
    Running {
        workload: workload.name.clone(),
        port,
        metrics_port,
        child,
    }
}

/// Where a copy answers one of its rendered probes, on the port the probe
/// names.
fn probe_url(workload: &Workload, process: &Running, probe: &Probe) -> String {
    let port = match probe.port.as_str() {
        "http" => process.port,
        "metrics" => process.metrics_port,
        other => panic!("{} probes a port it does not name: {other}", workload.name),
    }
    .unwrap_or_else(|| {
        panic!(
            "{}'s {} needs a port it does not open",
            workload.name, probe.kind
        )
    });
    format!("http://127.0.0.1:{port}{}", probe.path)
}

/// Starts a copy and waits until its rendered startup probe answers (without
/// one: `/readyz` on its port, else `/metrics`), then checks its other
/// probes answer too. The ports were free when picked, but another process
/// of the machine may take one before the copy binds it; the copy then exits
/// saying so, and is started again on other ports.
async fn launch(workload: &Workload, copy: usize, http: &reqwest::Client) -> Running {
    for _ in 0..5 {
        let mut process = start(workload, copy);
        let startup = workload.probes.iter().find(|p| p.kind == "startupProbe");
        let probe = match (startup, process.port, process.metrics_port) {
            (Some(startup), _, _) => probe_url(workload, &process, startup),
            (None, Some(port), _) => format!("http://127.0.0.1:{port}/readyz"),
            (None, None, Some(port)) => format!("http://127.0.0.1:{port}/metrics"),
            (None, None, None) => return process,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(status) = process.child.try_wait().unwrap() {
                eprintln!(
                    "{} exited at start ({status}); starting it again",
                    workload.name
                );
                break;
            }
            let answered = http.get(&probe).send().await;
            if answered.is_ok_and(|r| r.status().is_success()) {
                for other in &workload.probes {
                    let url = probe_url(workload, &process, other);
                    let status = http.get(&url).send().await.map(|r| r.status());
                    assert!(
                        status.as_ref().is_ok_and(|s| s.is_success()),
                        "{}'s {} ({url}): {status:?}",
                        workload.name,
                        other.kind
                    );
                }
                return process;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} does not answer {probe}",
                workload.name
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    panic!("{} exits at every start", workload.name);
}

/// The router in front: each request to the Service the HTTPRoute's rules
/// pick, the copies of its Deployment in turn, with `X-Forwarded-For`
/// appended as the gateway does.
#[derive(Clone)]
struct Gateway {
    rules: Arc<Vec<(PathMatch, String)>>,
    backends: Arc<HashMap<String, Vec<u16>>>,
    turn: Arc<AtomicUsize>,
    http: reqwest::Client,
}

async fn forward(State(gateway): State<Gateway>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    let Some(service) = backend_of(&gateway.rules, &path) else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from("no route"))
            .unwrap();
    };
    let ports = &gateway.backends[service];
    let port = ports[gateway.turn.fetch_add(1, Ordering::Relaxed) % ports.len()];
    let query = request
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let method = request.method().clone();
    let mut headers: HeaderMap = request.headers().clone();
    headers.remove("host");
    headers.insert("x-forwarded-for", "198.51.100.7".parse().unwrap());
    let body: Bytes = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap();
    let answer = gateway
        .http
        .request(method, format!("http://127.0.0.1:{port}{path}{query}"))
        .headers(headers)
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{service} on {port} answers {path}: {e}"));
    let mut response = Response::builder().status(answer.status());
    *response.headers_mut().unwrap() = answer.headers().clone();
    response
        .body(Body::from(answer.bytes().await.unwrap()))
        .unwrap()
}

/// `sum` of one counter over the processes' `/metrics`.
async fn total(http: &reqwest::Client, running: &[Running], series: &str) -> f64 {
    let mut sum = 0.0;
    for process in running {
        let Some(port) = process.metrics_port else {
            continue;
        };
        let text = http
            .get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        sum += text
            .lines()
            .filter(|l| l.starts_with(series))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    sum
}

#[tokio::test]
async fn the_chart_s_workloads_run_a_user_s_journey_with_every_job_run_once() {
    let db = TestDb::empty().await;
    let broker = TestBroker::new();
    let mail = SmtpSink::start().await;
    let host = kube_sim::Simulator::start(kube_sim::Options::host())
        .await
        .unwrap();
    let _containers = Containers;
    // The Secret as a pod sees it: readable by the pod's user (65532).
    let host_dir = tempfile_dir();
    std::fs::write(host_dir.join("kubeconfig"), host.kubeconfig(None)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&host_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        host_dir.join("kubeconfig"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();

    let (collector, spans) = crate::traces::collector().await;
    let exchange = format!("config.AMQP_EXCHANGE={}", broker.topology.exchange);
    let traces = format!("config.OTEL_EXPORTER_OTLP_ENDPOINT={collector}");
    let haproxy_dir = tempfile_dir();
    std::fs::set_permissions(&haproxy_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (haproxy_port, runtime_port) = (unused_port(), unused_port());
    let documents = rendered(&[
        // The control planes' shared HAProxy: one replica on this
        // machine's ports, forwarding to the host's node ports (the
        // simulator's, on loopback).
        "config.KUBEBYON_LOADBALANCER_PROVIDER=haproxy",
        &format!("config.KUBEBYON_HAPROXY_BASE_DOMAIN={HAPROXY_DOMAIN}"),
        "config.KUBEBYON_HAPROXY_BACKEND=nodeport",
        &format!("config.KUBEBYON_HAPROXY_PORT={haproxy_port}"),
        "haproxy.replicas=1",
        &format!("haproxy.port={haproxy_port}"),
        &format!("haproxy.runtimePort={runtime_port}"),
        &format!("haproxy.configDir={}", haproxy_dir.display()),
        // Within this machine's file descriptor limit.
        "haproxy.maxConnections=2000",
        // Every process on this machine's loopback: the platform's own
        // fallback addresses (localhost and each process's port).
        "allowLoopbackPublicUrls=true",
        "config.KUBEBYON_PUBLIC_BASE_URL=",
        "config.KUBEBYON_JOIN_BASE_URL=",
        "host.inCluster=false",
        &format!("host.kubeconfigSecret={HOST_SECRET}"),
        &format!("existingSecret={SECRET}"),
        &exchange,
        &traces,
        "config.OTEL_BSP_SCHEDULE_DELAY=100",
        "config.KUBEBYON_ADMIN_EMAIL=root@example.com",
        // Two connections a process (a schedule's lock and its run; a
        // request's transaction): some thirty processes at the default ten
        // held about 70 of the server's connections, at two about 50,
        // inside the suite's budget (README).
        "config.DATABASE_MAX_CONNECTIONS=2",
    ]);
    let secret = HashMap::from([
        ("DATABASE_URL".to_string(), db.url.clone()),
        ("AMQP_URL".to_string(), tests::broker::amqp_url()),
        (
            "KUBEBYON_SETTINGS_KEY".to_string(),
            SETTINGS_KEY.to_string(),
        ),
        ("SMTP_URL".to_string(), mail.url()),
    ]);
    let mounted = HashMap::from([(HOST_SECRET.to_string(), host_dir.clone())]);
    let workloads = workloads(&documents, &secret, &mounted);
    let kinds =
        |kind: &str| -> Vec<&Workload> { workloads.iter().filter(|w| w.kind == kind).collect() };

    // The pre-install hook: migrations and the broker's queues.
    let [migrate] = kinds("Job")[..] else {
        panic!("one hook Job: {:?}", kinds("Job"));
    };
    let status = start(migrate, 0).child.wait().await.unwrap();
    assert!(status.success(), "the migration hook succeeds");

    // HAProxy, and its Runtime API's headless Service as cluster DNS
    // answers it: the one replica.
    let runtime_api = &workloads
        .iter()
        .find_map(|w| w.env.get("KUBEBYON_HAPROXY_RUNTIME_API"))
        .expect("the chart tells the functions where the Runtime API is");
    let (runtime_host, runtime) = runtime_api.rsplit_once(':').unwrap();
    assert_eq!(runtime, runtime_port.to_string());
    let _runtime_dns = HostsEntry::add(runtime_host);
    let _haproxy = ChartHaproxy::start(&documents, runtime_port).await;

    // Every Deployment, as many copies as the chart asks for (two for most
    // HTTP functions and for the create job's workers, which the journey's
    // create goes through: its job is claimed once between two consumers).
    let http = reqwest::Client::new();
    let copies: Vec<(&Workload, usize)> = kinds("Deployment")
        .into_iter()
        .flat_map(|w| (0..w.replicas).map(move |copy| (w, copy)))
        .collect();
    assert!(
        copies
            .iter()
            .filter(|(w, _)| w.name.contains("job-cluster-create"))
            .count()
            >= 2,
        "the create job has two workers"
    );
    let running: Vec<Running> = futures_util::future::join_all(
        copies
            .iter()
            .map(|(workload, copy)| launch(workload, *copy, &http)),
    )
    .await;
    // Each CronJob's run, two at once (a slow run meeting the next): both
    // end well, whether one stepped aside or they did not meet.
    for cron in kinds("CronJob") {
        let (mut first, mut second) = (start(cron, 0), start(cron, 1));
        let (a, b) = tokio::join!(first.child.wait(), second.child.wait());
        assert!(
            a.unwrap().success() && b.unwrap().success(),
            "{}",
            cron.name
        );
    }
    let mut backends: HashMap<String, Vec<u16>> = HashMap::new();
    for process in &running {
        if let Some(port) = process.port {
            backends
                .entry(process.workload.clone())
                .or_default()
                .push(port);
        }
    }
    let gateway = Gateway {
        // The rules of the same rendering the workloads came from.
        rules: Arc::new(httproute_rules(&documents)),
        backends: Arc::new(backends),
        turn: Arc::default(),
        http: http.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = Router::new().fallback(forward).with_state(gateway);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    // The first admin, by the admin command, as the runbook runs it.
    let mut admin_command = Command::new(workspace_binary("local"))
        .args(["create-admin", "root@example.com"])
        .env("DATABASE_URL", &db.url)
        .env("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = admin_command.stdin.take().unwrap();
    stdin
        .write_all(b"grown trusty lantern sofa\n")
        .await
        .unwrap();
    drop(stdin);
    let output = admin_command.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let anonymous = Client::http(&base, Duration::from_secs(60));
    let login = anonymous
        .send(
            "POST",
            "/api/auth/login",
            Some(json!({ "email": "root@example.com", "password": "grown trusty lantern sofa" })),
        )
        .await;
    assert_eq!(login.status, StatusCode::OK, "{}", login.body);
    let admin = anonymous.signed_in(&login);
    let (status, me) = admin.call("GET", "/api/auth/me", None).await;
    assert_eq!(
        (status, me["role"].as_str()),
        (StatusCode::OK, Some("admin"))
    );

    // A user registers and builds a cluster, through the job functions and
    // RabbitMQ.
    let journey = Journey {
        anonymous,
        mail: &mail,
        pool: &db.pool,
    };
    let user = journey.sign_up("alice@example.com").await;
    let id = journey.ready_cluster(&user, "rehearsal").await;

    // One trace from the request in api-clusters to the job in
    // job-cluster-create, through RabbitMQ.
    let job_id: uuid::Uuid = sqlx::query_scalar(
        "SELECT id FROM cluster_jobs WHERE type = 'cluster_create' AND cluster_id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let (request, job) = eventually(30, "the create's spans from both functions", || {
        let spans = spans.lock().unwrap().clone();
        let job_id = job_id.to_string();
        async move {
            let job = spans
                .iter()
                .find(|s| s.attributes.get("job_id") == Some(&job_id))?
                .clone();
            let request = spans
                .iter()
                .find(|s| s.name == "POST /api/console/clusters" && s.trace_id == job.trace_id)?
                .clone();
            Some((request, job))
        }
    })
    .await;
    assert_eq!(
        (request.service.as_str(), job.service.as_str()),
        ("api-clusters", "job-cluster-create")
    );

    // The cluster, born `loadbalancer` (the platform's default mode), is
    // reached through the shared HAProxy by SNI: the create job wrote its
    // entry through the Runtime API; kubectl gets there with a kubeconfig.
    let sni = format!("rehearsal-{}.{HAPROXY_DOMAIN}", &id.replace('-', "")[..8]);
    let _sni_dns = HostsEntry::add(&sni);
    let through_haproxy = format!("https://{sni}:{haproxy_port}");
    let kubectl = async |name: &str| {
        let (status, text) = user
            .call(
                "POST",
                &format!("/api/console/clusters/{id}/kubeconfigs"),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{text}");
        let file = haproxy_dir.join(name);
        let text = match text {
            Value::String(text) => text,
            json => json.to_string(),
        };
        std::fs::write(&file, text).unwrap();
        file
    };
    let get_namespaces = async |file: &PathBuf| {
        let output = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(file)
            .args(["--request-timeout=10s", "get", "namespaces", "-o", "name"])
            .env("HOME", &haproxy_dir)
            .output()
            .await
            .unwrap();
        let said = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(
            output.status.success() && said.contains("namespace/default"),
            "kubectl with {}: {said}{}",
            file.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let cluster = user
        .call("GET", &format!("/api/console/clusters/{id}"), None)
        .await
        .1;
    assert_eq!(
        cluster["api_endpoint"],
        through_haproxy.as_str(),
        "{cluster}"
    );
    let by_sni = kubectl("haproxy.kubeconfig").await;
    get_namespaces(&by_sni).await;
    // Switched to `nodeport` and back, each switch one update job (a
    // container) that verifies the new address from the platform before
    // recording it; the old address serves through its grace period.
    let switch = async |mode: &str| {
        let (status, body) = user
            .call(
                "PATCH",
                &format!("/api/console/clusters/{id}"),
                Some(json!({ "public_access_mode": mode })),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let path = format!("/api/console/clusters/{id}");
        let user = &user;
        let path = &path;
        let switched = eventually(60, "the switch to end", || async move {
            let cluster = user.try_send("GET", path, None).await?.body;
            (cluster["status"] != "updating").then_some(cluster)
        })
        .await;
        assert_eq!(switched["public_access_mode"], mode, "{switched}");
        switched
    };
    let on_nodeport = switch("nodeport").await;
    assert_eq!(
        on_nodeport["previous_api_endpoint"],
        through_haproxy.as_str(),
        "{on_nodeport}"
    );
    get_namespaces(&by_sni).await;
    get_namespaces(&kubectl("nodeport.kubeconfig").await).await;
    let back = switch("loadbalancer").await;
    assert_eq!(back["api_endpoint"], through_haproxy.as_str(), "{back}");
    get_namespaces(&kubectl("again.kubeconfig").await).await;

    journey.token_and_hostname(&user, &id).await;
    journey.delete(&user, &id).await;

    // Every job ran once: one attempt each, all succeeded, and the job
    // processes together claimed each exactly once.
    let jobs = journey.jobs_ran_once().await;
    assert_eq!(
        total(&http, &running, "kubebyon_jobs_claimed_total{").await,
        jobs.len() as f64,
        "claims over every job process"
    );

    // A schedule run that finds its lock held steps aside at once: each
    // schedule, looping Deployment or CronJob, run once more while the
    // rehearsal holds that schedule's lock.
    let schedules: Vec<&Workload> = workloads
        .iter()
        .filter(|w| {
            w.kind == "CronJob"
                || (w.kind == "Deployment"
                    && !w.env.contains_key("PORT")
                    && !w.binary.starts_with("job-"))
        })
        .collect();
    assert_eq!(schedules.len(), 9, "{schedules:?}");
    for schedule in schedules {
        let mut lock = db.pool.begin().await.unwrap();
        sqlx::query("SELECT pg_advisory_xact_lock(19266, hashtext($1))")
            .bind(format!("schedule:{}", schedule.binary))
            .execute(&mut *lock)
            .await
            .unwrap();
        let mut once = schedule.clone();
        if !once.args.iter().any(|a| a == "--once") {
            once.args.push("--once".into());
        }
        let mut env = once.env.clone();
        env.insert("LOG_FORMAT".into(), "json".into());
        env.remove("METRICS_PORT");
        let env = env
            .iter()
            .map(|(k, v)| (k.clone(), v.replace("{pod}", "once")))
            .collect();
        let output = podman_run(&once, &env, &once.args).output().await.unwrap();
        let logs = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{}: {logs}", schedule.name);
        assert!(
            logs.contains("another run of this schedule is in progress"),
            "{} stepped aside: {logs}",
            schedule.name
        );
        lock.rollback().await.unwrap();
    }

    // `helm test`: the chart's test pod's command, each Service at the
    // first copy of its Deployment; then with one Service not answering.
    let test = documents
        .iter()
        .find(|d| d["kind"] == "Pod" && d["metadata"]["annotations"]["helm.sh/hook"] == "test")
        .expect("the chart renders a helm test");
    let container = &test["spec"]["containers"][0];
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let command = strings(&container["command"]);
    let at_copies = |url: &String| {
        let (service, path) = url
            .strip_prefix("http://")
            .and_then(|rest| rest.split_once(".default.svc"))
            .unwrap_or_else(|| panic!("a Service URL: {url}"));
        let port = running
            .iter()
            .find(|p| p.workload == service)
            .and_then(|p| p.port)
            .unwrap_or_else(|| panic!("{service} runs"));
        format!("http://127.0.0.1:{port}{path}")
    };
    let urls: Vec<String> = strings(&container["args"]).iter().map(at_copies).collect();
    assert_eq!(
        urls.len(),
        workloads
            .iter()
            .filter(|w| w.env.contains_key("PORT"))
            .count()
            + 1,
        "every HTTP function's /healthz, and the OpenAPI document: {urls:?}"
    );
    // The test pod's container: the image, its user, read-only.
    let test_pod = Workload {
        kind: "Pod".into(),
        name: "kb-test-services".into(),
        binary: command[0].rsplit('/').next().unwrap().to_string(),
        args: Vec::new(),
        env: BTreeMap::new(),
        replicas: 1,
        probes: Vec::new(),
        user: format!(
            "{}:{}",
            test["spec"]["securityContext"]["runAsUser"],
            test["spec"]["securityContext"]["runAsGroup"]
        ),
        read_only: container["securityContext"]["readOnlyRootFilesystem"] == true,
        mounts: Vec::new(),
    };
    assert_eq!(test_pod.user, "65532:65532");
    let helm_test = |urls: Vec<String>| {
        let args: Vec<String> = command[1..].iter().cloned().chain(urls).collect();
        podman_run(&test_pod, &BTreeMap::new(), &args).output()
    };
    let output = helm_test(urls.clone()).await.unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut gone = urls.clone();
    gone.push(format!("http://127.0.0.1:{}/healthz", free_port()));
    let output = helm_test(gone.clone()).await.unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(gone.last().unwrap().as_str()),
        "the failure names the URL"
    );

    for mut process in running {
        let pid = process.child.id().unwrap();
        tests::interrupt(pid);
        let status = process.child.wait().await.unwrap();
        assert!(
            status.success(),
            "{} stops cleanly on SIGINT",
            process.workload
        );
    }
}

/// The chart's HAProxy Deployment (one replica) as a process of Debian's
/// HAProxy: its rendered arguments, its ConfigMap's files where the
/// Deployment mounts them, the pod's user; stopped with its process group
/// (the master and its worker).
struct ChartHaproxy {
    child: Child,
}

impl ChartHaproxy {
    async fn start(documents: &[Value], runtime: u16) -> Self {
        let deployment = documents
            .iter()
            .find(|d| {
                d["kind"] == "Deployment"
                    && d["metadata"]["labels"]["app.kubernetes.io/component"] == "haproxy"
            })
            .expect("the chart renders HAProxy's Deployment for the haproxy provider");
        assert_eq!(deployment["spec"]["replicas"], 1);
        let spec = pod_spec(deployment);
        let container = &spec["containers"][0];
        let config = container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "config")
            .unwrap()["mountPath"]
            .as_str()
            .unwrap();
        let config_map = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "config")
            .unwrap()["configMap"]["name"]
            .clone();
        let files = &documents
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == config_map)
            .expect("HAProxy's ConfigMap")["data"];
        for (file, text) in files.as_object().unwrap() {
            std::fs::write(Path::new(config).join(file), text.as_str().unwrap()).unwrap();
        }
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let user = |field: &str| spec["securityContext"][field].as_u64().unwrap() as u32;
        let child = Command::from(tests::edgeproxy::haproxy())
            .args(&args)
            .uid(user("runAsUser"))
            .gid(user("runAsGroup"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("Debian's haproxy is installed (scripts/test.sh installs it)");
        eventually(30, "HAProxy's Runtime API to answer", || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", runtime))
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        Self { child }
    }
}

impl Drop for ChartHaproxy {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// A private directory for the test's copy of a mounted Secret.
fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kubebyon-rehearsal-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
