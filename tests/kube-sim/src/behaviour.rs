//! What the simulated cluster does by itself: the k3s helm controller for the
//! vCluster chart, the service port allocator, the namespace controller, and
//! in a vCluster a scheduler that makes Deployments available on Ready nodes.

use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};

use crate::{Options, Role, Shared, Simulator, registry, store::Store};

fn resource(api_version: &str, kind: &str) -> &'static registry::ResourceType {
    registry::find_kind(api_version, kind).expect("registered kind")
}

/// Objects every cluster starts with.
pub fn seed(shared: &Shared) {
    let mut store = shared.store.lock().expect("lock");
    let namespaces = resource("v1", "Namespace");
    let mut names = vec!["default", "kube-system", "kube-public", "kube-node-lease"];
    if shared.options.role == Role::Host {
        names.push("kubebyon-system");
    }
    for name in names {
        let _ = store.create(namespaces, "", json!({"metadata": {"name": name}}));
    }
    if shared.options.role == Role::Host {
        // kube-apiserver's bootstrap policy: the role `system:masters` holds.
        let _ = store.create(
            resource("rbac.authorization.k8s.io/v1", "ClusterRole"),
            "",
            json!({"metadata": {"name": "cluster-admin"}, "rules": [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]}),
        );
    }
    if shared.options.role.is_tenant() {
        // What kubeadm sets up for bootstrap tokens: the ClusterRole whose
        // holders' kubelet client certificates kube-controller-manager approves
        // by itself, bound to the group of kubeadm's default node tokens.
        let role = crate::bootstrap::NODE_CLIENT_ROLE;
        let _ = store.create(
            resource("rbac.authorization.k8s.io/v1", "ClusterRole"),
            "",
            json!({"metadata": {"name": role}, "rules": [{
                "apiGroups": ["certificates.k8s.io"],
                "resources": ["certificatesigningrequests/nodeclient"],
                "verbs": ["create"],
            }]}),
        );
        let _ = store.create(
            resource("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            "",
            json!({"metadata": {"name": "kubeadm:node-autoapprove-bootstrap"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                 "name": crate::bootstrap::DEFAULT_NODE_TOKEN_GROUP}]}),
        );
    }
}

