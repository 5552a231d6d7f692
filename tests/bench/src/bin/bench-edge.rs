//! Benchmark of the workload edge's hop: the same requests by `wrk`, in one
//! run, straight to a stand-in ingress controller and through Debian's
//! HAProxy configured from the edge the platform renders for a cluster
//! (its HTTPRoute and shim EndpointSlice, `tests::edgeproxy`): requests per
//! second and the p50/p99 each way, and what the hop adds.
//!
//! Usage: `bench-edge [--seconds N] [--connections C]` (default 10 s, 32);
//! needs `haproxy` and `wrk` (Debian's packages). Prints one JSON line.

#![allow(clippy::print_stdout)]

use std::{net::SocketAddr, time::Duration};

use shared::{
    host::WorkloadGateway,
    ingress::edge::{self, Backend, Site},
};
use tests::edgeproxy::{Haproxy, haproxy_config, ingress};
use uuid::Uuid;

/// What `wrk` measured.
#[derive(Debug, Clone, Copy)]
struct Run {
    requests_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// `wrk`'s latency (`812.00us`, `1.20ms`, `2.01s`) in milliseconds.
fn millis(raw: &str) -> f64 {
    let (number, unit) = raw.split_at(
        raw.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(raw.len()),
    );
    let number: f64 = number.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => number / 1000.0,
        "ms" => number,
        "s" => number * 1000.0,
        _ => f64::NAN,
    }
}

fn wrk(url: &str, host: &str, seconds: u64, connections: u32) -> anyhow::Result<Run> {
    let output = std::process::Command::new("wrk")
        .args([
            &format!("-t{}", connections.min(2)),
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
        ])
        .args(["-H", &format!("Host: {host}"), url])
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "wrk: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout)?;
    let field = |prefix: &str| -> Option<String> {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .map(|rest| rest.trim().to_string())
    };
    anyhow::ensure!(
        !text.contains("Non-2xx"),
        "some answers were not 2xx: {text}"
    );
    Ok(Run {
        requests_per_second: field("Requests/sec:").unwrap_or_default().parse()?,
        p50_ms: millis(&field("50%").unwrap_or_default()),
        p99_ms: millis(&field("99%").unwrap_or_default()),
    })
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
    let connections = u32::try_from(value("--connections", 32))?;

    let stand_in = ingress("shop").await;
    let gateway = WorkloadGateway {
        name: "workloads".into(),
        namespace: "kubebyon".into(),
        http_listener: "http".into(),
        https: None,
        resync: Duration::from_secs(300),
    };
    let id = Uuid::new_v4();
    let hostname = "shop.apps.example.com";
    let sites = [Site {
        binding_id: None,
        hostname: hostname.into(),
        self_managed: false,
    }];
    let backend = Backend::NodePorts {
        addresses: vec!["127.0.0.1".parse()?],
        port: stand_in.addr.port(),
    };
    let rendered = edge::render(id, "kb-bench", &gateway, hostname, &sites, &backend);
    let dir = std::env::temp_dir().join(format!("kb-bench-edge-{}", id.simple()));
    std::fs::create_dir_all(&dir)?;
    let port = tests::free_port();
    let config = haproxy_config(&rendered.objects, &[], &dir, (port, 0));
    let _haproxy = Haproxy::start(&dir, &config, port).await;

    let direct_url = format!("http://{}/", stand_in.addr);
    let edge_url = format!("http://{}/", SocketAddr::from(([127, 0, 0, 1], port)));
    // `wrk` blocks: off the runtime, which serves the stand-in meanwhile.
    let measure = |url: String, seconds: u64| {
        tokio::task::spawn_blocking(move || wrk(&url, hostname, seconds, connections))
    };
    // A short warm-up each way, then the measured runs.
    measure(direct_url.clone(), 1).await??;
    measure(edge_url.clone(), 1).await??;
    let direct = measure(direct_url, seconds).await??;
    let through = measure(edge_url, seconds).await??;
    std::fs::remove_dir_all(&dir)?;
    println!(
        "{}",
        serde_json::json!({
            "bench": "edge",
            "seconds": seconds,
            "connections": connections,
            "direct": {"requests_per_second": direct.requests_per_second, "p50_ms": direct.p50_ms, "p99_ms": direct.p99_ms},
            "edge": {"requests_per_second": through.requests_per_second, "p50_ms": through.p50_ms, "p99_ms": through.p99_ms},
            "added_p50_ms": through.p50_ms - direct.p50_ms,
            "added_p99_ms": through.p99_ms - direct.p99_ms,
            "throughput_ratio": through.requests_per_second / direct.requests_per_second,
        })
    );
    Ok(())
}
