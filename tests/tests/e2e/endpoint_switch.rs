//! Switching a cluster's endpoint as one job: a cluster moved from
//! `nodeport` to `loadbalancer` gets its new address verified before it is
//! recorded; `kubectl` with the kubeconfig issued before keeps working for
//! the grace period and is refused once the old entry is retired, while one
//! issued after works; the list marks the old kubeconfig stale, join scripts
//! name the new address and the owner is notified. Two switches asked at
//! once: one is accepted, the other refused while it runs. (The failed
//! verification, with HAProxy stopped, is in `haproxy.rs`.)

use shared::domain::JobPayload;
use std::{path::PathBuf, time::Duration};

use axum::http::StatusCode;
use serde_json::{Value, json};
use shared::jobs::Processed;

use crate::harness::{TestApp, host_settings};

/// A kubeconfig as downloaded, in a directory of its own, for `kubectl`.
struct Kubeconfig {
    dir: PathBuf,
}

impl Kubeconfig {
    async fn issue(app: &TestApp, id: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kb-switch-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config"),
            app.issue_kubeconfig(id, json!({})).await,
        )
        .unwrap();
        Self { dir }
    }

    /// `kubectl get namespaces` with it: whether it succeeded, and what it said.
    async fn get_namespaces(&self) -> (bool, String) {
        let output = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.dir.join("config"))
            .args(["--request-timeout=5s", "get", "namespaces", "-o", "name"])
            .env("HOME", &self.dir)
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        (
            output.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    }
}

