//! Control-plane metrics: snapshots from the host's metrics API (played by the
//! simulator), unavailable snapshots with their reason, pruning, and the range
//! API's downsampling.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use sync_metrics::collect::collect_all;

use crate::harness::TestApp;

const WEEK: Duration = Duration::from_secs(7 * 86_400);

/// metrics-server's view of a release's control-plane pod `<release>-0`.
fn pod_metrics(namespace: &str, release: &str, containers: serde_json::Value) -> serde_json::Value {
    metrics_of(
        namespace,
        &format!("{release}-0"),
        json!({ "app": "vcluster", "release": release }),
        containers,
    )
}

/// metrics-server's view of the pod `pod`, labelled as it is.
pub(crate) fn metrics_of(
    namespace: &str,
    pod: &str,
    labels: serde_json::Value,
    containers: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
        "metadata": { "name": pod, "namespace": namespace, "labels": labels },
        "timestamp": "2026-11-29T12:00:00Z", "window": "30s",
        "containers": containers,
    })
}

#[tokio::test]
async fn snapshots_are_taken_pruned_and_downsampled() {
    // vCluster's StatefulSet pod, `<release>-0`.
    let platform = TestApp::builder("worker-b")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host()
        .build()
        .await;
    let (id, namespace) = platform.create_ready("psi", "nodeport").await;

    // metrics-server's view of the control-plane pod.
    platform
        .sim()
        .put(pod_metrics(
            &namespace,
            "psi",
            json!([
                { "name": "syncer", "usage": { "cpu": "250000000n", "memory": "200Mi" } },
                { "name": "etcd", "usage": { "cpu": "50m", "memory": "100Mi" } },
            ]),
        ))
        .unwrap();
    let report = collect_all(&platform.db.pool, platform.host(), 4, WEEK)
        .await
        .unwrap();
    assert_eq!((report.collected, report.unavailable), (1, 0));
    let (cpu, rss, pod, components): (f64, i64, String, serde_json::Value) = sqlx::query_as(
        "SELECT total_cpu_percent, total_memory_rss_bytes, pod_name, components FROM control_plane_metrics_snapshots",
    )
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert!((cpu - 30.0).abs() < 1e-9, "{cpu}");
    assert_eq!((rss, pod.as_str()), (300 * 1024 * 1024, "psi-0"));
    assert_eq!(components[1]["name"], "etcd");

    // No figures: an unavailable snapshot that says why.
    assert!(
        platform
            .sim()
            .remove("metrics.k8s.io/v1beta1", "PodMetrics", &namespace, "psi-0")
    );
    let report = collect_all(&platform.db.pool, platform.host(), 4, WEEK)
        .await
        .unwrap();
    assert_eq!(report.unavailable, 1);
    let (error,): (String,) = sqlx::query_as(
        "SELECT error_message FROM control_plane_metrics_snapshots WHERE NOT available",
    )
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert!(error.contains("metrics-server"), "{error}");

    // Ten minutes of history, one snapshot a minute, CPU 0, 10, … 90 %.
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-20T10:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    for minute in 0..10i64 {
        sqlx::query(
            "INSERT INTO control_plane_metrics_snapshots (cluster_id, available, namespace, collected_at, total_cpu_percent,
                 total_memory_rss_bytes, total_memory_virtual_bytes, load_average_1)
             VALUES ($1::uuid, true, $2, $3, $4, $5, $5 + 4000, $4 / 100)",
        )
        .bind(&id)
        .bind(&namespace)
        .bind(start + chrono::Duration::minutes(minute))
        .bind(minute as f64 * 10.0)
        .bind(1000 + minute)
        .execute(&platform.db.pool)
        .await
        .unwrap();
    }
    let (status, series) = platform
        .call("GET", &format!("/api/console/clusters/{id}/metrics?from=2026-11-20T10:00:00Z&to=2026-11-20T10:10:00Z&points=2"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{series}");
    assert_eq!(series["step_seconds"], 300.0);
    let points = series["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{series}");
    assert_eq!(
        (
            points[0]["samples"].as_i64(),
            points[0]["cpu_percent_avg"].as_f64(),
            points[0]["cpu_percent_max"].as_f64()
        ),
        (Some(5), Some(20.0), Some(40.0))
    );
    assert_eq!(
        (
            points[1]["cpu_percent_avg"].as_f64(),
            points[1]["memory_bytes_max"].as_i64()
        ),
        (Some(70.0), Some(1009))
    );
    assert_eq!(
        (
            points[1]["memory_virtual_bytes_avg"].as_i64(),
            points[1]["load_average_1_max"].as_f64()
        ),
        (Some(5007), Some(0.9))
    );
    assert_eq!(points[1]["at"], "2026-11-20T10:05:00Z");

    // Older than the retention: pruned by the next cycle.
    let report = collect_all(
        &platform.db.pool,
        platform.host(),
        4,
        Duration::from_secs(86_400),
    )
    .await
    .unwrap();
    assert_eq!(report.pruned, 10);
    // Their sums: the 10-minute one and the hourly one of 10:00.
    assert_eq!(report.pruned_sums, 2);

    for (query, field) in [
        ("points=0", "points"),
        ("from=2026-11-20T10:00:00Z&to=2026-11-19T10:00:00Z", "from"),
    ] {
        let (status, body) = platform
            .call(
                "GET",
                &format!("/api/console/clusters/{id}/metrics?{query}"),
                None,
            )
            .await;
        assert_eq!(
            (status, body["errors"][0]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some(field))
        );
    }
    let (status, _) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{}/metrics", uuid::Uuid::new_v4()),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// A week of samples a minute (some unavailable, some without a figure),
/// written in two statements that share hours: over a week the series is
/// read from hourly sums, over a day from 10-minute sums, and every slice's
/// figures equal those of its samples, recounted from them here.
#[tokio::test]
async fn long_ranges_are_read_from_sums_with_the_figures_of_their_samples() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("rho", "nodeport").await;
    let pool = &platform.db.pool;
    for (first, last) in [(0, 5_000), (5_001, 7 * 1440)] {
        sqlx::query(
            "INSERT INTO control_plane_metrics_snapshots (cluster_id, available, namespace, collected_at,
                 total_cpu_percent, total_memory_rss_bytes, total_memory_virtual_bytes, load_average_1,
                 error_message)
             SELECT $1::uuid, m % 97 <> 0, $2, '2026-11-20T10:00:00Z'::timestamptz + m * interval '1 minute',
                    CASE WHEN m % 97 = 0 OR m % 13 = 0 THEN NULL ELSE (m * 7919) % 1000 / 10.0 END,
                    CASE WHEN m % 97 = 0 THEN NULL ELSE 1000000 + (m * 104729) % 9999991 END,
                    CASE WHEN m % 97 = 0 OR m % 11 = 0 THEN NULL ELSE 5000000 + m END,
                    CASE WHEN m % 97 = 0 THEN NULL ELSE (m % 400) / 100.0 END,
                    CASE WHEN m % 97 = 0 THEN 'the metrics API did not answer' END
             FROM generate_series($3::int, $4::int) m",
        )
        .bind(&id)
        .bind(&namespace)
        .bind(first)
        .bind(last)
        .execute(pool)
        .await
        .unwrap();
    }
    let slices = |series: &serde_json::Value| {
        (
            series["from"].as_str().unwrap().to_owned(),
            series["to"].as_str().unwrap().to_owned(),
            series["step_seconds"].as_f64().unwrap(),
        )
    };
    for (range, points, cut) in [
        (
            "from=2026-11-20T10:17:00Z&to=2026-11-27T10:17:00Z",
            100,
            ("2026-11-20T10:00:00Z", "2026-11-27T12:00:00Z", 7200.0),
        ),
        (
            "from=2026-11-22T10:17:00Z&to=2026-11-23T10:17:00Z",
            120,
            ("2026-11-22T10:10:00Z", "2026-11-23T10:30:00Z", 1200.0),
        ),
    ] {
        let (status, series) = platform
            .call(
                "GET",
                &format!("/api/console/clusters/{id}/metrics?{range}&points={points}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{series}");
        let (from, to, step_seconds) = slices(&series);
        assert_eq!((from.as_str(), to.as_str(), step_seconds), cut, "{range}");
        // The same slices, recounted from the samples.
        let expected: Vec<serde_json::Value> = sqlx::query_scalar(
            "SELECT json_build_object(
                 'at', to_char(($2::timestamptz + slice * make_interval(secs => $4)) AT TIME ZONE 'UTC',
                               'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
                 'samples', count(*) FILTER (WHERE available),
                 'unavailable', count(*) FILTER (WHERE NOT available),
                 'cpu_percent_avg', avg(total_cpu_percent), 'cpu_percent_max', max(total_cpu_percent),
                 'memory_bytes_avg', avg(total_memory_rss_bytes)::bigint,
                 'memory_bytes_max', max(total_memory_rss_bytes),
                 'memory_virtual_bytes_avg', avg(total_memory_virtual_bytes)::bigint,
                 'memory_virtual_bytes_max', max(total_memory_virtual_bytes),
                 'load_average_1_avg', avg(load_average_1), 'load_average_1_max', max(load_average_1))
             FROM (SELECT floor(extract(epoch FROM collected_at - $2::timestamptz) / $4) AS slice, *
                   FROM control_plane_metrics_snapshots
                   WHERE cluster_id = $1::uuid AND collected_at >= $2::timestamptz
                     AND collected_at < $3::timestamptz) s
             GROUP BY slice ORDER BY slice",
        )
        .bind(&id)
        .bind(&from)
        .bind(&to)
        .bind(step_seconds)
        .fetch_all(pool)
        .await
        .unwrap();
        let points = series["points"].as_array().unwrap();
        assert_eq!(points.len(), expected.len(), "{range}");
        assert!(
            points.len() <= 100 && points.len() > 60,
            "{range}: {}",
            points.len()
        );
        for (point, expected) in points.iter().zip(&expected) {
            for (field, value) in expected.as_object().unwrap() {
                let got = &point[field.as_str()];
                match (got.as_f64(), value.as_f64()) {
                    (Some(got), Some(value)) => {
                        // Means are summed in another order: equal to the last bits.
                        let within = if field.ends_with("_avg") {
                            1e-9 * value.abs().max(1.0)
                        } else {
                            0.0
                        };
                        assert!(
                            (got - value).abs() <= within,
                            "{range} {field}: {got} against {value} at {}",
                            point["at"]
                        );
                    }
                    _ => assert_eq!(got, value, "{range} {field} at {}", point["at"]),
                }
            }
        }
    }
    // Samples are only written and pruned: a change to one would leave its
    // sums wrong, so it is refused.
    let changed = sqlx::query("UPDATE control_plane_metrics_snapshots SET total_cpu_percent = 0")
        .execute(pool)
        .await;
    assert!(changed.is_err());
}

/// A fixture `/proc`: the node's load, a control plane of two processes and a
/// zombie (no memory lines).
fn fixture_proc() -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("kubebyon-proc-{}", uuid::Uuid::new_v4()));
    let status = |pid: u32, name: &str, memory: &str| {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("status"),
            format!("Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t0\n{memory}Threads:\t9\n"),
        )
        .unwrap();
    };
    status(
        1,
        "vcluster",
        "VmPeak:\t 900000 kB\nVmSize:\t  800000 kB\nVmRSS:\t   51200 kB\n",
    );
    status(
        31,
        "kube-apiserver",
        "VmSize:\t 1600000 kB\nVmRSS:\t  409600 kB\n",
    );
    status(40, "defunct", "");
    std::fs::write(root.join("loadavg"), "1.25 0.75 0.50 2/311 4242\n").unwrap();
    root
}