/// Reacts to `events`, subscribed before the simulator answers anything, so
/// no change made right after it starts goes unseen.
pub async fn run(
    shared: Arc<Shared>,
    mut events: tokio::sync::broadcast::Receiver<crate::store::Event>,
) {
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(_) => return,
        };
        let kind = event.object["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let namespace = event.namespace.clone();
        let name = event
            .object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        match (kind.as_str(), event.kind) {
            ("Namespace", "MODIFIED")
                if event
                    .object
                    .pointer("/metadata/deletionTimestamp")
                    .is_some() =>
            {
                tokio::spawn(terminate_namespace(shared.clone(), name));
            }
            ("HelmChart", "ADDED")
                if shared.options.role == Role::Host && is_vcluster_chart(&event.object) =>
            {
                tokio::spawn(install_chart(shared.clone(), namespace, name));
            }
            ("HelmChart", "MODIFIED")
                if shared.options.role == Role::Host && is_vcluster_chart(&event.object) =>
            {
                // The control plane restarts with the chart's new values: its
                // certificate names what they name now.
                let target = chart_namespace(&event.object, &namespace);
                let child = shared
                    .children
                    .lock()
                    .expect("lock")
                    .get(&(target.clone(), name.clone()))
                    .cloned();
                if let Some(child) = child {
                    let _ = child.reissue_certificate(&certificate_names(
                        &event.object,
                        &name,
                        &target,
                    ));
                }
            }
            ("TenantControlPlane", added @ ("ADDED" | "MODIFIED"))
                if shared.options.role == Role::Host =>
            {
                tokio::spawn(crate::kamaji::reconcile(
                    shared.clone(),
                    namespace,
                    name,
                    added == "ADDED",
                ));
            }
            ("TenantControlPlane", "DELETED") if shared.options.role == Role::Host => {
                crate::kamaji::remove(&shared, &namespace, &name);
            }
            ("HelmChart", "DELETED") if shared.options.role == Role::Host => {
                uninstall_chart(&shared, &namespace, &name);
            }
            ("TLSRoute", "ADDED") if shared.options.role == Role::Host => {
                // A gateway controller accepts every route on its listeners.
                let status = json!({"status": {"parents": [{
                    "parentRef": event.object.pointer("/spec/parentRefs/0").cloned().unwrap_or(Value::Null),
                    "controllerName": "kube-sim/gateway",
                    "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""}]}]}});
                let api_version = event.object["apiVersion"].as_str().unwrap_or_default();
                let mut store = shared.store.lock().expect("lock");
                let _ = store.merge_patch(
                    resource(api_version, "TLSRoute"),
                    &namespace,
                    &name,
                    &status,
                    true,
                );
            }
            ("Deployment", "ADDED" | "MODIFIED") | ("Node", _)
                if shared.options.role.is_tenant() =>
            {
                let mut store = shared.store.lock().expect("lock");
                schedule_deployments(&mut store);
            }
            ("Service", "ADDED" | "MODIFIED") => {
                let mut store = shared.store.lock().expect("lock");
                allocate_service_ports(&shared, &mut store, &namespace, &name);
            }
            ("Secret", _) if shared.options.role == Role::Kamaji && namespace == "kube-system" => {
                crate::bootstrap::sign_cluster_info(&shared);
            }
            ("ConfigMap", "MODIFIED" | "DELETED")
                if shared.options.role == Role::Kamaji
                    && namespace == "kube-public"
                    && name == "cluster-info" =>
            {
                // Kamaji's phase watches cluster-info; the signer too.
                crate::bootstrap::run_phase(&shared);
                crate::bootstrap::sign_cluster_info(&shared);
            }
            ("CertificateSigningRequest", "ADDED") if shared.options.role == Role::Kamaji => {
                tokio::spawn(crate::bootstrap::approve(shared.clone(), name));
            }
            ("CertificateSigningRequest", "MODIFIED") if shared.options.role == Role::Kamaji => {
                crate::bootstrap::sign(&shared, &name);
            }
            ("Service", "DELETED") => {
                // kube-proxy stops forwarding the Service's node port: a new
                // connection to it is refused (one already open lives on,
                // as conntrack keeps it).
                shared
                    .node_ports
                    .lock()
                    .expect("lock")
                    .remove(&(namespace, name));
            }
            _ => {}
        }
    }
}

/// The scheduler and kubelets of a vCluster with private nodes, reduced to
/// what the platform observes: a Deployment's replicas are available while at
/// least one schedulable node is Ready, and none are otherwise; its pods
/// (`<deployment>-sim-<n>`, with its template's labels) run on the first
/// such node, Running and Ready, addressed from the node's `podCIDR`.
fn schedule_deployments(store: &mut Store) {
    let nodes = resource("v1", "Node");
    let deployments = resource("apps/v1", "Deployment");
    let schedulable = store
        .list(nodes, None, None, None)
        .unwrap_or_default()
        .into_iter()
        .find(|node| {
            node.pointer("/spec/unschedulable") != Some(&Value::Bool(true))
                && node
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
        });
    for deployment in store
        .list(deployments, None, None, None)
        .unwrap_or_default()
    {
        let wanted = deployment
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let available = if schedulable.is_some() { wanted } else { 0 };
        let have = deployment
            .pointer("/status/availableReplicas")
            .and_then(Value::as_i64);
        if have == Some(available) {
            continue;
        }
        let namespace = deployment
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let name = deployment
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        run_pods(
            store,
            &deployment,
            &namespace,
            &name,
            schedulable.as_ref(),
            available,
        );
        let status = json!({"status": {
            "replicas": wanted, "readyReplicas": available, "availableReplicas": available,
            "conditions": [{"type": "Available", "status": if available > 0 { "True" } else { "False" },
                            "reason": if available > 0 { "MinimumReplicasAvailable" } else { "NoSchedulableNodes" }}]}});
        let _ = store.merge_patch(deployments, &namespace, &name, &status, true);
    }
}

/// Makes a Deployment's pods what `available` says: that many, on `node`.
fn run_pods(
    store: &mut Store,
    deployment: &Value,
    namespace: &str,
    name: &str,
    node: Option<&Value>,
    available: i64,
) {
    let pods = resource("v1", "Pod");
    let prefix = format!("{name}-sim-");
    for pod in store
        .list(pods, Some(namespace), None, None)
        .unwrap_or_default()
    {
        if let Some(pod_name) = pod.pointer("/metadata/name").and_then(Value::as_str)
            && pod_name.starts_with(&prefix)
        {
            let _ = store.delete(pods, namespace, pod_name);
        }
    }
    let Some(node) = node else {
        return;
    };
    let labels = deployment
        .pointer("/spec/template/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let node_name = node
        .pointer("/metadata/name")
        .cloned()
        .unwrap_or(Value::Null);
    // The node's pod network's first addresses, as its CNI hands them out.
    let base = node
        .pointer("/spec/podCIDR")
        .and_then(Value::as_str)
        .and_then(|cidr| cidr.split('/').next()?.parse::<std::net::Ipv4Addr>().ok())
        .unwrap_or(std::net::Ipv4Addr::new(10, 244, 0, 0));
    for n in 0..available {
        let ip = std::net::Ipv4Addr::from(u32::from(base) + 2 + n as u32);
        let _ = store.create(
            pods,
            namespace,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{prefix}{n}"), "namespace": namespace, "labels": labels},
                "spec": {"nodeName": node_name, "containers": []},
                "status": {"phase": "Running", "podIP": ip.to_string(), "podIPs": [{"ip": ip.to_string()}],
                           "conditions": [{"type": "Ready", "status": "True"}]}}),
        );
    }
}

fn is_vcluster_chart(chart: &Value) -> bool {
    chart
        .pointer("/spec/chart")
        .and_then(Value::as_str)
        .is_some_and(|c| c.contains("vcluster"))
}

/// A control plane whose API server exited at start, as the host shows it:
/// its pod `pod` restarting (CrashLoopBackOff, the last exit an error) and
/// what its log says (`Simulator::startup_log`), by the name `name` of the
/// object that made it.
pub(crate) fn exited_at_start(
    shared: &Shared,
    namespace: &str,
    name: &str,
    pod: &str,
    labels: &Value,
    container: &str,
    log: String,
) {
    let _ = shared.store.lock().expect("lock").create(
        resource("v1", "Pod"),
        namespace,
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": namespace, "labels": labels},
            "spec": {"containers": [{"name": container}]},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": container, "ready": false, "restartCount": 5,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off 2m40s restarting failed container={container}")}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}),
    );
    shared
        .startup_logs
        .lock()
        .expect("lock")
        .insert((namespace.to_string(), name.to_string()), log);
}

