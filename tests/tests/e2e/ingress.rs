//! The managed workload ingress: installed in the simulated vCluster through
//! its own API by an `ingress_converge` job, followed to `ready` once a node
//! can run it, repaired after a failure, and removed without touching an
//! ingress controller of the user's.

use axum::http::StatusCode;
use serde_json::json;

use shared::{http::Identity, jobs::Processed};

use crate::harness::{TestApp, node};

/// The type and status of every job of the cluster, oldest first.
async fn jobs_of(platform: &TestApp, id: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT type, status FROM cluster_jobs WHERE cluster_id = $1::uuid ORDER BY created_at, id",
    )
    .bind(id)
    .fetch_all(&platform.db.pool)
    .await
    .unwrap()
}

fn pair(job_type: &str, status: &str) -> (String, String) {
    (job_type.to_string(), status.to_string())
}

#[tokio::test]
async fn the_managed_ingress_is_installed_followed_and_removed() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let id = platform.create_with_ingress("phi").await;
    let outcomes: Vec<Processed> = platform.drive().await.into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        outcomes,
        [Processed::Succeeded, Processed::Succeeded],
        "the create, then its follow-up"
    );
    assert_eq!(
        jobs_of(&platform, &id).await,
        [
            pair("cluster_create", "succeeded"),
            pair("ingress_converge", "succeeded")
        ]
    );
    let cluster = platform.cluster(&id).await;
    assert_eq!(cluster["status"], "ready");
    assert_eq!(
        cluster["managed_workload_ingress_status"], "provisioning",
        "no node can run it yet: {cluster}"
    );
    let vcluster = platform
        .sim()
        .vcluster(cluster["namespace"].as_str().unwrap(), "phi")
        .unwrap();

    // The controller's objects, applied by the platform's field manager.
    let class = vcluster
        .get("networking.k8s.io/v1", "IngressClass", "", "kubebyon")
        .expect("the IngressClass");
    assert_eq!(class["spec"]["controller"], "kubebyon.dev/ingress-nginx");
    let deployment = vcluster
        .get(
            "apps/v1",
            "Deployment",
            "kubebyon-ingress",
            "kubebyon-ingress",
        )
        .expect("the controller");
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--ingress-class=kubebyon")
            && args.contains("--controller-class=kubebyon.dev/ingress-nginx"),
        "{args}"
    );
    assert_eq!(
        deployment["metadata"]["managedFields"][0]["manager"],
        "kubebyon"
    );
    let service = vcluster
        .get("v1", "Service", "kubebyon-ingress", "kubebyon-ingress")
        .unwrap();
    assert_eq!(service["spec"]["type"], "NodePort");
    assert!(
        vcluster
            .get(
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                "",
                "kubebyon-ingress"
            )
            .is_some()
    );

    // A node joins: the controller becomes available and the observation
    // says so, with no job: an installed controller is only followed.
    vcluster
        .put(node("worker-1", "True", chrono::Utc::now()))
        .unwrap();
    assert_eq!(platform.observe().await.ingress_convergences, 0);
    assert!(platform.drive().await.is_empty());
    assert_eq!(
        platform.cluster(&id).await["managed_workload_ingress_status"],
        "ready"
    );

    // The user's own ingress controller lives beside ours.
    vcluster
        .put(json!({ "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": { "name": "nginx" },
                     "spec": { "controller": "k8s.io/ingress-nginx" } }))
        .unwrap();

    // Switched off: ours goes, theirs stays.
    let (status, body) = platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(json!({ "managed_workload_ingress_enabled": false })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    platform.drive().await;
    assert_eq!(
        jobs_of(&platform, &id).await[2..],
        [
            pair("cluster_update", "succeeded"),
            pair("ingress_converge", "succeeded")
        ]
    );
    let cluster = platform.cluster(&id).await;
    assert_eq!(
        cluster["managed_workload_ingress_status"], "disabled",
        "{cluster}"
    );
    assert!(
        vcluster
            .get("networking.k8s.io/v1", "IngressClass", "", "kubebyon")
            .is_none()
    );
    assert!(
        vcluster
            .get(
                "rbac.authorization.k8s.io/v1",
                "ClusterRole",
                "",
                "kubebyon-ingress"
            )
            .is_none()
    );
    assert!(
        vcluster
            .get("networking.k8s.io/v1", "IngressClass", "", "nginx")
            .is_some(),
        "the user's stays"
    );
}

