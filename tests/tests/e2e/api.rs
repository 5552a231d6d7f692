//! The cluster routes through the router, as the gateway would call them, with
//! real PostgreSQL behind them.

use shared::domain::JobPayload;
use std::sync::Arc;

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use http_body_util::BodyExt;
use shared::{
    clusters::ClusterCreation,
    config::{JobSettings, Settings},
    http::{AppState, Identity, with_common_layers},
};
use tower::ServiceExt;
use uuid::Uuid;

use crate::harness::{Reply, TestApp};

fn cluster(name: &str) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "workload_cpu_limit_milli_cores": 2000,
        "workload_memory_limit_mib": 4096,
        "public_access_mode": "nodeport",
    })
}

#[tokio::test]
async fn create_answers_202_with_the_operation_and_writes_cluster_operation_and_job_together() {
    let api = TestApp::builder("api-test").build().await;
    let (status, body) = api
        .call("POST", "/api/console/clusters", Some(cluster("demo")))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["operation"]["type"], "create");
    assert_eq!(body["operation"]["status"], "pending");
    assert_eq!(body["cluster"]["status"], "provisioning");
    assert_eq!(body["cluster"]["public_access_mode"], "nodeport");
    assert_eq!(body["cluster"]["kubernetes_version"], "1.33");
    assert_eq!(
        (
            api.count("clusters").await,
            api.count("cluster_operations").await,
            api.count("cluster_jobs").await
        ),
        (1, 1, 1)
    );
    let payload: serde_json::Value = sqlx::query_scalar("SELECT payload FROM cluster_jobs")
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(
        payload["name"], "demo",
        "the job carries the target snapshot"
    );
    let target: ClusterCreation =
        serde_json::from_value(payload).expect("a create job carries a ClusterCreation");
    let earlier: ClusterCreation = serde_json::from_value(body["cluster"].clone())
        .expect("a create job written with the whole row still parses");
    assert_eq!(target, earlier, "the target is the cluster as accepted");

    let id = body["cluster"]["id"].as_str().unwrap();
    let (status, fetched) = api
        .call("GET", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fetched["name"], "demo");
}

#[tokio::test]
async fn bad_input_gets_problem_json_and_writes_nothing() {
    let api = TestApp::builder("api-test").build().await;
    let Reply { status, headers, body } = api
        .client()
        .send("POST", "/api/console/clusters", Some(serde_json::json!({"name": "Bad Name", "workload_cpu_limit_milli_cores": 0, "workload_memory_limit_mib": 4096})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(headers[header::CONTENT_TYPE], "application/problem+json");
    assert_eq!(body["code"], "validation_failed");
    assert_eq!(body["errors"].as_array().unwrap().len(), 2, "{body}");
    // Each also as a code with what its words need, beside the English.
    let coded: Vec<(&str, &serde_json::Value, &serde_json::Value)> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["field"].as_str().unwrap(), &e["code"], &e["params"]))
        .collect();
    assert_eq!(
        coded,
        [
            (
                "name",
                &serde_json::json!("name"),
                &serde_json::json!({"max": "40"})
            ),
            (
                "workload_cpu_limit_milli_cores",
                &serde_json::json!("out_of_range"),
                &serde_json::json!({"min": "100", "max": "256000"})
            ),
        ],
        "{body}"
    );

    let malformed = Request::post("/api/console/clusters")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{\"name\":"))
        .unwrap();
    let Reply { status, body, .. } = api.client().raw(malformed).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("malformed_json"))
    );

    let (status, body) = api
        .call(
            "POST",
            "/api/console/clusters",
            Some(serde_json::json!({"name": "x", "workload_cpu_limit_milli_cores": 1000, "workload_memory_limit_mib": 1024, "colour": "red"})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_body"))
    );

    let no_type = Request::post("/api/console/clusters")
        .body(Body::from("{}"))
        .unwrap();
    let Reply { status, body, .. } = api.client().raw(no_type).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Some("unsupported_media_type")
        )
    );

    // A body over the limit is 413, whether its length is announced or streamed.
    let huge = format!(
        "{{\"name\":\"{}\",\"workload_cpu_limit_milli_cores\":1000,\"workload_memory_limit_mib\":1024}}",
        "a".repeat(20 * 1024 * 1024)
    );
    let announced = Request::post("/api/console/clusters")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, huge.len())
        .body(Body::from(huge.clone()))
        .unwrap();
    let Reply {
        status,
        headers,
        body,
    } = api.client().raw(announced).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    assert_eq!(headers[header::CONTENT_TYPE], "application/problem+json");
    let chunks = huge
        .into_bytes()
        .chunks(64 * 1024)
        .map(|c| Ok::<_, std::io::Error>(axum::body::Bytes::copy_from_slice(c)))
        .collect::<Vec<_>>();
    let streamed = Request::post("/api/console/clusters")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .unwrap();
    let Reply { status, body, .. } = api.client().raw(streamed).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    // Just under the limit the body is read, and judged on what it says.
    let under = format!(
        "{{\"name\":\"{}\",\"workload_cpu_limit_milli_cores\":1000,\"workload_memory_limit_mib\":1024}}",
        "a".repeat(shared::extract::MAX_BODY_BYTES - 200)
    );
    let Reply { status, body, .. } = api
        .client()
        .raw(
            Request::post("/api/console/clusters")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(under))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("validation_failed"))
    );

    let (status, body) = api
        .call("GET", "/api/console/clusters/not-a-uuid", None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_path"))
    );
    let (status, body) = api.call("GET", "/api/console/clusters?limit=0", None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("validation_failed"))
    );
    let (status, body) = api
        .call("GET", "/api/console/clusters?cursor=nonsense", None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_cursor"))
    );

    assert_eq!(
        (api.count("clusters").await, api.count("cluster_jobs").await),
        (0, 0)
    );
}

