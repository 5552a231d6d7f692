//! The workload edge behind a real reverse proxy: Debian's HAProxy,
//! configured from the objects the platform renders (HTTPRoutes, shim
//! EndpointSlices, the Gateway's HTTPS listeners and their certificates), in
//! front of loopback servers standing in for clusters' ingress controllers
//! (`tests/tests/e2e/edge_proxy.rs`, `bench-edge`).

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, extract::State, http::HeaderMap};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use serde_json::Value;
use shared::{host::objects::HostObject, ingress::edge};

/// A stand-in for a cluster's ingress controller: answers its name and
/// the `Host` it was asked for, and keeps each `Host`.
pub struct Ingress {
    pub addr: SocketAddr,
    pub hosts: Arc<Mutex<Vec<String>>>,
}

pub async fn ingress(name: &'static str) -> Ingress {
    let hosts = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .fallback(
            |State((name, hosts)): State<(&'static str, Arc<Mutex<Vec<String>>>)>,
             headers: HeaderMap| async move {
                let host = headers
                    .get("host")
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                hosts.lock().unwrap().push(host.clone());
                format!("{name} {host}")
            },
        )
        .with_state((name, hosts.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ingress { addr, hosts }
}

/// A CA of the test's own, in the place of cert-manager's issuer.
pub fn authority() -> (String, CertifiedIssuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kubebyon-edge-test-ca");
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    (issuer.pem(), issuer)
}

/// Issues each Certificate as cert-manager would fill its Secret: a PEM of
/// the certificate and its key, named after the Secret, in `dir`.
pub fn issue(certificates: &[HostObject], dir: &Path, ca: &CertifiedIssuer<'static, KeyPair>) {
    for certificate in certificates {
        let names: Vec<String> = certificate.body["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, ca).unwrap();
        let secret = certificate.body["spec"]["secretName"].as_str().unwrap();
        std::fs::write(
            dir.join(format!("{secret}.pem")),
            format!("{}{}", cert.pem(), key.serialize_pem()),
        )
        .unwrap();
    }
}

/// HAProxy's configuration for the Gateway's listeners and the routes on
/// them: an HTTP frontend for the HTTP listener (on `ports.0`), an HTTPS one
/// (on `ports.1`, every certificate of `certificates`, chosen by SNI) for
/// the HTTPS listeners when a route is on one;
/// a route is a host match (and, on a listener with a hostname, an SNI
/// match), its `RequestRedirect` a redirect, its `URLRewrite` a `Host`
/// header set in its backend, whose servers are its Service's
/// EndpointSlice's endpoints.
pub fn haproxy_config(
    objects: &[HostObject],
    listeners: &[Value],
    certificates: &Path,
    ports: (u16, u16),
) -> String {
    let slices: BTreeMap<&str, &Value> = objects
        .iter()
        .filter(|o| o.kind == edge::SLICE_KIND)
        .map(|o| (o.namespace.as_str(), &o.body))
        .collect();
    let listener_hosts: BTreeMap<&str, &str> = listeners
        .iter()
        .filter_map(|l| Some((l["name"].as_str()?, l["hostname"].as_str()?)))
        .collect();
    let (mut plain, mut secure, mut backends) = (String::new(), String::new(), String::new());
    for (i, route) in objects
        .iter()
        .filter(|o| o.kind == edge::ROUTE_KIND)
        .enumerate()
    {
        let spec = &route.body["spec"];
        let hostname = spec["hostnames"][0].as_str().unwrap();
        let section = spec["parentRefs"][0]["sectionName"].as_str().unwrap();
        let rule = &spec["rules"][0];
        let frontend = if section == "http" {
            &mut plain
        } else {
            &mut secure
        };
        let mut condition = format!("r{i}");
        frontend.push_str(&format!(
            "    acl r{i} hdr(host),field(1,:) -i {hostname}\n"
        ));
        if let Some(sni) = listener_hosts.get(section) {
            frontend.push_str(&format!("    acl r{i}_sni ssl_fc_sni -i {sni}\n"));
            condition.push_str(&format!(" r{i}_sni"));
        }
        let filters = rule["filters"].as_array().cloned().unwrap_or_default();
        if let Some(redirect) = filters.iter().find(|f| f["type"] == "RequestRedirect") {
            let redirect = &redirect["requestRedirect"];
            frontend.push_str(&format!(
                "    http-request redirect scheme {} code {} if {condition}\n",
                redirect["scheme"].as_str().unwrap(),
                redirect["statusCode"]
            ));
            continue;
        }
        frontend.push_str(&format!("    use_backend b{i} if {condition}\n"));
        backends.push_str(&format!("backend b{i}\n"));
        if let Some(rewrite) = filters.iter().find(|f| f["type"] == "URLRewrite") {
            backends.push_str(&format!(
                "    http-request set-header Host {}\n",
                rewrite["urlRewrite"]["hostname"].as_str().unwrap()
            ));
        }
        let slice = slices[route.namespace.as_str()];
        let port = slice["ports"][0]["port"].as_i64().unwrap();
        for (n, endpoint) in slice["endpoints"].as_array().unwrap().iter().enumerate() {
            backends.push_str(&format!(
                "    server s{n} {}:{port}\n",
                endpoint["addresses"][0].as_str().unwrap()
            ));
        }
    }
    let secure = match secure.is_empty() {
        true => String::new(),
        false => format!(
            "frontend https\n    bind 127.0.0.1:{} ssl crt {}\n{secure}",
            ports.1,
            certificates.display()
        ),
    };
    format!(
        "global\n    maxconn 4096\n\
         defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
         frontend http\n    bind 127.0.0.1:{}\n{plain}{secure}{backends}",
        ports.0
    )
}

/// Debian's HAProxy (in `/usr/sbin`, which a user's `PATH` may lack).
pub fn haproxy() -> std::process::Command {
    let installed = Path::new("/usr/sbin/haproxy");
    std::process::Command::new(if installed.exists() {
        installed
    } else {
        Path::new("haproxy")
    })
}

/// HAProxy, in the foreground, until dropped.
pub struct Haproxy(std::process::Child);

impl Haproxy {
    /// Checks `config` (written to `dir/haproxy.cfg`), then runs HAProxy
    /// with it until the port `wait_for` answers.
    pub async fn start(dir: &Path, config: &str, wait_for: u16) -> Self {
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let check = haproxy()
            .args(["-c", "-f"])
            .arg(&path)
            .output()
            .expect("Debian's haproxy is installed (scripts/test.sh installs it)");
        assert!(
            check.status.success(),
            "{}\n{config}",
            String::from_utf8_lossy(&check.stderr)
        );
        let running = Self(haproxy().args(["-db", "-f"]).arg(&path).spawn().unwrap());
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", wait_for)).is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        running
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
