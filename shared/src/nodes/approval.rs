//! One node per join attempt: the platform, not the cluster, approves the
//! client certificate a joining kubelet asks for.
//!
//! A kubelet joining with a bootstrap token authenticates as
//! `system:bootstrap:<token id>` and files a CertificateSigningRequest
//! (signer `kubernetes.io/kube-apiserver-client-kubelet`, subject
//! `CN=system:node:<node name>, O=system:nodes`). kube-controller-manager's
//! `csrapproving` controller approves it by itself whenever the requester may
//! `create certificatesigningrequests/nodeclient`, which kubeadm grants every
//! bootstrap token through the ClusterRoleBinding
//! `kubeadm:node-autoapprove-bootstrap`. A bootstrap token is reusable until
//! it expires, so with that binding in place one token joins any number of
//! machines under any names, existing nodes' names included (kubeadm's docs,
//! "Turning off auto-approval of node client certificates").
//!
//! So on vCluster the platform removes every binding of that ClusterRole
//! from the cluster ([`remove_auto_approval`]); on Kamaji, which makes that
//! binding again whenever `cluster-info` changes, its tokens are in a group
//! of its own that nothing auto-approves ([`grant_join_rights`]). Either
//! way it approves, for each attempt, exactly one request ([`choose`],
//! [`approve`]): the first one filed with the attempt's own
//! bootstrap token for the host name the attempt reported, while no node of
//! that name exists. Every other request filed with that token is denied.
//! Renewals by nodes already joined (`selfnodeclient`) are left to the
//! cluster.

use k8s_openapi::api::{
    certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition},
    core::v1::Node,
    rbac::v1::ClusterRoleBinding,
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};

use super::reasons::JoinReason;
use crate::host::HostError;

/// The ClusterRole whose holders' kubelet client certificates
/// kube-controller-manager approves without asking anyone.
pub const NODE_CLIENT_AUTO_APPROVAL_ROLE: &str =
    "system:certificates.k8s.io:certificatesigningrequests:nodeclient";

/// The signer of kubelets' client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// Deletes every ClusterRoleBinding that hands bootstrap requests to the
/// cluster's automatic approval. Returns the names deleted.
pub async fn remove_auto_approval(client: Client) -> Result<Vec<String>, HostError> {
    let api: Api<ClusterRoleBinding> = Api::all(client);
    let mut removed = Vec::new();
    for binding in api.list(&ListParams::default()).await? {
        let Some(name) = binding.metadata.name else {
            continue;
        };
        if binding.role_ref.kind == "ClusterRole"
            && binding.role_ref.name == NODE_CLIENT_AUTO_APPROVAL_ROLE
        {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(err.into()),
            }
            removed.push(name);
        }
    }
    Ok(removed)
}

/// What `kubeadm join` reads with a bootstrap token, granted to `group`
/// (kubeadm's own Roles and ClusterRoles, which Kamaji's bootstrap phase
/// makes): the `kubeadm-config` and `kubelet-config` ConfigMaps, Nodes by
/// name, and filing certificate requests (`system:node-bootstrapper`).
/// Never `nodeclient`: the platform approves. Applied again before each
/// join, so bindings the tenant deleted come back.
pub async fn grant_join_rights(client: Client, group: &str) -> Result<(), HostError> {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    let subjects = serde_json::json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]);
    let params = PatchParams::apply("kubebyon").force();
    let role_bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "kube-system");
    for (name, role) in [
        (
            "kubebyon:join-kubeadm-config",
            "kubeadm:nodes-kubeadm-config",
        ),
        ("kubebyon:join-kubelet-config", "kubeadm:kubelet-config"),
    ] {
        let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": "kube-system"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": subjects});
        role_bindings
            .patch(name, &params, &Patch::Apply(binding))
            .await?;
    }
    let cluster_role_bindings: Api<ClusterRoleBinding> = Api::all(client);
    for (name, role) in [
        ("kubebyon:join-bootstrap", "system:node-bootstrapper"),
        ("kubebyon:join-get-nodes", "kubeadm:get-nodes"),
    ] {
        let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects});
        cluster_role_bindings
            .patch(name, &params, &Patch::Apply(binding))
            .await?;
    }
    Ok(())
}

/// What an attempt's certificate requests come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The request for the attempt's node; `approved` once the cluster
    /// holds the approval.
    Approve { request: String, approved: bool },
    /// The kubelet has not asked yet.
    Waiting,
    /// The attempt's node cannot be approved.
    Refused { reason: JoinReason },
}

/// The node name a kubelet client certificate request asks for: the
/// subject's `system:node:<name>` common name, with `system:nodes` as
/// organization, as kube-controller-manager requires of such requests.
pub fn requested_node(request_pem: &[u8]) -> Option<String> {
    use x509_parser::prelude::{FromDer, X509CertificationRequest};
    let (_, pem) = x509_parser::pem::parse_x509_pem(request_pem).ok()?;
    if pem.label != "CERTIFICATE REQUEST" {
        return None;
    }
    let (_, request) = X509CertificationRequest::from_der(&pem.contents).ok()?;
    request.verify_signature().ok()?;
    let subject = &request.certification_request_info.subject;
    let mut names = subject.iter_common_name();
    let name = names.next()?.as_str().ok()?;
    if names.next().is_some() {
        return None;
    }
    let organizations: Vec<&str> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .collect();
    if organizations != ["system:nodes"] {
        return None;
    }
    name.strip_prefix("system:node:")
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

fn settled(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| matches!(c.type_.as_str(), "Approved" | "Denied"))
        })
}

