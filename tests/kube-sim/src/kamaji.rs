//! Kamaji on a simulated host, as clastix/kamaji 26.8.2-edge defines it: the
//! `TenantControlPlane` webhook's version rules, and the controller that
//! turns one into a control plane — a Deployment and a Service named after
//! it (pods labelled `kamaji.clastix.io/name`), the admin kubeconfig Secret
//! `<name>-admin-kubeconfig` (`admin.conf`, `super-admin.conf` and their
//! `.svc` twins), and the status the platform reads
//! (`status.kubernetesResources.version`, `status.controlPlaneEndpoint`,
//! `status.kubeconfig.admin.secretName`). Its API server is started with the
//! flags Kamaji builds (see `authz::ApiServerFiles::from_tenant_control_plane`)
//! and does not start when kube-apiserver would refuse them: the Deployment
//! never becomes available and its pod restarts, as a real one would.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::{Options, Role, Shared, Simulator, registry, store::ApiError};

fn resource(api_version: &str, kind: &str) -> &'static registry::ResourceType {
    registry::find_kind(api_version, kind).expect("registered kind")
}

/// `spec.kubernetes.admissionControllers`' default
/// (`api/v1alpha1/tenantcontrolplane_types.go`).
pub(crate) const KAMAJI_ADMISSION_CONTROLLERS: &[&str] = &[
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "DefaultStorageClass",
    "DefaultTolerationSeconds",
    "LimitRanger",
    "MutatingAdmissionWebhook",
    "NamespaceLifecycle",
    "PersistentVolumeClaimResize",
    "Priority",
    "ResourceQuota",
    "RuntimeClass",
    "ServiceAccount",
    "StorageObjectInUseProtection",
    "TaintNodesByCondition",
    "ValidatingAdmissionWebhook",
];

/// The newest Kubernetes minor the release runs
/// (`internal/upgrade/kubeadm_version.go`: `KubeadmVersion = "v1.36.0"`).
const SUPPORTED_MINOR: u64 = 36;

/// The webhook's name (`internal/webhook/routes/tcp_validate.go`).
const WEBHOOK: &str = "vtenantcontrolplane.kb.io";

