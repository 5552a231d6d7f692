//! The cluster lifecycle end to end: the HTTP API, real PostgreSQL, the job
//! backbone, the host adapter (kube-rs) and the Kubernetes API simulator as the
//! k3s host. The tests that read vCluster's chart values run on vCluster;
//! the Kamaji engine's own are in `engines.rs` and `kubeadm_join.rs`.

use std::time::Duration;

use axum::http::StatusCode;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube_sim::Faults;
use shared::{
    domain::JobPayload,
    jobs::{self, JobMessage, Processed},
};

use crate::harness::{TestApp, host_settings, job_settings, node};
use tests::handlers::sweep;

async fn namespace_names(client: kube::Client) -> Vec<String> {
    let namespaces: Api<Namespace> = Api::all(client);
    namespaces
        .list(&Default::default())
        .await
        .expect("the vCluster API answers with the kubeconfig's credentials")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect()
}

#[tokio::test]
async fn create_builds_the_control_plane_and_its_kubeconfig_reaches_the_vcluster() {
    let platform = TestApp::builder("worker-b")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host()
        .build()
        .await;
    let id = platform.create("alpha", "nodeport").await;

    let (status, body) = platform
        .call(
            "POST",
            &format!("/api/console/clusters/{id}/kubeconfigs"),
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("kubeconfig_unavailable"))
    );

    let done = platform.drive().await;
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].1, Processed::Succeeded);

    let cluster = platform.cluster(&id).await;
    assert_eq!(cluster["status"], "ready");
    assert_eq!(cluster["connection_status"], "connected");
    assert_eq!(cluster["kubeconfig_available"], true);
    let namespace = cluster["namespace"].as_str().unwrap();
    assert!(
        platform.sim().vcluster(namespace, "alpha").is_some(),
        "the vCluster API runs"
    );
    let service = platform
        .sim()
        .get("v1", "Service", namespace, "alpha-public")
        .unwrap();
    assert_eq!(
        cluster["api_endpoint"],
        format!(
            "https://localhost:{}",
            service["spec"]["ports"][0]["nodePort"]
        )
    );

    // What the host got, read back from the simulated API.
    let ns = platform
        .sim()
        .get("v1", "Namespace", "", namespace)
        .unwrap();
    assert_eq!(
        ns["metadata"]["labels"]["kubebyon.dev/cluster-id"],
        id.as_str()
    );
    assert!(
        platform
            .sim()
            .get("v1", "ResourceQuota", namespace, "kubebyon-control-plane")
            .is_some()
    );
    assert!(
        platform
            .sim()
            .get("v1", "LimitRange", namespace, "kubebyon-defaults")
            .is_some()
    );
    // Fenced: only the API port is open from outside the namespace, and
    // nothing leaves it for another tenant's pods.
    let policy = platform
        .sim()
        .get(
            "networking.k8s.io/v1",
            "NetworkPolicy",
            namespace,
            "kubebyon-isolation",
        )
        .expect("the control plane's namespace has a network policy");
    let spec = &policy["spec"];
    assert_eq!(spec["podSelector"], serde_json::json!({}));
    assert_eq!(
        spec["policyTypes"],
        serde_json::json!(["Ingress", "Egress"])
    );
    assert_eq!(
        spec["ingress"],
        serde_json::json!([
            {"from": [{"podSelector": {}}]},
            {"ports": [{"protocol": "TCP", "port": 8443}]},
        ])
    );
    let egress = spec["egress"].as_array().unwrap();
    assert_eq!(egress[0], serde_json::json!({"to": [{"podSelector": {}}]}));
    assert_eq!(
        egress[2]["to"][0]["ipBlock"],
        serde_json::json!({"cidr": "0.0.0.0/0", "except": ["10.42.0.0/16", "169.254.0.0/16"]}),
        "no other tenant's pod, no instance metadata"
    );
    assert!(
        egress
            .iter()
            .all(|rule| rule["to"].as_array().unwrap().iter().all(|peer| peer
                .get("namespaceSelector")
                .is_none()
                || peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                    == "kube-system")),
        "no other namespace is reachable: {egress:?}"
    );
    let chart = platform
        .sim()
        .get("helm.cattle.io/v1", "HelmChart", namespace, "alpha")
        .unwrap();
    assert_eq!(chart["spec"]["chart"], "vcluster");
    assert_eq!(chart["metadata"]["managedFields"][0]["manager"], "kubebyon");
    let values: serde_json::Value =
        serde_json::from_str(chart["spec"]["valuesContent"].as_str().unwrap()).unwrap();
    assert_eq!(values["privateNodes"]["enabled"], true);
    assert_eq!(
        values["controlPlane"]["statefulSet"]["persistence"]["volumeClaim"]["storageClass"],
        "longhorn"
    );
    assert_eq!(
        values["controlPlane"]["statefulSet"]["resources"]["requests"]["cpu"],
        "750m"
    );
    // A limit above the request, so the namespace's LimitRange default
    // (500m) is never the container's limit.
    assert_eq!(
        values["controlPlane"]["statefulSet"]["resources"]["limits"]["cpu"],
        "1500m"
    );
    assert_eq!(
        values["controlPlane"]["distro"]["k8s"]["image"]["tag"],
        "v1.33.5"
    );
    let service = platform
        .sim()
        .get("v1", "Service", namespace, "alpha-public")
        .unwrap();
    assert_eq!(service["spec"]["type"], "NodePort");

    // The kubeconfig works against the vCluster with a real kube-rs client.
    let client = platform.kube_client_from_kubeconfig(&id).await;
    let names = namespace_names(client).await;
    assert!(
        names.contains(&"default".to_string()) && names.contains(&"kube-system".to_string()),
        "{names:?}"
    );

    let (_, operations) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/operations"),
            None,
        )
        .await;
    assert_eq!(operations[0]["status"], "succeeded");
    let (_, job_list) = platform
        .call("GET", &format!("/api/console/clusters/{id}/jobs"), None)
        .await;
    assert_eq!(job_list[0]["attempt_count"], 1);
}

