//! The platform's image as CI builds it (`scripts/image.sh`, which
//! `scripts/test.sh` runs after building the binaries): from scratch, glibc
//! from Debian's packages, every function binary. A function runs from it
//! with a read-only root file system as the non-root user 65532, answers its
//! probes, and the chart's `helm test` command, run from the image too, finds
//! it healthy. Containers run as the machine allows: podman with runc,
//! cgroupfs, explicit ulimits and `target/containers.conf`.

use std::process::Output;

use tests::{
    database::TestDb,
    eventually, free_port,
    podman::{IMAGE, RUN},
};

fn podman(args: &[&str]) -> Output {
    tests::podman::podman()
        .args(args)
        .output()
        .expect("podman runs (scripts/test.sh installs it)")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `podman run` of the image, read-only.
fn run_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = RUN.to_vec();
    args.push("--read-only");
    args.extend_from_slice(extra);
    args
}

#[tokio::test]
async fn a_function_runs_from_the_image_read_only_as_its_non_root_user() {
    let inspected = podman(&[
        "image",
        "inspect",
        "--format",
        "{{.Size}} {{.Config.User}} {{.Digest}}",
        IMAGE,
    ]);
    assert!(
        inspected.status.success(),
        "the image is built (scripts/image.sh): {}",
        text(&inspected)
    );
    let image = String::from_utf8_lossy(&inspected.stdout)
        .trim()
        .to_string();
    let fields: Vec<&str> = image.split(' ').collect();
    assert_eq!(fields[1], "65532:65532", "{image}");

    let db = TestDb::new().await;
    let (port, metrics) = (free_port(), free_port());
    let name = format!("kubebyon-image-{}", uuid::Uuid::new_v4().simple());
    let env = [
        format!("DATABASE_URL={}", db.url),
        format!("AMQP_URL={}", tests::broker::amqp_url()),
        format!("PORT={port}"),
        format!("METRICS_PORT={metrics}"),
        "DATABASE_MAX_CONNECTIONS=2".to_string(),
    ];
    let mut args = run_args(&["-d", "--name", &name]);
    for variable in &env {
        args.extend(["-e", variable.as_str()]);
    }
    args.extend([IMAGE, "/usr/local/bin/api-auth"]);
    let started = podman(&args);
    assert!(started.status.success(), "{}", text(&started));

    let http = reqwest::Client::new();
    let ready = format!("http://127.0.0.1:{port}/readyz");
    eventually(60, "the function in the container is ready", || async {
        let reply = http.get(&ready).send().await.ok()?;
        (reply.status() == 200).then_some(())
    })
    .await;

    // The chart's `helm test` command, from the image.
    let healthz = format!("http://127.0.0.1:{port}/healthz");
    let openapi = format!("http://127.0.0.1:{port}/api/openapi.json");
    let check = podman(&run_args(&[
        IMAGE,
        "/usr/local/bin/local",
        "check-url",
        &healthz,
        &openapi,
    ]));
    assert!(check.status.success(), "{}", text(&check));
    assert!(text(&check).contains(&format!("{openapi}: 200")));
    // The command line ships in the image: it reaches the function, which
    // refuses a key that is none (exit 3, one line).
    let platform = format!("http://127.0.0.1:{port}");
    let cli = podman(&run_args(&[
        IMAGE,
        "/usr/local/bin/kubebyon",
        "--url",
        &platform,
        "--api-key",
        "kb_00000000_not-a-key",
        "whoami",
    ]));
    assert_eq!(cli.status.code(), Some(3), "{}", text(&cli));
    assert!(text(&cli).contains("error: "), "{}", text(&cli));

    // As 65532, with nothing writable but what is mounted.
    let container = podman(&[
        "inspect",
        "--format",
        "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}}",
        &name,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&container.stdout).trim(),
        "65532:65532 true"
    );
    let top = podman(&["top", &name, "huser", "args"]);
    assert!(
        text(&top).contains("65532") && text(&top).contains("/usr/local/bin/api-auth"),
        "{}",
        text(&top)
    );
    let stopped = podman(&["stop", "--time", "5", &name]);
    assert!(stopped.status.success(), "{}", text(&stopped));
    #[allow(clippy::print_stdout)]
    {
        println!(
            "image {IMAGE}: {} MiB, user {}, read-only root, {}",
            fields[0].parse::<u64>().unwrap_or_default() / 1024 / 1024,
            fields[1],
            fields[2]
        );
    }
}

/// `route-agent` from the image as the chart's DaemonSet runs it: root
/// with `NET_ADMIN` alone, a read-only root, the host's network. One pass
/// reads the host's routing table over rtnetlink, finds nothing of the
/// (empty) plan to change and reports, which the platform records.
#[tokio::test(flavor = "multi_thread")]
async fn the_route_agent_runs_from_the_image_with_net_admin_alone() {
    let token = "route-agent-token-for-the-image-0123456789";
    let app = crate::harness::TestApp::builder("image-route-agent")
        .env("KUBEBYON_ROUTE_AGENT_TOKEN", token)
        .build()
        .await;
    let api = format!("KUBEBYON_API={}", app.base_url);
    let token = format!("KUBEBYON_ROUTE_AGENT_TOKEN={token}");
    let pass = podman(&run_args(&[
        "--user",
        "0",
        "--cap-drop",
        "all",
        "--cap-add",
        "NET_ADMIN",
        "-e",
        &api,
        "-e",
        &token,
        "-e",
        "NODE_NAME=image-host",
        IMAGE,
        "/usr/local/bin/route-agent",
        "--once",
    ]));
    assert!(pass.status.success(), "{}", text(&pass));
    let line: serde_json::Value = serde_json::from_slice(&pass.stdout).unwrap();
    assert_eq!(
        line,
        serde_json::json!({"changed": 0, "applied": 0, "failed": []})
    );
    let reported: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM route_agent_reports WHERE host_node = 'image-host'",
    )
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(reported, 1);
}
