//! HTTPS on the workload edge: the shared Gateway's HTTPS listeners and the
//! cert-manager `Certificate`s they serve, in the Gateway's namespace, for
//! every site the clusters' edges serve. The platform's own names (under
//! the base domain) share certificates of at most `san_limit` names each, on
//! one listener; a self-managed hostname gets a certificate from the
//! self-managed issuer and a listener of its own, which takes only routes
//! from its cluster's namespace.

use serde_json::{Value, json};
use uuid::Uuid;

use super::{COMPONENT, dedicated_certificate, dedicated_listener};
use crate::host::{
    Https, WorkloadGateway as Gateway,
    objects::{HostObject, Kind},
};

pub const CERTIFICATE_KIND: Kind = Kind {
    group: "cert-manager.io",
    version: "v1",
    kind: "Certificate",
    plural: "certificates",
};
pub const GATEWAY_KIND: Kind = Kind {
    group: "gateway.networking.k8s.io",
    version: "v1",
    kind: "Gateway",
    plural: "gateways",
};

/// The label value of the edge's certificates.
pub const CERTIFICATES: &str = "edge-https";

/// Gateway API's bound on a Gateway's listeners and on a listener's
/// certificates (`maxItems: 64` in its CRDs).
pub const GATEWAY_API_MAX: usize = 64;

/// A hostname an edge serves, as HTTPS needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub hostname: String,
    /// The cluster's host namespace.
    pub namespace: String,
    /// The binding it comes from; `None` for a cluster's own name.
    pub binding_id: Option<Uuid>,
    pub self_managed: bool,
}

/// What HTTPS on the edge is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The certificates, in the Gateway's namespace.
    pub certificates: Vec<HostObject>,
    /// The listeners the platform keeps on the Gateway.
    pub listeners: Vec<Value>,
    /// The bindings that cannot be served over HTTPS, and why.
    pub refused: Vec<(Uuid, String)>,
}

/// The name of the `index`th certificate of the platform's names.
pub fn platform_certificate(index: usize) -> String {
    format!("kubebyon-edge-platform-{index}")
}

/// Plans HTTPS for `served` (in the order self-managed hostnames were
/// bound, first served first), with `room` listeners free on the Gateway
/// besides the ones the platform keeps there.
pub fn plan(gateway: &Gateway, https: &Https, served: &[Served], room: usize) -> Plan {
    let labels = json!({"app.kubernetes.io/managed-by": "kubebyon", COMPONENT.0: CERTIFICATES});
    let certificate = |name: &str, names: &[&str], issuer: &crate::host::IssuerRef| HostObject {
        kind: CERTIFICATE_KIND,
        namespace: gateway.namespace.clone(),
        name: name.into(),
        body: json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": name, "namespace": gateway.namespace, "labels": labels},
            "spec": {"secretName": name, "dnsNames": names, "issuerRef": issuer.to_json()}}),
    };
    let listener = |name: &str, hostname: Option<&str>, secrets: &[String], from: Value| {
        let mut listener = json!({"name": name, "port": https.port, "protocol": "HTTPS",
            "tls": {"mode": "Terminate", "certificateRefs": secrets.iter()
                .map(|s| json!({"group": "", "kind": "Secret", "name": s})).collect::<Vec<_>>()},
            "allowedRoutes": {"namespaces": {"from": "Selector", "selector": from}}});
        if let Some(hostname) = hostname {
            listener["hostname"] = json!(hostname);
        }
        listener
    };
    let mut platform: Vec<&Served> = served.iter().filter(|s| !s.self_managed).collect();
    platform.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    platform.dedup_by(|a, b| a.hostname == b.hostname);
    let mut certificates = Vec::new();
    let mut listeners = Vec::new();
    let mut refused = Vec::new();
    let mut room = room;
    let chunks: Vec<&[&Served]> = platform.chunks(https.san_limit).collect();
    if !chunks.is_empty() && room > 0 {
        room -= 1;
        let mut secrets = Vec::new();
        for (index, chunk) in chunks.iter().enumerate() {
            if index < GATEWAY_API_MAX {
                let name = platform_certificate(index);
                let names: Vec<&str> = chunk.iter().map(|s| s.hostname.as_str()).collect();
                certificates.push(certificate(&name, &names, &https.issuer));
                secrets.push(name);
            } else {
                refused.extend(chunk.iter().filter_map(|s| {
                    Some((s.binding_id?, format!(
                        "the platform's names fill {GATEWAY_API_MAX} certificates of {} names, the most one listener serves",
                        https.san_limit
                    )))
                }));
            }
        }
        listeners.push(listener(
            &https.listener,
            None,
            &secrets,
            json!({"matchExpressions": [{"key": "kubebyon.dev/cluster-id", "operator": "Exists"}]}),
        ));
    } else {
        refused.extend(platform.iter().filter_map(|s| {
            Some((
                s.binding_id?,
                "the Gateway has room for no more listeners".to_string(),
            ))
        }));
    }
    for site in served.iter().filter(|s| s.self_managed) {
        let Some(id) = site.binding_id else { continue };
        if room == 0 {
            refused.push((
                id,
                format!(
                    "the Gateway has room for no more listeners ({GATEWAY_API_MAX} at most in Gateway API)"
                ),
            ));
            continue;
        }
        room -= 1;
        let name = dedicated_certificate(id);
        certificates.push(certificate(
            &name,
            &[site.hostname.as_str()],
            &https.self_managed_issuer,
        ));
        listeners.push(listener(
            &dedicated_listener(id),
            Some(&site.hostname),
            std::slice::from_ref(&name),
            json!({"matchLabels": {"kubernetes.io/metadata.name": site.namespace}}),
        ));
    }
    Plan {
        certificates,
        listeners,
        refused,
    }
}