#[tokio::test]
async fn changing_the_public_access_mode_moves_the_endpoint_and_the_kubeconfig() {
    let platform = TestApp::builder("worker-b")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host()
        .build()
        .await;
    let id = platform.create("beta", "nodeport").await;
    platform.drive().await;
    let before = platform.cluster(&id).await;
    assert!(
        before["api_endpoint"]
            .as_str()
            .unwrap()
            .starts_with("https://localhost:")
    );

    let (status, body) = platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(serde_json::json!({"public_access_mode": "loadbalancer"})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["operation"]["type"], "update");
    assert_eq!(body["cluster"]["status"], "updating");
    assert_eq!(platform.drive().await[0].1, Processed::Succeeded);

    let after = platform.cluster(&id).await;
    assert_eq!(after["status"], "ready");
    assert_eq!(after["public_access_mode"], "loadbalancer");
    let endpoint = after["api_endpoint"].as_str().unwrap();
    assert!(
        endpoint.starts_with(&format!("https://{}:", kube_sim::LOAD_BALANCER_IP)),
        "{endpoint}"
    );
    assert_ne!(after["api_endpoint"], before["api_endpoint"]);
    let namespace = after["namespace"].as_str().unwrap();
    let service = platform
        .sim()
        .get("v1", "Service", namespace, "beta-public-lb")
        .unwrap();
    assert_eq!(service["spec"]["type"], "LoadBalancer");
    assert!(
        platform
            .sim()
            .get("v1", "Service", namespace, "beta-public")
            .is_none(),
        "the NodePort goes once the switch is done (no grace period here)"
    );
    // The control plane's certificate names the address the load balancer
    // was given (the Service is made, and its address waited for, first),
    // and the one clients used until the switch.
    let chart = platform
        .sim()
        .get("helm.cattle.io/v1", "HelmChart", namespace, "beta")
        .unwrap();
    let values: serde_json::Value =
        serde_json::from_str(chart["spec"]["valuesContent"].as_str().unwrap()).unwrap();
    assert_eq!(
        values["controlPlane"]["proxy"]["extraSANs"],
        serde_json::json!([kube_sim::LOAD_BALANCER_IP, "localhost"])
    );
    // Which is what lets a client verify it there: a kubeconfig's kube
    // client reaches the cluster at the load balancer's address.
    let client = platform.kube_client_from_kubeconfig(&id).await;
    let namespaces: Api<Namespace> = Api::all(client);
    namespaces
        .list(&Default::default())
        .await
        .expect("the certificate names the load balancer's address");
    let stages = platform.latest_stages(&id).await;
    let at = |stage: &str| stages.iter().position(|s| s == stage);
    assert!(
        at("updating the public endpoint") < at("updating the control plane")
            && at("updating the public endpoint").is_some(),
        "{stages:?}"
    );

    let text = platform.issue_kubeconfig(&id, serde_json::json!({})).await;
    assert!(
        text.contains(endpoint),
        "the kubeconfig follows the endpoint"
    );
    let names = namespace_names(platform.kube_client_from_kubeconfig(&id).await).await;
    assert!(names.contains(&"default".to_string()));

    let (status, body) = platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(serde_json::json!({"workload_cpu_limit_milli_cores": 1})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("validation_failed"))
    );
}

#[tokio::test]
async fn delete_removes_the_namespace_and_soft_deletes_the_cluster() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("gamma", "nodeport").await;

    let (status, body) = platform
        .call("DELETE", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(platform.drive().await[0].1, Processed::Succeeded);

    assert!(
        platform
            .sim()
            .get("v1", "Namespace", "", &namespace)
            .is_none(),
        "the namespace is gone"
    );
    assert!(
        platform
            .sim()
            .get("helm.cattle.io/v1", "HelmChart", &namespace, "gamma")
            .is_none()
    );
    assert!(
        platform.sim().vcluster(&namespace, "gamma").is_none(),
        "the control plane stopped"
    );
    let (status, _) = platform
        .call("GET", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (deleted_at, cluster_status): (Option<chrono::DateTime<chrono::Utc>>, String) =
        sqlx::query_as("SELECT deleted_at, status FROM clusters WHERE id = $1::uuid")
            .bind(&id)
            .fetch_one(&platform.db.pool)
            .await
            .unwrap();
    assert!(deleted_at.is_some());
    assert_eq!(cluster_status, "deleted");
    // The name is free again.
    platform.create("gamma", "nodeport").await;
}

#[tokio::test]
async fn a_failed_chart_install_fails_the_create_and_names_the_step() {
    let platform = TestApp::builder("worker-b")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host()
        .build()
        .await;
    platform.sim().set_faults(Faults {
        chart_install_error: Some(
            "Error: INSTALLATION FAILED: storageclass \"longhorn\" not found".into(),
        ),
        ..Faults::default()
    });
    let id = platform.create("delta", "nodeport").await;
    assert_eq!(platform.drive().await[0].1, Processed::Failed);
    let cluster = platform.cluster(&id).await;
    assert_eq!(cluster["status"], "failed");
    assert_eq!(
        cluster["last_error_message"],
        "installing the control plane failed: Error: INSTALLATION FAILED: storageclass \"longhorn\" not found"
    );
    let (_, operations) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/operations"),
            None,
        )
        .await;
    assert_eq!(operations[0]["status"], "failed");
    assert_eq!(
        operations[0]["stage"],
        "waiting for the control plane to become ready"
    );
    assert_eq!(
        operations[0]["error_message"],
        cluster["last_error_message"]
    );
}