/// Why vCluster's open-source build stops with these values: private nodes
/// are a pro feature (loft-sh/vcluster v0.29.1 `pkg/pro/privatenodes.go`)
/// unless the licence reaches it, here through the Secret
/// `external.platform.apiKey.secretName` names, holding an `accessKey`
/// (`pkg/platform/secret.go`).
fn unlicensed(store: &Store, namespace: &str, values: &Value) -> Option<String> {
    if values.pointer("/privateNodes/enabled") != Some(&json!(true)) {
        return None;
    }
    let licensed = values
        .pointer("/external/platform/apiKey/secretName")
        .and_then(Value::as_str)
        .and_then(|secret| store.get(resource("v1", "Secret"), namespace, secret).ok())
        .and_then(|secret| crate::store::secret_text(&secret, "accessKey"))
        .is_some_and(|key| !key.is_empty());
    (!licensed).then(|| {
        "you are trying to use a vCluster pro feature 'private nodes' that is not part of the open-source build".into()
    })
}

/// The chart's values (JSON, as the platform writes them).
fn chart_values(chart: &Value) -> Option<Value> {
    chart
        .pointer("/spec/valuesContent")
        .and_then(Value::as_str)
        .and_then(|values| serde_json::from_str::<Value>(values).ok())
}

/// `controlPlane.proxy.extraSANs` of the chart's values.
fn extra_sans(chart: &Value) -> Vec<String> {
    chart_values(chart)
        .and_then(|values| {
            values
                .pointer("/controlPlane/proxy/extraSANs")
                .and_then(Value::as_array)
                .cloned()
        })
        .unwrap_or_default()
        .iter()
        .filter_map(|san| san.as_str().map(str::to_string))
        .collect()
}

