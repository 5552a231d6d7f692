//! Control-plane metrics: every ready cluster's control-plane pod, stored as
//! one snapshot per cycle — or an unavailable snapshot with the reason — and
//! pruned after a retention.
//!
//! Two sources, read side by side:
//! - the host's metrics API (metrics-server): CPU and memory working set per
//!   container;
//! - the pod's own `/proc`, read by a POSIX shell command run through the
//!   `pods/exec` subresource in the engine's container with a shell (vCluster's
//!   `syncer`, Alpine, so `sh` and `cat` are there; Kamaji's images are
//!   distroless, so not there): the load averages (the node's, as
//!   every container sees them) and, per process of the control plane
//!   (vcluster, kube-apiserver, kube-controller-manager, etcd or kine…), its
//!   resident and virtual memory.
//!
//! A snapshot is available when either source answered; what the other could
//! not tell is left empty and its reason kept in `error_message`.

use std::time::Duration;

use futures_util::{StreamExt, stream};
use serde::Serialize;
use sqlx::PgPool;

use shared::{
    clusters,
    host::{HostCluster, PodUsage},
    metrics::{self, NewSnapshot},
};

/// Prints the shell's own pid (left out of the figures), the load averages,
/// then the status file of every process; a process that ends while it is
/// read is skipped rather than failing the command.
pub const PROC_COMMAND: [&str; 3] = [
    "sh",
    "-c",
    "echo $$; cat /proc/loadavg || exit 1; cat /proc/[0-9]*/status 2>/dev/null; exit 0",
];

/// Most of `PROC_COMMAND`'s output that is read (a control plane has a handful
/// of processes, each status file about 1.5 KiB).
const PROC_OUTPUT_LIMIT: u64 = 1 << 20;

/// How long reading `/proc` in one pod may take.
const PROC_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MetricsReport {
    pub collected: u64,
    pub unavailable: u64,
    /// Snapshots pruned.
    pub pruned: u64,
    /// Their 10-minute and hourly sums pruned.
    pub pruned_sums: u64,
}

/// What the pod's `/proc` told.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcSample {
    pub load_averages: [f64; 3],
    pub processes: Vec<ProcessUsage>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessUsage {
    pub pid: u32,
    pub name: String,
    pub rss_bytes: i64,
    pub virtual_bytes: i64,
}

/// Reads `PROC_COMMAND`'s output. Processes without memory figures (zombies)
/// and the shell that printed it are left out.
pub fn parse_proc(output: &str) -> Result<ProcSample, String> {
    let mut lines = output.lines();
    let shell: Option<u32> = lines.next().and_then(|l| l.trim().parse().ok());
    let load = lines.next().unwrap_or_default();
    let figures: Vec<f64> = load
        .split_whitespace()
        .take(3)
        .filter_map(|f| f.parse().ok())
        .collect();
    let [one, five, fifteen] = figures[..] else {
        return Err(format!("/proc/loadavg reads {load:?}"));
    };
    let kib = |value: &str| -> Option<i64> {
        let number = value.trim().strip_suffix("kB")?.trim();
        number.parse::<i64>().ok()?.checked_mul(1024)
    };
    // One status file: its lines up to the next `Name:`.
    let process = |status: &[&str]| -> Option<ProcessUsage> {
        let field = |key: &str| {
            status.iter().find_map(|line| {
                let (k, v) = line.split_once(':')?;
                (k == key).then_some(v)
            })
        };
        Some(ProcessUsage {
            pid: field("Pid")?.trim().parse().ok()?,
            name: field("Name")?.trim().to_string(),
            rss_bytes: kib(field("VmRSS")?)?,
            virtual_bytes: kib(field("VmSize")?)?,
        })
    };
    let rest: Vec<&str> = lines.collect();
    let starts: Vec<usize> = (0..rest.len())
        .filter(|&i| rest[i].starts_with("Name:"))
        .chain([rest.len()])
        .collect();
    let processes = starts
        .windows(2)
        .filter_map(|w| process(&rest[w[0]..w[1]]))
        .filter(|p| Some(p.pid) != shell)
        .collect();
    Ok(ProcSample {
        load_averages: [one, five, fifteen],
        processes,
    })
}