#[tokio::test]
async fn a_user_retries_a_failed_create_whose_failure_may_pass_and_only_that() {
    let platform = TestApp::builder("worker-b")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host()
        .build()
        .await;
    platform.sim().set_faults(Faults {
        chart_install_error: Some("Error: INSTALLATION FAILED: image pull timed out".into()),
        ..Faults::default()
    });
    let id = platform.create("zeta", "nodeport").await;
    assert_eq!(platform.drive().await[0].1, Processed::Failed);
    let history = format!("/api/console/clusters/{id}/operations");
    let failed = &platform.call("GET", &history, None).await.1[0];
    assert_eq!(failed["error"]["code"], "chart_install_failed", "{failed}");
    assert_eq!(failed["error"]["retryable"], true);
    assert!(failed["error"]["hint"].as_str().unwrap().contains("Retry"));
    let (_, jobs) = platform
        .call("GET", &format!("/api/console/clusters/{id}/jobs"), None)
        .await;
    assert_eq!(jobs[0]["error"]["code"], "chart_install_failed");
    assert_eq!(jobs[0]["error_history"][0]["code"], "chart_install_failed");
    let retry = format!(
        "/api/console/clusters/{id}/operations/{}/retry",
        failed["id"].as_str().unwrap()
    );

    // Another user's cluster, or another cluster's operation, is not found.
    let (status, body) = platform
        .call(
            "POST",
            &format!(
                "/api/console/clusters/{}/operations/{}/retry",
                uuid::Uuid::new_v4(),
                failed["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );

    // A failure that would repeat is refused, with what to do instead.
    sqlx::query("UPDATE cluster_jobs SET error_code = 'host_rejected' WHERE cluster_id = $1::uuid")
        .bind(&id)
        .execute(&platform.db.pool)
        .await
        .unwrap();
    let (status, body) = platform.call("POST", &retry, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("operation_not_retryable")),
        "{body}"
    );
    assert!(
        body["detail"].as_str().unwrap().contains("operator"),
        "{body}"
    );
    assert_eq!(
        platform.cluster(&id).await["status"],
        "failed",
        "nothing moved"
    );
    sqlx::query(
        "UPDATE cluster_jobs SET error_code = 'chart_install_failed' WHERE cluster_id = $1::uuid",
    )
    .bind(&id)
    .execute(&platform.db.pool)
    .await
    .unwrap();

    // The cause has gone: the retry runs the create again, to the end. Two
    // sent at once (a double click) retry it once: the other is told why.
    platform.sim().set_faults(Faults::default());
    let (first, second) = tokio::join!(
        platform.call("POST", &retry, None),
        platform.call("POST", &retry, None)
    );
    let (mut answers, refused): (Vec<_>, Vec<_>) = [first, second]
        .into_iter()
        .partition(|(status, _)| *status == StatusCode::ACCEPTED);
    assert_eq!(
        (answers.len(), refused.len()),
        (1, 1),
        "{answers:?} {refused:?}"
    );
    assert_eq!(refused[0].0, StatusCode::CONFLICT, "{refused:?}");
    let (_, accepted) = answers.remove(0);
    assert_eq!(accepted["operation"]["status"], "pending");
    assert_eq!(accepted["cluster"]["status"], "provisioning");
    assert_eq!(platform.drive().await[0].1, Processed::Succeeded);
    assert_eq!(platform.cluster(&id).await["status"], "ready");
    let done = &platform.call("GET", &history, None).await.1[0];
    assert_eq!(
        (done["status"].as_str(), &done["error"]),
        (Some("succeeded"), &serde_json::Value::Null)
    );
    // Every stage of both attempts, in order, each with when: the failed
    // install, the retry, the second attempt from its start, done.
    let stages: Vec<&str> = done["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    let at = |name: &str| stages.iter().position(|s| *s == name);
    let retried = at("queued for retry").unwrap_or_else(|| panic!("{stages:?}"));
    assert_eq!(
        stages[..retried].last(),
        Some(&"waiting for the control plane to become ready"),
        "the first attempt stopped where the install failed: {stages:?}"
    );
    assert_eq!(stages[0], "creating the namespace", "{stages:?}");
    assert_eq!(stages[retried + 1], "creating the namespace", "{stages:?}");
    // Only the retry had a failed install to remove, and says so.
    assert_eq!(
        at("removing the failed install").map(|i| i > retried),
        Some(true),
        "{stages:?}"
    );
    assert!(
        stages[retried..].contains(&"installing the control plane"),
        "{stages:?}"
    );
    assert_eq!(stages.last(), Some(&"done"));
    assert_eq!(stages.len(), done["stages"].as_array().unwrap().len());
    let times: Vec<chrono::DateTime<chrono::Utc>> = done["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["at"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    // A succeeded operation is not retried.
    let (status, body) = platform.call("POST", &retry, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("operation_not_failed"))
    );
    let (audited,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM audit_events WHERE action = 'cluster_operation.retry' AND cluster_id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(audited, 1);
}

#[tokio::test]
async fn an_unreachable_host_api_is_retried_not_failed() {
    let platform = TestApp::builder("worker-b").host().build().await;
    platform.sim().set_faults(Faults {
        api_down: true,
        ..Faults::default()
    });
    let id = platform.create("eps", "nodeport").await;
    assert_eq!(platform.drive().await[0].1, Processed::RetryScheduled);
    let (_, job_list) = platform
        .call("GET", &format!("/api/console/clusters/{id}/jobs"), None)
        .await;
    assert_eq!(job_list[0]["status"], "pending");
    assert!(
        job_list[0]["last_error"]
            .as_str()
            .unwrap()
            .starts_with("creating the namespace:"),
        "{job_list}"
    );
    assert_eq!(platform.cluster(&id).await["status"], "provisioning");
}

#[tokio::test]
async fn a_worker_killed_mid_create_is_resumed_by_another_and_the_cluster_becomes_ready_once() {
    let platform = TestApp::builder("worker-b")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host()
        .build()
        .await;
    platform.sim().set_faults(Faults {
        ready_delay: Some(Duration::from_millis(1500)),
        ..Faults::default()
    });
    let id = platform.create("zeta", "nodeport").await;
    let job_id: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM cluster_jobs WHERE cluster_id = $1::uuid")
            .bind(&id)
            .fetch_one(&platform.db.pool)
            .await
            .unwrap();
    let message = JobMessage {
        job_id,
        job_type: shared::clusters::ClusterCreation::KIND.job_type,
    };

    // Worker A gets as far as waiting for the control plane, then dies.
    let worker_a = platform.worker("worker-a");
    let a = tokio::spawn(async move { worker_a.process(message).await });
    tests::eventually(20, "worker A to reach the wait", || async {
        let operation: String =
            sqlx::query_scalar("SELECT stage FROM cluster_operations WHERE cluster_id = $1::uuid")
                .bind(&id)
                .fetch_one(&platform.db.pool)
                .await
                .unwrap();
        (operation == "waiting for the control plane to become ready").then_some(())
    })
    .await;
    a.abort();
    let _ = a.await;

    // Its lease runs out; the sweep hands the job on; worker B finishes it.
    tests::eventually(20, "the lease to expire", || async {
        let expired: bool =
            sqlx::query_scalar("SELECT leased_until < now() FROM cluster_jobs WHERE id = $1")
                .bind(job_id)
                .fetch_one(&platform.db.pool)
                .await
                .unwrap();
        expired.then_some(())
    })
    .await;
    let report = sweep(&platform.db.pool, &platform.dispatcher, &job_settings())
        .await
        .unwrap();
    assert_eq!((report.requeued, report.published), (1, 1));
    let done = platform.drive().await;
    assert_eq!(
        done.iter()
            .filter(|(_, p)| *p == Processed::Succeeded)
            .count(),
        1,
        "{done:?}"
    );

    let record = jobs::get(&platform.db.pool, job_id).await.unwrap().unwrap();
    assert_eq!(
        (record.status.as_str(), record.attempt_count),
        ("succeeded", 2)
    );
    assert_eq!(record.worker_id.as_deref(), Some("worker-b"));
    assert_eq!(record.error_history[0]["worker_id"], "worker-a");
    let cluster = platform.cluster(&id).await;
    assert_eq!(cluster["status"], "ready");
    let namespace = cluster["namespace"].as_str().unwrap();
    assert!(
        platform
            .sim()
            .get("helm.cattle.io/v1", "HelmChart", namespace, "zeta")
            .is_some()
    );
    let operations: i64 =
        sqlx::query_scalar("SELECT count(*) FROM cluster_operations WHERE cluster_id = $1::uuid")
            .bind(&id)
            .fetch_one(&platform.db.pool)
            .await
            .unwrap();
    assert_eq!(operations, 1);
}

#[tokio::test]
async fn of_two_concurrent_deletes_one_is_accepted_and_one_is_409() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let id = platform.create("eta", "nodeport").await;
    platform.drive().await;
    let path = format!("/api/console/clusters/{id}");
    let (first, second) = tokio::join!(
        platform.call("DELETE", &path, None),
        platform.call("DELETE", &path, None)
    );
    let mut statuses = [first.0, second.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::ACCEPTED, StatusCode::CONFLICT]);
    let conflict = if first.0 == StatusCode::CONFLICT {
        first.1
    } else {
        second.1
    };
    assert_eq!(conflict["code"], "cluster_delete_in_progress");
    let jobs: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM cluster_jobs WHERE cluster_id = $1::uuid AND type = 'cluster_delete'",
    )
    .bind(&id)
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(jobs, 1);
}

#[tokio::test]
async fn observation_records_whether_each_control_plane_answers() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("theta", "nodeport").await;
    let vcluster = platform.sim().vcluster(&namespace, "theta").unwrap();

    let report = platform.observe().await;
    assert_eq!((report.connected, report.unreachable), (1, 0));
    let seen = platform.cluster(&id).await;
    assert_eq!(seen["connection_status"], "connected");

    vcluster.set_faults(Faults {
        api_down: true,
        ..Faults::default()
    });
    let report = platform.observe().await;
    assert_eq!((report.connected, report.unreachable), (0, 1));
    let lost = platform.cluster(&id).await;
    assert_eq!(lost["connection_status"], "unreachable");
    assert_eq!(
        lost["last_observed_at"], seen["last_observed_at"],
        "last seen stays when it was last seen"
    );

    vcluster.set_faults(Faults::default());
    platform.observe().await;
    assert_eq!(
        platform.cluster(&id).await["connection_status"],
        "connected"
    );
}