fn chart_namespace(chart: &Value, namespace: &str) -> String {
    chart
        .pointer("/spec/targetNamespace")
        .and_then(Value::as_str)
        .unwrap_or(namespace)
        .to_string()
}

async fn install_chart(shared: Arc<Shared>, namespace: String, name: String) {
    let charts = resource("helm.cattle.io/v1", "HelmChart");
    let faults = shared.faults.lock().expect("lock").clone();
    let job = format!("helm-install-{name}");
    if let Some(message) = faults.chart_install_error {
        let mut store = shared.store.lock().expect("lock");
        let status = json!({"status": {"jobName": job, "conditions": [
            {"type": "JobCreated", "status": "True", "reason": "", "message": ""},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": message},
        ]}});
        let _ = store.merge_patch(charts, &namespace, &name, &status, true);
        return;
    }
    {
        let mut store = shared.store.lock().expect("lock");
        let status = json!({"status": {"jobName": job, "conditions": [
            {"type": "JobCreated", "status": "True", "reason": "", "message": ""}]}});
        let _ = store.merge_patch(charts, &namespace, &name, &status, true);
    }
    tokio::time::sleep(faults.ready_delay.unwrap_or(shared.options.ready_delay)).await;
    let Some(chart) = shared
        .store
        .lock()
        .expect("lock")
        .get(charts, &namespace, &name)
        .ok()
    else {
        return;
    };
    let target = chart_namespace(&chart, &namespace);
    let token = uuid::Uuid::new_v4().simple().to_string();
    let names = certificate_names(&chart, &name, &target);
    // The API server's authorization and admission files, from the host
    // Secret the values mount.
    let values = chart_values(&chart).unwrap_or_default();
    let files = crate::authz::ApiServerFiles::from_chart(
        &shared.store.lock().expect("lock"),
        &target,
        &values,
    );
    let refusal = faults
        .api_server_exits
        .clone()
        .or_else(|| files.start_refusal())
        .or_else(|| unlicensed(&shared.store.lock().expect("lock"), &target, &values));
    if let Some(refusal) = refusal {
        // The chart installs; the control plane exits at start and
        // restarts: the StatefulSet never has a ready replica.
        let labels = json!({"app": "vcluster", "release": name});
        let mut store = shared.store.lock().expect("lock");
        let _ = store.create(
            resource("apps/v1", "StatefulSet"),
            &target,
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                   "metadata": {"name": name, "namespace": target, "labels": labels},
                   "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "serviceName": format!("{name}-headless"),
                            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "syncer"}]}}}}),
        );
        let status = json!({"status": {"jobName": job, "conditions": [
            {"type": "JobCreated", "status": "True", "reason": "", "message": ""}]}});
        let _ = store.merge_patch(charts, &namespace, &name, &status, true);
        drop(store);
        exited_at_start(
            &shared,
            &target,
            &name,
            &format!("{name}-0"),
            &labels,
            "syncer",
            refusal,
        );
        return;
    }
    // On every address: a load balancer's (127.0.0.2 below) reaches it as a
    // node's does, and only the names its certificate carries verify.
    let Ok(child) = Simulator::start_on(
        std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
        Options {
            names,
            authorizer: crate::authz::Authorizer::from_files(&files),
            webhook_credentials: crate::WebhookCredentials::from_files(&files),
            ..Options::vcluster(token)
        },
    )
    .await
    else {
        return;
    };
    let kubeconfig = child.kubeconfig(Some(&format!("https://{name}.{target}:443")));
    shared
        .children
        .lock()
        .expect("lock")
        .insert((target.clone(), name.clone()), child);
    let labels = json!({"app": "vcluster", "release": name});
    let mut store = shared.store.lock().expect("lock");
    let objects = [
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": name, "namespace": target, "labels": labels},
               "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "serviceName": format!("{name}-headless"),
                        "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "syncer", "image": "ghcr.io/loft-sh/vcluster-pro"}]}}}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": target, "labels": labels},
               "spec": {"type": "ClusterIP", "selector": labels, "ports": [{"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}]}}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": format!("vc-{name}"), "namespace": target, "labels": labels},
               "data": {"config": base64::engine::general_purpose::STANDARD.encode(kubeconfig)}}),
    ];
    for object in objects {
        let r = resource(
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
        );
        if store.create(r, &target, object.clone()).is_err() {
            // The namespace is gone or terminating: the install fails quietly, as helm would.
            return;
        }
    }
    let statefulsets = resource("apps/v1", "StatefulSet");
    let _ = store.merge_patch(
        statefulsets,
        &target,
        &name,
        &json!({"status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "currentReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1}}),
        true,
    );
    let status = json!({"status": {"jobName": format!("helm-install-{name}"), "conditions": [
        {"type": "JobCreated", "status": "True", "reason": "", "message": ""}]}});
    let _ = store.merge_patch(charts, &namespace, &name, &status, true);
}

