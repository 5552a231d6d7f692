//! The control-plane engines against a simulator that refuses what the real
//! components refuse: a Kamaji `TenantControlPlane` made, started with the
//! platform's authorizer and admission files, reached with `kubectl`, and
//! deleted; Kamaji's version webhook; kube-apiserver's refusal of
//! `--authorization-config` beside `--authorization-mode` (what the
//! platform's vCluster values used to make); vCluster's refusal of private
//! nodes without a licence.

use std::time::Duration;

use serde_json::{Value, json};

use crate::{
    admission::{Kubectl, pod},
    harness::{TestApp, VCLUSTER_ACCESS_KEY},
};

/// Waits for `check` to hold, up to 10 s.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen within 10 s");
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_kamaji_cluster_is_a_tenant_control_plane_started_with_the_platforms_authorizer() {
    let platform = TestApp::builder("worker-kamaji")
        .env("KUBEBYON_ENGINE", "kamaji")
        .admission()
        .build()
        .await;
    let (id, namespace) = platform.create_ready("kappa", "nodeport").await;
    let cluster = platform.cluster(&id).await;
    assert_eq!(cluster["status"], "ready", "{cluster}");
    assert_eq!(cluster["engine"], "kamaji");
    assert_eq!(cluster["kubeconfig_available"], true);

    // No HelmChart: the host identity makes a TenantControlPlane.
    let sim = platform.sim();
    assert!(
        sim.get("helm.cattle.io/v1", "HelmChart", &namespace, "kappa")
            .is_none()
    );
    let tcp = sim
        .get(
            "kamaji.clastix.io/v1alpha1",
            "TenantControlPlane",
            &namespace,
            "kappa",
        )
        .expect("the cluster's TenantControlPlane");
    assert_eq!(
        tcp["status"]["kubernetesResources"]["version"]["status"],
        "Ready"
    );
    assert_eq!(tcp["spec"]["kubernetes"]["version"], "v1.33.5");
    let extra = strings(&tcp["spec"]["controlPlane"]["deployment"]["extraArgs"]["apiServer"]);
    assert!(
        extra
            .iter()
            .any(|a| a.starts_with("--authorization-config=")),
        "{extra:?}"
    );
    assert!(
        strings(&tcp["spec"]["networkProfile"]["certSANs"]).contains(&"localhost".to_string()),
        "the public host is in the certificate: {tcp}"
    );
    // Every container bounded, so the namespace's LimitRange defaults (a
    // CPU limit below the API server's request) never apply, and two pods
    // (one replacing the other) fit in the quota.
    let milli = |q: &Value| {
        let q = q.as_str().unwrap();
        q.strip_suffix('m').unwrap().parse::<i64>().unwrap()
    };
    let deployment_spec = &tcp["spec"]["controlPlane"]["deployment"];
    let mut bounded = vec![&tcp["spec"]["addons"]["konnectivity"]["server"]["resources"]];
    for component in ["apiServer", "controllerManager", "scheduler", "kine"] {
        bounded.push(&deployment_spec["resources"][component]);
    }
    let (mut requests, mut limits) = (0, 0);
    for resources in bounded {
        let (request, limit) = (
            milli(&resources["requests"]["cpu"]),
            milli(&resources["limits"]["cpu"]),
        );
        assert!(request <= limit, "{resources}");
        requests += request;
        limits += limit;
    }
    let quota = sim
        .get("v1", "ResourceQuota", &namespace, "kubebyon-control-plane")
        .unwrap();
    assert_eq!(milli(&quota["spec"]["hard"]["requests.cpu"]), 2 * requests);
    assert_eq!(milli(&quota["spec"]["hard"]["limits.cpu"]), 2 * limits);
    // The flags Kamaji starts the API server with: its own
    // `--authorization-mode` dropped for the structured configuration.
    let deployment = sim
        .get("apps/v1", "Deployment", &namespace, "kappa")
        .expect("Kamaji's Deployment");
    let args = strings(&deployment["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(
        !args.iter().any(|a| a.starts_with("--authorization-mode")),
        "{args:?}"
    );
    // The public Service selects Kamaji's pods on the port they listen on
    // (its node port, which the control plane advertises); only that port,
    // or the node port range, is open into the namespace, whose control
    // plane may reach Kamaji's.
    let service = sim
        .get("v1", "Service", &namespace, "kappa-public")
        .unwrap();
    assert_eq!(
        service["spec"]["selector"],
        json!({"kamaji.clastix.io/name": "kappa"})
    );
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"],
        service["spec"]["ports"][0]["nodePort"]
    );
    let policy = sim
        .get(
            "networking.k8s.io/v1",
            "NetworkPolicy",
            &namespace,
            "kubebyon-isolation",
        )
        .unwrap();
    assert_eq!(
        policy["spec"]["ingress"][1],
        json!({"ports": [{"protocol": "TCP", "port": 6443},
                         {"protocol": "TCP", "port": 30000, "endPort": 32767}]})
    );
    assert!(policy["spec"]["egress"].as_array().unwrap().iter().any(
        |rule| rule["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            == "kamaji-system"
    ));

    // Through the public endpoint with a kubeconfig the platform issued: the
    // platform's authorizer and admission webhook answer inside it.
    let kubectl = Kubectl::for_cluster(&platform, &id).await;
    let (ok, out) = kubectl.run(&["create", "namespace", "shop"], "").await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl.apply(&pod("system", "kube-system", "64")).await;
    assert!(!ok, "{out}");
    assert!(
        out.contains("is forbidden") && out.contains("run workloads in a namespace of your own"),
        "{out}"
    );
    let (ok, out) = kubectl.apply(&pod("huge", "shop", "64")).await;
    assert!(!ok, "{out}");
    assert!(out.contains("denied the request"), "{out}");

    // Its nodes join with `kubeadm join`, which dials the server
    // `cluster-info` names: Kamaji's endpoint, the host's address and the
    // cluster's node port, on which the API server listens and the Service
    // forwards.
    let node_port = cluster["api_endpoint"]
        .as_str()
        .and_then(|e| e.rsplit(':').next())
        .and_then(|p| p.parse::<i64>().ok())
        .unwrap();
    assert_eq!(tcp["spec"]["networkProfile"]["port"], node_port, "{tcp}");
    assert_eq!(
        tcp["status"]["controlPlaneEndpoint"],
        format!("127.0.0.1:{node_port}")
    );
    let public = sim
        .list("v1", "Service")
        .into_iter()
        .find(|s| {
            s["metadata"]["namespace"] == namespace.as_str() && s["spec"]["type"] == "NodePort"
        })
        .unwrap();
    assert_eq!(public["spec"]["ports"][0]["nodePort"], node_port);
    assert_eq!(public["spec"]["ports"][0]["targetPort"], node_port);
    // Konnectivity's agents on the nodes dial the same address on the node
    // port of the Service's second port, on which the server listens: the
    // way back for `kubectl logs` and `exec` to nodes the host cannot route to.
    let tunnel = &public["spec"]["ports"][1];
    assert_eq!(tunnel["name"], "konnectivity", "{public}");
    assert_eq!(tunnel["targetPort"], tunnel["nodePort"], "{public}");
    assert_eq!(
        tcp["spec"]["addons"]["konnectivity"]["server"]["port"], tunnel["nodePort"],
        "{tcp}"
    );
    let agent = sim
        .vcluster(&namespace, "kappa")
        .unwrap()
        .get("apps/v1", "DaemonSet", "kube-system", "konnectivity-agent")
        .expect("Kamaji's agent in the cluster");
    let args = agent["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    for arg in [
        "--proxy-server-host=127.0.0.1".to_string(),
        format!("--proxy-server-port={}", tunnel["nodePort"]),
    ] {
        assert!(args.as_array().unwrap().contains(&json!(arg)), "{agent}");
    }

    // Deleting removes the namespace and everything in it.
    let (status, body) = platform
        .call("DELETE", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert!(status.is_success(), "{status} {body}");
    platform.drive().await;
    let (status, _) = platform
        .call("GET", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(status, axum::http::StatusCode::NOT_FOUND);
    assert!(sim.get("v1", "Namespace", "", &namespace).is_none());
    assert!(sim.vcluster(&namespace, "kappa").is_none());
}

#[tokio::test]
async fn kamaji_refuses_what_its_webhook_and_kube_apiserver_refuse() {
    let platform = TestApp::builder("worker-kamaji-refusals")
        .env("KUBEBYON_ENGINE", "kamaji")
        .admission()
        .build()
        .await;
    let (id, namespace) = platform.create_ready("lambda", "nodeport").await;
    let sim = platform.sim();
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&sim.kubeconfig(None)).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kamaji.clastix.io", "v1alpha1", "TenantControlPlane"),
        "tenantcontrolplanes",
    );
    let api: kube::Api<kube::core::DynamicObject> =
        kube::Api::namespaced_with(client, &namespace, &resource);
    let apply = |name: &str, spec: Value| {
        let object = json!({"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec});
        let api = api.clone();
        let name = name.to_string();
        async move {
            api.patch(
                &name,
                &kube::api::PatchParams::apply("test").force(),
                &kube::api::Patch::Apply(object),
            )
            .await
        }
    };
    let refused = |result: Result<kube::core::DynamicObject, kube::Error>| match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("not refused: {other:?}"),
    };
    // The version webhook: no downgrade, no skipped minor, nothing newer
    // than the release runs.
    let tcp = api.get("lambda").await.unwrap();
    let mut spec = tcp.data["spec"].clone();
    spec["kubernetes"]["version"] = json!("v1.32.9");
    let (code, message) = refused(apply("lambda", spec.clone()).await);
    assert_eq!(code, 403);
    assert!(
        message.contains("vtenantcontrolplane.kb.io")
            && message.contains("unable to downgrade a TenantControlPlane from 1.33.0 to 1.32.0"),
        "{message}"
    );
    spec["kubernetes"]["version"] = json!("v1.35.0");
    let (_, message) = refused(apply("lambda", spec.clone()).await);
    assert!(message.contains("non-sequential"), "{message}");
    spec["kubernetes"]["version"] = json!("v1.34.1");
    apply("lambda", spec.clone()).await.expect("one minor up");
    let (_, message) = refused(
        apply(
            "newer",
            json!({"kubernetes": {"version": "v1.37.0"}, "controlPlane": {"service": {"serviceType": "ClusterIP"}}}),
        )
        .await,
    );
    assert!(
        message.contains("greater than the supported one"),
        "{message}"
    );

    // kube-apiserver: `--authorization-config` beside
    // `--authorization-mode`, or naming a file nothing mounts, stops it.
    let files = shared::admission::authorizer::SECRET_NAME;
    let mounted = |extra: Vec<&str>| {
        json!({"kubernetes": {"version": "v1.33.5"},
            "controlPlane": {"service": {"serviceType": "ClusterIP"}, "deployment": {
                "extraArgs": {"apiServer": extra},
                "additionalVolumes": [{"name": files, "secret": {"secretName": files}}],
                "additionalVolumeMounts": {"apiServer": [{"name": files, "mountPath": "/etc/kubebyon", "readOnly": true}]}}}})
    };
    apply(
        "both",
        mounted(vec![
            "--authorization-config=/etc/kubebyon/authorization.yaml",
            "--authorization-mode=Node,RBAC",
        ]),
    )
    .await
    .unwrap();
    apply(
        "unmounted",
        mounted(vec![
            "--authorization-config=/etc/elsewhere/authorization.yaml",
        ]),
    )
    .await
    .unwrap();
    eventually("both API servers exited", || {
        sim.startup_log(&namespace, "both").is_some()
            && sim.startup_log(&namespace, "unmounted").is_some()
    })
    .await;
    assert!(
        sim.startup_log(&namespace, "both")
            .unwrap()
            .contains("--authorization-config can not be specified when --authorization-mode"),
    );
    assert!(
        sim.startup_log(&namespace, "unmounted")
            .unwrap()
            .contains("no such file or directory")
    );
    for name in ["both", "unmounted"] {
        assert!(sim.vcluster(&namespace, name).is_none(), "{name} runs");
        let tcp = api.get(name).await.unwrap();
        assert_ne!(
            tcp.data["status"]["kubernetesResources"]["version"]["status"], "Ready",
            "{name}"
        );
    }
    // Fixed, the API server starts: the controller tries again after an
    // exit when the object changes.
    apply(
        "both",
        mounted(vec![
            "--authorization-config=/etc/kubebyon/authorization.yaml",
            "--admission-control-config-file=/etc/kubebyon/admission.yaml",
        ]),
    )
    .await
    .unwrap();
    eventually("the fixed control plane runs", || {
        sim.vcluster(&namespace, "both").is_some()
    })
    .await;
    assert!(sim.startup_log(&namespace, "both").is_none());
    // The platform's own cluster started, with its files.
    assert!(sim.startup_log(&namespace, "lambda").is_none());
    assert_eq!(platform.cluster(&id).await["status"], "ready");
}

#[tokio::test]
async fn vcluster_runs_licensed_with_its_whole_api_server_command_and_refuses_what_it_did_before() {
    let platform = TestApp::builder("worker-vcluster-engine")
        .env("KUBEBYON_ENGINE", "vcluster")
        .admission()
        .build()
        .await;
    let (id, namespace) = platform.create_ready("mu", "nodeport").await;
    assert_eq!(platform.cluster(&id).await["status"], "ready");
    assert_eq!(platform.cluster(&id).await["engine"], "vcluster");
    let sim = platform.sim();
    let chart = sim
        .get("helm.cattle.io/v1", "HelmChart", &namespace, "mu")
        .unwrap();
    let values: Value =
        serde_json::from_str(chart["spec"]["valuesContent"].as_str().unwrap()).unwrap();
    // The licence reaches vCluster through a Secret of its namespace.
    let secret_name = values["external"]["platform"]["apiKey"]["secretName"]
        .as_str()
        .expect("the licence's Secret is named");
    let secret = sim.get("v1", "Secret", &namespace, secret_name).unwrap();
    use base64::Engine;
    let access_key = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["accessKey"].as_str().unwrap())
        .unwrap();
    assert_eq!(access_key, VCLUSTER_ACCESS_KEY.as_bytes());
    // The whole command: no `--authorization-mode` beside the configuration.
    let api_server = &values["controlPlane"]["distro"]["k8s"]["apiServer"];
    let command = strings(&api_server["command"]);
    assert_eq!(command[0], "/binaries/kube-apiserver");
    assert!(
        command
            .iter()
            .any(|a| a.starts_with("--authorization-config="))
    );
    assert!(
        !command
            .iter()
            .any(|a| a.starts_with("--authorization-mode"))
    );
    assert!(api_server.get("extraArgs").is_none());

    // What the values used to say — the files' flags as `extraArgs` over
    // vCluster's own `--authorization-mode=Node,RBAC` — stops the API
    // server; so do private nodes without a licence.
    let mut before = values.clone();
    before["controlPlane"]["distro"]["k8s"]["apiServer"] = json!({"extraArgs": command
        .iter()
        .filter(|a| a.starts_with("--authorization-config") || a.starts_with("--admission-control-config-file"))
        .collect::<Vec<_>>()});
    let mut unlicensed = values.clone();
    unlicensed.as_object_mut().unwrap().remove("external");
    for (name, values) in [("before", before), ("unlicensed", unlicensed)] {
        let mut chart = chart.clone();
        chart["metadata"] = json!({"name": name, "namespace": namespace});
        chart["spec"]["valuesContent"] = json!(values.to_string());
        chart.as_object_mut().unwrap().remove("status");
        sim.put(chart).unwrap();
    }
    eventually("both control planes exited", || {
        sim.startup_log(&namespace, "before").is_some()
            && sim.startup_log(&namespace, "unlicensed").is_some()
    })
    .await;
    assert!(
        sim.startup_log(&namespace, "before")
            .unwrap()
            .contains("--authorization-config can not be specified when --authorization-mode")
    );
    assert!(
        sim.startup_log(&namespace, "unlicensed")
            .unwrap()
            .contains("vCluster pro feature 'private nodes'")
    );
    for name in ["before", "unlicensed"] {
        assert!(sim.vcluster(&namespace, name).is_none(), "{name} runs");
        let set = sim.get("apps/v1", "StatefulSet", &namespace, name).unwrap();
        assert!(set["status"]["readyReplicas"].as_i64().unwrap_or(0) == 0);
    }
}

/// A control plane whose API server keeps exiting: the wait for it ends
/// saying so, with the command that shows its log, instead of a bare
/// timeout; the job tries again later.
#[tokio::test]
async fn a_control_plane_that_keeps_exiting_is_named_when_the_wait_ends() {
    let mut settings = crate::harness::host_settings();
    settings.ready_timeout = Duration::from_secs(2);
    let platform = TestApp::builder("worker-exits")
        .env("KUBEBYON_ENGINE", "kamaji")
        .host_with(settings)
        .build()
        .await;
    platform.sim().set_faults(kube_sim::Faults {
        api_server_exits: Some("failed to reach the DataStore".into()),
        ..kube_sim::Faults::default()
    });
    let id = platform.create("nu", "nodeport").await;
    platform.drive().await;
    let cluster = platform.cluster(&id).await;
    let namespace = cluster["namespace"].as_str().unwrap();
    let (_, operations) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/operations"),
            None,
        )
        .await;
    let said = operations[0].to_string();
    assert!(
        said.contains("its kube-apiserver container keeps exiting (5 restarts, last exit code 1)")
            && said.contains(&format!("kubectl -n {namespace} logs nu-")),
        "{said}"
    );
    assert_eq!(operations[0]["error"]["code"], "timeout", "{said}");
}