#[tokio::test]
async fn a_failed_install_is_recorded_and_repaired_by_the_observation() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("chi", "nodeport").await;
    let vcluster = platform.sim().vcluster(&namespace, "chi").unwrap();
    vcluster
        .put(node("worker-1", "True", chrono::Utc::now()))
        .unwrap();

    vcluster.set_faults(kube_sim::Faults {
        api_down: true,
        ..Default::default()
    });
    let (status, _) = platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(json!({ "managed_workload_ingress_enabled": true })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    platform.drive().await;
    let cluster = platform.cluster(&id).await;
    assert_eq!(
        cluster["status"], "ready",
        "the cluster itself is fine: {cluster}"
    );
    assert_eq!(cluster["managed_workload_ingress_status"], "error");
    let error = cluster["managed_workload_ingress_last_error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.starts_with("installing the ingress controller failed"),
        "{cluster}"
    );
    assert_eq!(
        jobs_of(&platform, &id).await[1..],
        [
            pair("cluster_update", "succeeded"),
            pair("ingress_converge", "failed")
        ]
    );
    let (attempts, job_error): (i32, String) = sqlx::query_as(
        "SELECT attempt_count, last_error FROM cluster_jobs WHERE type = 'ingress_converge'",
    )
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(
        (attempts, job_error),
        (1, error),
        "one attempt, the same reason"
    );

    // Unreachable: no job is enqueued for it.
    assert_eq!(platform.observe().await.ingress_convergences, 0);

    // Reachable again: one convergence, and only one however often it is
    // observed; the cluster is busy with it meanwhile.
    vcluster.set_faults(kube_sim::Faults::default());
    assert_eq!(platform.observe().await.ingress_convergences, 1);
    assert_eq!(platform.observe().await.ingress_convergences, 0);
    assert_eq!(
        platform.cluster(&id).await["managed_workload_ingress_status"],
        "error",
        "the job, not the observation, installs"
    );
    let (status, body) = platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(json!({ "workload_cpu_limit_milli_cores": 3000 })),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(platform.drive().await.len(), 1);
    let cluster = platform.cluster(&id).await;
    assert_eq!(
        cluster["managed_workload_ingress_status"], "ready",
        "{cluster}"
    );
    assert!(cluster["managed_workload_ingress_last_error"].is_null());
}

