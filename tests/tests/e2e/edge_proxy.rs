//! The workload edge's objects through a real reverse proxy. The objects the
//! platform renders for two clusters (their HTTPRoutes and shim
//! EndpointSlices, the Gateway's HTTPS listeners and the certificates they
//! name) are translated into a configuration of Debian's HAProxy, which then
//! stands in front of two loopback HTTP servers in the place of the
//! clusters' ingress controllers: each hostname reaches its own cluster,
//! over HTTPS with the certificate holding its name (signed by a test CA in
//! the place of cert-manager), a self-managed hostname with `Host` rewritten
//! to its cluster's own name, plain HTTP redirected, an unknown name nowhere.
//!
//! What this does not prove about a real Gateway implementation: Gateway API
//! conformance (listener precedence and conflicts, `allowedRoutes`, route
//! status), endpoints followed as the EndpointSlice changes (the
//! translation reads them once), a listener serving only its own
//! certificates (HAProxy picks among all of them by SNI), and cert-manager's
//! issuance.

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
use shared::{
    host::{Https, IssuerRef, WorkloadGateway, objects::HostObject},
    ingress::edge::{self, Backend, Site, https},
};
use uuid::Uuid;

/// A stand-in for a cluster's ingress controller: answers its name and
/// the `Host` it was asked for, and keeps each `Host`.
struct Ingress {
    addr: SocketAddr,
    hosts: Arc<Mutex<Vec<String>>>,
}