/// What both sources said of one cluster's control plane.
struct Observation {
    usage: Result<Vec<PodUsage>, String>,
    /// The pod `/proc` was read in, and what it said.
    proc: (String, Result<ProcSample, String>),
}

async fn observe(host: &HostCluster, cluster: &clusters::Cluster) -> Observation {
    let usage = host
        .control_plane_metrics(cluster)
        .await
        .map_err(|e| format!("the host's metrics API: {e}"));
    let engine = shared::host::engine::of(cluster.engine);
    let Some(container) = engine.shell_container() else {
        return Observation {
            usage,
            proc: (
                String::new(),
                Err(format!(
                    "/proc is not read: the {} engine's control-plane images have no shell",
                    cluster.engine
                )),
            ),
        };
    };
    // The pod the metrics API named, else one the engine names (vCluster's
    // StatefulSet's first pod).
    let pod = match usage.as_deref() {
        Ok([first, ..]) => Some(first.pod.clone()),
        _ => engine.first_pod(cluster),
    };
    let Some(pod) = pod else {
        return Observation {
            usage,
            proc: (
                String::new(),
                Err("no control-plane pod is known without the metrics API".into()),
            ),
        };
    };
    let read = host.exec_output(cluster, &pod, container, &PROC_COMMAND, PROC_OUTPUT_LIMIT);
    let proc = match tokio::time::timeout(PROC_TIMEOUT, read).await {
        Ok(Ok(output)) => parse_proc(&output),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer in {} s", PROC_TIMEOUT.as_secs())),
    }
    .map_err(|e| format!("/proc of {pod}: {e}"));
    Observation {
        usage,
        proc: (pod, proc),
    }
}

/// The snapshot of one cluster from what it answered.
fn snapshot<'a>(cluster: &'a clusters::Cluster, seen: &'a Observation) -> NewSnapshot<'a> {
    let usage = match &seen.usage {
        Ok(pods) => pods.first().ok_or(
            "the metrics API has no figures for the control-plane pod (is metrics-server running on the host, and the pod running?)",
        ),
        Err(error) => Err(error.as_str()),
    };
    let (proc_pod, proc) = (&seen.proc.0, seen.proc.1.as_ref());
    let errors: Vec<&str> = [usage.err(), proc.err().map(String::as_str)]
        .into_iter()
        .flatten()
        .collect();
    let mut components = Vec::new();
    if let Ok(pod) = usage {
        components.extend(pod.containers.iter().map(|c| {
            serde_json::json!({
                "kind": "container", "name": c.name,
                "cpu_percent": c.cpu_cores * 100.0, "memory_bytes": c.memory_bytes,
            })
        }));
    }
    if let Ok(sample) = proc {
        components.extend(sample.processes.iter().map(|p| {
            serde_json::json!({
                "kind": "process", "name": p.name, "pid": p.pid,
                "rss_bytes": p.rss_bytes, "virtual_bytes": p.virtual_bytes,
            })
        }));
    }
    let load = proc.ok().map(|s| s.load_averages);
    NewSnapshot {
        cluster_id: cluster.id,
        namespace: &cluster.namespace,
        pod_name: match (usage, proc) {
            (Ok(pod), _) => Some(pod.pod.as_str()),
            (Err(_), Ok(_)) => Some(proc_pod.as_str()),
            (Err(_), Err(_)) => None,
        },
        available: usage.is_ok() || proc.is_ok(),
        error: (!errors.is_empty()).then(|| errors.join("; ")),
        load_averages: load,
        total_cpu_percent: usage
            .ok()
            .map(|pod| pod.containers.iter().map(|c| c.cpu_cores).sum::<f64>() * 100.0),
        // Resident memory from /proc; else the working set the metrics API reports.
        total_memory_rss_bytes: match (proc, usage) {
            (Ok(sample), _) => Some(sample.processes.iter().map(|p| p.rss_bytes).sum()),
            (Err(_), Ok(pod)) => Some(pod.containers.iter().map(|c| c.memory_bytes).sum()),
            (Err(_), Err(_)) => None,
        },
        total_memory_virtual_bytes: proc
            .ok()
            .map(|sample| sample.processes.iter().map(|p| p.virtual_bytes).sum()),
        components: serde_json::Value::Array(components),
    }
}