#[tokio::test]
async fn a_second_live_cluster_with_the_same_name_is_409_and_leaves_nothing_behind() {
    let api = TestApp::builder("api-test").build().await;
    assert_eq!(
        api.call("POST", "/api/console/clusters", Some(cluster("dup")))
            .await
            .0,
        StatusCode::ACCEPTED
    );
    let (status, body) = api
        .call("POST", "/api/console/clusters", Some(cluster("dup")))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["code"], "cluster_name_taken");
    assert_eq!(
        (
            api.count("clusters").await,
            api.count("cluster_operations").await,
            api.count("cluster_jobs").await
        ),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn a_delete_during_a_create_waits_its_turn_and_a_second_delete_is_409() {
    let api = TestApp::builder("api-test").build().await;
    let (_, body) = api
        .call("POST", "/api/console/clusters", Some(cluster("busy")))
        .await;
    let id = body["cluster"]["id"].as_str().unwrap().to_string();

    // The create job has not run yet: the delete is accepted and queued behind it.
    let (status, body) = api
        .call("DELETE", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["operation"]["type"], "delete");
    assert_eq!(body["operation"]["status"], "pending");
    assert_eq!(
        body["operation"]["stage"],
        "queued behind the running operation"
    );
    let delete_jobs: i64 =
        sqlx::query_scalar("SELECT count(*) FROM cluster_jobs WHERE type = 'cluster_delete'")
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(delete_jobs, 0, "no delete job while the create is active");

    let (status, body) = api
        .call("DELETE", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("cluster_delete_in_progress"))
    );

    // The create runs (and fails: no host here); the sweep then starts the delete.
    assert_eq!(api.runner.run_until_idle().await.len(), 1);
    let report = tests::handlers::sweep(
        &api.db.pool,
        api.state.publisher.as_ref(),
        &JobSettings::default(),
    )
    .await
    .unwrap();
    assert_eq!((report.promoted, report.published), (1, 1));
    let (_, fetched) = api
        .call("GET", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(fetched["status"], "deleting");
    let done = api.runner.run_until_idle().await;
    assert_eq!(done.len(), 1);
    assert_eq!(
        done[0].0.job_type,
        shared::clusters::ClusterDeletion::KIND.job_type
    );

    let (_, operations) = api
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/operations"),
            None,
        )
        .await;
    let types: Vec<_> = operations
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["delete", "create"], "newest first");
}

