//! Benchmark of the `haproxy` provider's hop: the same requests to a
//! simulated cluster API server (HTTPS, its own CA), in one run, straight
//! to it and through Debian's HAProxy running the chart's configuration
//! (`infra/helm/kubebyon/files/haproxy.cfg`, TLS passthrough by SNI, the
//! cluster mapped through the Runtime API as the platform maps it).
//!
//! Two measures each way: new connections a second (each request a new
//! TCP connection and TLS handshake, `GET /version`, `--connections`
//! at once), and the latency of `GET /version` on kept connections (p50,
//! p99). Usage: `bench-haproxy [--seconds N] [--connections C]` (default
//! 10 s, 8); needs `haproxy`. Prints one JSON line.

#![allow(clippy::print_stdout)]

use std::{
    net::SocketAddr,
    path::Path,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use bench::Process;
use serde_json::json;
use shared::host::haproxy::{Backend, Haproxy};
use tests::edgeproxy::haproxy;

const NAME: &str = "bench-0a1b2c3d.clusters.example.test";

/// The chart's HAProxy configuration with its values filled in.
fn configuration(port: u16, runtime: u16, dir: &Path) -> anyhow::Result<String> {
    let chart =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/helm/kubebyon/files/haproxy.cfg");
    let template = std::fs::read_to_string(&chart).with_context(|| chart.display().to_string())?;
    let filled = template
        .replace("{{ .Values.haproxy.maxConnections }}", "2000")
        .replace("{{ .Values.haproxy.runtimePort }}", &runtime.to_string())
        .replace("{{ .Values.haproxy.port }}", &port.to_string())
        .replace(
            "{{ .Values.haproxy.configDir }}",
            &dir.display().to_string(),
        );
    ensure!(
        !filled.contains("{{"),
        "a value of the chart's configuration is not filled in"
    );
    Ok(filled)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    round3(sorted[rank.min(sorted.len() - 1)])
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// `GET /version` from `connections` tasks for `seconds`: requests a
/// second and the latencies in milliseconds, sorted.
async fn load(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    seconds: u64,
    connections: usize,
) -> anyhow::Result<(f64, Vec<f64>)> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (client, url, token) = (client.clone(), url.to_string(), token.to_string());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let sent = Instant::now();
                let reply = client.get(&url).bearer_auth(&token).send().await?;
                anyhow::ensure!(reply.status() == 200, "{}", reply.status());
                reply.bytes().await?;
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let rate = all.len() as f64 / started.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    Ok((rate, all))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let seconds = value("--seconds", 10);
    let connections = usize::try_from(value("--connections", 8))?;

    let token = uuid::Uuid::new_v4().simple().to_string();
    let api = kube_sim::Simulator::start(kube_sim::Options {
        names: vec![NAME.into()],
        ..kube_sim::Options::vcluster(token.clone())
    })
    .await?;
    let dir = std::env::temp_dir().join(format!(
        "kb-bench-haproxy-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir)?;
    let (port, runtime) = (tests::free_port(), tests::free_port());
    std::fs::write(dir.join("haproxy.cfg"), configuration(port, runtime, &dir)?)?;
    std::fs::write(dir.join("clusters.map"), "")?;
    let _proxy = Process(
        haproxy()
            .args(["-W", "-db", "-f"])
            .arg(dir.join("haproxy.cfg"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let settings = Haproxy {
        base_domain: "clusters.example.test".into(),
        runtime_api: format!("127.0.0.1:{runtime}"),
        map: format!("{}/clusters.map", dir.display()),
        backend: Backend::NodePort,
        port,
    };
    let replica = SocketAddr::from(([127, 0, 0, 1], runtime));
    let mut answers = false;
    for _ in 0..100 {
        answers = settings.show(replica).await.is_ok();
        if answers {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ensure!(answers, "HAProxy's Runtime API does not answer");
    settings
        .put(replica, &Default::default(), NAME, api.addr())
        .await?;

    let ca = reqwest::Certificate::from_pem(api.ca_pem().as_bytes())?;
    let client = |via: SocketAddr, fresh: bool| {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca.clone())
            .resolve(NAME, via);
        if fresh {
            builder = builder.pool_max_idle_per_host(0);
        }
        builder.build()
    };
    let direct_addr = SocketAddr::from(([127, 0, 0, 1], api.addr().port()));
    let proxy_addr = SocketAddr::from(([127, 0, 0, 1], port));
    let direct_url = format!("https://{NAME}:{}/version", direct_addr.port());
    let proxy_url = format!("https://{NAME}:{port}/version");
    let mut results = serde_json::Map::new();
    for (label, fresh) in [("new_connections", true), ("kept_connections", false)] {
        let direct_client = Arc::new(client(direct_addr, fresh)?);
        let proxy_client = Arc::new(client(proxy_addr, fresh)?);
        // Warm-up, then the measured runs, one way after the other.
        load(&direct_client, &direct_url, &token, 1, connections).await?;
        load(&proxy_client, &proxy_url, &token, 1, connections).await?;
        let (direct_rate, direct) =
            load(&direct_client, &direct_url, &token, seconds, connections).await?;
        let (proxy_rate, through) =
            load(&proxy_client, &proxy_url, &token, seconds, connections).await?;
        results.insert(
            label.into(),
            json!({
                "direct": {"per_second": direct_rate.round(), "p50_ms": percentile(&direct, 0.5), "p99_ms": percentile(&direct, 0.99)},
                "haproxy": {"per_second": proxy_rate.round(), "p50_ms": percentile(&through, 0.5), "p99_ms": percentile(&through, 0.99)},
                "added_p50_ms": round3(percentile(&through, 0.5) - percentile(&direct, 0.5)),
                "added_p99_ms": round3(percentile(&through, 0.99) - percentile(&direct, 0.99)),
                "ratio": (proxy_rate / direct_rate * 100.0).round() / 100.0,
            }),
        );
    }
    std::fs::remove_dir_all(&dir)?;
    println!(
        "{}",
        json!({"bench": "haproxy", "seconds": seconds, "connections": connections, "results": results})
    );
    Ok(())
}
