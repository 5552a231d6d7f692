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

use std::{net::SocketAddr, time::Duration};

use shared::{
    host::{Https, IssuerRef, WorkloadGateway, objects::HostObject},
    ingress::edge::{self, Backend, Site, https},
};
use tests::edgeproxy::{Haproxy, authority, haproxy_config, ingress, issue};
use uuid::Uuid;

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
    let _haproxy = Haproxy::start(&dir, &config, ports.1).await;

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