/// Runs the command for real, with `/proc` read from `root` when given.
fn run_in(root: Option<std::path::PathBuf>) -> kube_sim::ExecHandler {
    std::sync::Arc::new(move |request: &kube_sim::ExecRequest| {
        let args: Vec<String> = request
            .command
            .iter()
            .map(|a| match &root {
                Some(root) => a.replace("/proc/", &format!("{}/", root.display())),
                None => a.clone(),
            })
            .collect();
        let output = std::process::Command::new(&args[0])
            .args(&args[1..])
            .output()
            .unwrap();
        kube_sim::ExecOutput {
            stdout: output.stdout,
            stderr: output.stderr,
            exit_code: output.status.code().unwrap_or(-1),
        }
    })
}

#[derive(sqlx::FromRow)]
struct Snapshot {
    available: bool,
    load_average_1: Option<f64>,
    load_average_5: Option<f64>,
    load_average_15: Option<f64>,
    total_memory_rss_bytes: Option<i64>,
    total_memory_virtual_bytes: Option<i64>,
    components: serde_json::Value,
    error_message: Option<String>,
}

#[tokio::test]
async fn load_and_process_memory_come_from_the_pods_proc() {
    // vCluster's StatefulSet pod, whose name is known without asking.
    let platform = TestApp::builder("worker-b")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host()
        .build()
        .await;
    let (_, namespace) = platform.create_ready("tau", "nodeport").await;
    let latest = || async {
        sqlx::query_as::<_, Snapshot>(
            "SELECT available, load_average_1, load_average_5, load_average_15, total_memory_rss_bytes,
                    total_memory_virtual_bytes, components, error_message
             FROM control_plane_metrics_snapshots ORDER BY id DESC LIMIT 1",
        )
        .fetch_one(&platform.db.pool)
        .await
        .unwrap()
    };

    // Neither the metrics API nor the pod: unavailable, with both reasons.
    collect_all(&platform.db.pool, platform.host(), 4, WEEK)
        .await
        .unwrap();
    let Snapshot {
        available,
        load_average_1: load,
        error_message: error,
        ..
    } = latest().await;
    let error = error.unwrap();
    assert!(!available && load.is_none());
    assert!(
        error.contains("metrics-server") && error.contains("/proc of tau-0"),
        "{error}"
    );

    // The pod (two containers) and a handler that runs the command for real
    // against the fixture: only /proc answers.
    platform
        .sim()
        .put(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "tau-0", "namespace": namespace, "labels": { "app": "vcluster", "release": "tau" } },
            "spec": { "containers": [{ "name": "syncer", "image": "vcluster" }, { "name": "sidecar", "image": "busybox" }] },
        }))
        .unwrap();
    let root = fixture_proc();
    platform.sim().set_exec(run_in(Some(root.clone())));
    let report = collect_all(&platform.db.pool, platform.host(), 4, WEEK)
        .await
        .unwrap();
    assert_eq!((report.collected, report.unavailable), (1, 0));
    let Snapshot {
        available,
        load_average_1: l1,
        load_average_5: l5,
        load_average_15: l15,
        total_memory_rss_bytes: rss,
        total_memory_virtual_bytes: virt,
        components,
        error_message: error,
    } = latest().await;
    assert!(available);
    assert_eq!((l1, l5, l15), (Some(1.25), Some(0.75), Some(0.5)));
    assert_eq!(rss, Some((51_200 + 409_600) * 1024));
    assert_eq!(virt, Some((800_000 + 1_600_000) * 1024));
    let processes: Vec<_> = components
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap(),
                c["name"].as_str().unwrap(),
                c["pid"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        processes,
        [
            ("process", "vcluster", Some(1)),
            ("process", "kube-apiserver", Some(31))
        ]
    );
    let error = error.unwrap();
    assert!(
        error.contains("metrics-server") && !error.contains("/proc"),
        "{error}"
    );

    // Both sources: CPU from the metrics API, memory and load from /proc.
    platform
        .sim()
        .put(pod_metrics(
            &namespace,
            "tau",
            json!([{ "name": "syncer", "usage": { "cpu": "500m", "memory": "300Mi" } }]),
        ))
        .unwrap();
    collect_all(&platform.db.pool, platform.host(), 4, WEEK)
        .await
        .unwrap();
    let Snapshot {
        available,
        load_average_1: l1,
        total_memory_rss_bytes: rss,
        components,
        error_message: error,
        ..
    } = latest().await;
    assert!(available && error.is_none(), "{error:?}");
    assert_eq!((l1, rss), (Some(1.25), Some((51_200 + 409_600) * 1024)));
    assert_eq!(components[0]["kind"], "container");
    assert_eq!(components.as_array().unwrap().len(), 3);
    std::fs::remove_dir_all(&root).unwrap();

    // The same command against this machine's real /proc: this test's own
    // process is among those read.
    platform.sim().set_exec(run_in(None));
    collect_all(&platform.db.pool, platform.host(), 4, WEEK)
        .await
        .unwrap();
    let Snapshot {
        load_average_1: l1,
        total_memory_virtual_bytes: virt,
        components,
        error_message: error,
        ..
    } = latest().await;
    assert!(error.is_none() && l1.is_some_and(|l| l >= 0.0), "{error:?}");
    let ours = components
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["pid"].as_u64() == Some(u64::from(std::process::id())))
        .expect("the test process is read from /proc");
    assert!(ours["rss_bytes"].as_i64().unwrap() > 0);
    assert!(virt.unwrap() >= ours["virtual_bytes"].as_i64().unwrap());

    // A failing command (the fixture is gone): the metrics API's figures stay,
    // memory falls back to the working set, and the reason is kept.
    platform.sim().set_exec(run_in(Some(root)));
    collect_all(&platform.db.pool, platform.host(), 4, WEEK)
        .await
        .unwrap();
    let Snapshot {
        available,
        load_average_1: l1,
        total_memory_rss_bytes: rss,
        total_memory_virtual_bytes: virt,
        error_message: error,
        ..
    } = latest().await;
    let error = error.unwrap();
    assert!(available && l1.is_none() && virt.is_none());
    assert_eq!(rss, Some(300 * 1024 * 1024));
    assert!(
        error.contains("/proc of tau-0") && error.contains("exit code 1"),
        "{error}"
    );

    // An answer past the size limit is cut off and refused.
    platform
        .sim()
        .set_exec(std::sync::Arc::new(|_: &kube_sim::ExecRequest| {
            kube_sim::ExecOutput {
                stdout: vec![b'x'; 2 << 20],
                ..kube_sim::ExecOutput::default()
            }
        }));
    collect_all(&platform.db.pool, platform.host(), 4, WEEK)
        .await
        .unwrap();
    let Snapshot {
        error_message: error,
        load_average_1: l1,
        ..
    } = latest().await;
    let error = error.unwrap();
    assert!(
        l1.is_none() && error.contains("wrote more than 1048576 bytes"),
        "{error}"
    );
}

