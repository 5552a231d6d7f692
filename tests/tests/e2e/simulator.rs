//! The Kubernetes API simulator is faithful enough for kube-rs and kubectl.

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::{
    Api, Client, Config,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams},
};
use kube_sim::{Options, Simulator};
use serde_json::json;

async fn client(sim: &Simulator) -> Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&sim.kubeconfig(None)).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn config_map(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

#[tokio::test]
async fn crud_selectors_and_optimistic_concurrency_through_kube_rs() {
    let sim = Simulator::start(Options::host()).await.unwrap();
    let client = client(&sim).await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let created = maps
        .create(
            &PostParams::default(),
            &config_map("one", json!({"tier": "a"})),
        )
        .await
        .unwrap();
    maps.create(
        &PostParams::default(),
        &config_map("two", json!({"tier": "b"})),
    )
    .await
    .unwrap();
    let err = maps
        .create(&PostParams::default(), &config_map("one", json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err}"
    );

    let selected = maps
        .list(&ListParams::default().labels("tier=a"))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    let by_field = maps
        .list(&ListParams::default().fields("metadata.name=two"))
        .await
        .unwrap();
    assert_eq!(by_field.items[0].metadata.name.as_deref(), Some("two"));

    // A replace with a stale resourceVersion is refused.
    let mut stale = created.clone();
    maps.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "new"}})),
    )
    .await
    .unwrap();
    stale.data = Some([("k".to_string(), "lost".to_string())].into());
    let err = maps
        .replace("one", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err}"
    );
    assert_eq!(maps.get("one").await.unwrap().data.unwrap()["k"], "new");

    // generateName.
    let generated: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let generated = maps
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(generated.metadata.name.unwrap().starts_with("gen-"));

    // 404 is a Status the client understands.
    let err = maps.get("missing").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404 && s.reason == "NotFound"),
        "{err}"
    );
    assert!(maps.get_opt("missing").await.unwrap().is_none());
}

#[tokio::test]
async fn server_side_apply_creates_then_merges_and_records_the_manager() {
    let sim = Simulator::start(Options::host()).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client(&sim).await, "default");
    let params = PatchParams::apply("kubebyon").force();
    let first = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "labels": {"a": "1"}},
                       "stringData": {"x": "1"}});
    let created = secrets
        .patch("s", &params, &Patch::Apply(first))
        .await
        .unwrap();
    let again = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "labels": {"b": "2"}}});
    let merged = secrets
        .patch("s", &params, &Patch::Apply(again))
        .await
        .unwrap();
    let labels = merged.metadata.labels.unwrap();
    assert_eq!(
        (
            labels.get("a").map(String::as_str),
            labels.get("b").map(String::as_str)
        ),
        (Some("1"), Some("2"))
    );
    assert_ne!(
        created.metadata.resource_version,
        merged.metadata.resource_version
    );
    assert_eq!(
        merged.metadata.managed_fields.unwrap()[0]
            .manager
            .as_deref(),
        Some("kubebyon")
    );
}