#[tokio::test]
async fn a_gateway_api_release_before_v1_5_gets_its_tlsroute_at_v1alpha2() {
    let mut settings = host_settings();
    settings.load_balancer = shared::host::LoadBalancerProvider::GatewayApi {
        gateway_name: "kubebyon-edge".into(),
        gateway_namespace: "kubebyon-system".into(),
        base_domain: "clusters.example.test".into(),
    };
    // On Kamaji: the route's backend is Kamaji's Service on the node port
    // the API server listens on, which its nodes dial.
    let platform = TestApp::builder("worker-b")
        .host_with(settings)
        .build()
        .await;
    // v1.2–v1.4's experimental channel: TLSRoute v1alpha2 (and v1alpha3), no v1.
    platform.sim().set_faults(kube_sim::Faults {
        unserved_resources: vec!["gateway.networking.k8s.io/v1/tlsroutes".into()],
        ..kube_sim::Faults::default()
    });
    let id = platform.create("kappa", "loadbalancer").await;
    assert_eq!(platform.drive().await[0].1, Processed::Succeeded);
    let cluster = platform.cluster(&id).await;
    assert_eq!(cluster["status"], "ready", "{cluster}");
    let namespace = cluster["namespace"].as_str().unwrap();
    let route = platform
        .sim()
        .get(
            "gateway.networking.k8s.io/v1alpha2",
            "TLSRoute",
            namespace,
            "kappa",
        )
        .expect("the route at v1alpha2");
    let node_port = platform
        .sim()
        .get("v1", "Service", namespace, "kappa-public")
        .expect("the nodes' Service")["spec"]["ports"][0]["nodePort"]
        .clone();
    let tcp = platform
        .sim()
        .get(
            "kamaji.clastix.io/v1alpha1",
            "TenantControlPlane",
            namespace,
            "kappa",
        )
        .unwrap();
    assert_eq!(tcp["spec"]["networkProfile"]["port"], node_port, "{tcp}");
    assert_eq!(
        route["spec"]["rules"][0]["backendRefs"][0],
        serde_json::json!({"name": "kappa", "port": node_port}),
        "{route}"
    );
    assert!(
        platform
            .sim()
            .get(
                "gateway.networking.k8s.io/v1",
                "TLSRoute",
                namespace,
                "kappa"
            )
            .is_none()
    );
}