#[tokio::test]
async fn clusters_are_private_to_their_owner_and_routes_need_an_identity() {
    let api = TestApp::builder("api-test").build().await;
    let (_, body) = api
        .call("POST", "/api/console/clusters", Some(cluster("mine")))
        .await;
    let id = body["cluster"]["id"].as_str().unwrap().to_string();

    let stranger: Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name) VALUES ('eve@example.com', 'Eve') RETURNING id",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    let as_stranger = Identity::Development(stranger);
    for path in [
        format!("/api/console/clusters/{id}"),
        format!("/api/console/clusters/{id}/jobs"),
        format!("/api/console/clusters/{id}/operations"),
    ] {
        let (status, body) = api.client_with(as_stranger).call("GET", &path, None).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{path}"
        );
    }
    assert_eq!(
        api.client_with(as_stranger)
            .call("DELETE", &format!("/api/console/clusters/{id}"), None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let (_, list) = api
        .client_with(as_stranger)
        .call("GET", "/api/console/clusters", None)
        .await;
    assert_eq!(list["items"], serde_json::json!([]));

    let (status, body) = api
        .client_with(Identity::Accounts)
        .call("GET", "/api/console/clusters", None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthenticated"))
    );
}

#[tokio::test]
async fn the_list_pages_newest_first_by_cursor() {
    let api = TestApp::builder("api-test").build().await;
    for name in ["one", "two", "three"] {
        assert_eq!(
            api.call("POST", "/api/console/clusters", Some(cluster(name)))
                .await
                .0,
            StatusCode::ACCEPTED
        );
    }
    let (_, page) = api.call("GET", "/api/console/clusters?limit=2", None).await;
    let names: Vec<_> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["three", "two"]);
    let cursor = page["next_cursor"].as_str().expect("a next page");
    let (_, page) = api
        .call(
            "GET",
            &format!("/api/console/clusters?limit=2&cursor={cursor}"),
            None,
        )
        .await;
    let names: Vec<_> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["one"]);
    assert!(page["next_cursor"].is_null());
}

#[tokio::test]
async fn health_readiness_and_unknown_routes() {
    let api = TestApp::builder("api-test").build().await;
    let (status, body) = api.call("GET", "/healthz", None).await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, serde_json::Value::String("ok".into()))
    );
    assert_eq!(api.call("GET", "/readyz", None).await.0, StatusCode::OK);
    let Reply {
        status,
        headers,
        body,
    } = api.client().send("GET", "/api/nothing-here", None).await;
    assert_eq!(
        (
            status,
            headers[header::CONTENT_TYPE].to_str().unwrap(),
            body["code"].as_str()
        ),
        (
            StatusCode::NOT_FOUND,
            "application/problem+json",
            Some("not_found")
        )
    );

    api.db.pool.close().await;
    let (status, body) = api.call("GET", "/readyz", None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("unavailable"))
    );
}

#[tokio::test]
async fn a_job_whose_payload_is_not_of_its_type_fails_at_once_saying_so() {
    let api = TestApp::builder("api-test").build().await;
    api.call("POST", "/api/console/clusters", Some(cluster("tampered")))
        .await;
    // What a producer of another job type would have written.
    sqlx::query(r#"UPDATE cluster_jobs SET payload = '{"node_id": "x", "force": true}'"#)
        .execute(&api.db.pool)
        .await
        .unwrap();
    api.runner.run_until_idle().await;
    let (status, attempts, error): (String, i32, Option<String>) =
        sqlx::query_as("SELECT status, attempt_count, last_error FROM cluster_jobs")
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!((status.as_str(), attempts), ("failed", 1), "{error:?}");
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.starts_with("the job's payload is malformed: missing field")),
        "{error:?}"
    );
}

