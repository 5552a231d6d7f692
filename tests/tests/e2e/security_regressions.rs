//! The security regression suite: the attack requests of the platform's
//! security reviews, kept as data (`tests/security/attacks.json`: who sends
//! what, and the answer it must get), replayed in order against `local`
//! started as a process in accounts mode, behind one trusted proxy hop, with
//! a mail sink and a settings key. A finding that comes back fails the case
//! that names it.

use serde_json::{Value, json};
use tests::database::TestDb;

use crate::{harness::SETTINGS_KEY, local_process::Local};

const WEBHOOK_SECRET: &str = "whsec_regressions";

/// An API key of a new tenant (role `user`) with the address `email`.
async fn user_key(db: &TestDb, email: &str) -> String {
    let user_id: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name, role, email_verified_at)
         VALUES ($1, 'Tenant', 'user', now()) RETURNING id",
    )
    .bind(email)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    tests::api_key(&db.pool, user_id, "regressions").await
}

/// `t=<t>,v1=<HMAC-SHA256 of "t.body">` under the webhook secret.
fn stripe_signature(t: &str, body: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, WEBHOOK_SECRET.as_bytes());
    let mac = ring::hmac::sign(&key, format!("{t}.{body}").as_bytes());
    let hex: String = mac.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("t={t},v1={hex}")
}

struct Suite {
    local: Local,
    keys: Vec<(&'static str, String)>,
    places: Vec<(&'static str, String)>,
}

impl Suite {
    fn fill(&self, text: &str) -> String {
        self.places
            .iter()
            .fold(text.to_string(), |text, (name, value)| {
                text.replace(&format!("{{{name}}}"), value)
            })
    }

    async fn send(
        &self,
        actor: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let step = json!({ "as": actor, "method": method, "path": path, "body": body });
        self.request(&step).await
    }

    /// Sends one step's request: (status, body as JSON or text).
    async fn request(&self, step: &Value) -> (u16, Value) {
        let method = step["method"].as_str().unwrap();
        let path = self.fill(step["path"].as_str().unwrap());
        let source = step["source"].as_str().unwrap_or("198.51.100.1");
        let forwarded = match step["forged_source"].as_str() {
            Some(forged) => format!("{forged}, {source}"),
            None => source.to_string(),
        };
        let mut client = self
            .local
            .client
            .clone()
            .header("x-forwarded-for", forwarded);
        let actor = step["as"].as_str().unwrap();
        if let Some((_, key)) = self.keys.iter().find(|(name, _)| *name == actor) {
            client = client.bearer(key);
        } else {
            assert_eq!(actor, "anonymous", "an actor the suite knows");
        }
        let body = match &step["body"] {
            Value::Null => None,
            Value::String(text) => match text.strip_prefix("{settings: ") {
                Some(change) => Some(self.settings_with(change.trim_end_matches('}')).await),
                None => Some(self.fill(text)),
            },
            json => Some(self.fill(&json.to_string())),
        };
        if let Some(headers) = step["headers"].as_object() {
            for (name, value) in headers {
                let value = value.as_str().unwrap();
                let value = match value.strip_prefix("{stripe_signature: t=") {
                    Some(t) => stripe_signature(
                        t.trim_end_matches('}'),
                        body.as_deref().unwrap_or_default(),
                    ),
                    None => self.fill(value),
                };
                client = client.header(name, value);
            }
        }
        let reply = match body {
            Some(body) => {
                client
                    .send_bytes(method, &path, "application/json", body)
                    .await
            }
            None => client.send(method, &path, None).await,
        };
        (reply.status.as_u16(), reply.body)
    }

    /// The current system settings as a PUT body, with `field=value` changed.
    async fn settings_with(&self, change: &str) -> String {
        let (field, value) = change.split_once('=').unwrap();
        let admin = &self
            .keys
            .iter()
            .find(|(name, _)| *name == "admin")
            .unwrap()
            .1;
        let (_, mut view) = self
            .local
            .client
            .clone()
            .bearer(admin)
            .call("GET", "/api/console/admin/settings", None)
            .await;
        let object = view.as_object_mut().unwrap();
        object.remove("secrets");
        object.remove("updated_at");
        object.insert(field.trim().to_string(), json!(value.trim()));
        view.to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attacks_of_the_security_reviews_stay_refused() {
    let cases: Value = serde_json::from_str(include_str!("../../security/attacks.json"))
        .expect("tests/security/attacks.json is JSON");
    let db = TestDb::new().await;
    let mail = tests::smtp::SmtpSink::start().await;
    let admin = tests::development_api_key(&db.pool, "regressions").await;
    let owner = user_key(&db, "owner@example.com").await;
    let other = user_key(&db, "other@example.com").await;
    let mail_url = mail.url();
    let local = Local::start_with(
        &[],
        &[
            ("DATABASE_URL", &db.url),
            ("SMTP_URL", &mail_url),
            ("KUBEBYON_TRUSTED_PROXY_HOPS", "1"),
            ("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY),
        ],
    )
    .await;
    let mut suite = Suite {
        local,
        keys: vec![("admin", admin), ("owner", owner), ("other", other)],
        places: Vec::new(),
    };

    // What the attacks need: a cluster of each tenant's, and a webhook secret.
    for (actor, name, place) in [
        ("owner", "owned", "own_cluster"),
        ("other", "theirs", "other_cluster"),
    ] {
        let (status, body) = suite
            .send(
                actor,
                "POST",
                "/api/console/clusters",
                Some(
                    json!({ "name": name, "workload_cpu_limit_milli_cores": 1000,
                              "workload_memory_limit_mib": 1024 }),
                ),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        let id = body["cluster"]["id"].as_str().unwrap().to_string();
        suite.places.push((place, id));
    }
    // A 100 kB address (review 1, 10).
    suite
        .places
        .push(("huge_email", format!("{}@example.com", "a".repeat(100_000))));
    let billing = json!({
        "default_plan_id": null,
        "stripe_api_base_url": "https://api.stripe.com",
        "secrets": { "stripe_webhook_secret": WEBHOOK_SECRET },
    });
    let (status, body) = suite
        .send(
            "admin",
            "PUT",
            "/api/console/admin/billing-settings",
            Some(billing),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let mut failures = Vec::new();
    for case in cases["cases"].as_array().unwrap() {
        let finding = case["finding"].as_str().unwrap();
        for (index, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            for round in 0..step["repeat"].as_u64().unwrap_or(1) {
                let (status, body) = suite.request(step).await;
                let expect = &step["expect"];
                let code_ok = expect["code"]
                    .as_str()
                    .is_none_or(|code| body["code"] == code);
                if u64::from(status) != expect["status"].as_u64().unwrap() || !code_ok {
                    failures.push(format!(
                        "{finding}\n  step {index} (round {round}): {} {} answered {status} {body}, expected {expect}",
                        step["method"], step["path"]
                    ));
                }
            }
        }
    }
    suite.local.stop().await;
    assert!(
        failures.is_empty(),
        "attacks the platform no longer refuses:\n{}",
        failures.join("\n")
    );
}
