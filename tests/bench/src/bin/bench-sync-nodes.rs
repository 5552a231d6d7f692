//! Benchmark of one `sync-nodes` cycle at fleet scale.
//!
//! A child process (this program with `serve`) plays the fleet: a simulated
//! host cluster holding every cluster's kubeconfig Secret, and one simulated
//! vCluster API per cluster with its nodes, each on its own loopback port. The
//! parent is the schedule: a fresh PostgreSQL database with the clusters as
//! ready, and `sync_nodes::sync::sync_all` — the code `sync-nodes` runs —
//! timed over a first cycle (every node is new: snapshot rows and events
//! written) and further cycles with nothing changed. The parent's peak RSS
//! (VmHWM) covers only the sync, not the simulated fleet. With `--observe
//! K`, then K cycles of `sync-clusters`' observation of the same control
//! planes (`sync_clusters::observe::observe_clusters`: `/version`, the
//! ingress and webhook checks, the recorded connection), each of which must
//! find every cluster connected.
//!
//! Usage: `bench-sync-nodes [--clusters N] [--nodes M] [--cycles K] [--observe K]`;
//! prints one JSON line.
//! Needs `DATABASE_URL` (a server where it may create a database).

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let clusters = bench::arg(&args, "--clusters", 1000)?;
    let nodes = bench::arg(&args, "--nodes", 20)?;
    let runtime = tokio::runtime::Runtime::new()?;
    if args.first().map(String::as_str) == Some("serve") {
        return runtime.block_on(serve(clusters, nodes));
    }
    let cycles = bench::arg(&args, "--cycles", 5)?;
    let observe = bench::arg(&args, "--observe", 0)?;
    runtime.block_on(measure(clusters, nodes, cycles, observe))
}

/// The child: the simulated fleet, described on stdout, alive until stdin closes.
async fn serve(clusters: usize, nodes: usize) -> anyhow::Result<()> {
    use base64::Engine;
    let host = kube_sim::Simulator::start(kube_sim::Options::host()).await?;
    let heartbeat = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut fleet = Vec::with_capacity(clusters);
    let mut keep = Vec::with_capacity(clusters);
    for i in 0..clusters {
        let name = format!("bench-{i}");
        let namespace = format!("kb-{name}");
        let token = uuid::Uuid::new_v4().simple().to_string();
        let vcluster =
            kube_sim::Simulator::start(kube_sim::Options::vcluster(token.clone())).await?;
        for n in 0..nodes {
            vcluster
                .put(json!({
                    "apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{n}")},
                    "status": {
                        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                        "lastHeartbeatTime": heartbeat, "lastTransitionTime": heartbeat}],
                        "addresses": [{"type": "InternalIP", "address": format!("10.{}.{}.{}", i / 250, i % 250, n + 1)}],
                        "nodeInfo": {"osImage": "Debian GNU/Linux 12 (bookworm)", "kubeletVersion": "v1.33.5",
                                     "containerRuntimeVersion": "containerd://1.7.27"},
                        "allocatable": {"cpu": "3800m", "memory": "16Gi", "ephemeral-storage": "100Gi"}
                    }
                }))
                .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        }
        // The vCluster's own kubeconfig: its CA pinned, its token.
        let kubeconfig = vcluster.kubeconfig(None);
        host.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}))
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        host.put(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": format!("vc-{name}"), "namespace": namespace},
            "data": {"config": base64::engine::general_purpose::STANDARD.encode(kubeconfig)}
        }))
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        fleet.push(json!({"name": name, "namespace": namespace, "url": vcluster.url()}));
        keep.push(vcluster);
    }
    bench::serve_until_parent_closes(
        &json!({"host_kubeconfig": host.kubeconfig(None), "clusters": fleet}),
    )
    .await?;
    drop(keep);
    Ok(())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

