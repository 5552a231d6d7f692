//! A worker joining a Kamaji control plane the way kubeadm does, against the
//! simulator: token discovery of `cluster-info` (signed by the
//! bootstrapsigner, the CA pinned by its public key's hash, computed here
//! with `openssl` as kubeadm's documentation does), the endpoint
//! `cluster-info` names (the TenantControlPlane's), bootstrap-token
//! authentication held to RBAC, the kubelet's certificate request approved
//! and signed by the cluster's CA, and the Node registered with that
//! certificate. The joining side is `tests/stand-ins/kubeadm`, written from
//! kubeadm's discovery code, in Python: it shares no code with the simulator.
//! Then the same through the platform: its join script runs that `kubeadm`
//! against a Kamaji cluster, and the platform, not the cluster, approves.

use std::{path::PathBuf, process::Stdio, sync::Arc, time::Duration};

use kube_sim::{Options, Simulator};
use serde_json::{Value, json};

use crate::{admission::Kubectl, harness::TestApp};

const NAMESPACE: &str = "tenant-kappa";
const NAME: &str = "kappa";

fn python() -> String {
    std::env::var("KUBEBYON_TEST_PYTHON")
        .unwrap_or_else(|_| "../target/test-venv/bin/python".to_string())
}

fn stand_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("stand-ins/kubeadm")
}

