//! The README's quickstart, run as written: the block is read from README.md
//! and run by bash against `local` (the binary `./infra/local/run.sh` starts)
//! with the real `kubectl`, so the README and what works cannot drift apart.

use std::{path::Path, process::Stdio, time::Duration};

use base64::Engine;
use tests::database::TestDb;

use crate::local_process::Local;

const MARKER: &str = "<!-- quickstart:";

/// The shell block that follows the quickstart marker in the README.
fn quickstart_block(readme: &str) -> String {
    let after = &readme[readme
        .find(MARKER)
        .expect("the README marks its quickstart")..];
    let start = after
        .find("```sh\n")
        .expect("a sh block follows the marker")
        + "```sh\n".len();
    let end = after[start..].find("\n```\n").expect("the block is closed");
    after[start..start + end + 1].to_string()
}

/// Runs `script` with bash, `set -eo pipefail`, in `dir`, within a time limit.
async fn bash(script: &str, dir: &Path, env: &[(&str, &str)]) -> (bool, String, String) {
    let child = tokio::process::Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", script])
        .current_dir(dir)
        .env("HOME", dir)
        .env_remove("KUBECONFIG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bash runs");
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the quickstart finishes within two minutes")
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_block_is_found_and_ends_where_the_fence_does() {
    let readme =
        "intro\n<!-- quickstart: x -->\n```sh\necho one\necho two\n```\n\n```sh\nlater\n```\n";
    assert_eq!(quickstart_block(readme), "echo one\necho two\n");
}

// Multi-threaded: bash and kubectl run as child processes while `local` serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_quickstart_runs_as_written_with_kubectl() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let block = quickstart_block(&readme);
    assert!(
        block.contains("kubectl get namespaces") && block.contains("kubectl apply"),
        "the quickstart drives kubectl:\n{block}"
    );

    let db = TestDb::new().await;
    let local = Local::start(&[("DATABASE_URL", &db.url)]).await;
    let dir = std::env::temp_dir().join(format!("quickstart-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();

    let (ok, out, err) = bash(&block, &dir, &[("API", &local.base)]).await;
    assert!(
        ok,
        "the quickstart failed\n--- stdout\n{out}\n--- stderr\n{err}"
    );
    for expected in [
        "kube-system",
        "namespace/demo created",
        "deployment.apps/hello created",
    ] {
        assert!(
            out.contains(expected),
            "{expected:?} missing from\n{out}\n{err}"
        );
    }
    assert!(
        err.contains("admission webhook \"workloads.admission.kubebyon.dev\" denied the request")
            && err.contains(
                "Deployment \"hello\" (30 pod(s) × 100m CPU, 128Mi memory) asks for 2900m more"
            ),
        "the scale past the limit is refused inside the cluster:\n{err}"
    );
    let listed = out
        .lines()
        .find(|line| line.starts_with("hello "))
        .unwrap_or_else(|| panic!("`kubectl get deployments` lists hello:\n{out}"));
    assert!(listed.contains("0/1"), "no node has joined yet: {listed}");
    let join = out.lines().last().unwrap_or_default();
    assert!(
        join.starts_with("curl -sS -H 'Authorization: Bearer ")
            && join.ends_with("/join | sudo sh"),
        "the join command comes last: {join:?}"
    );

    // The kubeconfig pins the cluster's CA over HTTPS, and nothing skips verification.
    let kubeconfig: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("kubeconfig.yaml")).unwrap())
            .unwrap();
    let cluster = &kubeconfig["clusters"][0]["cluster"];
    assert!(cluster["server"].as_str().unwrap().starts_with("https://"));
    assert!(
        cluster.get("insecure-skip-tls-verify").is_none(),
        "{cluster}"
    );
    let ca_data = cluster["certificate-authority-data"].as_str().unwrap();
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca_data)
        .unwrap();
    assert!(
        String::from_utf8(ca)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );

    // Another CA (another simulator's) does not vouch for the cluster: kubectl refuses it.
    let stranger = kube_sim::Simulator::start(kube_sim::Options::host())
        .await
        .unwrap();
    let mut forged = kubeconfig.clone();
    forged["clusters"][0]["cluster"]["certificate-authority-data"] =
        base64::engine::general_purpose::STANDARD
            .encode(stranger.ca_pem())
            .into();
    std::fs::write(dir.join("forged.yaml"), forged.to_string()).unwrap();
    let (ok, out, err) = bash("kubectl --kubeconfig forged.yaml get namespaces", &dir, &[]).await;
    assert!(
        !ok,
        "a CA that did not sign the certificate is refused: {out}"
    );
    assert!(
        err.contains("certificate signed by unknown authority"),
        "{err}"
    );

    local.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
