//! The `haproxy` provider with a real HAProxy: Debian's, run with the
//! configuration the chart renders (`files/haproxy.cfg`) on loopback ports,
//! in front of simulated clusters' API servers. The platform keeps its map
//! through the Runtime API: `kubectl` with each cluster's kubeconfig reaches
//! its own cluster through the one address, by SNI, and no other; a name
//! the map does not hold is refused at the handshake; a `kubectl get
//! --watch` of one cluster keeps receiving while ten others are added and
//! removed; `sync-haproxy` refills a restarted HAProxy and removes what no
//! cluster holds; a cluster deleted or switched to `nodeport` leaves the
//! map, and its kubeconfigs are listed as stale.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use serde_json::{Value, json};
use shared::host::{
    LoadBalancerProvider,
    haproxy::{Backend, Haproxy},
};
use tests::{edgeproxy::haproxy, free_port};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

use crate::harness::{TestApp, host_settings};

const BASE_DOMAIN: &str = "clusters.example.test";

/// HAProxy run from the chart's rendered configuration until dropped.
struct Proxy {
    dir: PathBuf,
    port: u16,
    runtime: u16,
    child: Child,
}

impl Proxy {
    /// The chart's ConfigMap for HAProxy, rendered for `dir` and two free
    /// ports, written to `dir`, and HAProxy started on it.
    async fn start() -> Self {
        let dir =
            std::env::temp_dir().join(format!("kb-haproxy-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let (port, runtime) = (free_port(), free_port());
        let documents = crate::routing::rendered(&[
            "config.KUBEBYON_LOADBALANCER_PROVIDER=haproxy",
            &format!("config.KUBEBYON_HAPROXY_BASE_DOMAIN={BASE_DOMAIN}"),
            &format!("haproxy.port={port}"),
            &format!("haproxy.runtimePort={runtime}"),
            &format!("haproxy.configDir={}", dir.display()),
            // Within this machine's file descriptor limit (HAProxy wants
            // two a connection).
            "haproxy.maxConnections=2000",
        ]);
        let config = documents
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "kb-haproxy")
            .expect("the chart renders HAProxy's ConfigMap");
        for file in ["haproxy.cfg", "clusters.map"] {
            std::fs::write(dir.join(file), config["data"][file].as_str().unwrap()).unwrap();
        }
        let child = Self::spawn(&dir, runtime).await;
        Self {
            dir,
            port,
            runtime,
            child,
        }
    }

    /// HAProxy in one process (the chart runs it master-worker, whose
    /// worker would outlive a killed master here), once its Runtime API
    /// answers a command.
    async fn spawn(dir: &Path, runtime: u16) -> Child {
        let child = Command::from(haproxy())
            .args(["-db", "-f"])
            .arg(dir.join("haproxy.cfg"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("Debian's haproxy is installed (scripts/test.sh installs it)");
        let runtime_api = Self::settings_for(dir, 0, runtime);
        let replica = SocketAddr::from(([127, 0, 0, 1], runtime));
        for _ in 0..100 {
            if runtime_api.show(replica).await.is_ok() {
                return child;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("HAProxy's Runtime API does not answer");
    }

    /// Stops HAProxy and starts it again from the chart's (empty) map.
    async fn restart(&mut self) {
        self.child.kill().await.unwrap();
        self.child = Self::spawn(&self.dir, self.runtime).await;
    }

    fn settings(&self) -> Haproxy {
        Self::settings_for(&self.dir, self.port, self.runtime)
    }

    fn settings_for(dir: &Path, port: u16, runtime: u16) -> Haproxy {
        Haproxy {
            base_domain: BASE_DOMAIN.into(),
            runtime_api: format!("127.0.0.1:{runtime}"),
            map: format!("{}/clusters.map", dir.display()),
            backend: Backend::NodePort,
            port,
        }
    }

    /// The map as HAProxy holds it.
    async fn map(&self) -> Vec<String> {
        let haproxy = self.settings();
        let replica = haproxy.replicas().await.unwrap()[0];
        haproxy.show(replica).await.unwrap().into_keys().collect()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A name of `/etc/hosts` for HAProxy's loopback address while it lives, as
/// the base domain's wildcard record is in DNS: the platform reaches the
/// cluster by its public name (to issue a kubeconfig), as kubectl does.
pub(crate) struct HostsEntry(String);

impl HostsEntry {
    const FILE: &str = "/etc/hosts";

    pub(crate) fn add(name: &str) -> Self {
        use std::io::Write;
        let line = format!("127.0.0.1 {name} # kubebyon haproxy test");
        let mut hosts = std::fs::OpenOptions::new()
            .append(true)
            .open(Self::FILE)
            .expect("/etc/hosts is writable (the tests run as root)");
        writeln!(hosts, "{line}").unwrap();
        Self(line)
    }
}

impl Drop for HostsEntry {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(Self::FILE) {
            let kept: String = text
                .lines()
                .filter(|l| *l != self.0)
                .map(|l| format!("{l}\n"))
                .collect();
            let _ = std::fs::write(Self::FILE, kept);
        }
    }
}

/// A cluster's kubeconfig in a directory of its own, used through HAProxy.
struct Kubectl {
    dir: PathBuf,
    sni: String,
    port: u16,
    _resolved: HostsEntry,
}

impl Kubectl {
    async fn for_cluster(app: &TestApp, id: &str, proxy: &Proxy) -> Self {
        let cluster = app.cluster(id).await;
        let endpoint = cluster["api_endpoint"].as_str().unwrap().to_string();
        let sni = endpoint
            .trim_start_matches("https://")
            .split(':')
            .next()
            .unwrap()
            .to_string();
        let resolved = HostsEntry::add(&sni);
        let dir = proxy.dir.join(&sni);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config"),
            app.issue_kubeconfig(id, json!({})).await,
        )
        .unwrap();
        Self {
            dir,
            sni,
            port: proxy.port,
            _resolved: resolved,
        }
    }

    /// kubectl with this kubeconfig as downloaded (its server's name
    /// resolves to HAProxy), or, with `sni`, sent to HAProxy's address
    /// presenting that name instead.
    fn command(&self, sni: Option<&str>, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(self.dir.join("config"))
            .arg("--request-timeout=5s");
        if let Some(sni) = sni {
            command
                .arg(format!("--server=https://127.0.0.1:{}", self.port))
                .arg(format!("--tls-server-name={sni}"));
        }
        command.args(args).env("HOME", &self.dir).kill_on_drop(true);
        command
    }

    async fn run(&self, sni: Option<&str>, args: &[&str]) -> (bool, String) {
        let output = self.command(sni, args).output().await.unwrap();
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

async fn load_balanced(app: &TestApp, name: &str) -> String {
    let id = app.create(name, "loadbalancer").await;
    let driven = app.drive().await;
    let cluster = app.cluster(&id).await;
    assert_eq!(cluster["status"], "ready", "{driven:?} {cluster}");
    id
}

async fn delete(app: &TestApp, id: &str) {
    let (status, body) = app
        .call("DELETE", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert!(status.is_success(), "{body}");
    app.drive().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn clusters_share_one_haproxy_by_sni_and_a_watch_survives_others_coming_and_going() {
    let mut proxy = Proxy::start().await;
    let mut settings = host_settings();
    settings.node_address = "127.0.0.1".into();
    settings.load_balancer = LoadBalancerProvider::Haproxy(proxy.settings());
    let app = TestApp::builder("worker-haproxy")
        .host_with(settings)
        .build()
        .await;

    let alpha = load_balanced(&app, "alpha").await;
    let beta = load_balanced(&app, "beta").await;
    let cluster = app.cluster(&alpha).await;
    let sni = |id: &str, name: &str| format!("{name}-{}.{BASE_DOMAIN}", &id.replace('-', "")[..8]);
    assert_eq!(
        cluster["api_endpoint"],
        format!("https://{}:{}", sni(&alpha, "alpha"), proxy.port)
    );
    assert_eq!(proxy.map().await, {
        let mut both = vec![sni(&alpha, "alpha"), sni(&beta, "beta")];
        both.sort();
        both
    });

    // Each kubeconfig reaches its own cluster through the one address; the
    // other's name reaches the other cluster, whose certificate its CA
    // does not sign.
    let (kubectl_a, kubectl_b) = (
        Kubectl::for_cluster(&app, &alpha, &proxy).await,
        Kubectl::for_cluster(&app, &beta, &proxy).await,
    );
    for kubectl in [&kubectl_a, &kubectl_b] {
        let (ok, out) = kubectl
            .run(None, &["get", "namespaces", "-o", "name"])
            .await;
        assert!(ok && out.contains("namespace/default"), "{out}");
    }
    let (ok, out) = kubectl_a
        .run(Some(&kubectl_b.sni), &["get", "namespaces"])
        .await;
    assert!(!ok && out.contains("certificate"), "{out}");

    // A name the map does not hold: refused at the handshake.
    let (ok, out) = kubectl_a
        .run(
            Some(&format!("nobody.{BASE_DOMAIN}")),
            &["get", "namespaces"],
        )
        .await;
    assert!(!ok && !out.contains("certificate"), "{out}");

    // A watch of alpha, while ten other clusters come and go.
    let mut watch = kubectl_a
        .command(None, &["get", "configmaps", "--watch", "-o", "name"])
        .arg("--request-timeout=0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut others = Vec::new();
    for n in 0..10 {
        others.push(load_balanced(&app, &format!("other{n}")).await);
    }
    assert_eq!(proxy.map().await.len(), 12);
    for id in &others {
        delete(&app, id).await;
    }
    assert_eq!(proxy.map().await.len(), 2, "deleted clusters leave the map");
    let namespace = cluster["namespace"].as_str().unwrap();
    app.sim()
        .vcluster(namespace, "alpha")
        .unwrap()
        .put(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "after-the-others", "namespace": "default"}}))
        .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("after-the-others") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the watch still receives");
    watch.kill().await.unwrap();

    // HAProxy restarts with the chart's empty map: sync-haproxy refills it,
    // and removes an entry no cluster holds.
    proxy.restart().await;
    assert!(proxy.map().await.is_empty());
    let haproxy = proxy.settings();
    let replica = haproxy.replicas().await.unwrap()[0];
    haproxy
        .put(
            replica,
            &Default::default(),
            &format!("stale.{BASE_DOMAIN}"),
            "127.0.0.1:9".parse().unwrap(),
        )
        .await
        .unwrap();
    let report = sync_haproxy::converge(&app.db.pool, app.host())
        .await
        .unwrap();
    assert_eq!(
        (report.replicas, report.written, report.removed),
        (1, 2, 1),
        "{report:?}"
    );
    let (ok, out) = kubectl_a.run(None, &["get", "namespaces"]).await;
    assert!(ok, "{out}");
    let again = sync_haproxy::converge(&app.db.pool, app.host())
        .await
        .unwrap();
    assert_eq!((again.written, again.removed), (0, 0), "nothing twice");

    // Switched to nodeport: its name leaves the map.
    let (status, body) = app
        .call(
            "PATCH",
            &format!("/api/console/clusters/{beta}"),
            Some(json!({"public_access_mode": "nodeport"})),
        )
        .await;
    assert!(status.is_success(), "{body}");
    app.drive().await;
    assert_eq!(proxy.map().await, [sni(&alpha, "alpha")]);

    // Its kubeconfig names the address it had: the list says it is stale;
    // one issued now is not.
    let list = async || {
        app.call(
            "GET",
            &format!("/api/console/clusters/{beta}/kubeconfigs"),
            None,
        )
        .await
        .1
    };
    let listed = list().await;
    assert_eq!(listed[0]["stale"], true, "{listed}");
    assert_eq!(
        listed[0]["api_endpoint"],
        format!("https://{}:{}", kubectl_b.sni, proxy.port)
    );
    app.issue_kubeconfig(&beta, json!({})).await;
    let listed = list().await;
    assert_eq!(
        (listed[0]["stale"].clone(), listed[1]["stale"].clone()),
        (json!(false), json!(true)),
        "{listed}"
    );
    assert_eq!(
        listed[0]["api_endpoint"],
        app.cluster(&beta).await["api_endpoint"]
    );
}

/// With the `clusterip` backend (HAProxy inside the host), a cluster's
/// entry is its public Service's cluster IP on 443, which kube-apiserver
/// gave the Service as it made it.
#[tokio::test]
async fn inside_the_host_haproxy_forwards_to_the_service_s_cluster_ip() {
    let proxy = Proxy::start().await;
    let mut settings = host_settings();
    settings.load_balancer = LoadBalancerProvider::Haproxy(Haproxy {
        backend: Backend::ClusterIp,
        ..proxy.settings()
    });
    let app = TestApp::builder("worker-haproxy-ip")
        .host_with(settings)
        .build()
        .await;
    let id = load_balanced(&app, "gamma").await;
    let namespace = app.cluster(&id).await["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    let service: Value = app
        .sim()
        .get("v1", "Service", &namespace, "gamma-public-lb")
        .unwrap();
    assert_eq!(service["spec"]["type"], "ClusterIP");
    let ip = service["spec"]["clusterIP"].as_str().unwrap();
    let haproxy = proxy.settings();
    let replica = haproxy.replicas().await.unwrap()[0];
    let map = haproxy.show(replica).await.unwrap();
    assert_eq!(
        map.values().collect::<Vec<_>>(),
        [&format!("{ip}/443")],
        "{map:?}"
    );
}

/// A switch to the shared HAProxy while HAProxy is stopped: the new address
/// does not answer, so the job fails with `endpoint_unreachable` and the
/// cluster stays on its NodePort endpoint, which keeps serving; what the
/// switch made is removed. With HAProxy back, retrying the operation
/// switches it.
#[tokio::test(flavor = "multi_thread")]
async fn a_switch_to_a_stopped_haproxy_leaves_the_cluster_on_its_old_endpoint() {
    let mut proxy = Proxy::start().await;
    let mut settings = host_settings();
    settings.node_address = "127.0.0.1".into();
    settings.ready_timeout = Duration::from_secs(3);
    settings.load_balancer = LoadBalancerProvider::Haproxy(proxy.settings());
    let app = TestApp::builder("worker-haproxy-down")
        .host_with(settings)
        .build()
        .await;
    let id = app.create("zeta", "nodeport").await;
    app.drive().await;
    let before = app.cluster(&id).await;
    let namespace = before["namespace"].as_str().unwrap().to_string();
    let sni = format!("zeta-{}.{BASE_DOMAIN}", &id.replace('-', "")[..8]);
    let _resolved = HostsEntry::add(&sni);
    proxy.child.kill().await.unwrap();

    let (status, body) = crate::endpoint_switch::switch(&app, &id, "loadbalancer").await;
    assert_eq!(status, axum::http::StatusCode::ACCEPTED, "{body}");
    let operation = body["operation"]["id"].as_str().unwrap().to_string();
    let done = app.drive().await;
    assert_eq!(done[0].1, shared::jobs::Processed::Failed, "{done:?}");
    let (_, operations) = app
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/operations"),
            None,
        )
        .await;
    let failed = &operations[0];
    assert_eq!(failed["id"], operation.as_str());
    assert_eq!(failed["error"]["code"], "endpoint_unreachable", "{failed}");
    assert!(
        failed["error_message"]
            .as_str()
            .unwrap()
            .contains(&format!("https://{sni}:{}", proxy.port)),
        "{failed}"
    );
    let after = app.cluster(&id).await;
    assert_eq!(
        (
            &after["status"],
            &after["public_access_mode"],
            &after["api_endpoint"],
            &after["previous_api_endpoint"]
        ),
        (
            &json!("ready"),
            &json!("nodeport"),
            &before["api_endpoint"],
            &Value::Null
        ),
        "the cluster stays on its old endpoint"
    );
    assert!(
        app.sim()
            .get("v1", "Service", &namespace, "zeta-public-lb")
            .is_none(),
        "the unverified entry is removed"
    );
    let client = app.kube_client_from_kubeconfig(&id).await;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    namespaces
        .list(&Default::default())
        .await
        .expect("the old endpoint serves");

    // HAProxy is back: the same operation, retried, goes through.
    proxy.child = Proxy::spawn(&proxy.dir, proxy.runtime).await;
    let (status, body) = app
        .call(
            "POST",
            &format!("/api/console/clusters/{id}/operations/{operation}/retry"),
            None,
        )
        .await;
    assert!(status.is_success(), "{body}");
    assert_eq!(app.drive().await[0].1, shared::jobs::Processed::Succeeded);
    let switched = app.cluster(&id).await;
    assert_eq!(
        switched["api_endpoint"],
        format!("https://{sni}:{}", proxy.port)
    );
    assert_eq!(proxy.map().await, [sni]);
}