#[tokio::test]
async fn load_balanced_clusters_can_share_one_gateway_by_sni() {
    let mut settings = host_settings();
    settings.load_balancer = shared::host::LoadBalancerProvider::GatewayApi {
        gateway_name: "kubebyon-edge".into(),
        gateway_namespace: "kubebyon-system".into(),
        base_domain: "clusters.example.test".into(),
    };
    let platform = TestApp::builder("worker-b")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host_with(settings)
        .build()
        .await;
    // Gateway API v1.5's standard channel: TLSRoute v1, and v1alpha2 not
    // served (its CRD's `served: false`).
    platform.sim().set_faults(kube_sim::Faults {
        unserved_resources: vec!["gateway.networking.k8s.io/v1alpha2/tlsroutes".into()],
        ..kube_sim::Faults::default()
    });
    let id = platform.create("iota", "loadbalancer").await;
    assert_eq!(platform.drive().await[0].1, Processed::Succeeded);

    let cluster = platform.cluster(&id).await;
    let namespace = cluster["namespace"].as_str().unwrap();
    let host = format!("iota-{}.clusters.example.test", &id.replace('-', "")[..8]);
    assert_eq!(cluster["api_endpoint"], format!("https://{host}:443"));
    let route = platform
        .sim()
        .get(
            "gateway.networking.k8s.io/v1",
            "TLSRoute",
            namespace,
            "iota",
        )
        .unwrap();
    assert_eq!(route["spec"]["hostnames"][0], host.as_str());
    assert_eq!(route["spec"]["parentRefs"][0]["name"], "kubebyon-edge");
    assert_eq!(route["spec"]["rules"][0]["backendRefs"][0]["name"], "iota");
    for service in ["iota-public", "iota-public-lb"] {
        assert!(
            platform
                .sim()
                .get("v1", "Service", namespace, service)
                .is_none(),
            "no per-cluster load balancer"
        );
    }
    let chart = platform
        .sim()
        .get("helm.cattle.io/v1", "HelmChart", namespace, "iota")
        .unwrap();
    let values: serde_json::Value =
        serde_json::from_str(chart["spec"]["valuesContent"].as_str().unwrap()).unwrap();
    assert_eq!(
        values["controlPlane"]["proxy"]["extraSANs"][0],
        host.as_str(),
        "the certificate names the SNI host"
    );

    // Back to nodeport: the route goes, a NodePort Service comes.
    let (status, _) = platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(serde_json::json!({"public_access_mode": "nodeport"})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(platform.drive().await[0].1, Processed::Succeeded);
    assert!(
        platform
            .sim()
            .get(
                "gateway.networking.k8s.io/v1",
                "TLSRoute",
                namespace,
                "iota"
            )
            .is_none()
    );
    assert_eq!(
        platform
            .sim()
            .get("v1", "Service", namespace, "iota-public")
            .unwrap()["spec"]["type"],
        "NodePort"
    );
    assert!(
        platform.cluster(&id).await["api_endpoint"]
            .as_str()
            .unwrap()
            .starts_with("https://localhost:")
    );
    // The certificate names the address a NodePort is reached on.
    let chart = platform
        .sim()
        .get("helm.cattle.io/v1", "HelmChart", namespace, "iota")
        .unwrap();
    let values: serde_json::Value =
        serde_json::from_str(chart["spec"]["valuesContent"].as_str().unwrap()).unwrap();
    assert_eq!(
        values["controlPlane"]["proxy"]["extraSANs"],
        serde_json::json!(["localhost", host]),
        "the node address, and the SNI host clients used until the switch"
    );
}

#[tokio::test]
async fn node_sync_keeps_the_snapshot_and_appends_each_transition_once() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("kappa", "nodeport").await;
    let vcluster = platform.sim().vcluster(&namespace, "kappa").unwrap();
    let offline_after = Duration::from_secs(60);
    let sync = || sync_nodes::sync::sync_all(&platform.db.pool, platform.host(), 4, offline_after);
    let events = |query: String| {
        let platform = &platform;
        async move {
            let (status, body) = platform
                .call("GET", &format!("/api/console/node-events?{query}"), None)
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body.as_array()
                .unwrap()
                .iter()
                .map(|e| e["type"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    let now = chrono::Utc::now();

    vcluster.put(node("worker-1", "True", now)).unwrap();
    let report = sync().await.unwrap();
    assert_eq!((report.nodes, report.written, report.events), (1, 1, 2));
    assert_eq!(
        events(format!("cluster_id={id}")).await,
        ["ready", "joined"]
    );
    let (status, ip, cpu, memory): (String, String, i64, i64) = sqlx::query_as(
        "SELECT status, host(internal_ip), cpu_allocatable_milli_cores, memory_allocatable_bytes FROM nodes WHERE name = 'worker-1'",
    )
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), ip.as_str(), cpu, memory),
        ("ready", "192.0.2.10", 3800, 16 * 1024 * 1024)
    );

    // Nothing changed: nothing is written.
    let report = sync().await.unwrap();
    assert_eq!((report.written, report.events), (0, 0));

    // The kubelet stops posting: offline once the heartbeat is older than the threshold.
    vcluster
        .put(node(
            "worker-1",
            "True",
            now - chrono::Duration::seconds(120),
        ))
        .unwrap();
    sync().await.unwrap();
    // It comes back.
    vcluster
        .put(node("worker-1", "True", chrono::Utc::now()))
        .unwrap();
    sync().await.unwrap();
    // NotReady, then removed from the cluster.
    vcluster
        .put(node("worker-1", "False", chrono::Utc::now()))
        .unwrap();
    sync().await.unwrap();
    assert!(vcluster.remove("v1", "Node", "", "worker-1"));
    sync().await.unwrap();
    assert_eq!(
        events(format!("cluster_id={id}")).await,
        [
            "deleted",
            "not_ready",
            "ready",
            "offline",
            "ready",
            "joined"
        ],
        "newest first"
    );
    assert_eq!(
        events(format!("cluster_id={id}&type=ready")).await,
        ["ready", "ready"]
    );
    assert_eq!(
        events(format!("cluster_id={id}&limit=2")).await,
        ["deleted", "not_ready"]
    );
    let (status, body) = platform
        .call(
            "GET",
            &format!("/api/console/node-events?cluster_id={id}&limit=501"),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("validation_failed"))
    );
    // An unknown type, or a look-alike of a known one (Cyrillic `а`), is refused
    // with the list of types, not answered with an empty page.
    for bad in ["bogus", "re%D0%B0dy", "Ready"] {
        let (status, body) = platform
            .call(
                "GET",
                &format!("/api/console/node-events?cluster_id={id}&type={bad}"),
                None,
            )
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("validation_failed")),
            "{bad}: {body}"
        );
        assert!(
            body.to_string()
                .contains("joined, ready, not_ready, pending, offline or deleted"),
            "{body}"
        );
    }
    let (status, _) = platform
        .call(
            "GET",
            &format!(
                "/api/console/node-events?cluster_id={}",
                uuid::Uuid::new_v4()
            ),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// `q` finds clusters by a part of their name, in capitals too, across
/// pages, and a text no cluster's name can hold (a LIKE wildcard, a
/// look-alike letter, too long) is refused rather than searched for.
#[tokio::test]
async fn clusters_are_found_by_a_part_of_their_name() {
    let platform = TestApp::builder("worker-b").host().build().await;
    for name in ["shop-eu", "shop-us", "blog", "shop-asia"] {
        platform.create(name, "nodeport").await;
    }
    let names = |page: &serde_json::Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, page) = platform
        .call("GET", "/api/console/clusters?q=SHOP&limit=2", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(names(&page), ["shop-asia", "shop-us"], "newest first");
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, rest) = platform
        .call(
            "GET",
            &format!("/api/console/clusters?q=SHOP&limit=2&cursor={cursor}"),
            None,
        )
        .await;
    assert_eq!(names(&rest), ["shop-eu"]);
    assert!(rest["next_cursor"].is_null(), "{rest}");
    let (_, none) = platform
        .call("GET", "/api/console/clusters?q=wiki", None)
        .await;
    assert_eq!(names(&none), Vec::<String>::new());

    for q in ["%25", "sh_p", "sh%D0%BEp", "", &"a".repeat(64)] {
        let (status, body) = platform
            .call("GET", &format!("/api/console/clusters?q={q}"), None)
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{q}: {body}");
        assert_eq!(crate::harness::problem_fields(&body), ["q"], "{q}");
    }
}