#[tokio::test]
async fn admins_read_the_job_queue_and_retry_or_cancel_jobs() {
    let api = TestApp::builder("api-test").build().await;
    let (_, body) = api
        .call("POST", "/api/console/clusters", Some(cluster("failing")))
        .await;
    let failing = body["cluster"]["id"].as_str().unwrap().to_string();
    // No host adapter here: the create job fails at once.
    api.runner.run_until_idle().await;
    let (_, body) = api
        .call("POST", "/api/console/clusters", Some(cluster("waiting")))
        .await;
    let waiting = body["cluster"]["id"].as_str().unwrap().to_string();

    let (status, failed) = api
        .call("GET", "/api/console/admin/cluster-jobs?status=failed", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(failed.as_array().unwrap().len(), 1);
    assert_eq!(failed[0]["cluster_id"], failing.as_str());
    assert_eq!(failed[0]["last_error"], job_cluster_create::NO_HOST_ADAPTER);
    let (_, by_cluster) = api
        .call(
            "GET",
            &format!("/api/console/admin/cluster-jobs?cluster_id={waiting}"),
            None,
        )
        .await;
    assert_eq!(by_cluster[0]["status"], "pending");
    let (status, body) = api
        .call(
            "GET",
            "/api/console/admin/cluster-jobs?status=exploded",
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_query"))
    );

    // Retry the failed one: pending again with fresh attempts, the cluster back in progress.
    let failed_id = failed[0]["id"].as_str().unwrap().to_string();
    let (status, retried) = api
        .call(
            "POST",
            &format!("/api/console/admin/cluster-jobs/{failed_id}/retry"),
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["status"], "pending");
    assert_eq!(retried["max_attempts"], 1 + 5);
    let (_, cluster) = api
        .call("GET", &format!("/api/console/clusters/{failing}"), None)
        .await;
    assert_eq!(cluster["status"], "provisioning");
    let (status, body) = api
        .call(
            "POST",
            &format!("/api/console/admin/cluster-jobs/{failed_id}/retry"),
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("job_not_failed"))
    );

    // Cancel the waiting one: it never runs.
    let waiting_job = by_cluster[0]["id"].as_str().unwrap().to_string();
    let (status, cancelled) = api
        .call(
            "POST",
            &format!("/api/console/admin/cluster-jobs/{waiting_job}/cancel"),
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    let (_, cluster) = api
        .call("GET", &format!("/api/console/clusters/{waiting}"), None)
        .await;
    assert_eq!(cluster["status"], "failed");
    assert_eq!(
        cluster["last_error_message"],
        "cancelled by an administrator"
    );
    let (status, body) = api
        .call(
            "POST",
            &format!("/api/console/admin/cluster-jobs/{waiting_job}/cancel"),
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("job_not_pending"))
    );

    let done = api.runner.run_until_idle().await;
    let outcomes: Vec<_> = done
        .iter()
        .map(|(m, p)| (m.job_id.to_string(), p.clone()))
        .collect();
    assert!(
        outcomes.contains(&(failed_id.clone(), shared::jobs::Processed::Failed)),
        "the retry ran: {outcomes:?}"
    );
    assert!(
        !outcomes
            .iter()
            .any(|(id, p)| id == &waiting_job && *p != shared::jobs::Processed::Skipped),
        "{outcomes:?}"
    );

    // The administrator's actions (the clusters' creates are audited too).
    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_events WHERE actor_kind = 'admin' OR action LIKE 'cluster_job.%' ORDER BY id",
    )
    .fetch_all(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(actions, ["cluster_job.retry", "cluster_job.cancel"]);
}

