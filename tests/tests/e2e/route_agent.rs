//! `route-agent` in network namespaces the test makes: one standing for a
//! host node, one for a user's node whose pod network holds a "pod"
//! address, joined by a veth pair. The agent reads the route plan from the
//! platform with its token, installs the route, and a request from the
//! host's namespace reaches the pod through it; a plan change replaces the
//! route; a route it does not own is never touched; run again it changes
//! nothing; and the platform then knows the host reaches those pods. The
//! `local` route mode does the same from the platform's own process
//! (`sync-edge`). Every namespace the test makes is removed, whatever the
//! outcome.

use std::process::{Child, Command, Stdio};

use serde_json::Value;
use shared::ingress::edge::routes;
use uuid::Uuid;

use crate::harness::TestApp;

const TOKEN: &str = "route-agent-token-for-the-test-0123456789";

/// Runs `ip` with `args`, which must succeed.
fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The two namespaces, removed when dropped.
struct Namespaces {
    host: String,
    node: String,
}

impl Namespaces {
    fn make() -> Self {
        let tag = &Uuid::new_v4().simple().to_string()[..6];
        let (host, node) = (format!("kbh-{tag}"), format!("kbn-{tag}"));
        let made = Self { host, node };
        let (h, n) = (made.host.as_str(), made.node.as_str());
        ip(&["netns", "add", h]);
        ip(&["netns", "add", n]);
        let (veth_h, veth_n) = (format!("kh{tag}"), format!("kn{tag}"));
        ip(&[
            "link", "add", &veth_h, "type", "veth", "peer", "name", &veth_n,
        ]);
        ip(&["link", "set", &veth_h, "netns", h]);
        ip(&["link", "set", &veth_n, "netns", n]);
        for (ns, dev, address) in [
            (h, &veth_h, "192.168.77.1/30"),
            (n, &veth_n, "192.168.77.2/30"),
        ] {
            ip(&["-n", ns, "addr", "add", address, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        // The node's pods: addresses of its pod network, on its loopback.
        for pod in ["10.64.1.10/32", "10.64.2.10/32"] {
            ip(&["-n", n, "addr", "add", pod, "dev", "lo"]);
        }
        made
    }

    /// The routes of the host's namespace, as `ip route` prints them.
    fn routes(&self) -> String {
        let output = Command::new("ip")
            .args(["-n", &self.host, "route", "show"])
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap()
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in [&self.host, &self.node] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A web server on `address` inside the node's namespace, for as long as
/// it lives.
struct Pod(Child);

impl Pod {
    fn serve(namespaces: &Namespaces, address: &str) -> Self {
        Self(
            Command::new("ip")
                .args(["netns", "exec", &namespaces.node])
                .arg(tests::moto::python())
                .args(["-m", "http.server", "8080", "--bind", address])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a request from the host's namespace reaches `address:8080`,
/// trying for two seconds while the pod's server starts.
fn reaches(namespaces: &Namespaces, address: &str) -> bool {
    for _ in 0..40 {
        if reaches_once(namespaces, address) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// One pass of the agent, programming the host's namespace: its JSON line,
/// or `None` when it failed.
fn agent(app: &TestApp, namespaces: &Namespaces, token: &str) -> Option<Value> {
    let output = Command::new(tests::workspace_binary("route-agent"))
        .args(["--once", "--netns", &namespaces.host])
        .env("KUBEBYON_API", &app.base_url)
        .env("KUBEBYON_ROUTE_AGENT_TOKEN", token)
        .env("NODE_NAME", "host-1")
        .output()
        .unwrap();
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).unwrap())
}

async fn plan(app: &TestApp, cluster: &str, destination: &str) {
    sqlx::query("DELETE FROM edge_routes")
        .execute(&app.db.pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO edge_routes (cluster_id, node_name, destination, via)
         VALUES ($1::uuid, 'worker-1', $2::cidr, '192.168.77.2')",
    )
    .bind(cluster)
    .bind(destination)
    .execute(&app.db.pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_installs_replaces_and_owns_only_its_routes() {
    let app = TestApp::builder("worker-routes")
        .env("KUBEBYON_ROUTE_AGENT_TOKEN", TOKEN)
        .build()
        .await;
    let cluster = app.create("routed", "nodeport").await;
    let namespaces = Namespaces::make();
    let pods = (
        Pod::serve(&namespaces, "10.64.1.10"),
        Pod::serve(&namespaces, "10.64.2.10"),
    );
    // A route that is not the agent's, to the same node.
    ip(&[
        "-n",
        &namespaces.host,
        "route",
        "add",
        "10.99.0.0/24",
        "via",
        "192.168.77.2",
        "proto",
        "static",
    ]);
    assert!(!reaches_once(&namespaces, "10.64.1.10"), "no route yet");

    // A wrong token: nothing is read, nothing changes.
    assert!(agent(&app, &namespaces, "another-token-of-forty-characters-0000").is_none());
    assert!(!namespaces.routes().contains("10.64."));

    plan(&app, &cluster, "10.64.1.0/24").await;
    let pass = agent(&app, &namespaces, TOKEN).expect("the agent's pass");
    assert_eq!(
        (pass["changed"].as_u64(), pass["applied"].as_u64()),
        (Some(1), Some(1)),
        "{pass}"
    );
    let table = namespaces.routes();
    assert!(
        table.contains("10.64.1.0/24 via 192.168.77.2") && table.contains("proto 250"),
        "{table}"
    );
    assert!(
        reaches(&namespaces, "10.64.1.10"),
        "the pod through the route"
    );
    assert_eq!(
        routes::routed(&app.db.pool).await.unwrap(),
        ["10.64.1.0/24".parse().unwrap()],
        "the platform knows the host reaches it"
    );

    // Run again, as after a restart: nothing is applied twice.
    let pass = agent(&app, &namespaces, TOKEN).unwrap();
    assert_eq!(pass["changed"], 0, "{pass}");

    // The plan changes: the old route goes, the new one comes, the other
    // route stays.
    plan(&app, &cluster, "10.64.2.0/24").await;
    let pass = agent(&app, &namespaces, TOKEN).unwrap();
    assert_eq!(pass["changed"], 2, "{pass}");
    let table = namespaces.routes();
    assert!(!table.contains("10.64.1.0/24"), "{table}");
    assert!(table.contains("10.64.2.0/24 via 192.168.77.2"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("10.99.0.0/24 via 192.168.77.2") && l.contains("proto static")),
        "{table}"
    );
    assert!(reaches(&namespaces, "10.64.2.10"));
    assert!(!reaches_once(&namespaces, "10.64.1.10"));

    // A next hop the node cannot reach is reported, not hidden.
    sqlx::query("UPDATE edge_routes SET via = '203.0.113.9'")
        .execute(&app.db.pool)
        .await
        .unwrap();
    let pass = agent(&app, &namespaces, TOKEN).unwrap();
    assert_eq!(pass["failed"][0]["destination"], "10.64.2.0/24", "{pass}");
    assert!(routes::routed(&app.db.pool).await.unwrap().is_empty());

    let (host, node) = (namespaces.host.clone(), namespaces.node.clone());
    drop(pods);
    drop(namespaces);
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8(left.stdout).unwrap();
    assert!(!left.contains(&host) && !left.contains(&node), "{left}");
}

/// One try, without waiting for a server to start.
fn reaches_once(namespaces: &Namespaces, address: &str) -> bool {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &namespaces.host,
            "curl",
            "-s",
            "-o",
            "/dev/null",
        ])
        .args(["--max-time", "1", &format!("http://{address}:8080/")])
        .status()
        .unwrap()
        .success()
}

/// The `local` route mode: `sync-edge`, in the platform's process, programs
/// the plan in the host's namespace as an agent would, and reports as that
/// host node.
#[tokio::test(flavor = "multi_thread")]
async fn the_local_route_mode_programs_the_plan_from_the_platform() {
    let app = TestApp::builder("local-routes").build().await;
    let cluster = app.create("local-routed", "nodeport").await;
    let namespaces = Namespaces::make();
    let _pod = Pod::serve(&namespaces, "10.64.1.10");
    plan(&app, &cluster, "10.64.1.0/24").await;

    let program = || sync_edge::program_routes(&app.db.pool, "host-1", Some(&namespaces.host));
    let first = program().await.unwrap();
    assert_eq!((first.changed, first.applied, first.failed), (1, 1, 0));
    assert!(
        reaches(&namespaces, "10.64.1.10"),
        "{}",
        namespaces.routes()
    );
    assert_eq!(
        routes::routed(&app.db.pool).await.unwrap(),
        ["10.64.1.0/24".parse().unwrap()]
    );
    let again = program().await.unwrap();
    assert_eq!(again.changed, 0, "nothing is applied twice");

    // A planned destination another route already holds is not taken
    // over: it stays, and the destination is reported failed.
    ip(&[
        "-n",
        &namespaces.host,
        "route",
        "add",
        "10.64.3.0/24",
        "via",
        "192.168.77.2",
        "proto",
        "static",
    ]);
    sqlx::query(
        "INSERT INTO edge_routes (cluster_id, node_name, destination, via)
         VALUES ($1::uuid, 'worker-2', '10.64.3.0/24', '192.168.77.2')",
    )
    .bind(&cluster)
    .execute(&app.db.pool)
    .await
    .unwrap();
    let taken = program().await.unwrap();
    assert_eq!((taken.changed, taken.applied, taken.failed), (0, 1, 1));
    assert!(
        namespaces
            .routes()
            .lines()
            .any(|l| l.starts_with("10.64.3.0/24") && l.contains("proto static")),
        "{}",
        namespaces.routes()
    );

    // The cluster's plan goes: so does its route.
    sqlx::query("DELETE FROM edge_routes")
        .execute(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(program().await.unwrap().changed, 1);
    assert!(!namespaces.routes().contains("10.64.1.0/24"));

    // A namespace that does not exist: an error, not a silent pass.
    assert!(
        sync_edge::program_routes(&app.db.pool, "host-1", Some("kb-no-such-namespace"))
            .await
            .is_err()
    );
}