async fn eventually<T>(what: &str, check: impl Fn() -> Option<T>) -> T {
    for _ in 0..200 {
        if let Some(found) = check() {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen within 10 s");
}

/// A host with a running Kamaji control plane whose endpoint is a node
/// port of the host (`127.0.0.1:<port>`), as the platform would expose it.
struct Tenant {
    host: Arc<Simulator>,
    control_plane: Arc<Simulator>,
    endpoint: String,
    root: PathBuf,
}

impl Tenant {
    async fn start() -> Self {
        let host = Simulator::start(Options::host()).await.unwrap();
        host.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))
            .unwrap();
        host.put(
            json!({"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"kubernetes": {"version": "v1.33.5"}, "networkProfile": {"port": 6443},
                     "controlPlane": {"service": {"serviceType": "ClusterIP"}}}}),
        )
        .unwrap();
        let control_plane = eventually("the control plane starting", || {
            host.vcluster(NAMESPACE, NAME)
        })
        .await;
        host.put(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kappa-public", "namespace": NAMESPACE},
            "spec": {"type": "NodePort", "selector": {"kamaji.clastix.io/name": NAME},
                     "ports": [{"name": "https", "port": 443, "targetPort": 6443, "protocol": "TCP"}]}}))
            .unwrap();
        let node_port = eventually("a node port", || {
            host.get("v1", "Service", NAMESPACE, "kappa-public")?
                .pointer("/spec/ports/0/nodePort")?
                .as_i64()
        })
        .await;
        // Before: cluster-info names the Service's in-cluster address,
        // which no node outside the host reaches.
        let info = cluster_info(&control_plane);
        assert!(
            info.contains(&format!("server: https://{NAME}.{NAMESPACE}.svc:6443")),
            "{info}"
        );
        let mut tcp = host
            .get(
                "kamaji.clastix.io/v1alpha1",
                "TenantControlPlane",
                NAMESPACE,
                NAME,
            )
            .unwrap();
        tcp["spec"]["networkProfile"]["address"] = json!("127.0.0.1");
        tcp["spec"]["networkProfile"]["port"] = json!(node_port);
        tcp.as_object_mut().unwrap().remove("status");
        host.put(tcp).unwrap();
        // The API server now listens on the node port: the Service targets it.
        let mut service = host
            .get("v1", "Service", NAMESPACE, "kappa-public")
            .unwrap();
        service["spec"]["ports"][0]["targetPort"] = json!(node_port);
        service.as_object_mut().unwrap().remove("status");
        host.put(service).unwrap();
        let endpoint = format!("127.0.0.1:{node_port}");
        eventually("cluster-info naming the endpoint", || {
            cluster_info(&control_plane)
                .contains(&format!("server: https://{endpoint}\n"))
                .then_some(())
        })
        .await;
        let root = std::env::temp_dir().join(format!("kubeadm-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&root).unwrap();
        Self {
            host,
            control_plane,
            endpoint,
            root,
        }
    }

    /// A bootstrap token Secret in the control plane; its token.
    fn token(&self, groups: &str) -> String {
        let id = &uuid::Uuid::new_v4().simple().to_string()[..6];
        let secret = &uuid::Uuid::new_v4().simple().to_string()[..16];
        let expires = (chrono::Utc::now() + chrono::Duration::minutes(10))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        self.control_plane
            .put(json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
                "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
                "stringData": {},
                "data": {
                    "token-id": b64(id), "token-secret": b64(secret),
                    "usage-bootstrap-authentication": b64("true"), "usage-bootstrap-signing": b64("true"),
                    "auth-extra-groups": b64(groups), "expiration": b64(&expires)}}))
            .unwrap();
        format!("{id}.{secret}")
    }

    /// The pinned hash of the control plane's CA, the way kubeadm's
    /// documentation computes it.
    async fn ca_hash(&self) -> String {
        let ca = self.root.join("ca.crt");
        std::fs::write(&ca, self.control_plane.ca_pem()).unwrap();
        let output = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "openssl x509 -pubkey -in {} | openssl pkey -pubin -outform der | openssl dgst -sha256 -hex | sed 's/^.* //'",
                ca.display()
            ))
            .output()
            .await
            .unwrap();
        assert!(output.status.success());
        format!(
            "sha256:{}",
            String::from_utf8(output.stdout).unwrap().trim()
        )
    }

    /// Runs `kubeadm join` for `node`; (succeeded, output).
    async fn join(&self, token: &str, hash: &str, node: &str) -> (bool, String) {
        let output = tokio::process::Command::new(python())
            .arg(stand_in())
            .args(["join", &self.endpoint, "--token", token])
            .args(["--discovery-token-ca-cert-hash", hash, "--node-name", node])
            .env("KUBEBYON_JOIN_ROOT", &self.root)
            .env("KUBEADM_STAND_IN_TIMEOUT", "4")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
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

    fn node(&self, name: &str) -> Option<Value> {
        self.control_plane.get("v1", "Node", "", name)
    }
}

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn cluster_info(control_plane: &Simulator) -> String {
    control_plane
        .get("v1", "ConfigMap", "kube-public", "cluster-info")
        .and_then(|c| c.pointer("/data/kubeconfig")?.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_worker_joins_a_kamaji_control_plane_with_kubeadms_token_discovery() {
    let tenant = Tenant::start().await;
    let token = tenant.token("system:bootstrappers:kubeadm:default-node-token");
    let hash = tenant.ca_hash().await;

    // A pin of another CA is refused before anything is sent with the token.
    let other = format!("sha256:{}", "0".repeat(64));
    let (joined, output) = tenant.join(&token, &other, "worker-1").await;
    assert!(!joined, "{output}");
    assert!(output.contains("none of the public keys"), "{output}");
    assert!(tenant.node("worker-1").is_none());

    // A token the cluster does not know finds no signature to trust.
    let (joined, output) = tenant
        .join("zzzzzz.0123456789abcdef", &hash, "worker-1")
        .await;
    assert!(!joined, "{output}");
    assert!(output.contains("no JWS signed token"), "{output}");

    let (joined, output) = tenant.join(&token, &hash, "worker-1").await;
    assert!(joined, "{output}");
    assert!(
        output.contains(&format!(
            "will use API Server \"https://{}\"",
            tenant.endpoint
        )),
        "{output}"
    );
    let node = tenant.node("worker-1").expect("the node registered");
    assert_eq!(
        node.pointer("/status/conditions/0/type"),
        Some(&json!("Ready"))
    );
    let kubelet = std::fs::read_to_string(tenant.root.join("etc/kubernetes/kubelet.conf")).unwrap();
    assert!(kubelet.contains(&format!("server: https://{}", tenant.endpoint)));

    // kubectl sees the request the kubelet filed, by the token's user, approved
    // by the cluster itself (kubeadm's default node-token group), and signed.
    let kubectl = Kubectl::with(&tenant.control_plane.kubeconfig(None));
    let (ok, out) = kubectl.run(&["get", "csr", "-o", "json"], "").await;
    assert!(ok, "{out}");
    let csrs: Value = serde_json::from_str(&out).unwrap();
    let csr = &csrs["items"][0];
    let id = token.split('.').next().unwrap();
    assert_eq!(csr["spec"]["username"], format!("system:bootstrap:{id}"));
    assert_eq!(csr["status"]["conditions"][0]["reason"], "AutoApproved");
    assert!(csr["status"]["certificate"].is_string());
    drop(tenant.host);
}

#[tokio::test]
async fn kamaji_brings_back_auto_approval_so_only_a_group_of_the_platforms_keeps_approval_for_the_platform()
 {
    let tenant = Tenant::start().await;
    let hash = tenant.ca_hash().await;
    let kubectl = Kubectl::with(&tenant.control_plane.kubeconfig(None));

    // Deleting kubeadm's auto-approval does not last: the next token changes
    // cluster-info (its signature), and Kamaji's phase, which watches it,
    // makes the binding again.
    let (ok, out) = kubectl
        .run(
            &[
                "delete",
                "clusterrolebinding",
                "kubeadm:node-autoapprove-bootstrap",
            ],
            "",
        )
        .await;
    assert!(ok, "{out}");
    tenant.token("system:bootstrappers:kubeadm:default-node-token");
    eventually("the auto-approval binding back", || {
        tenant.control_plane.get(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            "",
            "kubeadm:node-autoapprove-bootstrap",
        )
    })
    .await;

    // A token in a group nothing grants: RBAC stops kubeadm at the
    // configuration it reads.
    let group = "system:bootstrappers:kubebyon:join";
    let token = tenant.token(group);
    let (joined, output) = tenant.join(&token, &hash, "worker-2").await;
    assert!(!joined, "{output}");
    assert!(output.contains("forbidden (403)"), "{output}");

    // The same rights as kubeadm's group, but not the approval: the request
    // waits until someone approves it, then the node joins.
    let bindings = format!(
        r#"{{"apiVersion": "v1", "kind": "List", "items": [
  {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {{"name": "kubebyon:join-config", "namespace": "kube-system"}},
    "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeadm:nodes-kubeadm-config"}},
    "subjects": [{{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "{group}"}}]}},
  {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {{"name": "kubebyon:join-kubelet-config", "namespace": "kube-system"}},
    "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeadm:kubelet-config"}},
    "subjects": [{{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "{group}"}}]}},
  {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {{"name": "kubebyon:join-bootstrap"}},
    "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"}},
    "subjects": [{{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "{group}"}}]}}]}}"#
    );
    let (ok, out) = kubectl
        .run(&["apply", "--validate=false", "-f", "-"], &bindings)
        .await;
    assert!(ok, "{out}");
    let control_plane = tenant.control_plane.clone();
    let user = format!("system:bootstrap:{}", token.split('.').next().unwrap());
    let joining = tokio::spawn(async move {
        let result = tenant.join(&token, &hash, "worker-2").await;
        (tenant, result)
    });
    let request = eventually("the kubelet's request", || {
        control_plane
            .list("certificates.k8s.io/v1", "CertificateSigningRequest")
            .into_iter()
            .find(|c| c["spec"]["username"] == user.as_str())
            .and_then(|c| c.pointer("/metadata/name")?.as_str().map(str::to_string))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiting = control_plane
        .get(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            "",
            &request,
        )
        .unwrap();
    assert!(waiting.pointer("/status/conditions").is_none(), "{waiting}");
    assert!(control_plane.get("v1", "Node", "", "worker-2").is_none());
    // What `kubectl certificate approve` sends, as JSON.
    let mut approved = waiting.clone();
    approved["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
        "reason": "KubeBYONApproved", "message": "approved by the test"}]);
    let path =
        format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{request}/approval");
    let (ok, out) = kubectl
        .run(
            &["replace", "--raw", &path, "-f", "-"],
            &approved.to_string(),
        )
        .await;
    assert!(ok, "{out}");
    let (tenant, (joined, output)) = joining.await.unwrap();
    assert!(joined, "{output}");
    assert!(tenant.node("worker-2").is_some());
}

