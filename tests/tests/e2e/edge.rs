//! The workload edge on the simulated host: a cluster with its managed
//! ingress gets an `HTTPRoute` per hostname on the shared Gateway and a shim
//! Service and EndpointSlice to its controller's NodePort on its nodes,
//! server-side applied by the platform; the endpoints follow the nodes,
//! never reach an address of the platform's or another tenant's, and the
//! routes follow the bindings; switching the ingress off takes it all down.
//! The platform does it with no more rights than the chart gives it.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};
use shared::host::{Https, IssuerRef, WorkloadGateway};

use crate::harness::{TestApp, host_settings, node};

fn edge_settings() -> shared::host::HostSettings {
    let mut settings = host_settings();
    settings.workload_gateway = Some(WorkloadGateway {
        name: "workloads".into(),
        namespace: "kubebyon".into(),
        http_listener: "http".into(),
        https: None,
        resync: Duration::from_secs(300),
    });
    settings
}

/// The cluster's HTTPRoutes on the host, by name.
fn routes(app: &TestApp, namespace: &str) -> Vec<(String, Value)> {
    let mut routes: Vec<(String, Value)> = app
        .sim()
        .list("gateway.networking.k8s.io/v1", "HTTPRoute")
        .into_iter()
        .filter(|r| r["metadata"]["namespace"] == namespace)
        .map(|r| (r["metadata"]["name"].as_str().unwrap().to_string(), r))
        .collect();
    routes.sort_by(|a, b| a.0.cmp(&b.0));
    routes
}

/// The shim EndpointSlice's endpoints, as `ip:port`.
fn endpoints(app: &TestApp, namespace: &str) -> Vec<String> {
    let slice = app
        .sim()
        .get(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            namespace,
            "kubebyon-edge",
        )
        .expect("the shim's EndpointSlice");
    let port = slice["ports"][0]["port"].as_i64().unwrap();
    slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{}:{port}", e["addresses"][0].as_str().unwrap()))
        .collect()
}

