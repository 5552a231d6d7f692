//! `local doctor` against a simulated host, as an operator runs it before
//! installing: a host with every prerequisite passes; with each one taken
//! away in turn it fails, naming that one and no other.

use std::collections::BTreeSet;

use kube_sim::{Faults, Options, Simulator};
use serde_json::json;
use tests::workspace_binary;

/// The host settings of a platform exposing `loadbalancer` clusters
/// through a shared Gateway (so the Gateway API is a prerequisite too).
const ENV: [(&str, &str); 4] = [
    ("KUBEBYON_LOADBALANCER_PROVIDER", "gatewayapi"),
    ("KUBEBYON_GATEWAY_NAME", "kubebyon-edge"),
    ("KUBEBYON_GATEWAY_NAMESPACE", "kubebyon-system"),
    ("KUBEBYON_GATEWAY_BASE_DOMAIN", "clusters.example.test"),
];

fn node(pod_cidr: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "host-1"},
           "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}})
}

/// The vCluster engine, licensed.
const VCLUSTER: [(&str, &str); 3] = [
    ("KUBEBYON_ENGINE", "vcluster"),
    (
        "KUBEBYON_VCLUSTER_PLATFORM_HOST",
        "platform.vcluster.example",
    ),
    ("KUBEBYON_VCLUSTER_ACCESS_KEY", "access-key"),
];

/// Kamaji's DataStore, ready or not, as its controller reports it.
fn datastore(ready: bool) -> serde_json::Value {
    json!({"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore",
           "metadata": {"name": "default"},
           "spec": {"driver": "etcd", "endpoints": ["kamaji-etcd-0.kamaji-etcd.kamaji-system.svc:2379"]},
           "status": {"ready": ready}})
}

/// A k3s host with Kamaji (its controller and default DataStore), Longhorn,
/// metrics-server and a Gateway.
async fn complete_host() -> std::sync::Arc<Simulator> {
    let sim = Simulator::start(Options::host()).await.unwrap();
    sim.put(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kamaji-system"}}),
    )
    .unwrap();
    sim.put(
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "kamaji", "namespace": "kamaji-system",
                            "labels": {"app.kubernetes.io/name": "kamaji", "app.kubernetes.io/instance": "kamaji"}},
               "spec": {"replicas": 1},
               "status": {"replicas": 1, "readyReplicas": 1}}),
    )
    .unwrap();
    sim.put(datastore(true)).unwrap();
    sim.put(
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                   "metadata": {"name": "longhorn"}, "provisioner": "driver.longhorn.io"}),
    )
    .unwrap();
    sim.put(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                   "metadata": {"name": "kubebyon-edge", "namespace": "kubebyon-system"},
                   "spec": {"gatewayClassName": "edge", "listeners": []}}),
    )
    .unwrap();
    sim.put(node("10.42.0.0/24")).unwrap();
    sim
}

/// What a case takes away from a complete host.
type TakeAway = Box<dyn Fn(&Simulator)>;

/// Runs `local doctor` against `sim`: whether it succeeded, and the checks
/// it reported failed.
async fn doctor(sim: &Simulator) -> (bool, BTreeSet<String>, String) {
    doctor_with(sim, &[]).await
}

