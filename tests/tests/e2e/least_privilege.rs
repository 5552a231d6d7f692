//! The platform on a host that holds its identities to RBAC, with the
//! chart's ServiceAccounts and roles (`templates/serviceaccounts.yaml`): the
//! jobs and schedules act as `kb-host`, the HTTP functions as
//! `kb-credentials`. Every flow that touches the host works; every right the
//! chart grants is one a flow used, so widening or narrowing a role by one
//! verb fails this test; and neither identity reaches what is not its own.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestApp, host_settings, node};

const JOBS: &str = "system:serviceaccount:default:kb-host";
const CREDENTIALS: &str = "system:serviceaccount:default:kb-credentials";

/// (verb, API group, resource) of every rule, taken apart.
fn atoms(rules: &Value) -> BTreeSet<(String, String, String)> {
    let list = |rule: &Value, key: &str| -> Vec<String> {
        rule[key]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut atoms = BTreeSet::new();
    for rule in rules.as_array().unwrap() {
        for verb in list(rule, "verbs") {
            for group in list(rule, "apiGroups") {
                for resource in list(rule, "resources") {
                    atoms.insert((verb.clone(), group.clone(), resource));
                }
            }
        }
    }
    atoms
}

fn rules_of(documents: &[Value], kind: &str, name: &str) -> Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the chart renders the {kind} {name}"))["rules"]
        .clone()
}