fn uninstall_chart(shared: &Shared, namespace: &str, name: &str) {
    let Some(chart_target) = shared
        .children
        .lock()
        .expect("lock")
        .keys()
        .find(|(_, release)| release == name)
        .map(|(ns, _)| ns.clone())
    else {
        return;
    };
    let _ = namespace;
    shared
        .children
        .lock()
        .expect("lock")
        .remove(&(chart_target.clone(), name.to_string()));
    let mut store = shared.store.lock().expect("lock");
    store.remove(resource("apps/v1", "StatefulSet"), &chart_target, name);
    store.remove(resource("v1", "Service"), &chart_target, name);
    store.remove(
        resource("v1", "Secret"),
        &chart_target,
        &format!("vc-{name}"),
    );
}

/// Allocates node ports and load-balancer addresses. A Service that selects a
/// running vCluster is given a node port that forwards to that vCluster's
/// API, as kube-proxy's would, so the public endpoint the platform computes
/// really reaches it, and stops reaching it once the Service is gone.
pub(crate) fn allocate_service_ports(
    shared: &Arc<Shared>,
    store: &mut Store,
    namespace: &str,
    name: &str,
) {
    let Ok(service) = store.get(resource("v1", "Service"), namespace, name) else {
        return;
    };
    assign(shared, store, namespace, name, &service);
}

/// The control plane whose pods a Service selects: a vCluster's by
/// release, a Kamaji control plane's by name.
fn control_plane_of(service: &Value) -> Option<&str> {
    service
        .pointer("/spec/selector/release")
        .or_else(|| service.pointer("/spec/selector/kamaji.clastix.io~1name"))
        .and_then(Value::as_str)
}

/// Where kube-proxy sends a connection to the node port of the Service
/// `namespace`/`name` now: the API of the control plane it selects, once
/// that runs, on the port the Service targets. A Kamaji API server listens
/// on its TenantControlPlane's `networkProfile.port`: a Service targeting
/// another port reaches nothing.
fn forward_target(shared: &Shared, namespace: &str, name: &str) -> Option<u16> {
    let service = shared
        .store
        .lock()
        .expect("lock")
        .get(resource("v1", "Service"), namespace, name)
        .ok()?;
    let release = control_plane_of(&service)?;
    if service
        .pointer("/spec/selector/kamaji.clastix.io~1name")
        .is_some()
        && !crate::kamaji::listens_on(shared, namespace, release, &service)
    {
        return None;
    }
    shared
        .children
        .lock()
        .expect("lock")
        .get(&(namespace.to_string(), release.to_string()))
        .map(|c| c.addr().port())
}

/// A Service's node port as kube-proxy serves it: a listener of its own
/// forwarding each connection to the vCluster's API, until dropped.
pub(crate) struct NodePort {
    port: u16,
    listener: tokio::task::AbortHandle,
}