/// [`doctor`] with more settings.
async fn doctor_with(sim: &Simulator, more: &[(&str, &str)]) -> (bool, BTreeSet<String>, String) {
    let dir = std::env::temp_dir().join(format!("kubebyon-doctor-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig(None)).unwrap();
    let output = tokio::process::Command::new(workspace_binary("local"))
        .arg("doctor")
        .env_clear()
        .env("KUBEBYON_HOST_KUBECONFIG", &kubeconfig)
        .envs(ENV)
        .envs(more.iter().copied())
        .output()
        .await
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let failed = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("FAIL "))
        .map(|line| line.split(':').next().unwrap().to_string())
        .collect();
    let report = format!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    (output.status.success(), failed, report)
}

#[tokio::test]
async fn the_doctor_names_each_missing_prerequisite_of_the_host() {
    let sim = complete_host().await;
    let (ok, failed, report) = doctor(&sim).await;
    assert!(ok && failed.is_empty(), "{report}");
    for check in [
        "ok   TenantControlPlane (kamaji.clastix.io/v1alpha1): served",
        "ok   Kamaji's controller in kamaji-system: running",
        "ok   Kamaji DataStore default: ready",
        "ok   StorageClass longhorn: provisioner driver.longhorn.io",
        "ok   Gateway kubebyon-system/kubebyon-edge: found",
        "(10.42.0.0/16): 10.42.0.0/24",
    ] {
        assert!(report.contains(check), "{check}: {report}");
    }

    let unserved = |group: &str| Faults {
        unserved_groups: vec![group.to_string()],
        ..Faults::default()
    };
    let cases: Vec<(&str, TakeAway, Vec<&str>)> = vec![
        (
            "no Kamaji",
            Box::new(move |sim| sim.set_faults(unserved("kamaji.clastix.io"))),
            vec![
                "TenantControlPlane (kamaji.clastix.io/v1alpha1)",
                "Kamaji DataStore default",
            ],
        ),
        (
            "no Kamaji controller",
            Box::new(|sim| {
                assert!(sim.remove("apps/v1", "Deployment", "kamaji-system", "kamaji"));
            }),
            vec!["Kamaji's controller in kamaji-system"],
        ),
        (
            "a DataStore not ready",
            Box::new(|sim| {
                sim.put(datastore(false)).unwrap();
            }),
            vec!["Kamaji DataStore default"],
        ),
        (
            "no StorageClass",
            Box::new(|sim| {
                assert!(sim.remove("storage.k8s.io/v1", "StorageClass", "", "longhorn"));
            }),
            vec!["StorageClass longhorn"],
        ),
        (
            "no metrics-server",
            Box::new(move |sim| sim.set_faults(unserved("metrics.k8s.io"))),
            vec!["metrics API (metrics.k8s.io)"],
        ),
        (
            "no Gateway API",
            Box::new(move |sim| sim.set_faults(unserved("gateway.networking.k8s.io"))),
            vec![
                "TLSRoute (gateway.networking.k8s.io v1 or v1alpha2)",
                "Gateway kubebyon-system/kubebyon-edge",
            ],
        ),
        (
            "no Gateway",
            Box::new(|sim| {
                assert!(sim.remove(
                    "gateway.networking.k8s.io/v1",
                    "Gateway",
                    "kubebyon-system",
                    "kubebyon-edge"
                ));
            }),
            vec!["Gateway kubebyon-system/kubebyon-edge"],
        ),
        (
            "another pod network",
            Box::new(|sim| {
                sim.put(node("10.244.1.0/24")).unwrap();
            }),
            vec!["the nodes' pod networks inside KUBEBYON_HOST_POD_CIDRS (10.42.0.0/16)"],
        ),
        (
            "the API down",
            Box::new(|sim| {
                sim.set_faults(Faults {
                    api_down: true,
                    ..Faults::default()
                })
            }),
            vec!["the host's API answers"],
        ),
    ];
    for (case, take_away, expected) in cases {
        let sim = complete_host().await;
        take_away(&sim);
        let (ok, failed, report) = doctor(&sim).await;
        assert!(!ok, "{case}: {report}");
        let expected: BTreeSet<String> = expected.into_iter().map(String::from).collect();
        assert_eq!(failed, expected, "{case}: {report}");
        assert!(
            report.contains("of the host's prerequisites not met"),
            "{case}: {report}"
        );
    }
    // On vCluster, the helm controller is what makes control planes.
    let sim = complete_host().await;
    let (ok, _, report) = doctor_with(&sim, &VCLUSTER).await;
    assert!(ok, "{report}");
    assert!(
        report.contains("ok   HelmChart (helm.cattle.io/v1): served"),
        "{report}"
    );
    assert!(!report.contains("Kamaji"), "{report}");
    sim.set_faults(unserved("helm.cattle.io"));
    let (ok, failed, report) = doctor_with(&sim, &VCLUSTER).await;
    assert!(!ok, "{report}");
    assert_eq!(
        failed,
        BTreeSet::from(["HelmChart (helm.cattle.io/v1)".to_string()])
    );
    // The pod network refused names the node and its network.
    let sim = complete_host().await;
    sim.put(node("10.244.1.0/24")).unwrap();
    let (_, _, report) = doctor(&sim).await;
    assert!(report.contains("outside: host-1 10.244.1.0/24"), "{report}");
}
