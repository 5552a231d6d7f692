//! The web console in real Chromium: `local` as the README runs it (a fresh
//! database, an SMTP sink, the simulator as host), and the browser journeys
//! of `functions/console/app/e2e/`, one file each, run by `@playwright/test`
//! against it: a new user in English, the same in Simplified Chinese, then
//! an administrator. Every page they visit is checked with axe-core and
//! photographed into `target/console-shots/`; a failed journey leaves its
//! trace in `target/console-results/`.
//!
//! `scripts/test.sh` installs what this needs: Debian's `chromium`, the
//! console's npm packages, and the built console embedded in `local`.

use std::{path::PathBuf, process::Stdio, time::Duration};

use tests::{database::TestDb, machine::Machine, smtp::SmtpSink};

use crate::local_process::Local;

fn app_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../functions/console/app")
}

/// Runs one journey (`e2e/<name>.spec.mjs`) in `language` with Playwright's
/// runner; its output is the test's, a failure's trace in
/// `target/console-results/<name>-<language>/`.
pub(crate) async fn journey(name: &str, language: &str, env: &[(&str, String)]) {
    let args = [name, language];
    let status = tokio::time::timeout(
        Duration::from_secs(330),
        tokio::process::Command::new("node_modules/.bin/playwright")
            .args(["test", &format!("e2e/{name}.spec.mjs")])
            .env("JOURNEY_LANGUAGE", language)
            .env("JOURNEY_RUN", format!("{name}-{language}"))
            .current_dir(app_dir())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .status(),
    )
    .await
    .unwrap_or_else(|_| panic!("the {args:?} journey finished within 5½ minutes"))
    .expect("node runs");
    assert!(
        status.success(),
        "the {args:?} journey failed (screenshots in target/console-shots, the trace in target/console-results/{name}-{language})"
    );
}

// Multi-threaded: Chromium, node, kubectl and the join script run as child
// processes while `local` serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_user_and_an_admin_do_everything_in_chromium_in_english_and_chinese() {
    assert!(
        app_dir().join("node_modules/@playwright/test").is_dir(),
        "the console's npm packages are missing: run scripts/test.sh (npm ci in functions/console/app)"
    );
    let db = TestDb::new().await;
    let smtp = SmtpSink::start().await;
    let local = Local::start_with(
        &[],
        &[
            ("DATABASE_URL", &db.url),
            ("SMTP_URL", &smtp.url()),
            ("KUBEBYON_INSECURE_COOKIES", "true"),
            ("KUBEBYON_ADMIN_EMAIL", "root@example.test"),
            // Seals the secrets the administrator sets.
            (
                "KUBEBYON_SETTINGS_KEY",
                "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
            ),
            // The tenant databases' instance is on loopback.
            ("KUBEBYON_ALLOW_PRIVATE_OUTBOUND", "true"),
            ("SYNC_NODES_INTERVAL_MS", "500"),
            ("SYNC_METRICS_INTERVAL_MS", "1000"),
        ],
    )
    .await;

    // The console is at `/`, with its policy; the API keeps its own 404s.
    let index = local.client.send("GET", "/clusters", None).await;
    assert_eq!(index.status, 200, "the console is built into local");
    assert_eq!(
        index.headers["content-security-policy"],
        console::CONTENT_SECURITY_POLICY
    );
    let page = index.body.as_str().expect("a page");
    assert!(
        page.contains("<script type=\"module\" crossorigin src=\"/assets/"),
        "{page}"
    );
    let missing = local
        .client
        .send("GET", "/api/console/nothing-here", None)
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.content_type(), "application/problem+json");

    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/console-shots");
    let common = |machine: &Machine| {
        vec![
            ("BASE_URL", local.base.clone()),
            ("MAILDIR", smtp.dir().display().to_string()),
            ("KUBECTL", "kubectl".to_string()),
            ("JOIN_SANDBOX", machine.dir().display().to_string()),
            ("SHOTS", shots.display().to_string()),
            ("DATABASE_URL", db.url.clone()),
        ]
    };
    let english = Machine::healthy("worker-en");
    journey("user", "en", &common(&english)).await;
    let chinese = Machine::healthy("worker-zh-cn");
    journey("user", "zh-CN", &common(&chinese)).await;

    // The Chinese journey's cluster, its create failed there as if the host
    // had refused it: the administrator retries it.
    let failed: (uuid::Uuid,) = sqlx::query_as(
        "SELECT id FROM clusters WHERE name = 'shop' AND status = 'failed' AND deleted_at IS NULL",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // More users than a page holds, older than every other, for the
    // back office's "more".
    sqlx::query(
        "INSERT INTO users (email, display_name, role, email_verified_at, created_at)
         SELECT 'page-' || i || '@example.test', 'Paged user ' || i, 'user', now(),
                now() - interval '30 days' - i * interval '1 minute'
         FROM generate_series(0, 119) i",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let user_email = std::fs::read_to_string(shots.join("en-user.txt")).unwrap();
    let mut env = common(&english);
    env.push(("ADMIN_EMAIL", "root@example.test".into()));
    env.push(("USER_EMAIL", user_email.trim().to_string()));
    journey("admin", "en", &env).await;
    journey("organizations", "en", &common(&english)).await;
    journey("organizations", "zh-CN", &common(&chinese)).await;

    // Tenant databases on a PostgreSQL server of the test's own, over TLS.
    let instance = crate::databases::Instance::start().await;
    std::fs::create_dir_all(&shots).unwrap();
    let ca = shots.join("instance-ca.pem");
    std::fs::write(&ca, &instance.ca_pem).unwrap();
    let mut env = common(&english);
    env.push(("ADMIN_EMAIL", "root@example.test".into()));
    env.push(("INSTANCE_PORT", instance.port.to_string()));
    env.push(("INSTANCE_CA", ca.display().to_string()));
    env.push(("INSTANCE_ADMIN_PASSWORD", "admin-secret-1".into()));
    journey("databases", "en", &env).await;
    journey("databases", "zh-CN", &env).await;

    // The retried job ran again and the cluster is ready once more.
    let status: (String,) = sqlx::query_as("SELECT status FROM clusters WHERE id = $1")
        .bind(failed.0)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(status.0, "ready");
    local.stop().await;
}
