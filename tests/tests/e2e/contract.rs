//! The OpenAPI document as a contract: schemathesis (the PyPI tool, run from
//! the test venv) generates requests from `local`'s `/api/openapi.json`, on a
//! fresh database, with every check on, a fixed seed and a bounded number of
//! examples per operation; every answer must be one the document describes.
//! Once as the development identity, once in accounts mode with an API key.
//! The exceptions, each with its reason, are in `tests/contract/schemathesis.toml`.

use std::{path::PathBuf, process::Stdio};

use tests::database::TestDb;

use crate::local_process::Local;

/// Examples per operation and phase: bounded to keep CI short.
const EXAMPLES: &str = "10";

fn schemathesis() -> PathBuf {
    let python = std::env::var_os("KUBEBYON_TEST_PYTHON")
        .map(PathBuf::from)
        .expect("KUBEBYON_TEST_PYTHON names the test venv's python (scripts/test.sh sets it)");
    python.with_file_name("schemathesis")
}

async fn run_against(local: &Local, extra: &[&str]) {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/contract/schemathesis.toml");
    let output = tokio::process::Command::new(schemathesis())
        .args(["--config-file", config, "run"])
        .arg(format!("{}/api/openapi.json", local.base))
        .args(["--checks", "all", "--seed", "1", "--max-examples", EXAMPLES])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(extra)
        .env("NO_COLOR", "1")
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("schemathesis runs (scripts/test.sh installs it into the test venv)");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found answers the document does not describe:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn the_api_answers_as_its_document_says_for_the_development_identity() {
    let db = TestDb::new().await;
    let local = Local::start(&[("DATABASE_URL", &db.url)]).await;
    run_against(&local, &[]).await;
    local.stop().await;
}

#[tokio::test]
async fn the_api_answers_as_its_document_says_to_an_api_key() {
    let db = TestDb::new().await;
    // An administrator's key, so the back office's operations are reached too.
    let key = tests::development_api_key(&db.pool, "contract").await;
    let local = Local::start_with(&[], &[("DATABASE_URL", &db.url)]).await;
    // A key may revoke itself, which would end the run: schemathesis finds
    // the key's id in the list it reads. The development identity's run
    // covers the operation (a key that is not its own: 403).
    run_against(
        &local,
        &[
            "--header",
            &format!("Authorization: Bearer {key}"),
            "--exclude-name",
            "DELETE /api/console/account/api-keys/{key_id}",
        ],
    )
    .await;
    local.stop().await;
}
