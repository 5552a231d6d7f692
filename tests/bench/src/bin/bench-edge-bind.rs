//! Benchmark of a binding's way to its first 200 through the workload edge:
//! `local` (the platform in one process, jobs through RabbitMQ) against a
//! simulated host, a cluster with its managed ingress and a ready node, and
//! Debian's HAProxy standing in for the Gateway implementation, configured
//! from the HTTPRoutes and EndpointSlice the platform applies. For each of
//! N bindings: the time from `POST …/hostnames` until its HTTPRoute is on
//! the host (the platform's share: the request, the job's enqueue, the
//! RabbitMQ delivery, the convergence), then until the first 200 through
//! the proxy after its configuration is rewritten and reloaded (the
//! stand-in's share: a real Gateway watches and reconciles its own way).
//!
//! Usage: `bench-edge-bind [--bindings N]` (default 20), as root (it
//! gives the loopback interface the node's address 192.0.2.10 for the run,
//! where a stand-in for the cluster's ingress controller listens on the
//! NodePort); needs the workspace binaries built, PostgreSQL at
//! DATABASE_URL's server, RabbitMQ at AMQP_URL and `haproxy`. Prints one
//! JSON line.

#![allow(clippy::print_stdout)]

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use bench::{Process, until};
use serde_json::{Value, json};
use shared::{host::objects::HostObject, ingress::edge};
use tests::edgeproxy::{haproxy, haproxy_config};

/// The node's address: TEST-NET-1, which the edge accepts as a node's.
const NODE_ADDRESS: &str = "192.0.2.10";

/// The node's address on the loopback interface, removed when dropped.
struct Address;

impl Address {
    fn add() -> anyhow::Result<Self> {
        let status = Command::new("ip")
            .args(["addr", "add", &format!("{NODE_ADDRESS}/32"), "dev", "lo"])
            .status()?;
        ensure!(
            status.success(),
            "ip addr add {NODE_ADDRESS}/32 dev lo (run as root)"
        );
        Ok(Self)
    }
}

impl Drop for Address {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["addr", "del", &format!("{NODE_ADDRESS}/32"), "dev", "lo"])
            .status();
    }
}