#[tokio::test]
async fn the_job_queue_is_for_administrators_only() {
    let api = TestApp::builder("api-test").build().await;
    let user: Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name) VALUES ('bob@example.com', 'Bob') RETURNING id",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    let (status, body) = api
        .client_with(Identity::Development(user))
        .call("GET", "/api/console/admin/cluster-jobs", None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    let (status, _) = api
        .client_with(Identity::Accounts)
        .call("GET", "/api/console/admin/cluster-jobs", None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn every_answer_carries_the_security_headers_and_the_limits_hold() {
    let api = TestApp::builder("api-test").build().await;
    let get = |path: &str| Request::get(path).body(Body::empty()).unwrap();
    let router = |settings: &[(&str, &str)]| {
        let source: std::collections::HashMap<&str, &str> = settings.iter().copied().collect();
        let state = AppState {
            settings: Arc::new(Settings::from_source(&source).unwrap()),
            ..api.state.clone()
        };
        with_common_layers(
            api_clusters::router().route(
                "/slow",
                axum::routing::get(|| async {
                    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
                    "done"
                }),
            ),
            state,
        )
    };
    let plain = router(&[]);
    for request in [
        get("/api/console/clusters"),
        get("/api/nothing-here"),
        get("/healthz"),
    ] {
        let response = plain.clone().oneshot(request).await.unwrap();
        let headers = response.headers();
        for (name, value) in [
            ("x-content-type-options", "nosniff"),
            ("x-frame-options", "DENY"),
            ("cache-control", "no-store"),
            ("referrer-policy", "no-referrer"),
        ] {
            assert_eq!(headers[name], value, "{name}");
        }
        assert!(
            headers["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        assert!(
            headers.get("strict-transport-security").is_none(),
            "not over HTTPS"
        );
    }
    // Every answer names its request: the caller's id, or a new one.
    let response = plain.clone().oneshot(get("/healthz")).await.unwrap();
    let id = response.headers()["x-request-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
    let mut traced = get("/api/console/clusters");
    traced
        .headers_mut()
        .insert("x-request-id", "trace-7".parse().unwrap());
    let response = plain.clone().oneshot(traced).await.unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-7");

    let https = router(&[("KUBEBYON_PUBLIC_BASE_URL", "https://kubebyon.example.com")]);
    let response = https.oneshot(get("/healthz")).await.unwrap();
    assert!(
        response.headers()["strict-transport-security"]
            .to_str()
            .unwrap()
            .starts_with("max-age=")
    );

    // A request past its time is stopped and answered.
    let hurried = router(&[("KUBEBYON_REQUEST_TIMEOUT_MS", "50")]);
    let response = hurried.oneshot(get("/slow")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["code"], "timed_out");

    // Past the requests in flight, the next is shed at once, not queued.
    let narrow = router(&[("KUBEBYON_MAX_CONCURRENT_REQUESTS", "1")]);
    let first = tokio::spawn(narrow.clone().oneshot(get("/slow")));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let second = narrow.clone().oneshot(get("/slow")).await.unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < std::time::Duration::from_millis(300));
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(
        narrow.oneshot(get("/slow")).await.unwrap().status(),
        StatusCode::OK,
        "the slot is free again"
    );
}

#[tokio::test]
async fn administrators_define_plans_and_one_in_use_is_deactivated_not_deleted() {
    let api = TestApp::builder("api-test").build().await;
    let plan_body = |name: &str, max_clusters: i64| {
        serde_json::json!({
            "name": name, "max_clusters": max_clusters, "max_nodes": 20,
            "max_cpu_milli_cores": 32000, "max_memory_mib": 65536, "max_hostnames": 10,
            "price_minor_units": 4900, "currency": "eur", "stripe_price_id": "price_1PqRsT",
        })
    };
    let (status, plan) = api
        .call(
            "POST",
            "/api/console/admin/plans",
            Some(plan_body("  Pro  ", 5)),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{plan}");
    assert_eq!(
        (
            plan["name"].as_str(),
            plan["active"].as_bool(),
            plan["max_clusters"].as_i64()
        ),
        (Some("Pro"), Some(true), Some(5))
    );
    let id = plan["id"].as_str().unwrap().to_string();

    // The same name (its edge spaces trimmed) and invalid fields are refused,
    // and nothing is written.
    let (status, body) = api
        .call(
            "POST",
            "/api/console/admin/plans",
            Some(plan_body("Pro", 1)),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("plan_name_taken"))
    );
    let mut invalid = plan_body("Pro\u{1}Max", 1);
    invalid["currency"] = "EUR".into();
    invalid["price_minor_units"] = (-1).into();
    let (status, body) = api
        .call("POST", "/api/console/admin/plans", Some(invalid))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let fields = crate::harness::problem_fields(&body);
    assert_eq!(fields, ["name", "price_minor_units", "currency"], "{body}");
    assert_eq!(api.count("plans").await, 1);

    // Replaced: new limits, deactivated.
    let mut change = plan_body("Pro", 8);
    change["active"] = false.into();
    let (status, plan) = api
        .call(
            "PUT",
            &format!("/api/console/admin/plans/{id}"),
            Some(change),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    let (_, read) = api
        .call("GET", &format!("/api/console/admin/plans/{id}"), None)
        .await;
    assert_eq!(
        (read["max_clusters"].as_i64(), read["active"].as_bool()),
        (Some(8), Some(false))
    );

    // An order refers to it: it cannot be deleted.
    let user: Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name) VALUES ('carol@example.com', 'Carol') RETURNING id",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO orders (user_id, plan_id, amount, currency) VALUES ($1, $2::uuid, 4900, 'eur')")
        .bind(user)
        .bind(&id)
        .execute(&api.db.pool)
        .await
        .unwrap();
    let (status, body) = api
        .call("DELETE", &format!("/api/console/admin/plans/{id}"), None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("plan_in_use")),
        "{body}"
    );
    assert_eq!(api.count("plans").await, 1);

    // One no order refers to is deleted.
    let (_, free) = api
        .call(
            "POST",
            "/api/console/admin/plans",
            Some(plan_body("Free", 1)),
        )
        .await;
    let free_id = free["id"].as_str().unwrap();
    let (status, _) = api
        .call(
            "DELETE",
            &format!("/api/console/admin/plans/{free_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api
        .call("GET", &format!("/api/console/admin/plans/{free_id}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = api.call("GET", "/api/console/admin/plans", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);

    // Each change is in the audit stream, and only administrators see plans.
    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_events WHERE target_kind = 'plan' ORDER BY id",
    )
    .fetch_all(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            "admin.plan.create",
            "admin.plan.update",
            "admin.plan.create",
            "admin.plan.delete"
        ]
    );
    let (status, _) = api
        .client_with(Identity::Development(user))
        .call("GET", "/api/console/admin/plans", None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// The back office lists every organization's clusters with their owners,
/// newest first, by a part of the name and by status, a page at a time;
/// for administrators only.
#[tokio::test]
async fn admins_list_every_organization_s_clusters() {
    let api = TestApp::builder("api-test").build().await;
    let bob: Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name) VALUES ('bob@example.com', 'Bob') RETURNING id",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    let bobs = api.client_with(Identity::Development(bob));
    api.call("POST", "/api/console/clusters", Some(cluster("shop-eu")))
        .await;
    let (status, made) = bobs
        .call("POST", "/api/console/clusters", Some(cluster("shop-us")))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{made}");
    api.call("POST", "/api/console/clusters", Some(cluster("blog")))
        .await;
    // No host adapter here: every create job fails at once but the last's.
    api.runner.run_until_idle().await;
    api.call("POST", "/api/console/clusters", Some(cluster("docs")))
        .await;

    let names = |page: &serde_json::Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, all) = api.call("GET", "/api/console/admin/clusters", None).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(names(&all), ["docs", "blog", "shop-us", "shop-eu"]);
    assert_eq!(all["items"][2]["owner_email"], "bob@example.com");
    assert_eq!(
        all["items"][2]["organization_id"],
        made["cluster"]["organization_id"]
    );
    let (_, shops) = api
        .call("GET", "/api/console/admin/clusters?q=SHOP", None)
        .await;
    assert_eq!(names(&shops), ["shop-us", "shop-eu"]);
    // The last one made, its job not run yet: the only one in its status.
    let waiting = all["items"][0]["status"].as_str().unwrap();
    assert_ne!(waiting, "failed");
    let (_, in_status) = api
        .call(
            "GET",
            &format!("/api/console/admin/clusters?status={waiting}"),
            None,
        )
        .await;
    assert_eq!(names(&in_status), ["docs"]);
    let (_, failed_shops) = api
        .call(
            "GET",
            "/api/console/admin/clusters?q=shop&status=failed",
            None,
        )
        .await;
    assert_eq!(names(&failed_shops), ["shop-us", "shop-eu"]);

    // A page at a time, none listed twice.
    let mut seen = Vec::new();
    let mut path = "/api/console/admin/clusters?limit=3".to_string();
    loop {
        let (status, page) = api.call("GET", &path, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        seen.extend(names(&page));
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/api/console/admin/clusters?limit=3&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, ["docs", "blog", "shop-us", "shop-eu"]);

    for (query, status, code) in [
        (
            "q=%25",
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        ),
        ("status=lost", StatusCode::BAD_REQUEST, "invalid_query"),
        ("cursor=x_1", StatusCode::BAD_REQUEST, "invalid_cursor"),
    ] {
        let (got, body) = api
            .call("GET", &format!("/api/console/admin/clusters?{query}"), None)
            .await;
        assert_eq!(
            (got, body["code"].as_str()),
            (status, Some(code)),
            "{query}: {body}"
        );
    }
    let (status, body) = bobs.call("GET", "/api/console/admin/clusters", None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
}