/// A Kamaji control plane runs the upstream images, distroless: the
/// metrics API's figures are its snapshot, and `/proc` is not read, with
/// the reason; a command run in its pod finds no shell, as `kubectl exec`
/// shows.
#[tokio::test]
async fn a_kamaji_control_plane_is_measured_by_the_metrics_api_alone() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (_, namespace) = platform.create_ready("chi", "nodeport").await;
    let pod = platform
        .sim()
        .list("v1", "Pod")
        .into_iter()
        .find(|p| {
            p["metadata"]["namespace"] == namespace.as_str()
                && p["metadata"]["labels"]["kamaji.clastix.io/name"] == "chi"
        })
        .expect("Kamaji's pod")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    platform
        .sim()
        .put(metrics_of(
            &namespace,
            &pod,
            json!({ "kamaji.clastix.io/name": "chi" }),
            json!([{ "name": "kube-apiserver", "usage": { "cpu": "200m", "memory": "300Mi" } }]),
        ))
        .unwrap();
    // Whatever a handler would answer, the image has no shell.
    platform.sim().set_exec(run_in(Some(fixture_proc())));
    let report = collect_all(&platform.db.pool, platform.host(), 4, WEEK)
        .await
        .unwrap();
    assert_eq!((report.collected, report.unavailable), (1, 0));
    let (cpu, rss, load, pod_name, error): (f64, i64, Option<f64>, String, Option<String>) =
        sqlx::query_as(
            "SELECT total_cpu_percent, total_memory_rss_bytes, load_average_1, pod_name, error_message
             FROM control_plane_metrics_snapshots",
        )
        .fetch_one(&platform.db.pool)
        .await
        .unwrap();
    assert!((cpu - 20.0).abs() < 1e-9, "{cpu}");
    assert_eq!(
        (rss, load, pod_name.as_str()),
        (300 * 1024 * 1024, None, pod.as_str())
    );
    let error = error.unwrap();
    assert!(
        error.contains("the kamaji engine's control-plane images have no shell"),
        "{error}"
    );

    let dir = std::env::temp_dir().join(format!("kb-exec-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config"), platform.sim().kubeconfig(None)).unwrap();
    let exec = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(dir.join("config"))
        .args(["-n", &namespace, "exec", &pod, "-c", "kube-apiserver"])
        .args(["--", "sh", "-c", "cat /proc/loadavg"])
        .env("HOME", &dir)
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let said = String::from_utf8_lossy(&exec.stderr);
    assert!(
        !exec.status.success() && said.contains("executable file not found"),
        "{said}"
    );
}