async fn measure(
    clusters: usize,
    nodes: usize,
    cycles: usize,
    observe: usize,
) -> anyhow::Result<()> {
    let load_before = loadavg();
    let fleet = bench::ChildFleet::start(&[
        "--clusters".into(),
        clusters.to_string(),
        "--nodes".into(),
        nodes.to_string(),
    ])?;
    let db = tests::database::TestDb::new().await;
    let result = run_cycles(&db.url, &fleet.description, cycles, observe, fleet.pid()).await;
    drop(db);
    let fleet_ready_s = fleet.ready_s;
    fleet.stop()?;
    let Cycles {
        first,
        steady,
        written: report,
        cpu,
        observations,
        observation_cpu,
    } = result?;
    let ms = |s: &f64| (s * 1000.0).round();
    let mut sorted = steady.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "{}",
        json!({
            "bench": "sync-nodes",
            "clusters": clusters,
            "nodes_per_cluster": nodes,
            "nodes": clusters * nodes,
            "concurrency": sync_nodes_concurrency(),
            "fleet_setup_s": (fleet_ready_s * 10.0).round() / 10.0,
            "first_cycle_ms": (first * 1000.0).round(),
            "first_cycle_written": report.0,
            "first_cycle_events": report.1,
            "steady_cycle_ms_median": (median * 1000.0).round(),
            "steady_cycle_ms_min": (sorted.first().copied().unwrap_or(f64::NAN) * 1000.0).round(),
            "steady_cycle_ms_max": (sorted.last().copied().unwrap_or(f64::NAN) * 1000.0).round(),
            "steady_cycles": steady.len(),
            "steady_cycle_cpu": cpu,
            "observation_cycle_ms": observations.iter().map(ms).collect::<Vec<_>>(),
            "observation_cycle_cpu": observation_cpu,
            "observation_concurrency": sync_clusters::CONCURRENCY,
            "peak_rss_mib": bench::peak_rss_mib(),
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
        })
    );
    Ok(())
}

fn sync_nodes_concurrency() -> usize {
    sync_nodes::sync::DEFAULT_CONCURRENCY
}

struct Cycles {
    first: f64,
    steady: Vec<f64>,
    /// Rows and events the first cycle wrote.
    written: (u64, u64),
    cpu: Value,
    observations: Vec<f64>,
    observation_cpu: Value,
}

async fn run_cycles(
    url: &str,
    fleet: &Value,
    cycles: usize,
    observe: usize,
    child: u32,
) -> anyhow::Result<Cycles> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .connect(url)
        .await?;
    let owner = shared::accounts::users::ensure_development_user(&pool).await?;
    let list = fleet["clusters"].as_array().context("clusters")?;
    let field = |key: &str| -> Vec<String> {
        list.iter()
            .map(|c| c[key].as_str().unwrap_or_default().to_string())
            .collect()
    };
    sqlx::query(
        "INSERT INTO clusters (owner_user_id, name, vcluster_name, namespace, kubernetes_version,
                               workload_cpu_limit_milli_cores, workload_memory_limit_mib,
                               control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
                               public_access_mode, api_endpoint, status, kubeconfig_available, kubeconfig_available_at)
         SELECT $1, name, name, namespace, '1.33', 4000, 8192, 500, 1024, 'nodeport', url, 'ready', true, now()
         FROM unnest($2::text[], $3::text[], $4::text[]) AS f(name, namespace, url)",
    )
    .bind(owner)
    .bind(field("name"))
    .bind(field("namespace"))
    .bind(field("url"))
    .execute(&pool)
    .await?;
    let settings = shared::host::HostSettings::from_source(&std::collections::HashMap::new())?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(
        fleet["host_kubeconfig"]
            .as_str()
            .context("host kubeconfig")?,
    )?;
    let host = shared::host::HostCluster::from_kubeconfig(kubeconfig, settings).await?;
    let offline_after = Duration::from_secs(24 * 3600);
    let sync = || {
        sync_nodes::sync::sync_all(
            &pool,
            &host,
            sync_nodes::sync::DEFAULT_CONCURRENCY,
            offline_after,
        )
    };
    let started = Instant::now();
    let report = sync().await?;
    let first = started.elapsed().as_secs_f64();
    anyhow::ensure!(report.failed_clusters == 0, "clusters failed: {report:?}");
    let mut steady = Vec::with_capacity(cycles);
    let before = bench::CpuSplit::now(child);
    for _ in 0..cycles {
        let started = Instant::now();
        let again = sync().await?;
        steady.push(started.elapsed().as_secs_f64());
        anyhow::ensure!(
            again.written == 0 && again.failed_clusters == 0,
            "a cycle with nothing changed wrote: {again:?}"
        );
    }
    let cpu = bench::CpuSplit::now(child).per_run_since(&before, cycles);
    let enqueuing = sync_clusters::observe::Enqueuing {
        publisher: &bench::Dropping,
        max_attempts: 3,
    };
    let mut observations = Vec::with_capacity(observe);
    let before = bench::CpuSplit::now(child);
    for _ in 0..observe {
        let started = Instant::now();
        let seen = sync_clusters::observe::observe_clusters(
            &pool,
            &host,
            enqueuing,
            sync_clusters::CONCURRENCY,
        )
        .await?;
        observations.push(started.elapsed().as_secs_f64());
        anyhow::ensure!(
            seen.connected == list.len() as u64 && seen.unreachable == 0,
            "an observation did not reach every cluster: {seen:?}"
        );
    }
    let observation_cpu = bench::CpuSplit::now(child).per_run_since(&before, observe.max(1));
    pool.close().await;
    Ok(Cycles {
        first,
        steady,
        written: (report.written, report.events),
        cpu,
        observations,
        observation_cpu,
    })
}