impl Drop for NodePort {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// The node port of the Service `namespace`/`name`, which selects a
/// control plane: the one it has, or a new one (a free port on every
/// address, as a node port is open on every node address), fixed from then
/// on, forwarding each connection where [`forward_target`] says.
fn node_port(shared: &Arc<Shared>, namespace: &str, name: &str) -> Option<u16> {
    let mut ports = shared.node_ports.lock().expect("lock");
    let key = (namespace.to_string(), name.to_string());
    if let Some(existing) = ports.get(&key) {
        return Some(existing.port);
    }
    let listener = std::net::TcpListener::bind(("0.0.0.0", 0)).ok()?;
    listener.set_nonblocking(true).ok()?;
    let port = listener.local_addr().ok()?.port();
    let listener = tokio::net::TcpListener::from_std(listener).ok()?;
    let weak = Arc::downgrade(shared);
    let (namespace, name) = key.clone();
    let forwarding = tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            let target = forward_target(&shared, &namespace, &name);
            drop(shared);
            let Some(target) = target else {
                continue;
            };
            tokio::spawn(async move {
                if let Ok(mut outbound) =
                    tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    ports.insert(
        key,
        NodePort {
            port,
            listener: forwarding.abort_handle(),
        },
    );
    Some(port)
}

/// kube-proxy's and the service controllers' part for a NodePort or
/// LoadBalancer Service: its node ports, and a load balancer's address.
fn assign(shared: &Arc<Shared>, store: &mut Store, namespace: &str, name: &str, service: &Value) {
    let services = resource("v1", "Service");
    let service_type = service
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    if !matches!(service_type, "NodePort" | "LoadBalancer") {
        // No node port any more (a NodePort Service made ClusterIP).
        shared
            .node_ports
            .lock()
            .expect("lock")
            .remove(&(namespace.to_string(), name.to_string()));
        return;
    }
    let mut ports = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut changed = false;
    // A control plane's Service forwards its first port to its API.
    let forwarded = control_plane_of(service)
        .and_then(|_| node_port(shared, namespace, name))
        .map(i64::from);
    for (i, port) in ports.iter_mut().enumerate() {
        let wanted = forwarded.filter(|_| i == 0);
        let current = port.get("nodePort").and_then(Value::as_i64);
        let next = wanted.or(current).unwrap_or(30000 + fastrand_port(name, i));
        if current != Some(next) {
            port["nodePort"] = json!(next);
            changed = true;
        }
    }
    if changed {
        let _ = store.merge_patch(
            services,
            namespace,
            name,
            &json!({"spec": {"ports": ports}}),
            false,
        );
    }
    if service_type == "LoadBalancer" {
        let ingress_port = forwarded.or_else(|| {
            service
                .pointer("/spec/ports/0/port")
                .and_then(Value::as_i64)
        });
        // A loopback address outside the names every certificate carries
        // (127.0.0.1, localhost): a client verifies it only when the
        // control plane was asked to name it (`controlPlane.proxy.extraSANs`).
        let wanted = json!({"loadBalancer": {"ingress": [{"ip": LOAD_BALANCER_IP, "ports": [{"port": ingress_port, "protocol": "TCP"}]}]}});
        if service.get("status") != Some(&wanted) {
            let _ = store.merge_patch(services, namespace, name, &json!({"status": wanted}), true);
        }
    }
}

/// The names vCluster's certificate carries besides loopback's: its
/// Service's, and the chart's `controlPlane.proxy.extraSANs`.
fn certificate_names(chart: &Value, name: &str, target: &str) -> Vec<String> {
    let mut names = vec![
        format!("{name}.{target}"),
        format!("{name}.{target}.svc"),
        format!("{name}.{target}.svc.cluster.local"),
    ];
    names.extend(extra_sans(chart));
    names
}

/// The address a LoadBalancer Service is given.
pub const LOAD_BALANCER_IP: &str = "127.0.0.2";

fn fastrand_port(name: &str, index: usize) -> i64 {
    let hash = name
        .bytes()
        .fold(index as i64 * 31, |h, b| (h * 31 + b as i64) % 2767);
    hash.abs()
}

async fn terminate_namespace(shared: Arc<Shared>, name: String) {
    tokio::time::sleep(shared.options.namespace_delete_delay).await;
    shared
        .children
        .lock()
        .expect("lock")
        .retain(|(ns, _), _| ns != &name);
    let mut store = shared.store.lock().expect("lock");
    for (resource, object) in store.contents_of(&name) {
        store.remove(resource, &name, &object);
    }
    store.remove(resource("v1", "Namespace"), "", &name);
}