/// A direct request to the host as `token`: its status.
async fn as_identity(sim: &kube_sim::Simulator, token: &str, method: &str, path: &str) -> u16 {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(sim.ca_pem().as_bytes()).unwrap())
        .build()
        .unwrap()
        .request(method.parse().unwrap(), format!("{}{path}", sim.url()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn patch(platform: &TestApp, id: &str, body: Value) {
    let (status, reply) = platform
        .call("PATCH", &format!("/api/console/clusters/{id}"), Some(body))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    platform.drive().await;
    assert_eq!(platform.cluster(id).await["status"], "ready");
}

/// Everything the platform does on its host with a `nodeport` and a
/// `loadbalancer` cluster, as the chart's identities: the used accesses.
async fn every_host_flow(platform: &TestApp) -> Vec<kube_sim::Access> {
    let (id, namespace) = platform.create_ready("lp-one", "nodeport").await;
    let (lb, _) = platform.create_ready("lp-two", "loadbalancer").await;
    for cluster in [&id, &lb] {
        assert_eq!(platform.cluster(cluster).await["status"], "ready");
    }
    let vcluster = platform.sim().vcluster(&namespace, "lp-one").unwrap();

    // The HTTP functions: a kubeconfig, a join token, a machine's join.
    let kubeconfig = platform.issue_kubeconfig(&id, json!({})).await;
    assert!(kubeconfig.contains("certificate-authority-data"));
    let (status, created) = platform
        .call(
            "POST",
            &format!("/api/console/clusters/{id}/tokens"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    // The machine fetches its script and reports its join: a bootstrap token.
    crate::nodes::take_a_use_as(
        platform,
        created["plaintext"].as_str().unwrap(),
        "lp-machine",
    )
    .await;

    // The schedules: access for clusters made before it, observation, nodes,
    // metrics (metrics-server and /proc through exec).
    sqlx::query("UPDATE clusters SET host_access_revision = 0")
        .execute(&platform.db.pool)
        .await
        .unwrap();
    let granted = sync_clusters::access::grant_missing(&platform.db.pool, platform.host())
        .await
        .unwrap();
    assert_eq!((granted.access_granted, granted.access_failed), (2, 0));
    let observed = platform.observe().await;
    assert_eq!(observed.connected, 2, "{observed:?}");
    vcluster
        .put(node("lp-machine", "True", chrono::Utc::now()))
        .unwrap();
    sync_nodes::sync::sync_all(
        &platform.db.pool,
        platform.host(),
        4,
        std::time::Duration::from_secs(60),
    )
    .await
    .unwrap();
    platform
        .sim()
        .put(json!({
            "apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
            "metadata": {"name": "lp-one-0", "namespace": namespace,
                         "labels": {"app": "vcluster", "release": "lp-one"}},
            "timestamp": chrono::Utc::now().to_rfc3339(), "window": "30s",
            "containers": [{"name": "syncer", "usage": {"cpu": "10m", "memory": "64Mi"}}],
        }))
        .unwrap();
    platform
        .sim()
        .set_exec(std::sync::Arc::new(|_: &kube_sim::ExecRequest| {
            kube_sim::ExecOutput {
                stdout: b"0.10 0.20 0.30 1/100 42\n".to_vec(),
                ..kube_sim::ExecOutput::default()
            }
        }));
    let metrics = sync_metrics::collect::collect_all(
        &platform.db.pool,
        platform.host(),
        4,
        std::time::Duration::from_secs(7 * 24 * 3600),
    )
    .await
    .unwrap();
    assert_eq!(metrics.collected + metrics.unavailable, 2, "{metrics:?}");

    // The jobs: an update, a mode switch, a node's removal, the deletes.
    patch(
        platform,
        &id,
        json!({ "workload_cpu_limit_milli_cores": 3000 }),
    )
    .await;
    patch(platform, &lb, json!({ "public_access_mode": "nodeport" })).await;
    let (_, nodes) = platform
        .call("GET", &format!("/api/console/clusters/{id}/nodes"), None)
        .await;
    let nodes = nodes["items"].clone();
    let node_id = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "lp-machine")
        .unwrap_or_else(|| panic!("the synced node: {nodes}"))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, reply) = platform
        .call(
            "DELETE",
            &format!("/api/console/clusters/{id}/nodes/{node_id}?force=true"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    platform.drive().await;
    assert!(vcluster.get("v1", "Node", "", "lp-machine").is_none());
    for cluster in [&id, &lb] {
        let (status, reply) = platform
            .call("DELETE", &format!("/api/console/clusters/{cluster}"), None)
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    }
    platform.drive().await;
    for cluster in [&id, &lb] {
        let (status, _) = platform
            .call("GET", &format!("/api/console/clusters/{cluster}"), None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    platform.sim().access_log()
}

/// A host with a workload Gateway: a cluster's edge made, followed to its
/// node, a binding's route made and removed, and the edge taken down.
async fn edge_flow() -> Vec<kube_sim::Access> {
    let mut settings = host_settings();
    settings.workload_gateway = Some(shared::host::WorkloadGateway {
        name: "workloads".into(),
        namespace: "kubebyon".into(),
        http_listener: "http".into(),
        https: None,
        resync: std::time::Duration::from_secs(300),
    });
    let edge = TestApp::builder("worker-lp-edge")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host_with(settings)
        .least_privilege()
        .build()
        .await;
    let id = edge.create_with_ingress("lp-six").await;
    edge.drive().await;
    let namespace = edge.cluster(&id).await["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    edge.sim()
        .vcluster(&namespace, "lp-six")
        .unwrap()
        .put(node("lp-edge", "True", chrono::Utc::now()))
        .unwrap();
    for _ in 0..2 {
        edge.observe().await;
        edge.drive().await;
    }
    let (status, binding) = edge
        .call(
            "POST",
            &format!("/api/console/clusters/{id}/hostnames"),
            Some(json!({ "hostname": "www.lp.test" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{binding}");
    sqlx::query("UPDATE workload_ingress_hostname_bindings SET verified_at = now()")
        .execute(&edge.db.pool)
        .await
        .unwrap();
    edge.observe().await;
    edge.drive().await;
    let (status, _) = edge
        .call(
            "DELETE",
            &format!(
                "/api/console/clusters/{id}/hostnames/{}",
                binding["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    edge.drive().await;
    patch(
        &edge,
        &id,
        json!({ "managed_workload_ingress_enabled": false }),
    )
    .await;
    let (_, state) = edge
        .call("GET", &format!("/api/console/clusters/{id}/edge"), None)
        .await;
    assert!(state["edge"].is_null(), "taken down: {state}");
    edge.sim().access_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_host_identity_holds_exactly_the_rights_its_functions_use() {
    // The admission webhook too: the create job writes the API server's
    // files (the platform's authorizer) into a Secret.
    let platform = TestApp::builder("worker-lp")
        .env("KUBEBYON_ENGINE", "vcluster")
        .admission()
        .least_privilege()
        .build()
        .await;
    let mut used = every_host_flow(&platform).await;
    // A Gateway API host too: `loadbalancer` clusters are TLSRoutes there.
    let mut settings = host_settings();
    settings.load_balancer = shared::host::LoadBalancerProvider::GatewayApi {
        gateway_name: "kubebyon-edge".into(),
        gateway_namespace: "kubebyon-system".into(),
        base_domain: "clusters.example.test".into(),
    };
    // Nothing serves the Gateway's address here: the switch back to it
    // makes its route, fails to verify it, and removes it again; soon.
    settings.ready_timeout = std::time::Duration::from_secs(3);
    let gateway = TestApp::builder("worker-lp-gw")
        .env("KUBEBYON_ENGINE", "vcluster")
        .host_with(settings)
        .least_privilege()
        .build()
        .await;
    let (id, _) = gateway.create_ready("lp-three", "loadbalancer").await;
    assert_eq!(gateway.cluster(&id).await["status"], "ready");
    patch(&gateway, &id, json!({ "public_access_mode": "nodeport" })).await;
    patch(
        &gateway,
        &id,
        json!({ "public_access_mode": "loadbalancer" }),
    )
    .await;
    // A first install that fails, retried: its chart is removed first.
    gateway.sim().set_faults(kube_sim::Faults {
        chart_install_error: Some("Error: INSTALLATION FAILED: image pull timed out".into()),
        ..kube_sim::Faults::default()
    });
    let failed = gateway.create("lp-five", "nodeport").await;
    gateway.drive().await;
    let (_, operations) = gateway
        .call(
            "GET",
            &format!("/api/console/clusters/{failed}/operations"),
            None,
        )
        .await;
    gateway.sim().set_faults(kube_sim::Faults::default());
    let (status, reply) = gateway
        .call(
            "POST",
            &format!(
                "/api/console/clusters/{failed}/operations/{}/retry",
                operations[0]["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    gateway.drive().await;
    assert_eq!(gateway.cluster(&failed).await["status"], "ready");
    used.extend(gateway.sim().access_log());
    used.extend(edge_flow().await);

    // Nothing refused. (Asked whether it may `escalate` or `bind` the
    // credentials Role, the jobs' identity is told no: the Role and its
    // binding are allowed as it holds what they grant. A refused write is
    // recorded as the write.)
    let denied: Vec<_> = used
        .iter()
        .filter(|a| !a.allowed && !matches!(a.verb.as_str(), "escalate" | "bind"))
        .collect();
    assert!(denied.is_empty(), "refused: {denied:#?}");
    let used_by = |user: &str| -> BTreeSet<(String, String, String)> {
        used.iter()
            .filter(|a| a.user == user && a.allowed)
            .map(|a| (a.verb.clone(), a.group.clone(), a.resource.clone()))
            .collect()
    };
    let documents = crate::routing::rendered(crate::harness::SUITE_ENGINES);
    let mut granted_jobs = atoms(&rules_of(&documents, "ClusterRole", "kb-host"));
    granted_jobs.extend(atoms(&rules_of(&documents, "ClusterRole", "kb-tenant")));
    assert_eq!(
        used_by(JOBS),
        granted_jobs,
        "what the jobs' ServiceAccount used (left) and was granted (right)"
    );
    let credentials_role = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]);
    assert_eq!(used_by(CREDENTIALS), atoms(&credentials_role));
    // The credentials Role named exactly the cluster's kubeconfig Secret.
    assert!(
        used.iter()
            .filter(|a| a.user == CREDENTIALS)
            .all(|a| a.name.starts_with("vc-lp-") && a.namespace.starts_with("kb-")),
        "{used:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn neither_host_identity_reaches_past_the_platforms_namespaces() {
    let platform = TestApp::builder("worker-lp-hostile")
        .env("KUBEBYON_ENGINE", "vcluster")
        .least_privilege()
        .build()
        .await;
    let (_, namespace) = platform.create_ready("lp-four", "nodeport").await;
    let sim = platform.sim();
    let jobs = sim.issue_token("default", "kb-host").unwrap();
    let credentials = sim.issue_token("default", "kb-credentials").unwrap();

    // The HTTP functions read the cluster's kubeconfig Secret and nothing else.
    let secret = |ns: &str, name: &str| format!("/api/v1/namespaces/{ns}/secrets/{name}");
    assert_eq!(
        as_identity(sim, &credentials, "GET", &secret(&namespace, "vc-lp-four")).await,
        200
    );
    assert!(
        sim.put(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "host-token", "namespace": "kube-system"}, "data": {}}))
            .is_ok()
    );
    for (token, who) in [(&credentials, "credentials"), (&jobs, "jobs")] {
        for path in [
            secret("kube-system", "host-token"),
            "/api/v1/secrets".to_string(),
            "/api/v1/namespaces/kube-system/pods/x/exec?command=id".to_string(),
        ] {
            let status = as_identity(sim, token, "GET", &path).await;
            assert_eq!(status, 403, "{who} {path}");
        }
    }
    assert_eq!(
        as_identity(
            sim,
            &credentials,
            "GET",
            &format!("/api/v1/namespaces/{namespace}/secrets")
        )
        .await,
        403,
        "a Role with resourceNames never allows a list"
    );
    assert_eq!(
        as_identity(
            sim,
            &credentials,
            "DELETE",
            &format!("/api/v1/namespaces/{namespace}")
        )
        .await,
        403
    );

    // The jobs may bind the tenant role, but not grant what they lack: a
    // Role reading every Secret of kube-system is refused as an escalation.
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(sim.ca_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let escalate = client
        .post(format!("{}/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings", sim.url()))
        .bearer_auth(&jobs)
        .json(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "steal", "namespace": "kube-system"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "kb-host", "namespace": "default"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(escalate.status(), 403);
    let message = escalate.text().await.unwrap();
    assert!(
        message.contains("attempting to grant RBAC permissions not currently held"),
        "{message}"
    );
}

/// The chart with its defaults (Kamaji alone) grants what a Kamaji
/// cluster's life needs — the TenantControlPlane, its admin kubeconfig
/// Secret, the metrics and `/proc` of its API server — and no HelmChart.
#[tokio::test]
async fn the_charts_kamaji_rights_carry_a_kamaji_cluster_and_grant_no_helm_chart() {
    let platform = TestApp::builder("worker-lp-kamaji")
        .env("KUBEBYON_ENGINE", "kamaji")
        .least_privilege()
        .build()
        .await;
    let (id, namespace) = platform.create_ready("lp-kamaji", "nodeport").await;
    assert_eq!(platform.cluster(&id).await["status"], "ready");
    let kubeconfig = platform.issue_kubeconfig(&id, json!({})).await;
    assert!(kubeconfig.contains("certificate-authority-data"));
    let observed = platform.observe().await;
    assert_eq!(observed.connected, 1, "{observed:?}");
    let pod = platform
        .sim()
        .list("v1", "Pod")
        .into_iter()
        .find(|p| p["metadata"]["namespace"] == namespace.as_str())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .expect("Kamaji's Deployment runs a pod");
    platform
        .sim()
        .put(crate::metrics::metrics_of(
            &namespace,
            &pod,
            json!({"kamaji.clastix.io/name": "lp-kamaji"}),
            json!([{"name": "kube-apiserver", "usage": {"cpu": "10m", "memory": "64Mi"}}]),
        ))
        .unwrap();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    platform.sim().set_exec(std::sync::Arc::new(
        move |request: &kube_sim::ExecRequest| {
            seen.lock().unwrap().push(request.container.clone());
            kube_sim::ExecOutput {
                stdout: b"0.10 0.20 0.30 1/100 42\n".to_vec(),
                ..kube_sim::ExecOutput::default()
            }
        },
    ));
    let metrics = sync_metrics::collect::collect_all(
        &platform.db.pool,
        platform.host(),
        4,
        std::time::Duration::from_secs(7 * 24 * 3600),
    )
    .await
    .unwrap();
    assert_eq!(metrics.collected + metrics.unavailable, 1, "{metrics:?}");
    assert!(
        asked.lock().unwrap().is_empty(),
        "nothing is run in a distroless control plane"
    );
    let (status, reply) = platform
        .call("DELETE", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    platform.drive().await;

    let used = platform.sim().access_log();
    let denied: Vec<_> = used
        .iter()
        .filter(|a| !a.allowed && !matches!(a.verb.as_str(), "escalate" | "bind"))
        .collect();
    assert!(denied.is_empty(), "refused: {denied:#?}");
    assert!(
        used.iter().any(|a| a.user == JOBS
            && a.allowed
            && a.group == "kamaji.clastix.io"
            && a.resource == "tenantcontrolplanes"
            && a.verb == "patch"),
        "the jobs made the TenantControlPlane: {used:#?}"
    );
    assert!(
        used.iter()
            .filter(|a| a.user == CREDENTIALS)
            .all(|a| a.name == "lp-kamaji-admin-kubeconfig"),
        "{used:#?}"
    );
    let documents = crate::routing::rendered(&[]);
    let granted = atoms(&rules_of(&documents, "ClusterRole", "kb-tenant"));
    assert!(
        !granted
            .iter()
            .any(|(_, group, _)| group == "helm.cattle.io"),
        "{granted:?}"
    );
    assert!(
        !granted
            .iter()
            .any(|(_, _, resource)| resource == "pods/exec"),
        "no exec where only Kamaji runs: {granted:?}"
    );
}