#[tokio::test]
async fn hostname_bindings_follow_their_cert_manager_certificate() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("tau", "nodeport").await;
    let vcluster = platform.sim().vcluster(&namespace, "tau").unwrap();
    for hostname in ["shop.customer.test", "blog.customer.test"] {
        let (status, body) = platform
            .call(
                "POST",
                &format!("/api/console/clusters/{id}/hostnames"),
                Some(json!({ "hostname": hostname })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let certificate = |ready: &str, reason: &str| {
        json!({ "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": { "name": "shop", "namespace": "default" },
                "spec": { "secretName": "shop-tls", "dnsNames": ["shop.customer.test"], "issuerRef": { "name": "letsencrypt" } },
                "status": { "conditions": [{ "type": "Ready", "status": ready, "reason": reason, "message": "the ACME order failed" }] } })
    };
    let binding = |bindings: &serde_json::Value, hostname: &str| {
        bindings
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["hostname"] == hostname)
            .unwrap()
            .clone()
    };
    let tls = |bindings: &serde_json::Value, hostname: &str| {
        let b = binding(bindings, hostname);
        (
            b["tls_mode"].as_str().unwrap().to_string(),
            b["tls_status"].as_str().unwrap().to_string(),
            b["tls_last_error"].clone(),
        )
    };
    // One observation cycle, then the bindings as the API shows them.
    let observed_bindings = async || {
        platform.observe().await;
        platform
            .call(
                "GET",
                &format!("/api/console/clusters/{id}/hostnames"),
                None,
            )
            .await
            .1
    };

    vcluster.put(certificate("False", "Failed")).unwrap();
    // Unproven self-managed claims are not followed.
    let bindings = observed_bindings().await;
    assert_eq!(tls(&bindings, "shop.customer.test").0, "none");
    // Once their DNS challenge is found (what `…/verify` records), they are.
    sqlx::query("UPDATE workload_ingress_hostname_bindings SET verified_at = now()")
        .execute(&platform.db.pool)
        .await
        .unwrap();
    let bindings = observed_bindings().await;
    let (mode, status, error) = tls(&bindings, "shop.customer.test");
    assert_eq!((mode.as_str(), status.as_str()), ("cert_manager", "error"));
    assert_eq!(error, "Failed: the ACME order failed");
    assert_eq!(
        tls(&bindings, "blog.customer.test").1,
        "none",
        "no certificate covers it"
    );

    vcluster.put(certificate("True", "Ready")).unwrap();
    let bindings = observed_bindings().await;
    let shop = binding(&bindings, "shop.customer.test");
    assert_eq!(
        (
            shop["tls_status"].as_str(),
            shop["tls_secret_name"].as_str()
        ),
        (Some("ready"), Some("shop-tls"))
    );
    assert!(shop["tls_last_error"].is_null());
}

#[tokio::test]
async fn retrying_a_failed_convergence_leaves_the_cluster_ready() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("psi", "nodeport").await;
    let vcluster = platform.sim().vcluster(&namespace, "psi").unwrap();
    vcluster.set_faults(kube_sim::Faults {
        api_down: true,
        ..Default::default()
    });
    platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(json!({ "managed_workload_ingress_enabled": true })),
        )
        .await;
    platform.drive().await;
    let job_id: uuid::Uuid = sqlx::query_scalar(
        "SELECT id FROM cluster_jobs WHERE type = 'ingress_converge' AND status = 'failed'",
    )
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(platform.cluster(&id).await["status"], "ready");

    let Identity::Development(admin) = platform.state.identity else {
        unreachable!("the platform serves as the development user")
    };
    let (status, body) = platform
        .call_as(
            admin,
            "POST",
            &format!("/api/console/admin/cluster-jobs/{job_id}/retry"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let cluster = platform.cluster(&id).await;
    assert_eq!(
        cluster["status"], "ready",
        "an ingress job does not move the cluster: {cluster}"
    );

    vcluster.set_faults(kube_sim::Faults::default());
    assert_eq!(platform.drive().await[0].1, Processed::Succeeded);
    let cluster = platform.cluster(&id).await;
    assert_eq!(
        (
            cluster["status"].as_str(),
            cluster["managed_workload_ingress_status"].as_str()
        ),
        (Some("ready"), Some("provisioning"))
    );
}

#[tokio::test]
async fn no_convergence_is_enqueued_ahead_of_a_queued_delete() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let id = platform.create_with_ingress("omega").await;
    let (status, body) = platform
        .call("DELETE", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "queued behind the create: {body}"
    );

    platform.drive().await;
    assert_eq!(
        jobs_of(&platform, &id).await,
        [pair("cluster_create", "succeeded")],
        "the delete waits for the sweep; no ingress work goes ahead of it"
    );
    let operations: Vec<(String, String)> = sqlx::query_as(
        "SELECT type, status FROM cluster_operations WHERE cluster_id = $1::uuid ORDER BY created_at",
    )
    .bind(&id)
    .fetch_all(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(
        operations,
        [pair("create", "succeeded"), pair("delete", "pending")]
    );
}