#[tokio::test]
async fn a_machine_joins_a_kamaji_cluster_with_the_platforms_script_and_only_the_platform_approves_it()
 {
    let platform = TestApp::builder("worker-kamaji-join")
        .env("KUBEBYON_ENGINE", "kamaji")
        .host()
        .build()
        .await;
    let (id, namespace) = platform.create_ready("kappa", "nodeport").await;
    let cluster = platform.cluster(&id).await;
    let endpoint = cluster["api_endpoint"].as_str().unwrap().to_string();
    let node_port = endpoint.rsplit(':').next().unwrap().to_string();
    let token = |body: Value| {
        let platform = &platform;
        let id = id.clone();
        async move {
            platform
                .call(
                    "POST",
                    &format!("/api/console/clusters/{id}/tokens"),
                    Some(body),
                )
                .await
        }
    };

    // A machine without kubeadm is told what to install, before the token's
    // use is taken.
    let (status, created) = token(json!({"max_uses": 2})).await;
    assert_eq!(status, axum::http::StatusCode::CREATED, "{created}");
    let command = created["join_command"].as_str().unwrap();
    let bare = tests::machine::Machine::healthy("Worker-8").without_kubeadm();
    let out = bare.run(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success());
    assert!(
        stderr.contains("not installed: kubeadm kubelet"),
        "{stderr}"
    );
    let use_count = || {
        let platform = &platform;
        let id = id.clone();
        let token_id = created["token"]["id"].clone();
        async move {
            let (_, tokens) = platform
                .call("GET", &format!("/api/console/clusters/{id}/tokens"), None)
                .await;
            tokens
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["id"] == token_id)
                .unwrap()["use_count"]
                .clone()
        }
    };
    assert_eq!(
        use_count().await,
        0,
        "no use is taken before kubeadm is there"
    );

    // It dials the endpoint the control plane advertises: the host's
    // address by IP, on the cluster's node port.
    let machine = tests::machine::Machine::healthy("Worker-9");
    let stdout = joins_through(&machine, command, &node_port).await;
    assert!(stdout.contains("kubeadm v1.33.5"), "{stdout}");
    assert!(
        stdout.contains("This node has joined the cluster"),
        "{stdout}"
    );
    let kubelet =
        std::fs::read_to_string(machine.root().join("etc/kubernetes/kubelet.conf")).unwrap();
    assert!(kubelet.contains(&format!("server: https://127.0.0.1:{node_port}")));
    // The command run again on the joined machine knows it for a node of
    // this cluster (its kubelet names the advertised address, not the
    // endpoint's host name) and takes no use.
    let again = machine.run(command).await;
    let again_out = String::from_utf8_lossy(&again.stdout).to_string();
    assert!(again.status.success(), "{again_out}");
    assert!(
        again_out.contains("Nothing to do: this machine is already a node of kappa"),
        "{again_out}"
    );

    let control_plane = platform.sim().vcluster(&namespace, "kappa").unwrap();
    let node = control_plane
        .get("v1", "Node", "", "worker-9")
        .expect("registered");
    assert_eq!(node["status"]["conditions"][0]["status"], "True");
    let (_, ledger) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/join-attempts"),
            None,
        )
        .await;
    let attempt = ledger
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["hostname"] == "worker-9" && a["counted_use"] == true)
        .unwrap()
        .clone();
    assert_eq!(attempt["outcome"], "succeeded", "{attempt}");
    assert_eq!(attempt["bootstrap_secret_deleted"], true);
    assert_eq!(use_count().await, 1);

    // The kubelet's request was the platform's to approve: Kamaji's
    // auto-approval is in place, for kubeadm's group, and the token's group
    // is another.
    let id_of_token = attempt["bootstrap_secret_name"]
        .as_str()
        .unwrap()
        .trim_start_matches("bootstrap-token-")
        .to_string();
    let csr = control_plane
        .list("certificates.k8s.io/v1", "CertificateSigningRequest")
        .into_iter()
        .find(|c| c["spec"]["username"] == format!("system:bootstrap:{id_of_token}"))
        .unwrap();
    assert!(
        csr["spec"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:bootstrappers:kubebyon:join")),
        "{csr}"
    );
    assert_eq!(
        csr["status"]["conditions"][0]["reason"], "KubeBYONJoinApproved",
        "{csr}"
    );
    assert!(
        control_plane
            .get(
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                "",
                "kubeadm:node-autoapprove-bootstrap"
            )
            .is_some()
    );

    // The public endpoint moves to a load balancer: the node port the
    // control plane advertises stays (its Service with it), so the joined
    // node's kubelet keeps its server, and the next machine joins through
    // the same one.
    let (status, body) = crate::endpoint_switch::switch(&platform, &id, "loadbalancer").await;
    assert_eq!(status, axum::http::StatusCode::ACCEPTED, "{body}");
    platform.drive().await;
    let switched = platform.cluster(&id).await;
    assert_eq!(switched["public_access_mode"], "loadbalancer", "{switched}");
    assert!(
        switched["api_endpoint"]
            .as_str()
            .unwrap()
            .starts_with(&format!("https://{}:", kube_sim::LOAD_BALANCER_IP)),
        "{switched}"
    );
    let next = tests::machine::Machine::healthy("worker-10");
    joins_through(&next, command, &node_port).await;
    assert!(control_plane.get("v1", "Node", "", "worker-10").is_some());

    // A Kamaji cluster made behind a load balancer has its node port too.
    let (lb, lb_namespace) = platform.create_ready("lambda", "loadbalancer").await;
    let (status, created) = platform
        .call(
            "POST",
            &format!("/api/console/clusters/{lb}/tokens"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, axum::http::StatusCode::CREATED, "{created}");
    let node_service = platform
        .sim()
        .get("v1", "Service", &lb_namespace, "lambda-public")
        .expect("the node Service");
    let lb_port = node_service["spec"]["ports"][0]["nodePort"].clone();
    let machine = tests::machine::Machine::healthy("worker-11");
    joins_through(
        &machine,
        created["join_command"].as_str().unwrap(),
        &lb_port,
    )
    .await;
}

/// Runs `command` on `machine`, which joins through the host's node port
/// `port` (what kubeadm says it dials); what it printed.
async fn joins_through(
    machine: &tests::machine::Machine,
    command: &str,
    port: &dyn std::fmt::Display,
) -> String {
    let out = machine.run(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("will use API Server \"https://127.0.0.1:{port}\"")),
        "{stdout}"
    );
    stdout
}