/// Binds `hostname` to the cluster and runs the jobs that asks for; the
/// binding.
async fn bind(app: &TestApp, id: &str, hostname: &str) -> Value {
    let (status, body) = app
        .call(
            "POST",
            &format!("/api/console/clusters/{id}/hostnames"),
            Some(json!({ "hostname": hostname })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    app.drive().await;
    body
}

/// The cluster's bindings, as the API lists them.
async fn bindings(app: &TestApp, id: &str) -> Value {
    app.call(
        "GET",
        &format!("/api/console/clusters/{id}/hostnames"),
        None,
    )
    .await
    .1
}

/// Switches the cluster's managed ingress off and runs its jobs.
async fn ingress_off(app: &TestApp, id: &str) {
    let (status, body) = app
        .call(
            "PATCH",
            &format!("/api/console/clusters/{id}"),
            Some(json!({ "managed_workload_ingress_enabled": false })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    app.drive().await;
}

/// One observation cycle and the jobs it asked for.
async fn observe_and_drive(app: &TestApp) -> usize {
    let asked = app.observe().await.ingress_convergences;
    app.drive().await;
    asked as usize
}

#[tokio::test]
async fn a_cluster_s_sites_are_routed_to_its_nodes_and_follow_its_bindings() {
    // As the chart's ServiceAccounts, held to its roles.
    let app = TestApp::builder("worker-edge")
        .host_with(edge_settings())
        .least_privilege()
        .build()
        .await;
    sqlx::query(
        "UPDATE system_settings SET managed_workload_ingress_base_domain = 'apps.example.com'",
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let id = app.create_with_ingress("shop").await;
    app.drive().await;
    let cluster = app.cluster(&id).await;
    let namespace = cluster["namespace"].as_str().unwrap().to_string();
    let canonical = format!("shop-{}.apps.example.com", &id.replace('-', "")[..8]);

    // No node yet: the cluster's own name is routed, to nothing.
    let found = routes(&app, &namespace);
    assert_eq!(found.len(), 1, "{found:?}");
    let (name, route) = &found[0];
    assert_eq!(name, "edge-cluster");
    assert_eq!(route["metadata"]["managedFields"][0]["manager"], "kubebyon");
    assert_eq!(route["spec"]["hostnames"], json!([canonical]));
    assert_eq!(
        route["spec"]["parentRefs"],
        json!([{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "workloads",
                "namespace": "kubebyon", "sectionName": "http"}])
    );
    assert_eq!(
        route["spec"]["rules"][0]["backendRefs"],
        json!([{"group": "", "kind": "Service", "name": "kubebyon-edge", "port": 80}])
    );
    assert!(endpoints(&app, &namespace).is_empty());
    let service = app
        .sim()
        .get("v1", "Service", &namespace, "kubebyon-edge")
        .unwrap();
    assert!(service["spec"].get("selector").is_none(), "{service}");
    let (status, edge) = app
        .call("GET", &format!("/api/console/clusters/{id}/edge"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{edge}");
    assert_eq!(edge["edge"]["backend"], "unavailable");
    assert_eq!(
        edge["edge"]["backend_reason"],
        "no ingress controller pod is ready"
    );

    // A node joins: the controller runs on it, and the next observations
    // find the controller ready, then the edge behind it.
    let vcluster = app.sim().vcluster(&namespace, "shop").unwrap();
    vcluster
        .put(node("worker-1", "True", chrono::Utc::now()))
        .unwrap();
    observe_and_drive(&app).await;
    assert_eq!(
        observe_and_drive(&app).await,
        1,
        "the edge is converged again"
    );
    let node_port = vcluster
        .get("v1", "Service", "kubebyon-ingress", "kubebyon-ingress")
        .unwrap()["spec"]["ports"][0]["nodePort"]
        .as_i64()
        .unwrap();
    assert_eq!(
        endpoints(&app, &namespace),
        [format!("192.0.2.10:{node_port}")]
    );
    assert_eq!(observe_and_drive(&app).await, 0, "nothing changed");

    // Bindings: a name under the base domain is routed as it is; a
    // self-managed one only once proven, its Host rewritten to the
    // cluster's own name.
    for hostname in ["blog.apps.example.com", "www.shop.test"] {
        bind(&app, &id, hostname).await;
    }
    let hostnames = |found: &[(String, Value)]| -> Vec<String> {
        let mut names: Vec<String> = found
            .iter()
            .map(|(_, r)| r["spec"]["hostnames"][0].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        hostnames(&routes(&app, &namespace)),
        ["blog.apps.example.com", canonical.as_str()]
    );
    sqlx::query("UPDATE workload_ingress_hostname_bindings SET verified_at = now()")
        .execute(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(observe_and_drive(&app).await, 1);
    let found = routes(&app, &namespace);
    assert_eq!(
        hostnames(&found),
        ["blog.apps.example.com", canonical.as_str(), "www.shop.test"]
    );
    let rule = |hostname: &str| {
        found
            .iter()
            .find(|(_, r)| r["spec"]["hostnames"][0] == hostname)
            .unwrap()
            .1["spec"]["rules"][0]
            .clone()
    };
    assert_eq!(
        rule("www.shop.test")["filters"],
        json!([{"type": "URLRewrite", "urlRewrite": {"hostname": canonical}}])
    );
    assert_eq!(rule("blog.apps.example.com")["filters"], json!([]));
    let listed = bindings(&app, &id).await;
    for binding in listed.as_array().unwrap() {
        let route = binding["edge_route"].as_str().unwrap();
        assert!(found.iter().any(|(name, _)| name == route), "{binding}");
        assert_eq!(binding["edge_listener"], "http");
    }

    // Unbound: its route goes.
    let blog = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["hostname"] == "blog.apps.example.com")
        .unwrap();
    let (status, _) = app
        .call(
            "DELETE",
            &format!(
                "/api/console/clusters/{id}/hostnames/{}",
                blog["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    app.drive().await;
    assert_eq!(
        hostnames(&routes(&app, &namespace)),
        [canonical.as_str(), "www.shop.test"]
    );

    // The ingress switched off: the edge goes with it.
    ingress_off(&app, &id).await;
    assert!(routes(&app, &namespace).is_empty());
    for (api_version, kind) in [("v1", "Service"), ("discovery.k8s.io/v1", "EndpointSlice")] {
        assert!(
            app.sim()
                .get(api_version, kind, &namespace, "kubebyon-edge")
                .is_none(),
            "{kind}"
        );
    }
    let (_, edge) = app
        .call("GET", &format!("/api/console/clusters/{id}/edge"), None)
        .await;
    assert!(edge["edge"].is_null(), "{edge}");
    let listed = bindings(&app, &id).await;
    assert!(listed[0]["edge_route"].is_null(), "{listed}");
}

#[tokio::test]
async fn a_tenant_cannot_point_the_edge_at_the_platform_or_another_tenant() {
    let app = TestApp::builder("worker-edge")
        .host_with(edge_settings())
        .build()
        .await;
    // Another tenant's cluster holds the first pod network.
    let (_, _) = app.create_ready("other", "nodeport").await;
    let other_pod: String =
        sqlx::query_scalar("SELECT pod_cidr::text FROM clusters WHERE name = 'other'")
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    let inside_other = other_pod.replace(".0/19", ".9");
    // The host's own node.
    app.sim()
        .put(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "host-1"},
                    "status": {"addresses": [{"type": "InternalIP", "address": "198.51.100.7"}]}}),
        )
        .unwrap();

    let id = app.create_with_ingress("mallory").await;
    app.drive().await;
    let namespace = app.cluster(&id).await["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    let vcluster = app.sim().vcluster(&namespace, "mallory").unwrap();
    let with_address = |name: &str, address: &str| {
        let mut n = node(name, "True", chrono::Utc::now());
        n["status"]["addresses"] = json!([{"type": "InternalIP", "address": address}]);
        n
    };
    vcluster
        .put(with_address("worker-1", "203.0.113.5"))
        .unwrap();
    observe_and_drive(&app).await;
    observe_and_drive(&app).await;
    let good = endpoints(&app, &namespace);
    assert_eq!(good.len(), 1);
    assert!(good[0].starts_with("203.0.113.5:"), "{good:?}");

    // Whatever address the tenant gives its nodes, none of these is ever
    // an endpoint: loopback, the clouds' metadata, the host's node, the
    // host's pod network, another tenant's pods.
    for hostile in [
        "127.0.0.1",
        "169.254.169.254",
        "198.51.100.7",
        "10.42.0.15",
        inside_other.as_str(),
        "0.0.0.0",
        "not-an-address",
    ] {
        vcluster.put(with_address("worker-1", hostile)).unwrap();
        observe_and_drive(&app).await;
        assert!(
            endpoints(&app, &namespace).is_empty(),
            "{hostile} is not reached"
        );
        let (_, edge) = app
            .call("GET", &format!("/api/console/clusters/{id}/edge"), None)
            .await;
        assert_eq!(
            edge["edge"]["backend_reason"], "no ready node has an address the edge may reach",
            "{hostile}"
        );
    }
    // A second node with a good address is used; the hostile one is not.
    vcluster
        .put(with_address("worker-2", "203.0.113.6"))
        .unwrap();
    observe_and_drive(&app).await;
    let found = endpoints(&app, &namespace);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("203.0.113.6:"), "{found:?}");
}

#[tokio::test]
async fn over_https_the_gateway_gets_listeners_and_certificates_and_bindings_follow_them() {
    let mut settings = edge_settings();
    let issuer = |name: &str| IssuerRef {
        kind: "ClusterIssuer".into(),
        name: name.into(),
    };
    settings.workload_gateway.as_mut().unwrap().https = Some(Https {
        listener: "https".into(),
        port: 443,
        issuer: issuer("dns01"),
        self_managed_issuer: issuer("http01"),
        san_limit: 2,
        redirect: true,
    });
    let app = TestApp::builder("worker-edge")
        .host_with(settings)
        .build()
        .await;
    sqlx::query(
        "UPDATE system_settings SET managed_workload_ingress_base_domain = 'apps.example.com'",
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    // The chart's Gateway, with its HTTP listener.
    app.sim()
        .put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubebyon"}}))
        .unwrap();
    app.sim()
        .put(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                    "metadata": {"name": "workloads", "namespace": "kubebyon"},
                    "spec": {"gatewayClassName": "example",
                             "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
        )
        .unwrap();
    let converge = async || sync_edge::converge(&app.db.pool, app.host()).await.unwrap();
    assert_eq!(converge().await.listeners, 0, "no site yet");

    let id = app.create_with_ingress("shop").await;
    app.drive().await;
    let namespace = app.cluster(&id).await["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    let canonical = format!("shop-{}.apps.example.com", &id.replace('-', "")[..8]);
    let mut bound = Vec::new();
    for hostname in [
        "blog.apps.example.com",
        "store.apps.example.com",
        "www.shop.test",
    ] {
        let body = bind(&app, &id, hostname).await;
        bound.push(body["id"].as_str().unwrap().to_string());
    }
    sqlx::query("UPDATE workload_ingress_hostname_bindings SET verified_at = now()")
        .execute(&app.db.pool)
        .await
        .unwrap();
    observe_and_drive(&app).await;
    let own = bound[2].replace('-', "");

    let report = converge().await;
    assert_eq!(
        (report.certificates, report.listeners, report.refused),
        (3, 2, 0),
        "{report:?}"
    );
    let gateway = app
        .sim()
        .get(
            "gateway.networking.k8s.io/v1",
            "Gateway",
            "kubebyon",
            "workloads",
        )
        .unwrap();
    let listeners = gateway["spec"]["listeners"].as_array().unwrap();
    let names: Vec<&str> = listeners
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["http", "https", format!("kb-{own}").as_str()],
        "the chart's stays"
    );
    assert_eq!(
        listeners[1]["tls"]["certificateRefs"],
        json!([{"group": "", "kind": "Secret", "name": "kubebyon-edge-platform-0"},
               {"group": "", "kind": "Secret", "name": "kubebyon-edge-platform-1"}])
    );
    assert_eq!(listeners[2]["hostname"], "www.shop.test");
    assert_eq!(
        listeners[2]["allowedRoutes"]["namespaces"]["selector"]["matchLabels"]["kubernetes.io/metadata.name"],
        namespace
    );
    let certificate = |name: &str| {
        app.sim()
            .get("cert-manager.io/v1", "Certificate", "kubebyon", name)
            .map(|c| c["spec"].clone())
    };
    let mut platform_names = [
        "blog.apps.example.com".to_string(),
        canonical.clone(),
        "store.apps.example.com".to_string(),
    ];
    platform_names.sort();
    assert_eq!(
        certificate("kubebyon-edge-platform-0").unwrap()["dnsNames"],
        json!(platform_names[..2])
    );
    assert_eq!(
        certificate("kubebyon-edge-platform-1").unwrap()["dnsNames"],
        json!(platform_names[2..])
    );
    let dedicated = certificate(&format!("kubebyon-edge-{own}")).unwrap();
    assert_eq!(dedicated["dnsNames"], json!(["www.shop.test"]));
    assert_eq!(dedicated["issuerRef"]["name"], "http01");

    // The routes: on the HTTPS listeners, plain HTTP redirected.
    let found = routes(&app, &namespace);
    let route = |name: &str| &found.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(
        route("edge-cluster")["spec"]["parentRefs"][0]["sectionName"],
        "https"
    );
    assert_eq!(
        route(&format!("edge-{own}"))["spec"]["parentRefs"][0]["sectionName"],
        format!("kb-{own}")
    );
    assert_eq!(
        route("edge-cluster-http")["spec"]["rules"][0]["filters"][0]["type"],
        "RequestRedirect"
    );

    // Bindings follow their certificates.
    let tls = async |hostname: &str| {
        let listed = bindings(&app, &id).await;
        let b = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["hostname"] == hostname)
            .unwrap()
            .clone();
        (
            b["tls_status"].as_str().unwrap().to_string(),
            b["tls_secret_name"].clone(),
        )
    };
    assert_eq!(
        tls("www.shop.test").await,
        ("pending".to_string(), json!(format!("kubebyon-edge-{own}")))
    );
    app.sim()
        .put(json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                    "metadata": {"name": format!("kubebyon-edge-{own}"), "namespace": "kubebyon"},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": ""}]}}))
        .unwrap();
    converge().await;
    assert_eq!(tls("www.shop.test").await.0, "ready");

    // A name unbound: the platform's names fit one certificate again.
    let (status, _) = app
        .call(
            "DELETE",
            &format!("/api/console/clusters/{id}/hostnames/{}", bound[1]),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    app.drive().await;
    let report = converge().await;
    assert_eq!(report.removed, 1, "{report:?}");
    assert!(certificate("kubebyon-edge-platform-1").is_none());

    // The ingress switched off: the platform's listeners and certificates go.
    ingress_off(&app, &id).await;
    let report = converge().await;
    assert_eq!(
        (report.listeners, report.removed, report.forgotten),
        (0, 2, 2),
        "{report:?}"
    );
    assert_eq!(
        tls("www.shop.test").await,
        ("none".to_string(), Value::Null),
        "no longer served over HTTPS"
    );
    let gateway = app
        .sim()
        .get(
            "gateway.networking.k8s.io/v1",
            "Gateway",
            "kubebyon",
            "workloads",
        )
        .unwrap();
    assert_eq!(
        gateway["spec"]["listeners"],
        json!([{"name": "http", "port": 80, "protocol": "HTTP"}])
    );
}

#[tokio::test]
async fn the_edge_reaches_pods_directly_once_every_agent_routes_them() {
    const TOKEN: &str = "route-agent-token-for-the-test-0123456789";
    let app = TestApp::builder("worker-edge")
        .host_with(edge_settings())
        .env("KUBEBYON_ROUTE_AGENT_TOKEN", TOKEN)
        .build()
        .await;
    let id = app.create_with_ingress("shop").await;
    app.drive().await;
    let cluster = app.cluster(&id).await;
    let namespace = cluster["namespace"].as_str().unwrap().to_string();
    // The node's pod network: the first /24 of the cluster's own; a second
    // node claims another cluster's addresses.
    let own = cluster["pod_cidr"].as_str().unwrap().replace("/19", "/24");
    let vcluster = app.sim().vcluster(&namespace, "shop").unwrap();
    let mut worker = node("worker-1", "True", chrono::Utc::now());
    worker["spec"] = json!({"podCIDR": own});
    vcluster.put(worker).unwrap();
    let mut stranger = node("worker-2", "True", chrono::Utc::now());
    stranger["spec"] = json!({"podCIDR": "10.200.0.0/24"});
    stranger["status"]["addresses"] = json!([{"type": "InternalIP", "address": "203.0.113.20"}]);
    vcluster.put(stranger).unwrap();
    observe_and_drive(&app).await;
    observe_and_drive(&app).await;
    assert!(
        endpoints(&app, &namespace)[0].starts_with("192.0.2.10:"),
        "on NodePorts first"
    );

    // The plan holds the cluster's own node's network only.
    let agents = app.client().bearer(TOKEN);
    let (status, plan) = agents.call("GET", "/api/route-agent/routes", None).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(
        plan,
        json!({"protocol": 250, "routes": [{"destination": own, "via": "192.0.2.10"}]})
    );
    let (status, refused) = app
        .client()
        .bearer("not-the-route-agents-token-0123456789")
        .call("GET", "/api/route-agent/routes", None)
        .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("invalid_route_agent_token"))
    );
    let report =
        |node: &str, applied: Vec<&str>| json!({"node": node, "applied": applied, "failed": []});
    let (status, refused) = agents
        .call(
            "POST",
            "/api/route-agent/reports",
            Some(report("Host_1", vec![])),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");

    // Two host nodes: one holding the route is not enough.
    for (node, applied) in [("host-1", vec![own.as_str()]), ("host-2", vec![])] {
        let (status, body) = agents
            .call(
                "POST",
                "/api/route-agent/reports",
                Some(report(node, applied)),
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    assert_eq!(observe_and_drive(&app).await, 0, "still NodePorts");
    // Both hold it: the edge goes to the pod.
    let (status, _) = agents
        .call(
            "POST",
            "/api/route-agent/reports",
            Some(report("host-2", vec![own.as_str()])),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(observe_and_drive(&app).await, 1);
    let pod = own.replace(".0/24", ".2:80");
    assert_eq!(endpoints(&app, &namespace), [pod]);
    let (_, edge) = app
        .call("GET", &format!("/api/console/clusters/{id}/edge"), None)
        .await;
    assert_eq!(edge["edge"]["backend"], "pod_ips");

    // A route withdrawn: back to the nodes.
    let (status, _) = agents
        .call(
            "POST",
            "/api/route-agent/reports",
            Some(report("host-1", vec![])),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(observe_and_drive(&app).await, 1);
    assert!(endpoints(&app, &namespace)[0].starts_with("192.0.2.10:"));

    // A node's pod network alone changing re-plans the routes.
    let second = own.replace(".0.0/24", ".1.0/24");
    let mut moved = node("worker-2", "True", chrono::Utc::now());
    moved["spec"] = json!({"podCIDR": second});
    moved["status"]["addresses"] = json!([{"type": "InternalIP", "address": "203.0.113.20"}]);
    vcluster.put(moved).unwrap();
    assert_eq!(observe_and_drive(&app).await, 1, "the plan changed");
    let (_, plan) = agents.call("GET", "/api/route-agent/routes", None).await;
    assert_eq!(plan["routes"].as_array().unwrap().len(), 2, "{plan}");
    assert_eq!(observe_and_drive(&app).await, 0);
}