/// The edge's objects in `namespace` as the proxy's configuration reads
/// them: its HTTPRoutes and its EndpointSlice.
fn edge_objects(host: &kube_sim::Simulator, namespace: &str) -> Vec<HostObject> {
    let object = |kind, body: Value| HostObject {
        kind,
        namespace: namespace.to_string(),
        name: body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        body,
    };
    let mut objects: Vec<HostObject> = host
        .list("gateway.networking.k8s.io/v1", "HTTPRoute")
        .into_iter()
        .filter(|r| r["metadata"]["namespace"] == namespace)
        .map(|r| object(edge::ROUTE_KIND, r))
        .collect();
    if let Some(slice) = host.get(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        namespace,
        "kubebyon-edge",
    ) {
        objects.push(object(edge::SLICE_KIND, slice));
    }
    objects
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn summary(mut values: Vec<f64>) -> Value {
    values.sort_by(f64::total_cmp);
    json!({
        "p50_ms": (percentile(&values, 0.5) * 10.0).round() / 10.0,
        "p90_ms": (percentile(&values, 0.9) * 10.0).round() / 10.0,
        "max_ms": (values[values.len() - 1] * 10.0).round() / 10.0,
    })
}

fn millis(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bindings: usize = args
        .iter()
        .position(|a| a == "--bindings")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse())
        .transpose()
        .context("--bindings must be a number")?
        .unwrap_or(20);

    let host = kube_sim::Simulator::start(kube_sim::Options::host()).await?;
    let db = tests::database::TestDb::new().await;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let dir = std::env::temp_dir().join(format!("kb-bench-bind-{run}"));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("host.kubeconfig");
    std::fs::write(&kubeconfig, host.kubeconfig(None))?;
    sqlx::query(
        "UPDATE system_settings SET managed_workload_ingress_base_domain = 'apps.example.com'",
    )
    .execute(&db.pool)
    .await?;

    let port = tests::free_port();
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/local");
    let _local = Process(
        Command::new(&binary)
            .arg("--development")
            .env("DATABASE_URL", &db.url)
            .env("AMQP_URL", tests::broker::amqp_url())
            .env("AMQP_EXCHANGE", format!("kbbench.{run}"))
            .env("PORT", port.to_string())
            .env("METRICS_PORT", tests::free_port().to_string())
            .env("KUBEBYON_HOST_KUBECONFIG", &kubeconfig)
            .env("KUBEBYON_HOST_NODE_ADDRESS", "localhost")
            .env("KUBEBYON_EDGE_GATEWAY_NAME", "workloads")
            .env("KUBEBYON_EDGE_GATEWAY_NAMESPACE", "kubebyon")
            .env("RUST_LOG", "warn")
            .spawn()
            .with_context(|| format!("{} (cargo build --workspace --bins)", binary.display()))?,
    );
    let api = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    until(Duration::from_secs(60), "local answers", async || {
        let reply = http.get(format!("{api}/healthz")).send().await.ok()?;
        reply.status().is_success().then_some(())
    })
    .await?;

    let created: Value = http
        .post(format!("{api}/api/console/clusters"))
        .json(&json!({
            "name": "shop", "workload_cpu_limit_milli_cores": 2000, "workload_memory_limit_mib": 4096,
            "public_access_mode": "nodeport", "managed_workload_ingress_enabled": true,
        }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = created["cluster"]["id"]
        .as_str()
        .context("the cluster's id")?
        .to_string();
    let namespace = until(
        Duration::from_secs(120),
        "the cluster is ready",
        async || {
            let body: Value = http
                .get(format!("{api}/api/console/clusters/{id}"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let cluster = body.get("cluster").unwrap_or(&body);
            (cluster["status"] == "ready")
                .then(|| cluster["namespace"].as_str().map(str::to_string))?
        },
    )
    .await?;

    // A node joins; the controller runs on it, and the edge points at it.
    let vcluster = host
        .vcluster(&namespace, "shop")
        .context("the cluster's vcluster")?;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    vcluster
        .put(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}],
                "addresses": [{"type": "InternalIP", "address": NODE_ADDRESS}, {"type": "Hostname", "address": "worker-1"}],
                "nodeInfo": {"osImage": "Debian GNU/Linux 12 (bookworm)", "kubeletVersion": "v1.33.5",
                             "containerRuntimeVersion": "containerd://1.7.27", "architecture": "amd64",
                             "bootID": "", "kernelVersion": "6.1.0", "kubeProxyVersion": "", "machineID": "",
                             "operatingSystem": "linux", "systemUUID": ""},
                "allocatable": {"cpu": "3800m", "memory": "16384Ki", "ephemeral-storage": "20Gi", "pods": "110"},
            },
        }))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let node_port = until(
        Duration::from_secs(120),
        "the edge's endpoints",
        async || {
            let slice = host.get(
                "discovery.k8s.io/v1",
                "EndpointSlice",
                &namespace,
                "kubebyon-edge",
            )?;
            (!slice["endpoints"].as_array()?.is_empty())
                .then(|| slice["ports"][0]["port"].as_u64())?
        },
    )
    .await?;

    // The cluster's ingress controller, on the node's NodePort.
    let _address = Address::add()?;
    let listener = tokio::net::TcpListener::bind((NODE_ADDRESS, u16::try_from(node_port)?)).await?;
    tokio::spawn(async move {
        axum::serve(listener, axum::Router::new().fallback(|| async { "ok" })).await
    });

    // The stand-in Gateway: HAProxy in master-worker mode, reloaded by
    // SIGUSR2 with its configuration rewritten from the host's objects.
    let proxy_port = tests::free_port();
    let config = dir.join("haproxy.cfg");
    let write_config = || {
        std::fs::write(
            &config,
            haproxy_config(&edge_objects(&host, &namespace), &[], &dir, (proxy_port, 0)),
        )
    };
    write_config()?;
    let proxy = Process(
        haproxy()
            .args(["-W", "-db", "-f"])
            .arg(&config)
            .stderr(std::process::Stdio::null())
            .spawn()?,
    );
    let proxy_pid = proxy.0.id().to_string();
    let edge_url = format!("http://127.0.0.1:{proxy_port}/");
    let answers = async |hostname: &str| {
        let reply = http
            .get(&edge_url)
            .header("host", hostname)
            .send()
            .await
            .ok()?;
        (reply.status() == 200).then_some(())
    };
    let canonical = format!("shop-{}.apps.example.com", &id.replace('-', "")[..8]);
    until(
        Duration::from_secs(10),
        "the cluster's own name through the proxy",
        async || answers(&canonical).await,
    )
    .await?;

    let (mut platform, mut stand_in, mut total) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..bindings {
        let hostname = format!("site-{n}.apps.example.com");
        let started = Instant::now();
        http.post(format!("{api}/api/console/clusters/{id}/hostnames"))
            .json(&json!({ "hostname": hostname }))
            .send()
            .await?
            .error_for_status()?;
        until(
            Duration::from_secs(30),
            "the binding's HTTPRoute",
            async || {
                host.list("gateway.networking.k8s.io/v1", "HTTPRoute")
                    .iter()
                    .any(|r| {
                        r["metadata"]["namespace"] == namespace.as_str()
                            && r["spec"]["hostnames"][0] == hostname.as_str()
                    })
                    .then_some(())
            },
        )
        .await?;
        let routed = Instant::now();
        platform.push(millis(started));
        write_config()?;
        ensure!(
            Command::new("kill")
                .args(["-USR2", &proxy_pid])
                .status()?
                .success(),
            "reloading HAProxy"
        );
        until(
            Duration::from_secs(10),
            "the first 200 through the proxy",
            async || answers(&hostname).await,
        )
        .await?;
        stand_in.push(millis(routed));
        total.push(millis(started));
    }
    drop(proxy);
    std::fs::remove_dir_all(&dir)?;
    println!(
        "{}",
        json!({
            "bench": "edge-bind",
            "bindings": bindings,
            "platform": summary(platform),
            "stand_in_proxy": summary(stand_in),
            "total": summary(total),
        })
    );
    Ok(())
}