fn approved(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Approved"))
}

async fn set_condition(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    type_: &str,
    reason: &str,
    message: &str,
) -> Result<(), HostError> {
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let condition = CertificateSigningRequestCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    };
    let patch = serde_json::json!({ "status": { "conditions": [condition] } });
    api.patch_approval(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Looks at the certificate requests filed with one attempt's bootstrap
/// token and chooses the one to approve: `chosen_before` (the request the
/// attempt was granted before) or else the first one, by creation, for
/// `hostname` while no node of that name exists. Every other request filed
/// with the token is denied here; the chosen one is approved by [`approve`]
/// once the caller has recorded it.
pub async fn choose(
    client: Client,
    bootstrap_token_id: &str,
    hostname: &str,
    chosen_before: Option<&str>,
) -> Result<Choice, HostError> {
    let requests: Api<CertificateSigningRequest> = Api::all(client.clone());
    let requester = format!("system:bootstrap:{bootstrap_token_id}");
    let mut mine: Vec<CertificateSigningRequest> = requests
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|csr| csr.spec.username.as_deref() == Some(requester.as_str()))
        .collect();
    mine.sort_by_key(|csr| {
        (
            csr.metadata.creation_timestamp.clone().map(|t| t.0),
            csr.metadata.name.clone(),
        )
    });
    let node_exists = Api::<Node>::all(client).get_opt(hostname).await?.is_some();
    let mut chosen: Option<(String, bool)> = chosen_before.map(|name| {
        let held = mine
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(name) && approved(c));
        (name.to_string(), held)
    });
    for csr in &mine {
        let Some(name) = csr.metadata.name.as_deref() else {
            continue;
        };
        if chosen.as_ref().is_some_and(|(c, _)| c == name) {
            continue;
        }
        let for_host = csr.spec.signer_name == KUBELET_CLIENT_SIGNER
            && requested_node(&csr.spec.request.0).as_deref() == Some(hostname);
        if chosen.is_none() && for_host && (approved(csr) || (!settled(csr) && !node_exists)) {
            chosen = Some((name.to_string(), approved(csr)));
        } else if !settled(csr) {
            set_condition(
                &requests,
                name,
                "Denied",
                "KubeBYONOneNodePerJoin",
                "a join attempt joins one node, under the host name it reported",
            )
            .await?;
        }
    }
    Ok(match chosen {
        Some((request, approved)) => Choice::Approve { request, approved },
        None if node_exists => Choice::Refused {
            reason: JoinReason::NodeExists {
                hostname: hostname.to_string(),
            },
        },
        None => Choice::Waiting,
    })
}

/// Approves the request [`choose`] chose, for the node named `hostname`.
pub async fn approve(client: Client, request: &str, hostname: &str) -> Result<(), HostError> {
    set_condition(
        &Api::all(client),
        request,
        "Approved",
        "KubeBYONJoinApproved",
        &format!("approved for the join attempt that reported host name {hostname}"),
    )
    .await
}

/// Denies one request (chosen, then refused by the platform).
pub async fn deny(client: Client, request: &str, reason: &str) -> Result<(), HostError> {
    set_condition(
        &Api::all(client),
        request,
        "Denied",
        "KubeBYONOneNodePerJoin",
        reason,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(subject: &[(rcgen::DnType, &str)]) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        let key = rcgen::KeyPair::generate().expect("key");
        params
            .serialize_request(&key)
            .expect("csr")
            .pem()
            .expect("pem")
    }

    #[test]
    fn the_node_name_comes_from_a_kubelet_subject_only() {
        use rcgen::DnType::{CommonName, OrganizationName};
        let kubelet = request(&[
            (CommonName, "system:node:worker-1"),
            (OrganizationName, "system:nodes"),
        ]);
        assert_eq!(
            requested_node(kubelet.as_bytes()).as_deref(),
            Some("worker-1")
        );
        let no_org = request(&[(CommonName, "system:node:worker-1")]);
        assert_eq!(requested_node(no_org.as_bytes()), None);
        let admin = request(&[
            (CommonName, "system:node:worker-1"),
            (OrganizationName, "system:masters"),
        ]);
        assert_eq!(requested_node(admin.as_bytes()), None);
        let user = request(&[(CommonName, "alice"), (OrganizationName, "system:nodes")]);
        assert_eq!(requested_node(user.as_bytes()), None);
        assert_eq!(requested_node(b"not a request"), None);
        let certificate = kubelet.replace("CERTIFICATE REQUEST", "CERTIFICATE");
        assert_eq!(requested_node(certificate.as_bytes()), None);
    }
}
