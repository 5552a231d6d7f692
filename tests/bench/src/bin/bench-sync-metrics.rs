//! Benchmark of `sync-metrics` cycles at fleet scale.
//!
//! A simulated host cluster (in a child process, so the parent's CPU time
//! and peak RSS are the schedule's own) holds every cluster's control-plane
//! pod as metrics-server reports it and answers the `/proc` command each
//! cycle runs in the pod through `pods/exec` with a control plane's status
//! files. The parent is the schedule: a fresh PostgreSQL database with the
//! clusters as ready, and `sync_metrics::collect::collect_all` — the code
//! `sync-metrics` runs — timed over a few cycles, each of which must store
//! an available snapshot of every cluster (checked).
//!
//! Usage: `bench-sync-metrics [--clusters N] [--cycles K]`; prints one JSON line.
//! Needs `DATABASE_URL` (a server where it may create a database).

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let clusters = bench::arg(&args, "--clusters", 1000)?;
    let runtime = tokio::runtime::Runtime::new()?;
    if args.first().map(String::as_str) == Some("serve") {
        return runtime.block_on(serve(clusters));
    }
    let cycles = bench::arg(&args, "--cycles", 3)?;
    runtime.block_on(measure(clusters, cycles))
}

/// What `cat /proc/loadavg` and the status files of a vCluster control
/// plane print, after the shell's pid.
fn proc_output() -> String {
    let mut out = String::from("1\n0.52 0.61 0.70 2/311 4242\n");
    for (pid, name, rss) in [
        (7, "vcluster", 120_000),
        (31, "kube-apiserver", 310_000),
        (32, "kube-controller", 90_000),
        (33, "kine", 40_000),
    ] {
        out.push_str(&format!(
            "Name:\t{name}\nState:\tS (sleeping)\nPid:\t{pid}\nVmSize:\t{} kB\nVmRSS:\t{rss} kB\n",
            rss * 4
        ));
    }
    out
}

/// The child: the simulated host, its kubeconfig on stdout, alive until
/// stdin closes.
async fn serve(clusters: usize) -> anyhow::Result<()> {
    let host = kube_sim::Simulator::start(kube_sim::Options::host()).await?;
    let output = proc_output().into_bytes();
    host.set_exec(std::sync::Arc::new(move |_: &kube_sim::ExecRequest| {
        kube_sim::ExecOutput {
            stdout: output.clone(),
            stderr: Vec::new(),
            exit_code: 0,
        }
    }));
    for i in 0..clusters {
        let (name, namespace) = (format!("bench-{i}"), format!("kb-bench-{i}"));
        host.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}))
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        host.put(json!({
            "apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
            "metadata": {"name": format!("{name}-0"), "namespace": namespace,
                         "labels": {"app": "vcluster", "release": name}},
            "timestamp": "2026-12-06T00:00:00Z", "window": "30s",
            "containers": [
                {"name": "syncer", "usage": {"cpu": "250000000n", "memory": "200Mi"}},
                {"name": "etcd", "usage": {"cpu": "50m", "memory": "100Mi"}},
            ],
        }))
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    }
    bench::serve_until_parent_closes(&json!({"host_kubeconfig": host.kubeconfig(None)})).await
}

async fn measure(clusters: usize, cycles: usize) -> anyhow::Result<()> {
    let fleet = bench::ChildFleet::start(&["--clusters".into(), clusters.to_string()])?;
    let db = tests::database::TestDb::new().await;
    let result = run_cycles(&db.url, clusters, &fleet.description, cycles, fleet.pid()).await;
    drop(db);
    let fleet_ready_s = fleet.ready_s;
    fleet.stop()?;
    let (times, cpu) = result?;
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let ms = |s: f64| (s * 1000.0).round();
    println!(
        "{}",
        json!({
            "bench": "sync-metrics",
            "clusters": clusters,
            "concurrency": sync_metrics::CONCURRENCY,
            "fleet_setup_s": (fleet_ready_s * 10.0).round() / 10.0,
            "cycles": times.len(),
            "cycle_ms": times.iter().map(|t| ms(*t)).collect::<Vec<_>>(),
            "cycle_ms_median": ms(sorted[sorted.len() / 2]),
            "cpu_per_cycle": cpu,
            "interval_s": 60,
            "peak_rss_mib": bench::peak_rss_mib(),
        })
    );
    Ok(())
}

async fn run_cycles(
    url: &str,
    clusters: usize,
    fleet: &Value,
    cycles: usize,
    child: u32,
) -> anyhow::Result<(Vec<f64>, Value)> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .connect(url)
        .await?;
    let owner = shared::accounts::users::ensure_development_user(&pool).await?;
    sqlx::query(
        "INSERT INTO clusters (owner_user_id, name, vcluster_name, namespace, kubernetes_version,
                               workload_cpu_limit_milli_cores, workload_memory_limit_mib,
                               control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
                               public_access_mode, status, kubeconfig_available, kubeconfig_available_at)
         SELECT $1, 'bench-' || i, 'bench-' || i, 'kb-bench-' || i, '1.33', 4000, 8192, 500, 1024,
                'nodeport', 'ready', true, now()
         FROM generate_series(0, $2 - 1) i",
    )
    .bind(owner)
    .bind(i64::try_from(clusters)?)
    .execute(&pool)
    .await?;
    let settings = shared::host::HostSettings::from_source(&std::collections::HashMap::new())?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(
        fleet["host_kubeconfig"]
            .as_str()
            .context("host kubeconfig")?,
    )?;
    let host = shared::host::HostCluster::from_kubeconfig(kubeconfig, settings).await?;
    let week = Duration::from_secs(7 * 86_400);
    let (mut times, before) = (Vec::with_capacity(cycles), bench::CpuSplit::now(child));
    for _ in 0..cycles {
        let started = Instant::now();
        let report =
            sync_metrics::collect::collect_all(&pool, &host, sync_metrics::CONCURRENCY, week)
                .await?;
        times.push(started.elapsed().as_secs_f64());
        anyhow::ensure!(
            report.collected == clusters as u64 && report.unavailable == 0,
            "a cycle did not snapshot every cluster: {report:?}"
        );
    }
    let cpu = bench::CpuSplit::now(child).per_run_since(&before, cycles);
    pool.close().await;
    Ok((times, cpu))
}
