//! Notification delivery: a cluster becoming ready reaches its owner by
//! email (a real SMTP exchange with aiosmtpd) and by a webhook that the PyPI
//! `standardwebhooks` library verifies; a failing receiver is retried with
//! the same `webhook-id` until it takes the event; opting out sends nothing;
//! a crash between sending and recording resends under the same id; two
//! copies of the schedule never send one delivery twice.

use std::sync::{Arc, Mutex};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use base64::Engine;
use queues::runtime::ScheduleContext;
use shared::{
    notifications,
    notifications::NotificationSettings,
    notifications::settings::{self, NotificationsSecretChanges},
};

use crate::harness::{SETTINGS_KEY, TestApp};

#[derive(Debug, Clone)]
struct Received {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

/// A webhook receiver that answers 500 to its first `fail` requests.
#[derive(Clone, Default)]
struct Receiver {
    received: Arc<Mutex<Vec<Received>>>,
    fail: Arc<Mutex<u32>>,
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: String) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    r.received.lock().unwrap().push(Received {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body,
    });
    let mut fail = r.fail.lock().unwrap();
    if *fail > 0 {
        *fail -= 1;
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}

impl Receiver {
    async fn start() -> (Self, String) {
        let receiver = Self::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/kubebyon", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/hooks/kubebyon", post(receive))
            .with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, url)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Verifies one received webhook with the published `standardwebhooks`
/// library; its answer is the event type, or the library's error.
fn verify(secret: &str, r: &Received) -> Result<String, String> {
    let output = std::process::Command::new(tests::moto::python())
        .args([
            "-c",
            "import json, sys\nfrom standardwebhooks import Webhook\nr = json.load(sys.stdin)\n\
             try:\n    print(Webhook(sys.argv[1]).verify(r['body'], r['headers'])['type'])\n\
             except Exception as e:\n    print(type(e).__name__, e, file=sys.stderr); sys.exit(3)",
            secret,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            let input = serde_json::json!({
                "body": r.body,
                "headers": {
                    "webhook-id": r.id, "webhook-timestamp": r.timestamp,
                    "webhook-signature": r.signature,
                },
            });
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.to_string().as_bytes())?;
            child.wait_with_output()
        })
        .expect("python with standardwebhooks (scripts/test.sh installs it)");
    if output.status.success() {
        Ok(String::from_utf8(output.stdout).unwrap().trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
    }
}

/// A platform with a host and a mail server, its outbound webhook posting to
/// a receiver signed with `secret`, and the `notify` schedule's context.
struct Setup {
    p: TestApp,
    receiver: Receiver,
    secret: String,
    ctx: ScheduleContext,
}

async fn setup() -> Setup {
    let (receiver, url) = Receiver::start().await;
    let p = TestApp::builder("worker-b")
        .host()
        .smtp()
        .env("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY)
        .env("KUBEBYON_ALLOW_PRIVATE_OUTBOUND", "true")
        .env("NOTIFY_RETRY_BASE_MS", "1")
        .env("NOTIFY_MAX_ATTEMPTS", "5")
        .build()
        .await;
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(b"0123456789abcdef0123456789abcdef")
    );
    let mut stored = settings::load(&p.db.pool).await.unwrap();
    stored.fields.outbound_webhook_url = Some(url);
    settings::save(
        &p.db.pool,
        p.state.settings.secret_box().as_ref(),
        &stored.fields,
        &NotificationsSecretChanges {
            outbound_webhook_secret: Some(Some(secret.clone())),
        },
    )
    .await
    .unwrap();
    let ctx = ScheduleContext::new(p.db.pool.clone(), p.state.settings.clone(), None, None);
    Setup {
        p,
        receiver,
        secret,
        ctx,
    }
}

async fn preferences(s: &Setup, change: impl FnOnce(&mut NotificationSettings)) {
    let user = s.p.development_user();
    let mut prefs = shared::notifications::preferences::settings(&s.p.db.pool, user)
        .await
        .unwrap();
    change(&mut prefs);
    shared::notifications::preferences::save_settings(&s.p.db.pool, user, &prefs)
        .await
        .unwrap();
}

async fn delivery(s: &Setup, channel: &str) -> (String, i32, Option<String>) {
    sqlx::query_as(
        "SELECT status, attempts, last_error FROM notification_deliveries WHERE channel = $1 ORDER BY id DESC LIMIT 1",
    )
    .bind(channel)
    .fetch_one(&s.p.db.pool)
    .await
    .unwrap()
}

/// Runs the schedule until nothing is due (retries wait 1 ms, doubling).
async fn deliver_all(s: &Setup) -> notify::NotifyReport {
    let mut total = notify::NotifyReport::default();
    for _ in 0..20 {
        let report = notify::run(&s.ctx).await.unwrap();
        if report == notify::NotifyReport::default() {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM notification_deliveries WHERE status IN ('pending', 'sending')",
            )
            .fetch_one(&s.p.db.pool)
            .await
            .unwrap();
            if open == 0 {
                break;
            }
        }
        total.fanned_out += report.fanned_out;
        total.delivered += report.delivered;
        total.failed_attempts += report.failed_attempts;
        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ready_cluster_is_mailed_and_posted_signed_and_a_failing_receiver_gets_it_once_it_answers()
 {
    let s = setup().await;
    preferences(&s, |p| p.webhook_enabled = true).await;
    *s.receiver.fail.lock().unwrap() = 3;
    let (cluster, _) = s.p.create_ready("shop", "nodeport").await;

    let report = deliver_all(&s).await;
    assert_eq!(
        (report.fanned_out, report.delivered, report.failed_attempts),
        (1, 2, 3),
        "{report:?}"
    );
    // The webhook: four attempts, one id, delivered once it answered.
    let received = s.receiver.received();
    assert_eq!(received.len(), 4);
    let outbox_id: i64 =
        sqlx::query_scalar("SELECT id FROM notification_outbox WHERE kind = 'cluster_ready'")
            .fetch_one(&s.p.db.pool)
            .await
            .unwrap();
    let id = format!("msg_kubebyon_{outbox_id}");
    assert!(received.iter().all(|r| r.id == id), "{received:?}");
    let (status, attempts, last_error) = delivery(&s, "webhook").await;
    assert_eq!(
        (status.as_str(), attempts, last_error),
        ("delivered", 4, None)
    );
    let last = received.last().unwrap();
    assert_eq!(verify(&s.secret, last), Ok("cluster.ready".into()));
    let body: serde_json::Value = serde_json::from_str(&last.body).unwrap();
    assert_eq!(body["data"]["cluster_id"].as_str(), Some(cluster.as_str()));
    assert_eq!(body["data"]["details"]["cluster_name"], "shop");
    // The verifier is real: another secret or another body fails it.
    let other = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([7u8; 32])
    );
    assert!(verify(&other, last).is_err());
    let mut tampered = last.clone();
    tampered.body = tampered.body.replace("shop", "shoq");
    assert!(verify(&s.secret, &tampered).is_err());

    // The email, once, with the same id.
    let mails: Vec<String> =
        s.p.mail()
            .messages()
            .into_iter()
            .filter(|m| m.contains("Subject: Cluster shop is ready"))
            .collect();
    assert_eq!(mails.len(), 1, "{mails:?}");
    assert!(
        mails[0].contains(&format!("Message-ID: <{id}@kubebyon>")),
        "{}",
        mails[0]
    );
    assert!(mails[0].contains("To: dev@kubebyon.local"));
    let delivered: bool = sqlx::query_scalar(
        "SELECT delivered_at IS NOT NULL FROM notification_outbox WHERE id = $1",
    )
    .bind(outbox_id)
    .fetch_one(&s.p.db.pool)
    .await
    .unwrap();
    assert!(delivered);

    // Opted out of "cluster ready": the next one sends nothing at all.
    preferences(&s, |p| p.notify_cluster_ready = false).await;
    s.p.create_ready("blog", "nodeport").await;
    let report = deliver_all(&s).await;
    assert_eq!((report.fanned_out, report.delivered), (1, 0), "{report:?}");
    assert_eq!(s.receiver.received().len(), 4);
    assert!(
        !s.p.mail()
            .messages()
            .iter()
            .any(|m| m.contains("Cluster blog"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_that_never_answers_ends_failed_and_does_not_hold_up_mail() {
    let s = setup().await;
    preferences(&s, |p| p.webhook_enabled = true).await;
    *s.receiver.fail.lock().unwrap() = 100;
    let user = s.p.development_user();
    notifications::enqueue(
        &s.p.db.pool,
        user,
        "order_paid",
        None,
        serde_json::json!({ "order_id": "o-1", "plan": "Pro" }),
    )
    .await
    .unwrap();
    deliver_all(&s).await;
    let (status, attempts, last_error) = delivery(&s, "webhook").await;
    assert_eq!((status.as_str(), attempts), ("failed", 5));
    assert_eq!(
        last_error.as_deref(),
        Some("the receiver answered HTTP 500: ")
    );
    assert_eq!(delivery(&s, "email").await.0, "delivered");
    assert!(
        s.p.mail()
            .messages()
            .iter()
            .any(|m| m.contains("Subject: Payment received: the Pro plan"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_between_sending_and_recording_resends_under_the_same_id_and_copies_never_double_send()
 {
    let s = setup().await;
    preferences(&s, |p| {
        p.webhook_enabled = true;
        p.email_enabled = false;
    })
    .await;
    let user = s.p.development_user();
    notifications::enqueue(
        &s.p.db.pool,
        user,
        "order_paid",
        None,
        serde_json::json!({ "plan": "Pro" }),
    )
    .await
    .unwrap();
    notifications::fan_out(&s.p.db.pool, 10).await.unwrap();
    // A copy claims the delivery and sends it, then dies before recording.
    let claimed = notifications::claim(&s.p.db.pool, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let stored = settings::load(&s.p.db.pool).await.unwrap();
    let signer =
        notifications::webhook::Signer::from_secret(&secrecy::SecretString::from(s.secret.clone()))
            .unwrap();
    let body = serde_json::to_vec(&claimed[0].event()).unwrap();
    notifications::webhook::send(
        &reqwest::Client::new(),
        stored.fields.outbound_webhook_url.as_deref().unwrap(),
        &signer,
        &claimed[0].message_id(),
        body,
    )
    .await
    .unwrap();
    // While its lease holds, no other run sends it.
    assert_eq!(notify::run(&s.ctx).await.unwrap().delivered, 0);
    sqlx::query(
        "UPDATE notification_deliveries SET lease_expires_at = now() - interval '1 second'",
    )
    .execute(&s.p.db.pool)
    .await
    .unwrap();
    assert_eq!(notify::run(&s.ctx).await.unwrap().delivered, 1);
    let received = s.receiver.received();
    assert_eq!(received.len(), 2);
    assert_eq!(
        received[0].id, received[1].id,
        "the receiver can tell the repeat"
    );
    let (status, attempts, _) = delivery(&s, "webhook").await;
    assert_eq!((status.as_str(), attempts), ("delivered", 2));
    // The dead copy's late record is fenced off by the attempt number.
    notifications::settle(
        &s.p.db.pool,
        &[(claimed[0].clone(), Err("late".into()))],
        notifications::Retries {
            base: std::time::Duration::from_millis(1),
            max_attempts: 5,
        },
    )
    .await
    .unwrap();
    assert_eq!(delivery(&s, "webhook").await.0, "delivered");

    // Two copies at once over 60 notifications: each sent exactly once.
    for i in 0..60 {
        notifications::enqueue(
            &s.p.db.pool,
            user,
            "order_paid",
            None,
            serde_json::json!({ "plan": format!("P{i}") }),
        )
        .await
        .unwrap();
    }
    let (a, b) = tokio::join!(notify::run(&s.ctx), notify::run(&s.ctx));
    assert_eq!(a.unwrap().delivered + b.unwrap().delivered, 60);
    let mut ids: Vec<String> = s.receiver.received()[2..]
        .iter()
        .map(|r| r.id.clone())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 60);
    assert_eq!(s.receiver.received().len(), 62);
}

#[tokio::test]
async fn the_outbound_webhook_secret_is_refused_unless_receivers_can_verify_with_it() {
    let s = setup().await;
    let (status, mut body) = s.p.call("GET", "/api/console/admin/settings", None).await;
    assert_eq!(status, axum::http::StatusCode::OK);
    let fields = body.as_object_mut().unwrap();
    fields.remove("secrets");
    fields.remove("updated_at");
    for (secret, expected) in [
        ("hunter2", axum::http::StatusCode::UNPROCESSABLE_ENTITY),
        ("whsec_AAAA", axum::http::StatusCode::UNPROCESSABLE_ENTITY),
        (s.secret.as_str(), axum::http::StatusCode::OK),
    ] {
        let mut put = body.clone();
        put["secrets"] = serde_json::json!({ "outbound_webhook_secret": secret });
        let (status, answer) =
            s.p.call("PUT", "/api/console/admin/settings", Some(put))
                .await;
        assert_eq!(status, expected, "{secret}: {answer}");
        if expected != axum::http::StatusCode::OK {
            assert_eq!(
                answer["errors"][0]["field"],
                "secrets.outbound_webhook_secret"
            );
        }
    }
}