#[tokio::test]
async fn status_subresource_watch_and_namespace_deletion() {
    let sim = Simulator::start(Options {
        namespace_delete_delay: Duration::from_millis(50),
        ..Options::host()
    })
    .await
    .unwrap();
    let client = client(&sim).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
        )
        .await
        .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "team");

    let list = maps.list(&ListParams::default()).await.unwrap();
    let version = list.metadata.resource_version.unwrap();
    let mut stream = maps
        .watch(&WatchParams::default().timeout(10), &version)
        .await
        .unwrap()
        .boxed();
    maps.create(&PostParams::default(), &config_map("watched", json!({})))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(event, WatchEvent::Added(ref cm) if cm.metadata.name.as_deref() == Some("watched")),
        "{event:?}"
    );

    // Status is written only through the subresource.
    namespaces
        .patch_status(
            "team",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Active"}})),
        )
        .await
        .unwrap();

    namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = namespaces.get("team").await.unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    let err = maps
        .create(&PostParams::default(), &config_map("late", json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );
    tests::eventually(10, "the namespace to be gone", || async {
        namespaces
            .get_opt("team")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        sim.get("v1", "ConfigMap", "team", "watched").is_none(),
        "its contents went with it"
    );
}

// Multi-threaded: kubectl runs as a blocking child process while the simulator serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_can_apply_get_watch_and_delete() {
    let sim = Simulator::start(Options::host()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("kubesim-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("config");
    std::fs::write(&kubeconfig, sim.kubeconfig(None)).unwrap();
    let manifest = dir.join("cm.yaml");
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-kubectl\n  namespace: default\ndata:\n  answer: \"42\"\n").unwrap();
    let kubectl = |args: &[&str]| {
        let output = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .env("HOME", &dir)
            .output()
            .expect("kubectl is installed (scripts/test.sh installs it)");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };

    // The simulator serves no OpenAPI schemas, so kubectl's schema validation is off.
    let (ok, out, err) = kubectl(&[
        "apply",
        "--server-side",
        "--validate=false",
        "--field-manager",
        "kubectl-test",
        "-f",
        manifest.to_str().unwrap(),
    ]);
    assert!(ok, "apply: {out} {err}");
    let (ok, out, err) = kubectl(&[
        "get",
        "configmap",
        "from-kubectl",
        "-n",
        "default",
        "-o",
        "jsonpath={.data.answer}",
    ]);
    assert!(ok, "get: {err}");
    assert_eq!(out, "42");
    let (ok, out, err) = kubectl(&["get", "namespaces", "-o", "name"]);
    assert!(ok, "list: {err}");
    assert!(out.contains("namespace/kube-system"), "{out}");
    let (ok, out, err) = kubectl(&[
        "get",
        "configmaps",
        "-n",
        "default",
        "--watch",
        "--request-timeout=2s",
        "-o",
        "name",
    ]);
    assert!(
        out.contains("configmap/from-kubectl"),
        "watch printed {out:?} ({ok}, {err})"
    );
    let (ok, _, err) = kubectl(&["delete", "configmap", "from-kubectl", "-n", "default"]);
    assert!(ok, "delete: {err}");
    assert!(
        sim.get("v1", "ConfigMap", "default", "from-kubectl")
            .is_none()
    );

    // kubectl's typed clients send protobuf; what they sent is what is stored.
    for args in [
        &["create", "namespace", "typed", "--dry-run=none"][..],
        &[
            "create",
            "deployment",
            "web",
            "-n",
            "typed",
            "--image=nginx:1.27",
            "--replicas=2",
            "--port=8080",
        ],
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "typed",
            "--from-literal=mode=fast",
        ],
        &[
            "create",
            "secret",
            "generic",
            "password",
            "-n",
            "typed",
            "--from-literal=p=s3cret",
        ],
    ] {
        let (ok, out, err) = kubectl(args);
        assert!(ok, "{args:?}: {out} {err}");
    }
    let web = sim.get("apps/v1", "Deployment", "typed", "web").unwrap();
    assert_eq!(web["spec"]["replicas"], 2);
    assert_eq!(web["spec"]["selector"]["matchLabels"]["app"], "web");
    let container = &web["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        (&container["image"], &container["ports"][0]["containerPort"]),
        (&json!("nginx:1.27"), &json!(8080))
    );
    assert_eq!(
        sim.get("v1", "ConfigMap", "typed", "settings").unwrap()["data"]["mode"],
        "fast"
    );
    let secret = sim.get("v1", "Secret", "typed", "password").unwrap();
    assert_eq!(
        secret["data"]["p"], "czNjcmV0",
        "base64 of the value, as JSON has it"
    );
    // Server-side columns and short names, as `kubectl get` shows them.
    let (ok, out, err) = kubectl(&["get", "deploy", "-n", "typed"]);
    assert!(ok, "get deploy: {err}");
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{out}"
    );
    assert!(
        out.lines().nth(1).unwrap_or_default().starts_with("web "),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
