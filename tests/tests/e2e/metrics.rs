//! Control-plane metrics: snapshots from the host's metrics API (played by the
//! simulator), unavailable snapshots with their reason, pruning, and the range
//! API's downsampling.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use shared::metricsync::collect_all;

use crate::platform::Platform;

const WEEK: Duration = Duration::from_secs(7 * 86_400);

#[tokio::test]
async fn snapshots_are_taken_pruned_and_downsampled() {
    let platform = Platform::new().await;
    let id = platform.create("psi", "nodeport").await;
    platform.drive().await;
    let namespace = platform.cluster(&id).await["namespace"]
        .as_str()
        .unwrap()
        .to_string();

    // metrics-server's view of the control-plane pod.
    platform
        .sim
        .put(json!({
            "apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
            "metadata": { "name": "psi-0", "namespace": namespace, "labels": { "app": "vcluster", "release": "psi" } },
            "timestamp": "2026-11-29T12:00:00Z", "window": "30s",
            "containers": [
                { "name": "syncer", "usage": { "cpu": "250000000n", "memory": "200Mi" } },
                { "name": "etcd", "usage": { "cpu": "50m", "memory": "100Mi" } },
            ],
        }))
        .unwrap();
    let report = collect_all(&platform.db.pool, &platform.host, 4, WEEK)
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
            .sim
            .remove("metrics.k8s.io/v1beta1", "PodMetrics", &namespace, "psi-0")
    );
    let report = collect_all(&platform.db.pool, &platform.host, 4, WEEK)
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
            "INSERT INTO control_plane_metrics_snapshots (cluster_id, available, namespace, collected_at, total_cpu_percent, total_memory_rss_bytes)
             VALUES ($1::uuid, true, $2, $3, $4, $5)",
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
    assert_eq!(points[1]["at"], "2026-11-20T10:05:00Z");

    // Older than the retention: pruned by the next cycle.
    let report = collect_all(
        &platform.db.pool,
        &platform.host,
        4,
        Duration::from_secs(86_400),
    )
    .await
    .unwrap();
    assert_eq!(report.pruned, 10);

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