/// `major.minor` of a version such as `v1.33.5`.
fn minor(version: &str) -> Option<(u64, u64)> {
    let mut parts = version.trim_start_matches('v').split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn denied(message: String) -> ApiError {
    ApiError {
        code: 403,
        reason: "Forbidden",
        message: format!("admission webhook \"{WEBHOOK}\" denied the request: {message}"),
    }
}

/// `internal/webhook/handlers/tcp_version.go`: a version above the supported
/// one is refused on create and update; an update may not go down, nor
/// skip a minor.
pub(crate) fn admit(object: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let version = |o: &Value| {
        o.pointer("/spec/kubernetes/version")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let new = version(object);
    let Some((major, new_minor)) = minor(&new) else {
        return Err(denied(format!(
            "unable to parse the desired Kubernetes version: No Major.Minor.Patch elements found in {new:?}"
        )));
    };
    if major > 1 || new_minor > SUPPORTED_MINOR {
        return Err(denied(match old {
            None => format!(
                "unable to create a TenantControlPlane with a Kubernetes version greater than the supported one, actually v1.{SUPPORTED_MINOR}"
            ),
            Some(_) => format!(
                "unable to upgrade to a version greater than the supported one (v1.{SUPPORTED_MINOR})"
            ),
        }));
    }
    let Some(old) = old else { return Ok(()) };
    if old.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    let previous = version(old);
    let Some((_, old_minor)) = minor(&previous) else {
        return Ok(());
    };
    // Patches are not compared (`ver.Patch = 0`).
    if new_minor < old_minor {
        return Err(denied(format!(
            "unable to downgrade a TenantControlPlane from 1.{old_minor}.0 to 1.{new_minor}.0"
        )));
    }
    if new_minor > old_minor + 1 {
        return Err(denied(
            "unable to upgrade to a minor version in a non-sequential mode".into(),
        ));
    }
    Ok(())
}

/// The names the API server's certificate carries besides loopback's: its
/// Service's and `spec.networkProfile.certSANs`.
fn certificate_names(tcp: &Value, name: &str, namespace: &str) -> Vec<String> {
    let mut names = vec![
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
    ];
    names.extend(
        tcp.pointer("/spec/networkProfile/certSANs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|san| san.as_str().map(str::to_string)),
    );
    names
}

/// `status.controlPlaneEndpoint` (`internal/resources/k8s_service_resource.go`,
/// `DeclaredControlPlaneAddress`): `spec.networkProfile.address`, else the
/// Service's in-cluster address, with `spec.networkProfile.port`. kubeadm's
/// `cluster-info`, and so every joining node, dials it.
fn control_plane_endpoint(tcp: &Value, name: &str, namespace: &str) -> String {
    let port = port(tcp);
    match tcp
        .pointer("/spec/networkProfile/address")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
    {
        Some(address) if address.contains(':') => format!("[{address}]:{port}"),
        Some(address) => format!("{address}:{port}"),
        None => format!("{name}.{namespace}.svc:{port}"),
    }
}

/// Kamaji's Service of a control plane: the API server's port, and
/// Konnectivity's second when the addon is on
/// (`internal/resources/konnectivity/service_resource.go`).
fn service_ports(tcp: &Value) -> Value {
    let api_port = port(tcp);
    let mut ports = vec![
        json!({"name": "kube-apiserver", "port": api_port, "targetPort": api_port, "protocol": "TCP"}),
    ];
    if let Some(tunnel) = konnectivity_port(tcp) {
        ports.push(
            json!({"name": "konnectivity-server", "port": tunnel, "targetPort": tunnel, "protocol": "TCP"}),
        );
    }
    json!(ports)
}

/// `spec.addons.konnectivity.server.port` (8132 by the CRD's default) when
/// the addon is on.
fn konnectivity_port(tcp: &Value) -> Option<i64> {
    let addon = tcp.pointer("/spec/addons/konnectivity")?;
    Some(
        addon
            .pointer("/server/port")
            .and_then(Value::as_i64)
            .unwrap_or(8132),
    )
}

/// Kamaji's Konnectivity agent in the tenant
/// (`internal/resources/konnectivity/agent.go`): the DaemonSet
/// `kube-system/konnectivity-agent`, whose `/proxy-agent` on every node
/// dials the advertised address (`AdvertisedControlPlaneAddress`) on the
/// server's port; none without the addon.
fn konnectivity_agent(child: &Simulator, tcp: &Value, endpoint: &str) {
    let Some(port) = konnectivity_port(tcp) else {
        return;
    };
    let host = endpoint.rsplit_once(':').map_or(endpoint, |(host, _)| host);
    let address = host.trim_start_matches('[').trim_end_matches(']');
    let labels = json!({"k8s-app": "konnectivity-agent"});
    let _ = child.put(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
    "metadata": {"name": "konnectivity-agent", "namespace": "kube-system"},
    "spec": {"selector": {"matchLabels": labels},
             "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                 "name": "konnectivity-agent", "command": ["/proxy-agent"],
                 "args": [
                     format!("--proxy-server-host={address}"),
                     format!("--proxy-server-port={port}"),
                     "--admin-server-port=8133".to_string(),
                     "--health-server-port=8134".to_string(),
                 ]}]}}}}));
}

fn port(tcp: &Value) -> i64 {
    tcp.pointer("/spec/networkProfile/port")
        .and_then(Value::as_i64)
        .unwrap_or(6443)
}