impl Drop for Kubeconfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A change of the cluster's public access mode, as the console asks it.
pub(crate) async fn switch(app: &TestApp, id: &str, mode: &str) -> (StatusCode, Value) {
    app.call(
        "PATCH",
        &format!("/api/console/clusters/{id}"),
        Some(json!({ "public_access_mode": mode })),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_switched_endpoint_is_verified_recorded_and_the_old_one_served_until_its_grace_ends() {
    switch_and_retire("vcluster").await;
}

/// On Kamaji the old node port is the nodes' endpoint: it outlives the
/// grace period, its kubeconfigs listed stale.
#[tokio::test(flavor = "multi_thread")]
async fn a_kamaji_cluster_switches_its_endpoint_and_keeps_the_node_port_its_nodes_dial() {
    switch_and_retire("kamaji").await;
}

async fn switch_and_retire(engine: &str) {
    let mut settings = host_settings();
    settings.endpoint_grace = Duration::from_secs(3600);
    let app = TestApp::builder("worker-switch")
        .env("KUBEBYON_ENGINE", engine)
        .host_with(settings)
        .build()
        .await;
    let id = app.create("delta", "nodeport").await;
    app.drive().await;
    let before = app.cluster(&id).await;
    let old = before["api_endpoint"].as_str().unwrap().to_string();
    assert!(old.starts_with("https://localhost:"), "{old}");
    let old_kubeconfig = Kubeconfig::issue(&app, &id).await;
    let (ok, out) = old_kubeconfig.get_namespaces().await;
    assert!(ok && out.contains("namespace/default"), "{out}");

    let (status, body) = switch(&app, &id, "loadbalancer").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Until the new endpoint is verified the cluster shows what serves it.
    assert_eq!(body["cluster"]["public_access_mode"], "nodeport", "{body}");
    assert_eq!(body["cluster"]["api_endpoint"], old.as_str());
    let done = app.drive().await;
    assert_eq!(done[0].1, Processed::Succeeded, "{done:?}");

    let after = app.cluster(&id).await;
    let new = after["api_endpoint"].as_str().unwrap().to_string();
    assert!(
        new.starts_with(&format!("https://{}:", kube_sim::LOAD_BALANCER_IP)),
        "{after}"
    );
    assert_eq!(after["public_access_mode"], "loadbalancer");
    assert_eq!(after["previous_api_endpoint"], old.as_str());
    assert_eq!(after["previous_public_access_mode"], "nodeport");
    let until: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(after["previous_endpoint_until"].clone()).unwrap();
    let left = until - chrono::Utc::now();
    assert!(
        left > chrono::Duration::minutes(59) && left <= chrono::Duration::minutes(60),
        "the grace period is the setting's: {left}"
    );

    // The switch verified the new address before recording it.
    let stages = app.latest_stages(&id).await;
    assert!(
        stages.iter().any(|s| s == "verifying the new endpoint"),
        "{stages:?}"
    );

    // Both addresses answer during the grace period: the old kubeconfig
    // (the certificate names both), and one issued now.
    let (ok, out) = old_kubeconfig.get_namespaces().await;
    assert!(ok, "the old address serves during the grace period: {out}");
    let new_kubeconfig = Kubeconfig::issue(&app, &id).await;
    let (ok, out) = new_kubeconfig.get_namespaces().await;
    assert!(ok, "{out}");
    let (_, listed) = app
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/kubeconfigs"),
            None,
        )
        .await;
    let stale: Vec<(Value, Value)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["api_endpoint"].clone(), k["stale"].clone()))
        .collect();
    assert_eq!(
        stale,
        [
            (json!(new.as_str()), json!(false)),
            (json!(old.as_str()), json!(true))
        ],
        "{listed}"
    );

    // A join script made now names the new address.
    let (status, created) = app
        .call(
            "POST",
            &format!("/api/console/clusters/{id}/tokens"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let script = app
        .machine(created["plaintext"].as_str().unwrap())
        .send("GET", "/join", None)
        .await;
    assert_eq!(script.status, 200);
    let script = script.body.as_str().unwrap();
    assert!(
        script.contains(&new) && !script.contains(&old),
        "the join script names the new endpoint"
    );

    // The owner hears of it, with both addresses and the end of the grace period.
    let notified: Vec<Value> = sqlx::query_scalar(
        "SELECT payload FROM notification_outbox
         WHERE kind = 'cluster_endpoint_changed' AND cluster_id = $1 AND user_id = $2",
    )
    .bind(uuid::Uuid::parse_str(&id).unwrap())
    .bind(app.development_user())
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(notified.len(), 1, "{notified:?}");
    assert_eq!(
        (
            &notified[0]["api_endpoint"],
            &notified[0]["previous_api_endpoint"]
        ),
        (&json!(new.as_str()), &json!(old.as_str()))
    );
    assert_eq!(
        shared::notifications::event_type("cluster_endpoint_changed"),
        "cluster.endpoint_changed"
    );

    // Nothing is due yet: the observation enqueues no retirement.
    assert_eq!(app.observe().await.endpoints_retired, 0);
    // The grace period passes.
    sqlx::query(
        "UPDATE clusters SET previous_endpoint_until = now() - interval '1 second' WHERE id = $1",
    )
    .bind(uuid::Uuid::parse_str(&id).unwrap())
    .execute(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(app.observe().await.endpoints_retired, 1);
    let done = app.drive().await;
    assert_eq!(
        done.iter()
            .map(|(m, p)| (m.job_type, p.clone()))
            .collect::<Vec<_>>(),
        [(
            shared::clusters::EndpointRetirement::KIND.job_type,
            Processed::Succeeded
        )]
    );
    let namespace = after["namespace"].as_str().unwrap();
    let node_service = app.sim().get("v1", "Service", namespace, "delta-public");
    let (ok, out) = old_kubeconfig.get_namespaces().await;
    if engine == "kamaji" {
        assert!(node_service.is_some(), "the nodes' Service stays");
        assert!(ok, "the node port still serves: {out}");
    } else {
        assert!(node_service.is_none(), "the old mode's Service is removed");
        assert!(
            !ok,
            "the old address is refused after the grace period: {out}"
        );
    }
    let (ok, out) = new_kubeconfig.get_namespaces().await;
    assert!(ok, "{out}");
    let retired = app.cluster(&id).await;
    assert_eq!(
        (
            &retired["previous_api_endpoint"],
            &retired["previous_endpoint_until"]
        ),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(app.observe().await.endpoints_retired, 0, "retired once");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_switches_at_once_are_serialized() {
    let app = TestApp::builder("worker-switch-race").host().build().await;
    let id = app.create("epsilon", "nodeport").await;
    app.drive().await;
    let ((first, a), (second, b)) = tokio::join!(
        switch(&app, &id, "loadbalancer"),
        switch(&app, &id, "loadbalancer"),
    );
    let mut statuses = [first, second];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::ACCEPTED, StatusCode::CONFLICT],
        "{a} {b}"
    );
    let refused = if first == StatusCode::CONFLICT {
        &a
    } else {
        &b
    };
    assert!(
        matches!(
            refused["code"].as_str(),
            Some("cluster_job_active" | "cluster_not_ready")
        ),
        "{refused}"
    );
    // While the switch runs, another is refused too.
    let (status, body) = switch(&app, &id, "nodeport").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let done = app.drive().await;
    assert_eq!(done.len(), 1, "one switch ran: {done:?}");
    assert_eq!(done[0].1, Processed::Succeeded);
    assert_eq!(app.cluster(&id).await["public_access_mode"], "loadbalancer");
    // Once it is over, the next one is taken.
    let (status, body) = switch(&app, &id, "nodeport").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(app.drive().await[0].1, Processed::Succeeded);
    let cluster = app.cluster(&id).await;
    assert_eq!(cluster["public_access_mode"], "nodeport");
    assert!(
        cluster["api_endpoint"]
            .as_str()
            .unwrap()
            .starts_with("https://localhost:"),
        "{cluster}"
    );
}

/// The operator changes the address NodePorts are reached on
/// (`KUBEBYON_HOST_NODE_ADDRESS`): `sync-clusters` finds the recorded
/// endpoint off what the settings give now and enqueues an update, which
/// switches the cluster as a change of mode does (verified, notified).
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_node_address_moves_the_clusters_through_a_switch() {
    let app = TestApp::builder("worker-switch-moved").host().build().await;
    let id = app.create("zeta", "nodeport").await;
    app.drive().await;
    let old = app.cluster(&id).await["api_endpoint"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(old.starts_with("https://localhost:"), "{old}");
    assert_eq!(app.observe().await.endpoints_moved, 0, "nothing moved yet");

    // The same host, as the platform sees it with the new setting.
    let mut settings = host_settings();
    settings.node_address = "127.0.0.1".into();
    let moved = std::sync::Arc::new(
        shared::host::HostCluster::from_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&app.sim().kubeconfig(None)).unwrap(),
            settings,
        )
        .await
        .unwrap(),
    );
    let enqueuing = sync_clusters::observe::Enqueuing {
        publisher: &app.dispatcher,
        max_attempts: 3,
    };
    let report = sync_clusters::observe::observe_clusters(&app.db.pool, &moved, enqueuing, 4)
        .await
        .unwrap();
    assert_eq!(report.endpoints_moved, 1, "{report:?}");
    let job: (uuid::Uuid,) = sqlx::query_as(
        "SELECT id FROM cluster_jobs WHERE status = 'pending' AND type = 'cluster_update'",
    )
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    let worker = shared::jobs::Worker::new(
        app.db.pool.clone(),
        crate::harness::job_settings(),
        "worker-moved",
        local::handlers(Some(moved.clone()), None),
    );
    let processed = worker
        .process(shared::jobs::JobMessage {
            job_id: job.0,
            job_type: shared::clusters::ClusterChanges::KIND.job_type,
        })
        .await
        .unwrap();
    assert_eq!(processed, Processed::Succeeded);
    let cluster = app.cluster(&id).await;
    let new = cluster["api_endpoint"].as_str().unwrap();
    assert_eq!(
        new,
        old.replace("https://localhost:", "https://127.0.0.1:"),
        "the same NodePort, at the new address"
    );
    let notified: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM notification_outbox WHERE kind = 'cluster_endpoint_changed'",
    )
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(notified, 1);
    let again = sync_clusters::observe::observe_clusters(&app.db.pool, &moved, enqueuing, 4)
        .await
        .unwrap();
    assert_eq!(again.endpoints_moved, 0, "moved once");
}
