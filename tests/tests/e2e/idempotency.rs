//! `Idempotency-Key` on the console's POSTs, as a client that retries sends
//! it: one cluster however many retries arrive, together or after; the first
//! answer replayed; another request under the same key refused; each user's
//! keys their own, and an API key's apart from its user's session's; an
//! answer past keeping forgotten.

use axum::http::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::harness::{Client, Reply, TestApp};

/// POSTs `body` to `path` as `client`, with `key` as its `Idempotency-Key`
/// when there is one.
async fn post(client: &Client, path: &str, key: Option<&[u8]>, body: Value) -> Reply {
    let client = match key {
        Some(key) => client.clone().header("idempotency-key", key),
        None => client.clone(),
    };
    client.send("POST", path, Some(body)).await
}

/// The `Idempotency-Key` an answer echoes.
fn echoed(reply: &Reply) -> Option<String> {
    reply
        .headers
        .get("idempotency-key")
        .map(|v| v.to_str().unwrap().to_string())
}

fn cluster(name: &str) -> Value {
    json!({ "name": name, "workload_cpu_limit_milli_cores": 2000, "workload_memory_limit_mib": 4096,
            "public_access_mode": "nodeport" })
}

async fn clusters_named(base: &TestApp, name: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM clusters WHERE name = $1")
        .bind(name)
        .fetch_one(&base.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_retried_create_is_answered_again_not_done_again() {
    let base = TestApp::builder("idempotency").build().await;
    let me = base.client();
    let key = Some(&b"\"create-alpha-1\""[..]);

    let first = post(&me, "/api/console/clusters", key, cluster("alpha")).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    assert_eq!(
        echoed(&first).as_deref(),
        Some("\"create-alpha-1\""),
        "the key is echoed"
    );
    let retry = post(&me, "/api/console/clusters", key, cluster("alpha")).await;
    assert_eq!(
        (retry.status, &retry.body),
        (StatusCode::ACCEPTED, &first.body),
        "the first answer, replayed"
    );
    assert_eq!(echoed(&retry), echoed(&first));
    assert_eq!(clusters_named(&base, "alpha").await, 1);
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM cluster_jobs")
        .fetch_one(&base.db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 1, "one job enqueued");

    // The same key with another body, or on another route: refused, nothing made.
    let other = post(&me, "/api/console/clusters", key, cluster("beta")).await;
    assert_eq!(
        (other.status, other.body["code"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("idempotency_key_reused")
        ),
        "{}",
        other.body
    );
    assert_eq!(clusters_named(&base, "beta").await, 0);
    let id = first.body["cluster"]["id"].as_str().unwrap();
    let elsewhere = post(
        &me,
        &format!("/api/console/clusters/{id}/tokens"),
        key,
        json!({}),
    )
    .await;
    assert_eq!(
        elsewhere.body["code"], "idempotency_key_reused",
        "{}",
        elsewhere.body
    );

    // Keys are the user's own: another user's same key is another request.
    let other_user: Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name, role, email_verified_at)
         VALUES ('other@example.com', 'Other', 'user', now()) RETURNING id",
    )
    .fetch_one(&base.db.pool)
    .await
    .unwrap();
    let theirs = post(
        &base.client_as(other_user),
        "/api/console/clusters",
        key,
        cluster("alpha"),
    )
    .await;
    assert_eq!(theirs.status, StatusCode::ACCEPTED, "{}", theirs.body);
    assert_ne!(theirs.body["cluster"]["id"], first.body["cluster"]["id"]);

    // Past keeping, the key is free for a new request.
    sqlx::query("UPDATE idempotency_keys SET expires_at = now() - interval '1 second'")
        .execute(&base.db.pool)
        .await
        .unwrap();
    let later = post(&me, "/api/console/clusters", key, cluster("beta")).await;
    assert_eq!(later.status, StatusCode::ACCEPTED, "{}", later.body);
    assert_eq!(clusters_named(&base, "beta").await, 1);
    sqlx::query("UPDATE idempotency_keys SET expires_at = now() - interval '1 second'")
        .execute(&base.db.pool)
        .await
        .unwrap();
    assert_eq!(
        shared::http::idempotency::prune_expired(&base.db.pool)
            .await
            .unwrap(),
        2,
        "the sweep's pruning takes both users' lapsed keys"
    );
}

#[tokio::test]
async fn concurrent_retries_with_one_key_make_one_cluster() {
    let base = TestApp::builder("idempotency").build().await;
    let me = base.client();
    let key = Some(&b"burst-7"[..]);
    let answers = futures_util::future::join_all(
        (0..8).map(|_| post(&me, "/api/console/clusters", key, cluster("gamma"))),
    )
    .await;
    assert_eq!(clusters_named(&base, "gamma").await, 1);
    let made: Vec<&Reply> = answers
        .iter()
        .filter(|a| a.status == StatusCode::ACCEPTED)
        .collect();
    assert!(!made.is_empty());
    assert!(
        made.iter().all(|a| a.body == made[0].body),
        "every 202 is the one answer"
    );
    for answer in &answers {
        match answer.status {
            StatusCode::ACCEPTED => {}
            StatusCode::CONFLICT => {
                assert_eq!(
                    answer.body["code"], "idempotency_request_in_flight",
                    "{}",
                    answer.body
                )
            }
            other => panic!("{other}: {}", answer.body),
        }
    }
}

#[tokio::test]
async fn a_malformed_key_is_refused_before_anything_is_made() {
    let base = TestApp::builder("idempotency").build().await;
    let me = base.client();
    let long = "k".repeat(256);
    for bad in [&b""[..], b"\"\"", "k\u{0430}y".as_bytes(), long.as_bytes()] {
        let answer = post(&me, "/api/console/clusters", Some(bad), cluster("delta")).await;
        assert_eq!(
            (answer.status, answer.body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_idempotency_key")),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(clusters_named(&base, "delta").await, 0);
    // Without the header the route works as ever.
    let plain = post(&me, "/api/console/clusters", None, cluster("delta")).await;
    assert_eq!((plain.status, echoed(&plain)), (StatusCode::ACCEPTED, None));
}

/// The review's finding: the store kept the `kb_…` API key, the join token
/// and the kubeconfig's token in clear for 24 hours. With the settings key
/// every kept answer is sealed and a retry still gets the secret; without
/// it, an answer that issued a secret is kept without its body and a retry
/// is refused, not run again.
#[tokio::test]
async fn an_answer_that_issued_a_secret_is_kept_sealed_or_not_at_all() {
    use base64::Engine;
    for sealing in [true, false] {
        let mut builder = TestApp::builder("idempotency");
        if sealing {
            let key = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
            builder = builder.env("KUBEBYON_SETTINGS_KEY", &key);
        }
        let base = builder.build().await;
        let me = base.client();
        let created = post(&me, "/api/console/clusters", None, cluster("vault")).await;
        let id = created.body["cluster"]["id"].as_str().unwrap().to_string();
        sqlx::query(
            "UPDATE clusters SET status = 'ready', api_endpoint = 'https://vault.example:6443'
             WHERE id = $1::uuid",
        )
        .bind(&id)
        .execute(&base.db.pool)
        .await
        .unwrap();
        let path = format!("/api/console/clusters/{id}/tokens");
        let key = Some(&b"token-1"[..]);
        let first = post(&me, &path, key, json!({})).await;
        assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
        let plaintext = first.body["plaintext"].as_str().unwrap();
        let secret_half = plaintext.split_once('.').unwrap().1.as_bytes();

        let (body, sealed): (Option<Vec<u8>>, bool) =
            sqlx::query_as("SELECT response_body, response_sealed FROM idempotency_keys")
                .fetch_one(&base.db.pool)
                .await
                .unwrap();
        assert_eq!(sealed, sealing);
        assert_eq!(body.is_some(), sealing, "kept only when it can be sealed");
        assert!(
            !body
                .unwrap_or_default()
                .windows(secret_half.len())
                .any(|w| w == secret_half),
            "no secret in clear in the store (sealing: {sealing})"
        );

        // An API key of the same user (an organization's key is its
        // maker's user too) is a caller of its own: it does not get the
        // token the session was given.
        let api_key = tests::development_api_key(&base.db.pool, "replayer").await;
        let by_key = base
            .client_with(shared::http::Identity::Accounts)
            .bearer(&api_key);
        let replayed = post(&by_key, &path, key, json!({})).await;
        assert_eq!(
            (replayed.status, replayed.body["code"].as_str()),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                Some("idempotency_key_reused")
            ),
            "{}",
            replayed.body
        );
        assert!(!replayed.body.to_string().contains(plaintext));

        let retry = post(&me, &path, key, json!({})).await;
        if sealing {
            assert_eq!(
                (retry.status, &retry.body),
                (StatusCode::CREATED, &first.body)
            );
        } else {
            assert_eq!(
                (retry.status, retry.body["code"].as_str()),
                (StatusCode::CONFLICT, Some("idempotency_answer_not_kept")),
                "{}",
                retry.body
            );
        }
        let tokens: i64 = sqlx::query_scalar("SELECT count(*) FROM tokens")
            .fetch_one(&base.db.pool)
            .await
            .unwrap();
        assert_eq!(tokens, 1, "the retry made nothing (sealing: {sealing})");
        // An answer that issued nothing secret is kept as before.
        let plain = post(
            &me,
            "/api/console/clusters",
            Some(&b"c-2"[..]),
            cluster("vault-2"),
        )
        .await;
        let again = post(
            &me,
            "/api/console/clusters",
            Some(&b"c-2"[..]),
            cluster("vault-2"),
        )
        .await;
        assert_eq!((again.status, &again.body), (plain.status, &plain.body));
    }
}