/// Snapshots (and sums) one pruning statement deletes at most.
const PRUNE_BATCH: i64 = 5_000;

/// Snapshots written by one statement.
const INSERT_BATCH: usize = 1_000;

/// One cycle: a snapshot of every ready cluster, `concurrency` at a time,
/// then the snapshots older than `retention` pruned.
pub async fn collect_all(
    pool: &PgPool,
    host: &HostCluster,
    concurrency: usize,
    retention: Duration,
) -> Result<MetricsReport, sqlx::Error> {
    let ready = clusters::list_observable(pool).await?;
    let observed: Vec<_> = stream::iter(ready)
        .map(|cluster| async move {
            let seen = observe(host, &cluster).await;
            (cluster, seen)
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let snapshots: Vec<_> = observed
        .iter()
        .map(|(cluster, seen)| snapshot(cluster, seen))
        .collect();
    let collected = snapshots.iter().filter(|s| s.available).count() as u64;
    let mut report = MetricsReport {
        collected,
        unavailable: snapshots.len() as u64 - collected,
        ..MetricsReport::default()
    };
    for batch in snapshots.chunks(INSERT_BATCH) {
        metrics::insert_all(pool, batch).await?;
    }
    // Batches while they are full, up to twice what this cycle wrote plus
    // one batch (samples and sums together; a sample adds about a tenth of
    // a sum): pruning keeps pace with collection and drains a backlog over
    // the next cycles, each statement short.
    let budget = 2 * observed.len() as u64 + PRUNE_BATCH as u64;
    while report.pruned + report.pruned_sums < budget {
        let pruned = metrics::prune(pool, retention, PRUNE_BATCH).await?;
        report.pruned += pruned.samples;
        report.pruned_sums += pruned.rollups;
        if pruned.samples.max(pruned.rollups) < PRUNE_BATCH as u64 {
            break;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::parse_proc;

    fn text(max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                4 => proptest::char::range('\0', '\u{7f}'),
                1 => proptest::sample::select(vec![':', '\t', ' ', '\n', '.', '-', 'k', 'B']),
                1 => any::<char>(),
            ],
            0..max,
        )
        .prop_map(|c| c.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// `/proc` figures come from inside the tenant's control-plane pod.
        #[test]
        fn proc_output_is_read_without_panicking(
            lines in proptest::collection::vec(
                prop_oneof![
                    text(60),
                    proptest::collection::vec(prop_oneof![any::<i64>().prop_map(|n| n.to_string()), text(8)], 0..8)
                        .prop_map(|fields| fields.join(" ")),
                    (text(10), any::<i64>()).prop_map(|(k, v)| format!("{k}:\t{v} kB")),
                ],
                0..12,
            )
        ) {
            let _ = parse_proc(&lines.join("\n"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_output_gives_load_and_each_process_but_the_shell() {
        let output = "77\n0.52 0.58 0.61 3/467 80\n\
            Name:\tvcluster\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t1\nVmSize:\t 1000 kB\nVmRSS:\t   200 kB\n\
            Name:\tkube-apiserver\nPid:\t12\nVmSize:\t2048 kB\nVmRSS:\t1024 kB\n\
            Name:\tzombie\nPid:\t13\n\
            Name:\tsh\nPid:\t77\nVmSize:\t100 kB\nVmRSS:\t10 kB\n";
        let sample = parse_proc(output).unwrap();
        assert_eq!(sample.load_averages, [0.52, 0.58, 0.61]);
        assert_eq!(
            sample.processes,
            vec![
                ProcessUsage {
                    pid: 1,
                    name: "vcluster".into(),
                    rss_bytes: 200 * 1024,
                    virtual_bytes: 1000 * 1024
                },
                ProcessUsage {
                    pid: 12,
                    name: "kube-apiserver".into(),
                    rss_bytes: 1024 * 1024,
                    virtual_bytes: 2048 * 1024
                },
            ]
        );
        assert!(parse_proc("1\nnot a loadavg\n").is_err());
        assert!(parse_proc("").is_err());
    }
}