/// Every change a user asks of a cluster is in the audit stream, written
/// with the operation it started: who, which cluster, which operation, and
/// for an update the fields it changes from what to what. A request refused
/// before its operation is written leaves no event, and a change to nothing
/// writes nothing at all.
#[tokio::test]
async fn a_cluster_s_create_update_and_delete_are_audited_and_a_refused_or_empty_change_is_not() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let id = platform.create("delta", "nodeport").await;
    platform.drive().await;
    // A change to nothing (no field, or a field as it is) writes nothing:
    // no operation, no job, no event.
    for nothing in [
        serde_json::json!({}),
        serde_json::json!({"public_access_mode": "nodeport"}),
    ] {
        let (status, body) = platform
            .call(
                "PATCH",
                &format!("/api/console/clusters/{id}"),
                Some(nothing),
            )
            .await;
        assert_eq!(
            (status, body["id"].as_str()),
            (StatusCode::OK, Some(id.as_str())),
            "{body}"
        );
        assert_eq!(body["status"], "ready");
    }
    let (_, operations) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/operations"),
            None,
        )
        .await;
    assert_eq!(operations.as_array().map(Vec::len), Some(1), "{operations}");
    let (status, update) = platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(serde_json::json!({"public_access_mode": "loadbalancer", "workload_memory_limit_mib": 8192})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{update}");
    platform.drive().await;
    let (status, _) = platform
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(serde_json::json!({"workload_cpu_limit_milli_cores": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, delete) = platform
        .call("DELETE", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{delete}");

    let events: Vec<(String, Option<uuid::Uuid>, String, serde_json::Value)> = sqlx::query_as(
        "SELECT action, actor_user_id, target_id, metadata FROM audit_events
         WHERE cluster_id = $1::uuid ORDER BY id",
    )
    .bind(&id)
    .fetch_all(&platform.db.pool)
    .await
    .unwrap();
    let actions: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        actions,
        ["cluster.create", "cluster.update", "cluster.delete"]
    );
    let (_, me) = platform.call("GET", "/api/auth/me", None).await;
    for (action, actor, target, metadata) in &events {
        assert_eq!(
            actor.map(|a| a.to_string()).as_deref(),
            me["id"].as_str(),
            "{action}"
        );
        assert_eq!(
            (target.as_str(), metadata["name"].as_str()),
            (id.as_str(), Some("delta"))
        );
        assert!(metadata["operation_id"].is_string(), "{action}: {metadata}");
    }
    let create = &events[0].3;
    assert_eq!(
        (
            create["workload_cpu_limit_milli_cores"].as_i64(),
            create["public_access_mode"].as_str()
        ),
        (Some(4000), Some("nodeport"))
    );
    // Only what the update changes: the memory it asked for is what it was.
    assert_eq!(
        events[1].3["changed"],
        serde_json::json!({"public_access_mode": {"from": "nodeport", "to": "loadbalancer"}})
    );
    assert_eq!(events[1].3["operation_id"], update["operation"]["id"]);
    assert_eq!(events[2].3["operation_id"], delete["operation"]["id"]);

    // The user reads them in their own activity.
    let (status, activity) = platform
        .call("GET", "/api/console/account/activity", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{activity}");
    let listed = activity.to_string();
    for action in ["cluster.create", "cluster.update", "cluster.delete"] {
        assert!(listed.contains(action), "{action} in {activity}");
    }

    // And in the cluster's own activity, newest first, each with who did
    // it and never the address it came from; another cluster's are not.
    platform.create("epsilon", "nodeport").await;
    let (status, activity) = platform
        .call("GET", &format!("/api/console/clusters/{id}/activity"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{activity}");
    let events = activity.as_array().unwrap();
    let actions: Vec<&str> = events
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["cluster.delete", "cluster.update", "cluster.create"]
    );
    for event in events {
        assert_eq!(event["actor_email"], me["email"], "{event}");
        assert!(event["ip"].is_null(), "{event}");
        assert_eq!(event["cluster_id"].as_str(), Some(id.as_str()));
    }
    let (_, older) = platform
        .call(
            "GET",
            &format!(
                "/api/console/clusters/{id}/activity?limit=1&before_id={}",
                events[0]["id"]
            ),
            None,
        )
        .await;
    assert_eq!(older[0]["action"], "cluster.update", "{older}");
    assert_eq!(older.as_array().map(Vec::len), Some(1));
}

/// A cluster's reads roll up its control plane and its live nodes into its
/// health and its node counts, one judgement for every client; the list
/// filters by it, and a health that is none is refused.
#[tokio::test]
async fn a_cluster_s_health_rolls_up_its_control_plane_and_its_nodes() {
    let platform = TestApp::builder("worker-b").build().await;
    let mut ids = std::collections::HashMap::new();
    for name in [
        "steady", "shaky", "lagging", "empty", "silent", "broken", "busy",
    ] {
        ids.insert(name, platform.create(name, "nodeport").await);
    }
    let pool = &platform.db.pool;
    sqlx::query(
        "UPDATE clusters SET status = 'ready', connection_status = 'connected'
         WHERE name <> 'busy'",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("UPDATE clusters SET status = 'failed' WHERE name = 'broken'")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("UPDATE clusters SET connection_status = 'unreachable' WHERE name = 'silent'")
        .execute(pool)
        .await
        .unwrap();
    // steady: one ready, one still joining, one removed while offline (a
    // removed node is not the cluster's any more); shaky: one ready, one
    // offline; lagging: one not ready; silent: one ready.
    for (cluster, node, status, removed) in [
        ("steady", "a", "ready", false),
        ("steady", "b", "pending", false),
        ("steady", "c", "offline", true),
        ("shaky", "a", "ready", false),
        ("shaky", "b", "offline", false),
        ("lagging", "a", "not_ready", false),
        ("silent", "a", "ready", false),
    ] {
        sqlx::query(
            "INSERT INTO nodes (cluster_id, name, status, source, deleted_at)
             VALUES ($1::uuid, $2, $3, 'sync', CASE WHEN $4 THEN now() END)",
        )
        .bind(&ids[cluster])
        .bind(node)
        .bind(status)
        .bind(removed)
        .execute(pool)
        .await
        .unwrap();
    }

    let (status, page) = platform.call("GET", "/api/console/clusters", None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let seen: std::collections::HashMap<String, (String, serde_json::Value)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                (
                    c["health"].as_str().unwrap().to_string(),
                    c["nodes"].clone(),
                ),
            )
        })
        .collect();
    let counts = |total, ready, not_ready, offline, pending| {
        serde_json::json!({
            "total": total, "ready": ready, "not_ready": not_ready,
            "offline": offline, "pending": pending,
        })
    };
    assert_eq!(seen["steady"], ("healthy".into(), counts(2, 1, 0, 0, 1)));
    assert_eq!(seen["shaky"], ("degraded".into(), counts(2, 1, 0, 1, 0)));
    assert_eq!(seen["lagging"], ("degraded".into(), counts(1, 0, 1, 0, 0)));
    assert_eq!(seen["empty"], ("no_nodes".into(), counts(0, 0, 0, 0, 0)));
    assert_eq!(
        seen["silent"],
        ("unreachable".into(), counts(1, 1, 0, 0, 0))
    );
    assert_eq!(seen["broken"].0, "failed");
    assert_eq!(seen["busy"].0, "in_progress");

    // The one cluster says the same.
    let (status, one) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{}", ids["shaky"]),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["health"], "degraded");
    assert_eq!(one["nodes"], counts(2, 1, 0, 1, 0));
    // What its workloads request: none before the platform observed them,
    // then what it observed last.
    assert_eq!(one["usage"], serde_json::Value::Null, "{one}");
    sqlx::query(
        "INSERT INTO cluster_workload_usage
             (cluster_id, cpu_requests_milli_cores, memory_requests_mib, pods, nodes, observed_at)
         VALUES ($1::uuid, 1250, 640, 7, 2, '2026-12-01T00:00:00Z')",
    )
    .bind(&ids["shaky"])
    .execute(pool)
    .await
    .unwrap();
    let (_, one) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{}", ids["shaky"]),
            None,
        )
        .await;
    assert_eq!(
        one["usage"],
        serde_json::json!({
            "cpu_requests_milli_cores": 1250, "memory_requests_mib": 640,
            "pods": 7, "observed_at": "2026-12-01T00:00:00Z",
        })
    );

    // Filtered: newest first, a page at a time, with the name search too.
    let names = |page: &serde_json::Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, degraded) = platform
        .call("GET", "/api/console/clusters?health=degraded&limit=1", None)
        .await;
    assert_eq!(names(&degraded), ["lagging"]);
    let cursor = degraded["next_cursor"].as_str().expect("a second page");
    let (_, rest) = platform
        .call(
            "GET",
            &format!("/api/console/clusters?health=degraded&limit=1&cursor={cursor}"),
            None,
        )
        .await;
    assert_eq!(names(&rest), ["shaky"]);
    assert!(rest["next_cursor"].is_null(), "{rest}");
    let (_, healthy) = platform
        .call("GET", "/api/console/clusters?health=healthy&q=STEAD", None)
        .await;
    assert_eq!(names(&healthy), ["steady"]);
    let (_, none) = platform
        .call("GET", "/api/console/clusters?health=healthy&q=shaky", None)
        .await;
    assert_eq!(names(&none), Vec::<String>::new());

    // By name, A to Z, a page at a time; with the health filter and the
    // search too. A cursor reads on only in the order that made it.
    let newest_cursor = cursor;
    let mut by_name = Vec::new();
    let mut at = String::new();
    loop {
        let (status, page) = platform
            .call(
                "GET",
                &format!("/api/console/clusters?sort=name&limit=3{at}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        by_name.extend(names(&page));
        match page["next_cursor"].as_str() {
            Some(next) => at = format!("&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(
        by_name,
        [
            "broken", "busy", "empty", "lagging", "shaky", "silent", "steady"
        ]
    );
    let (_, degraded) = platform
        .call(
            "GET",
            "/api/console/clusters?sort=name&health=degraded&limit=1",
            None,
        )
        .await;
    assert_eq!(names(&degraded), ["lagging"]);
    let by_name_cursor = degraded["next_cursor"].as_str().unwrap().to_string();
    let (_, rest) = platform
        .call(
            "GET",
            &format!(
                "/api/console/clusters?sort=name&health=degraded&limit=1&cursor={by_name_cursor}"
            ),
            None,
        )
        .await;
    assert_eq!(names(&rest), ["shaky"]);
    let (_, found) = platform
        .call("GET", "/api/console/clusters?sort=name&q=s", None)
        .await;
    assert_eq!(names(&found), ["busy", "shaky", "silent", "steady"]);
    for (query, code) in [
        (
            format!("sort=newest&cursor={by_name_cursor}"),
            "invalid_cursor",
        ),
        (
            format!("sort=name&cursor={newest_cursor}"),
            "invalid_cursor",
        ),
        ("sort=Name".to_string(), "invalid_query"),
        ("sort=name%00".to_string(), "invalid_query"),
    ] {
        let (status, body) = platform
            .call("GET", &format!("/api/console/clusters?{query}"), None)
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some(code)),
            "{query}: {body}"
        );
    }

    for health in ["sick", "Healthy", "healthy%00"] {
        let (status, body) = platform
            .call(
                "GET",
                &format!("/api/console/clusters?health={health}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{health}: {body}");
        assert_eq!(body["code"], "invalid_query", "{health}");
    }
}