/// The Gateway as the platform applies it: its listeners alone (the
/// chart's, and anyone else's, are theirs).
pub fn gateway(gateway: &Gateway, listeners: &[Value]) -> HostObject {
    HostObject {
        kind: GATEWAY_KIND,
        namespace: gateway.namespace.clone(),
        name: gateway.name.clone(),
        body: json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": gateway.name, "namespace": gateway.namespace},
            "spec": {"listeners": listeners}}),
    }
}

/// How many listeners the platform may keep on `gateway` (as read from
/// the host): Gateway API's bound less the listeners that are not its own
/// (the chart's HTTP listener, anyone else's).
pub fn room(gateway: &Value, https: &Https) -> usize {
    let others = gateway
        .pointer("/spec/listeners")
        .and_then(Value::as_array)
        .map_or(0, |listeners| {
            listeners
                .iter()
                .filter(|l| {
                    let name = l["name"].as_str().unwrap_or_default();
                    name != https.listener && !name.starts_with("kb-")
                })
                .count()
        });
    GATEWAY_API_MAX.saturating_sub(others)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::host::IssuerRef;

    fn settings(san_limit: usize) -> (Gateway, Https) {
        let https = Https {
            listener: "https".into(),
            port: 443,
            issuer: IssuerRef {
                kind: "ClusterIssuer".into(),
                name: "dns01".into(),
            },
            self_managed_issuer: IssuerRef {
                kind: "ClusterIssuer".into(),
                name: "http01".into(),
            },
            san_limit,
            redirect: true,
        };
        let gateway = Gateway {
            name: "workloads".into(),
            namespace: "kubebyon".into(),
            http_listener: "http".into(),
            https: Some(https.clone()),
            resync: Duration::from_secs(300),
        };
        (gateway, https)
    }

    fn platform(n: usize) -> Vec<Served> {
        (0..n)
            .map(|i| Served {
                hostname: format!("site{i:03}.apps.example.com"),
                namespace: format!("kb-{i}"),
                binding_id: Some(Uuid::from_u128(i as u128 + 1)),
                self_managed: false,
            })
            .collect()
    }

    #[test]
    fn the_platform_s_names_are_split_at_the_san_limit_on_one_listener() {
        let (gateway, https) = settings(100);
        let plan = plan(&gateway, &https, &platform(250), 63);
        let sizes: Vec<usize> = plan
            .certificates
            .iter()
            .map(|c| c.body["spec"]["dnsNames"].as_array().unwrap().len())
            .collect();
        assert_eq!(sizes, [100, 100, 50]);
        assert_eq!(
            plan.certificates[1].body["spec"]["dnsNames"][0],
            "site100.apps.example.com"
        );
        assert_eq!(
            plan.certificates[0].body["spec"]["issuerRef"]["name"],
            "dns01"
        );
        assert_eq!(plan.listeners.len(), 1);
        let refs: Vec<&str> = plan.listeners[0]["tls"]["certificateRefs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            refs,
            [
                "kubebyon-edge-platform-0",
                "kubebyon-edge-platform-1",
                "kubebyon-edge-platform-2"
            ]
        );
        assert!(plan.listeners[0].get("hostname").is_none());
        assert!(plan.refused.is_empty());
    }

    #[test]
    fn a_self_managed_hostname_gets_its_own_listener_while_the_gateway_has_room() {
        let (gateway, https) = settings(100);
        let mut served = platform(1);
        for i in 0..3u128 {
            served.push(Served {
                hostname: format!("www.shop{i}.test"),
                namespace: format!("kb-own{i}"),
                binding_id: Some(Uuid::from_u128(100 + i)),
                self_managed: true,
            });
        }
        let plan = plan(&gateway, &https, &served, 3);
        assert_eq!(plan.listeners.len(), 3, "the platform's and two of three");
        let own = &plan.listeners[1];
        assert_eq!(own["hostname"], "www.shop0.test");
        assert_eq!(
            own["allowedRoutes"]["namespaces"]["selector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "kb-own0"
        );
        let certificate = &plan.certificates[1];
        assert_eq!(
            certificate.body["spec"]["dnsNames"],
            json!(["www.shop0.test"])
        );
        assert_eq!(certificate.body["spec"]["issuerRef"]["name"], "http01");
        assert_eq!(plan.refused.len(), 1);
        assert_eq!(plan.refused[0].0, Uuid::from_u128(102));
    }
}