/// What the controller does when a TenantControlPlane is made (`made`) or
/// changed: starts its control plane once, when it is made, or again after
/// its API server exited at start; updates a running one.
pub(crate) async fn reconcile(shared: Arc<Shared>, namespace: String, name: String, made: bool) {
    let tcps = resource("kamaji.clastix.io/v1alpha1", "TenantControlPlane");
    let Ok(tcp) = shared
        .store
        .lock()
        .expect("lock")
        .get(tcps, &namespace, &name)
    else {
        return;
    };
    let child = shared
        .children
        .lock()
        .expect("lock")
        .get(&(namespace.clone(), name.clone()))
        .cloned();
    let version = tcp
        .pointer("/spec/kubernetes/version")
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(child) = child {
        // Running: a changed spec rolls the pods out (blue/green); the
        // certificate names what the spec names now.
        let _ = child.reissue_certificate(&certificate_names(&tcp, &name, &namespace));
        let endpoint = control_plane_endpoint(&tcp, &name, &namespace);
        child.start_kubeadm_phase(&endpoint);
        konnectivity_agent(&child, &tcp, &endpoint);
        let _ = shared.store.lock().expect("lock").merge_patch(
            resource("v1", "Service"),
            &namespace,
            &name,
            &json!({"spec": {"ports": service_ports(&tcp)}}),
            false,
        );
        if tcp.pointer("/status/controlPlaneEndpoint") != Some(&json!(endpoint)) {
            let status = json!({"status": {"controlPlaneEndpoint": endpoint}});
            let _ = shared
                .store
                .lock()
                .expect("lock")
                .merge_patch(tcps, &namespace, &name, &status, true);
        }
        if tcp.pointer("/status/kubernetesResources/version/version") != Some(&version) {
            let status = json!({"status": {"kubernetesResources": {"version": {"version": version, "status": "Ready"}}}});
            let _ = shared
                .store
                .lock()
                .expect("lock")
                .merge_patch(tcps, &namespace, &name, &status, true);
        }
        return;
    }
    // Not running: being started (this change is the controller's own
    // status), or its API server exited at start (a change may fix it).
    let key = (namespace.clone(), name.clone());
    let exited = shared
        .startup_logs
        .lock()
        .expect("lock")
        .remove(&key)
        .is_some();
    if !made && !exited {
        return;
    }
    if exited {
        let mut store = shared.store.lock().expect("lock");
        store.remove(resource("v1", "Pod"), &namespace, &format!("{name}-sim-0"));
    }
    if tcp
        .pointer("/status/kubernetesResources/version/status")
        .is_none()
    {
        let status =
            json!({"status": {"kubernetesResources": {"version": {"status": "Provisioning"}}}});
        let _ = shared
            .store
            .lock()
            .expect("lock")
            .merge_patch(tcps, &namespace, &name, &status, true);
    }
    let faults = shared.faults.lock().expect("lock").clone();
    tokio::time::sleep(faults.ready_delay.unwrap_or(shared.options.ready_delay)).await;
    let Ok(tcp) = shared
        .store
        .lock()
        .expect("lock")
        .get(tcps, &namespace, &name)
    else {
        return;
    };
    if shared
        .children
        .lock()
        .expect("lock")
        .contains_key(&(namespace.clone(), name.clone()))
    {
        return;
    }
    let files = crate::authz::ApiServerFiles::from_tenant_control_plane(
        &shared.store.lock().expect("lock"),
        &namespace,
        &tcp,
    );
    let labels = json!({"kamaji.clastix.io/name": name});
    let replicas = tcp
        .pointer("/spec/controlPlane/deployment/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(2);
    let service_type = tcp
        .pointer("/spec/controlPlane/service/serviceType")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    let api_port = port(&tcp);
    {
        let mut store = shared.store.lock().expect("lock");
        let objects = [
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                             {"name": "kube-apiserver", "args": files.args()},
                             {"name": "kube-controller-manager"}, {"name": "kube-scheduler"}]}}}}),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"type": service_type, "selector": labels, "ports": service_ports(&tcp)}}),
        ];
        for object in objects {
            let r = resource(
                object["apiVersion"].as_str().unwrap_or_default(),
                object["kind"].as_str().unwrap_or_default(),
            );
            if store.create(r, &namespace, object).is_err() {
                // Made already, or the namespace is going.
                if store.get(r, &namespace, &name).is_err() {
                    return;
                }
            }
        }
    }
    if let Some(refusal) = faults
        .api_server_exits
        .clone()
        .or_else(|| files.start_refusal())
    {
        // kube-apiserver exits at start: the pod restarts, the Deployment
        // never becomes available, the control plane stays provisioning.
        crate::behaviour::exited_at_start(
            &shared,
            &namespace,
            &name,
            &format!("{name}-sim-0"),
            &labels,
            "kube-apiserver",
            refusal,
        );
        return;
    }
    let Ok(child) = Simulator::start_on(
        std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
        Options {
            names: certificate_names(&tcp, &name, &namespace),
            authorizer: crate::authz::Authorizer::from_files(&files),
            webhook_credentials: crate::WebhookCredentials::from_files(&files),
            role: Role::Kamaji,
            ..Options::vcluster(uuid::Uuid::new_v4().simple().to_string())
        },
    )
    .await
    else {
        return;
    };
    let endpoint = control_plane_endpoint(&tcp, &name, &namespace);
    child.start_kubeadm_phase(&endpoint);
    konnectivity_agent(&child, &tcp, &endpoint);
    let kubeconfig = |server: &str, user: &str, groups: &[&str]| {
        child
            .kubeconfig_with_certificate(server, user, groups)
            .unwrap_or_default()
    };
    // kubeadm's two admin identities (v1.29+): `admin.conf` is bound to
    // cluster-admin through the group kubeadm:cluster-admins, which the
    // tenant may unbind; `super-admin.conf` is system:masters.
    let server = format!("https://{endpoint}");
    let data = json!({
        "admin.conf": kubeconfig(&server, "kubernetes-admin", &["kubeadm:cluster-admins"]),
        "admin.svc": kubeconfig(&server, "kubernetes-admin", &["kubeadm:cluster-admins"]),
        "super-admin.conf": kubeconfig(&server, "kubernetes-super-admin", &["system:masters"]),
        "super-admin.svc": kubeconfig(&server, "kubernetes-super-admin", &["system:masters"]),
    });
    use base64::Engine;
    let data: serde_json::Map<String, Value> = data
        .as_object()
        .expect("object")
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                json!(
                    base64::engine::general_purpose::STANDARD
                        .encode(v.as_str().unwrap_or_default())
                ),
            )
        })
        .collect();
    shared
        .children
        .lock()
        .expect("lock")
        .insert((namespace.clone(), name.clone()), child);
    let secret_name = format!("{name}-admin-kubeconfig");
    let mut store = shared.store.lock().expect("lock");
    if store
        .create(
            resource("v1", "Secret"),
            &namespace,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": secret_name, "namespace": namespace, "labels": {
                    "kamaji.clastix.io/name": name, "kamaji.clastix.io/component": "admin-kubeconfig"}},
                "data": data}),
        )
        .is_err()
    {
        return;
    }
    let _ = store.merge_patch(
        resource("apps/v1", "Deployment"),
        &namespace,
        &name,
        &json!({"status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                           "updatedReplicas": replicas, "observedGeneration": 1}}),
        true,
    );
    // The Deployment's pods, running.
    for n in 0..replicas {
        let _ = store.create(
            resource("v1", "Pod"),
            &namespace,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-5c7d9b8f6-sim{n}"), "namespace": namespace, "labels": labels},
                "spec": {"containers": [{"name": "kube-apiserver"}, {"name": "kube-controller-manager"}, {"name": "kube-scheduler"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
        );
    }
    let status = json!({"status": {
        "controlPlaneEndpoint": endpoint,
        "kubeconfig": {"admin": {"secretName": secret_name}},
        "kubernetesResources": {
            "version": {"version": version, "status": "Ready"},
            "service": {"name": name, "namespace": namespace, "port": api_port},
            "deployment": {"name": name, "namespace": namespace,
                           "selector": format!("kamaji.clastix.io/name={name}"),
                           "readyReplicas": replicas, "availableReplicas": replicas},
        },
    }});
    let _ = store.merge_patch(tcps, &namespace, &name, &status, true);
}

/// Whether the control plane `name` listens on the port `service` targets
/// (its `networkProfile.port`, kube-apiserver's `--secure-port`).
pub(crate) fn listens_on(shared: &Shared, namespace: &str, name: &str, service: &Value) -> bool {
    let Ok(tcp) = shared.store.lock().expect("lock").get(
        resource("kamaji.clastix.io/v1alpha1", "TenantControlPlane"),
        namespace,
        name,
    ) else {
        return false;
    };
    let target = service.pointer("/spec/ports/0/targetPort");
    target.and_then(Value::as_i64) == Some(port(&tcp))
}

/// What the controller does when a TenantControlPlane is deleted: its
/// objects go (owned by it).
pub(crate) fn remove(shared: &Shared, namespace: &str, name: &str) {
    shared
        .children
        .lock()
        .expect("lock")
        .remove(&(namespace.to_string(), name.to_string()));
    let mut store = shared.store.lock().expect("lock");
    store.remove(resource("apps/v1", "Deployment"), namespace, name);
    store.remove(resource("v1", "Service"), namespace, name);
    store.remove(
        resource("v1", "Secret"),
        namespace,
        &format!("{name}-admin-kubeconfig"),
    );
    let pods = resource("v1", "Pod");
    let selector = format!("kamaji.clastix.io/name={name}");
    for pod in store
        .list(pods, Some(namespace), Some(&selector), None)
        .unwrap_or_default()
    {
        if let Some(pod) = pod.pointer("/metadata/name").and_then(Value::as_str) {
            store.remove(pods, namespace, pod);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(version: &str) -> Value {
        json!({"spec": {"kubernetes": {"version": version}}})
    }

    #[test]
    fn the_version_webhook_refuses_what_kamaji_refuses() {
        admit(&tcp("v1.33.5"), None).unwrap();
        admit(&tcp("v1.34.1"), Some(&tcp("v1.33.5"))).unwrap();
        admit(&tcp("v1.33.6"), Some(&tcp("v1.33.5"))).unwrap();
        let message = |r: Result<(), ApiError>| r.unwrap_err().message;
        assert!(message(admit(&tcp("v1.37.0"), None)).contains("greater than the supported one"));
        assert!(message(admit(&tcp("v1.32.9"), Some(&tcp("v1.33.5")))).contains("downgrade"));
        assert!(message(admit(&tcp("v1.35.0"), Some(&tcp("v1.33.5")))).contains("non-sequential"));
        assert!(message(admit(&tcp("latest"), None)).contains("unable to parse"));
    }
}
