//! Each cluster's pod and service networks: allocated from the configured
//! pools in the create request's transaction, never overlapping another
//! cluster's however many creates race, refused clearly when a pool is
//! exhausted, given to the control plane's chart, released on delete.

use axum::http::StatusCode;
use serde_json::json;
use shared::networks::Block;
use uuid::Uuid;

use crate::harness::{TestApp, host_settings};

/// A user with a personal organisation of their own, so their creates do
/// not wait on one another's plan lock.
async fn user(app: &TestApp, n: usize) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO users (email, display_name, role, email_verified_at)
         VALUES ($1, 'Tenant', 'user', now()) RETURNING id",
    )
    .bind(format!("tenant{n}@example.com"))
    .fetch_one(&app.db.pool)
    .await
    .unwrap()
}

fn create_body(name: &str) -> serde_json::Value {
    json!({
        "name": name, "workload_cpu_limit_milli_cores": 1000, "workload_memory_limit_mib": 1024,
        "public_access_mode": "nodeport",
    })
}

/// Every live cluster's networks, as the clusters' rows hold them, checked
/// against the allocation table.
async fn networks(app: &TestApp) -> Vec<(Block, Block)> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT c.pod_cidr::text, c.service_cidr::text,
                (SELECT count(*) FROM cluster_networks n
                  WHERE n.cluster_id = c.id
                    AND ((n.purpose = 'pod' AND n.cidr = c.pod_cidr)
                      OR (n.purpose = 'service' AND n.cidr = c.service_cidr)))
           FROM clusters c WHERE c.deleted_at IS NULL",
    )
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(pod, service, allocated)| {
            assert_eq!(allocated, 2, "both of {pod} and {service} are allocated");
            (pod.parse().unwrap(), service.parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_creates_get_networks_that_never_overlap() {
    let app = TestApp::builder("worker-networks")
        .env("KUBEBYON_POD_CIDR_POOLS", "10.64.0.0/12, 10.80.0.0/12")
        .env("KUBEBYON_POD_CIDR_PREFIX", "19")
        .env("KUBEBYON_SERVICE_CIDR_POOLS", "10.128.0.0/14")
        .env("KUBEBYON_SERVICE_CIDR_PREFIX", "22")
        .build()
        .await;
    let mut users = Vec::new();
    for n in 0..20 {
        users.push(user(&app, n).await);
    }
    let creates = (0..200).map(|i| {
        let client = app.client_as(users[i % users.len()]);
        async move {
            client
                .call(
                    "POST",
                    "/api/console/clusters",
                    Some(create_body(&format!("c{i}"))),
                )
                .await
        }
    });
    for (status, body) in futures_util::future::join_all(creates).await {
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert!(body["cluster"]["pod_cidr"].is_string(), "{body}");
    }

    let allocated = networks(&app).await;
    assert_eq!(allocated.len(), 200);
    let every: Vec<Block> = allocated.iter().flat_map(|(p, s)| [*p, *s]).collect();
    for (i, a) in every.iter().enumerate() {
        for b in &every[i + 1..] {
            assert!(!a.overlaps(*b), "{a} and {b} overlap");
        }
    }
    // Lowest first, pool by pool: the 128 blocks of the first pod pool,
    // then the first 72 of the second; the first 200 service blocks.
    let mut pods: Vec<String> = allocated.iter().map(|(p, _)| p.to_string()).collect();
    let mut services: Vec<Block> = allocated.iter().map(|(_, s)| *s).collect();
    pods.sort_by_key(|p| p.parse::<Block>().unwrap());
    services.sort();
    assert_eq!(pods[0], "10.64.0.0/19");
    assert_eq!(pods[127], "10.79.224.0/19");
    assert_eq!(pods[128], "10.80.0.0/19");
    assert_eq!(pods[199], "10.88.224.0/19");
    assert_eq!(services[0].to_string(), "10.128.0.0/22");
    assert_eq!(services[199].to_string(), "10.131.28.0/22");

    // The table itself refuses an overlap, whoever writes it: a cluster's
    // pod network moved onto another's is refused.
    let mut tx = app.db.pool.begin().await.unwrap();
    let moved: Uuid = sqlx::query_scalar(
        "DELETE FROM cluster_networks WHERE cidr = '10.88.224.0/19' RETURNING cluster_id",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    let refused = sqlx::query(
        "INSERT INTO cluster_networks (cidr, cluster_id, purpose) VALUES ('10.64.16.0/20', $1, 'pod')",
    )
    .bind(moved)
    .execute(&mut *tx)
    .await
    .unwrap_err();
    assert_eq!(
        refused
            .as_database_error()
            .and_then(|e| e.code())
            .as_deref(),
        Some("23P01"),
        "{refused}"
    );
}

#[tokio::test]
async fn an_exhausted_pool_is_refused_whole_and_a_deleted_cluster_s_networks_are_reused() {
    let app = TestApp::builder("worker-networks")
        .host_with(host_settings())
        .env("KUBEBYON_POD_CIDR_POOLS", "10.64.0.0/18")
        .env("KUBEBYON_POD_CIDR_PREFIX", "19")
        .env("KUBEBYON_SERVICE_CIDR_POOLS", "10.128.0.0/20")
        .env("KUBEBYON_SERVICE_CIDR_PREFIX", "21")
        .build()
        .await;
    let (first, namespace) = app.create_ready("first", "nodeport").await;
    let (_second, _) = app.create_ready("second", "nodeport").await;
    let cluster = app.cluster(&first).await;
    assert_eq!(cluster["pod_cidr"], "10.64.0.0/19");
    assert_eq!(cluster["service_cidr"], "10.128.0.0/21");
    // The control plane is made with them.
    let tcp = app
        .sim()
        .get(
            "kamaji.clastix.io/v1alpha1",
            "TenantControlPlane",
            &namespace,
            "first",
        )
        .unwrap();
    assert_eq!(
        (
            &tcp["spec"]["networkProfile"]["podCidr"],
            &tcp["spec"]["networkProfile"]["serviceCidr"]
        ),
        (&json!("10.64.0.0/19"), &json!("10.128.0.0/21"))
    );

    // Both pools are full: refused with its code, and nothing written.
    let before = (
        app.count("clusters").await,
        app.count("cluster_operations").await,
        app.count("cluster_jobs").await,
        app.count("audit_events").await,
    );
    let (status, body) = app
        .call("POST", "/api/console/clusters", Some(create_body("third")))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "network_pool_exhausted");
    assert!(
        body["detail"].as_str().unwrap().contains("pod network"),
        "{body}"
    );
    let after = (
        app.count("clusters").await,
        app.count("cluster_operations").await,
        app.count("cluster_jobs").await,
        app.count("audit_events").await,
    );
    assert_eq!(before, after, "a refused create leaves nothing behind");

    // Deleted: its networks are free once its namespace is gone, and the
    // next cluster gets them; the deleted cluster's row keeps what it had.
    let (status, body) = app
        .call("DELETE", &format!("/api/console/clusters/{first}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    app.drive().await;
    let third = app.create("third", "nodeport").await;
    let cluster = app.cluster(&third).await;
    assert_eq!(cluster["pod_cidr"], "10.64.0.0/19");
    assert_eq!(cluster["service_cidr"], "10.128.0.0/21");
    let kept: (String,) = sqlx::query_as("SELECT pod_cidr::text FROM clusters WHERE id = $1::uuid")
        .bind(&first)
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(kept.0, "10.64.0.0/19");
    assert_eq!(networks(&app).await.len(), 2);
}