async fn ingress(name: &'static str) -> Ingress {
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

fn gateway() -> WorkloadGateway {
    let issuer = IssuerRef {
        kind: "ClusterIssuer".into(),
        name: "test".into(),
    };
    WorkloadGateway {
        name: "workloads".into(),
        namespace: "kubebyon".into(),
        http_listener: "http".into(),
        https: Some(Https {
            listener: "https".into(),
            port: 443,
            issuer: issuer.clone(),
            self_managed_issuer: issuer,
            san_limit: 2,
            redirect: true,
        }),
        resync: Duration::from_secs(300),
    }
}

/// One cluster's edge as the platform renders it, to `backend`.
struct Cluster {
    namespace: String,
    canonical: String,
    sites: Vec<Site>,
    objects: Vec<HostObject>,
}

fn cluster(name: &str, bindings: &[(&str, bool)], backend: SocketAddr) -> Cluster {
    let id = Uuid::new_v4();
    let namespace = format!("kb-{}", id.simple());
    let canonical = format!("{name}-{}.apps.example.com", &id.simple().to_string()[..8]);
    let mut sites = vec![Site {
        binding_id: None,
        hostname: canonical.clone(),
        self_managed: false,
    }];
    sites.extend(bindings.iter().map(|(hostname, self_managed)| Site {
        binding_id: Some(Uuid::new_v4()),
        hostname: hostname.to_string(),
        self_managed: *self_managed,
    }));
    let backend = Backend::NodePorts {
        addresses: vec![backend.ip().to_string().parse().unwrap()],
        port: backend.port(),
    };
    let rendered = edge::render(id, &namespace, &gateway(), &canonical, &sites, &backend);
    Cluster {
        namespace,
        canonical,
        sites,
        objects: rendered.objects,
    }
}

/// A CA of the test's own, in the place of cert-manager's issuer.
fn authority() -> (String, CertifiedIssuer<'static, KeyPair>) {
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
fn issue(certificates: &[HostObject], dir: &Path, ca: &CertifiedIssuer<'static, KeyPair>) {
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
/// them: an HTTP frontend for the HTTP listener, an HTTPS one (every
/// certificate of `certificates`, chosen by SNI) for the HTTPS listeners;
/// a route is a host match (and, on a listener with a hostname, an SNI
/// match), its `RequestRedirect` a redirect, its `URLRewrite` a `Host`
/// header set in its backend, whose servers are its Service's
/// EndpointSlice's endpoints.
fn haproxy_config(
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
    format!(
        "global\n    maxconn 256\n\
         defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
         frontend http\n    bind 127.0.0.1:{}\n{plain}\
         frontend https\n    bind 127.0.0.1:{} ssl crt {}\n{secure}\
         {backends}",
        ports.0,
        ports.1,
        certificates.display()
    )
}

/// Debian's HAProxy (in `/usr/sbin`, which a user's `PATH` may lack).
fn haproxy() -> std::process::Command {
    let installed = Path::new("/usr/sbin/haproxy");
    std::process::Command::new(if installed.exists() {
        installed
    } else {
        Path::new("haproxy")
    })
}

/// HAProxy, in the foreground, until dropped.
struct Haproxy(std::process::Child);

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_rendered_edge_serves_each_site_from_its_cluster_through_haproxy() {
    let shop_ingress = ingress("shop").await;
    let cafe_ingress = ingress("cafe").await;
    let shop = cluster(
        "shop",
        &[("blog.apps.example.com", false), ("www.shop.test", true)],
        shop_ingress.addr,
    );
    let cafe = cluster("cafe", &[("www.cafe.test", true)], cafe_ingress.addr);

    // HTTPS on the edge as `sync-edge` plans it, issued by the test's CA.
    let gateway = gateway();
    let served: Vec<https::Served> = [&shop, &cafe]
        .iter()
        .flat_map(|c| {
            c.sites.iter().map(|s| https::Served {
                hostname: s.hostname.clone(),
                namespace: c.namespace.clone(),
                binding_id: s.binding_id,
                self_managed: s.self_managed,
            })
        })
        .collect();
    let plan = https::plan(&gateway, gateway.https.as_ref().unwrap(), &served, 63);
    assert_eq!(
        plan.certificates.len(),
        4,
        "two shared by three names, two own"
    );
    let dir = std::env::temp_dir().join(format!("kb-edge-proxy-{}", Uuid::new_v4().simple()));
    let certificates = dir.join("certificates");
    std::fs::create_dir_all(&certificates).unwrap();
    let (ca_pem, ca) = authority();
    issue(&plan.certificates, &certificates, &ca);

    let ports = (tests::free_port(), tests::free_port());
    let objects: Vec<HostObject> = [&shop, &cafe]
        .iter()
        .flat_map(|c| c.objects.clone())
        .collect();
    let config = haproxy_config(&objects, &plan.listeners, &certificates, ports);
    std::fs::write(dir.join("haproxy.cfg"), &config).unwrap();
    let check = haproxy()
        .args(["-c", "-f"])
        .arg(dir.join("haproxy.cfg"))
        .output()
        .expect("Debian's haproxy is installed (scripts/test.sh installs it)");
    assert!(
        check.status.success(),
        "{}\n{config}",
        String::from_utf8_lossy(&check.stderr)
    );
    let _haproxy = Haproxy(
        haproxy()
            .args(["-db", "-f"])
            .arg(dir.join("haproxy.cfg"))
            .spawn()
            .unwrap(),
    );
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", ports.1)).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A client that trusts the test CA and finds every name on the proxy.
    let client = |names: &[&str]| {
        let mut builder = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10));
        for name in names {
            builder = builder.resolve(name, SocketAddr::from(([127, 0, 0, 1], ports.1)));
        }
        builder.build().unwrap()
    };
    let names = [
        shop.canonical.as_str(),
        "blog.apps.example.com",
        "www.shop.test",
        cafe.canonical.as_str(),
        "www.cafe.test",
        "nobody.apps.example.com",
    ];
    let https_client = client(&names);
    let get = async |hostname: &str| {
        let reply = https_client
            .get(format!("https://{hostname}:{}/cart", ports.1))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{hostname}: {e:?}"));
        (reply.status().as_u16(), reply.text().await.unwrap())
    };
    // Each site reaches its cluster, with the Host its ingress knows (as
    // sent, port and all, where no rewrite applies).
    let port = ports.1;
    assert_eq!(
        get(&shop.canonical).await,
        (200, format!("shop {}:{port}", shop.canonical))
    );
    assert_eq!(
        get("blog.apps.example.com").await,
        (200, format!("shop blog.apps.example.com:{port}"))
    );
    assert_eq!(
        get("www.shop.test").await,
        (200, format!("shop {}", shop.canonical)),
        "a self-managed hostname arrives as the cluster's own name"
    );
    assert_eq!(
        get(&cafe.canonical).await,
        (200, format!("cafe {}:{port}", cafe.canonical))
    );
    assert_eq!(
        get("www.cafe.test").await,
        (200, format!("cafe {}", cafe.canonical))
    );
    // A name no route holds reaches no cluster (and no certificate holds it).
    let before = (
        shop_ingress.hosts.lock().unwrap().len(),
        cafe_ingress.hosts.lock().unwrap().len(),
    );
    assert!(
        https_client
            .get(format!("https://nobody.apps.example.com:{}/", ports.1))
            .send()
            .await
            .is_err(),
        "no certificate names it"
    );
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let unknown = plain
        .get(format!("http://127.0.0.1:{}/", ports.0))
        .header("host", "nobody.apps.example.com")
        .send()
        .await
        .unwrap();
    assert_ne!(unknown.status().as_u16(), 200);
    assert_eq!(
        (
            shop_ingress.hosts.lock().unwrap().len(),
            cafe_ingress.hosts.lock().unwrap().len()
        ),
        before
    );

    // Plain HTTP is sent to HTTPS, for every site.
    for hostname in [shop.canonical.as_str(), "www.cafe.test"] {
        let reply = plain
            .get(format!("http://127.0.0.1:{}/cart?x=1", ports.0))
            .header("host", hostname)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), 301, "{hostname}");
        assert_eq!(
            reply.headers()["location"].to_str().unwrap(),
            format!("https://{hostname}/cart?x=1")
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
