//! Accounts end to end: real PostgreSQL, a real SMTP exchange (aiosmtpd), and
//! every route of the platform behind the accounts identity.

use std::collections::HashMap;

use axum::http::{StatusCode, header};
use serde_json::{Value, json};

use crate::harness::{Builder, Client, Reply, SETTINGS_KEY, TestApp};

/// A platform with accounts and a mail server, serving the console too.
fn platform() -> Builder {
    TestApp::builder("accounts-test")
        .accounts()
        .smtp()
        .console()
}

/// Registers, reads the code from the mail, confirms: a logged-in browser.
async fn signed_up(accounts: &TestApp, email: &str, password: &str) -> Client {
    let anonymous = accounts.client().ip("198.51.100.1");
    anonymous.sign_up(accounts.mail(), email, password).await
}

/// Resets `email`'s password by the emailed code, as its owner would from `client`.
async fn reset_password(accounts: &TestApp, client: &Client, email: &str, new_password: &str) {
    let reply = client
        .send(
            "POST",
            "/api/auth/password-reset",
            Some(json!({ "email": email })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let code = accounts.mail().code_for(email).await;
    let reply = client
        .send(
            "POST",
            "/api/auth/password-reset/confirm",
            Some(json!({ "email": email, "code": code, "new_password": new_password })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.body);
}

async fn login(accounts: &TestApp, email: &str, password: &str, ip: &str) -> Reply {
    accounts
        .client()
        .ip(ip)
        .send(
            "POST",
            "/api/auth/login",
            Some(json!({ "email": email, "password": password })),
        )
        .await
}

#[tokio::test]
async fn register_by_emailed_code_then_log_in_and_out() {
    let accounts = platform().build().await;
    let browser = signed_up(&accounts, "alice@example.com", "correct horse battery").await;
    let me = browser.send("GET", "/api/auth/me", None).await;
    assert_eq!(me.status, StatusCode::OK, "{}", me.body);
    assert_eq!(
        (me.body["email"].as_str(), me.body["role"].as_str()),
        (Some("alice@example.com"), Some("user"))
    );
    assert_eq!(me.body["email_verified"], true);
    // The same for a page that may be signed out, which is never a 401.
    let session = browser.send("GET", "/api/auth/session", None).await;
    assert_eq!(session.status, StatusCode::OK, "{}", session.body);
    assert_eq!(session.body["user"], me.body);

    // The session cookie: HttpOnly, Secure, SameSite=Lax; only its hash is stored.
    let reply = login(
        &accounts,
        "alice@example.com",
        "correct horse battery",
        "198.51.100.2",
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let set_cookie: Vec<String> = reply
        .headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert!(
        set_cookie[0].starts_with("__Host-kb_session=kbs_")
            && set_cookie[0].contains("HttpOnly")
            && set_cookie[0].contains("Secure")
            && set_cookie[0].contains("SameSite=Lax"),
        "{set_cookie:?}"
    );
    let token = reply.cookie("__Host-kb_session").unwrap();
    let (stored,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM sessions WHERE token_hash = sha256(convert_to($1, 'UTF8'))",
    )
    .bind(&token)
    .fetch_one(&accounts.db.pool)
    .await
    .unwrap();
    assert_eq!(stored, 1);

    // A cookie write without the CSRF header is refused; with it, it goes through.
    let second = browser.signed_in(&reply);
    let no_csrf = second.clone().csrf_token(None);
    let refused = no_csrf
        .send(
            "POST",
            "/api/console/account/api-keys",
            Some(json!({ "name": "ci", "scope": "write", "password": "correct horse battery" })),
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    // A value planted in both the cookie and the header (cookie tossing), or
    // another session's token, is not this session's: refused too.
    for planted in [
        "planted-by-a-sibling-subdomain".to_string(),
        browser.csrf().unwrap().to_string(),
    ] {
        let tossed = second.clone().csrf_token(Some(planted));
        let refused = tossed
            .send(
                "POST",
                "/api/console/account/api-keys",
                Some(
                    json!({ "name": "ci", "scope": "write", "password": "correct horse battery" }),
                ),
            )
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    }
    let made = second
        .send(
            "POST",
            "/api/console/account/api-keys",
            Some(json!({ "name": "ci", "scope": "write", "password": "correct horse battery" })),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);

    let out = second.send("POST", "/api/auth/logout", None).await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert_eq!(
        second.send("GET", "/api/auth/me", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Signed out, or never signed in, or with a forged session cookie: no
    // one, and no 401.
    for client in [
        second.clone(),
        accounts.client(),
        accounts
            .client()
            .header("cookie", "__Host-kb_session=forged"),
    ] {
        let session = client.send("GET", "/api/auth/session", None).await;
        assert_eq!(
            (session.status, &session.body),
            (StatusCode::OK, &json!({ "user": null }))
        );
    }
    assert_eq!(
        browser.send("GET", "/api/auth/me", None).await.status,
        StatusCode::OK,
        "the other session lives on"
    );

    // Every login is in the history, failures with their reason.
    login(
        &accounts,
        "alice@example.com",
        "wrong password!!",
        "198.51.100.3",
    )
    .await;
    let history = browser
        .send("GET", "/api/console/account/logins", None)
        .await;
    let rows = history.body.as_array().unwrap();
    assert_eq!(
        (
            rows[0]["success"].as_bool(),
            rows[0]["failure_reason"].as_str(),
            rows[0]["ip"].as_str()
        ),
        (Some(false), Some("wrong password"), Some("198.51.100.3"))
    );
    assert_eq!(rows[0]["user_agent"], "kubebyon-tests/1.0");
    assert!(rows.iter().filter(|r| r["success"] == true).count() >= 2);
}

#[tokio::test]
async fn unconfirmed_accounts_cannot_log_in_and_a_code_dies_after_five_wrong_guesses() {
    let accounts = platform().build().await;
    let anonymous = accounts.client().ip("198.51.100.7");
    let reply = anonymous.send( "POST", "/api/auth/register", Some(json!({ "email": "bob@example.com", "password": "correct horse battery", "display_name": "Bob" })))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let code = accounts.mail().code_for("bob@example.com").await;
    let refused = login(
        &accounts,
        "bob@example.com",
        "correct horse battery",
        "198.51.100.7",
    )
    .await;
    assert_eq!(
        (refused.status, refused.body["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("invalid_credentials"))
    );

    let wrong = if code == "000000" { "000001" } else { "000000" };
    for _ in 0..5 {
        let reply = anonymous.send(
                "POST",
                "/api/auth/verify-email",
                Some(json!({ "email": "bob@example.com", "code": wrong, "password": "correct horse battery" })),
            )
            .await;
        assert_eq!(
            (reply.status, reply.body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_code"))
        );
    }
    let reply = anonymous.send(
            "POST",
            "/api/auth/verify-email",
            Some(json!({ "email": "bob@example.com", "code": code, "password": "correct horse battery" })),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::BAD_REQUEST,
        "the right code is dead too: {}",
        reply.body
    );
    assert!(
        reply.body["detail"]
            .as_str()
            .unwrap()
            .contains("ask for a new one")
    );

    // A new code works.
    let reply = anonymous
        .send(
            "POST",
            "/api/auth/resend-code",
            Some(json!({ "email": "bob@example.com" })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let fresh = accounts.mail().code_for("bob@example.com").await;
    let reply = anonymous.send(
            "POST",
            "/api/auth/verify-email",
            Some(json!({ "email": "bob@example.com", "code": fresh, "password": "correct horse battery" })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);

    // Validation names every bad field.
    let reply = anonymous
        .send(
            "POST",
            "/api/auth/register",
            Some(json!({ "email": "nope", "password": "short", "display_name": "" })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    let fields = crate::harness::problem_fields(&reply.body);
    assert_eq!(fields, ["email", "display_name"]);
    // A long but guessable password is refused with the reason.
    let reply = anonymous.send(
            "POST",
            "/api/auth/register",
            Some(json!({ "email": "weak@example.com", "password": "password123456", "display_name": "Weak" })),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.body
    );
    assert_eq!(reply.body["errors"][0]["field"], "password");
    assert!(
        reply.body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("too easy to guess"),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn a_password_reset_ends_every_session() {
    let accounts = platform().build().await;
    let browser = signed_up(&accounts, "carol@example.com", "correct horse battery").await;
    let reply = login(
        &accounts,
        "carol@example.com",
        "correct horse battery",
        "198.51.100.9",
    )
    .await;
    let laptop = browser.signed_in(&reply);

    let anonymous = accounts.client().ip("198.51.100.10");
    reset_password(
        &accounts,
        &anonymous,
        "carol@example.com",
        "battery staple horse",
    )
    .await;
    for client in [&browser, &laptop] {
        assert_eq!(
            client.send("GET", "/api/auth/me", None).await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        login(
            &accounts,
            "carol@example.com",
            "correct horse battery",
            "198.51.100.9"
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        login(
            &accounts,
            "carol@example.com",
            "battery staple horse",
            "198.51.100.9"
        )
        .await
        .status,
        StatusCode::OK
    );
    // An unknown address gets the same answer, and no mail.
    let before = accounts.mail().messages().len();
    let reply = anonymous
        .send(
            "POST",
            "/api/auth/password-reset",
            Some(json!({ "email": "nobody@example.com" })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    assert_eq!(accounts.mail().messages().len(), before);
}

#[tokio::test]
async fn api_keys_authenticate_until_revoked_and_disabled_users_lose_access_at_once() {
    let accounts = platform().build().await;
    let browser = signed_up(&accounts, "dave@example.com", "correct horse battery").await;
    let made = browser
        .send(
            "POST",
            "/api/console/account/api-keys",
            Some(
                json!({ "name": "laptop", "scope": "write", "password": "correct horse battery" }),
            ),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    let key = made.body["key"].as_str().unwrap().to_string();
    assert!(key.starts_with(made.body["api_key"]["prefix"].as_str().unwrap()));
    let cli = accounts.client().ip("198.51.100.20").bearer(&key);
    let clusters = cli.send("GET", "/api/console/clusters", None).await;
    assert_eq!(clusters.status, StatusCode::OK, "{}", clusters.body);
    let listed = browser
        .send("GET", "/api/console/account/api-keys", None)
        .await;
    assert!(
        !listed.body.to_string().contains(&key),
        "the key is shown once"
    );
    assert!(
        listed.body[0]["last_used_at"].is_string(),
        "{}",
        listed.body
    );

    let key_id = made.body["api_key"]["id"].as_str().unwrap();
    let revoked = browser
        .send(
            "DELETE",
            &format!("/api/console/account/api-keys/{key_id}"),
            None,
        )
        .await;
    assert_eq!(revoked.status, StatusCode::OK);
    assert_eq!(
        cli.send("GET", "/api/console/clusters", None).await.status,
        StatusCode::UNAUTHORIZED
    );

    // Another key, then the account is disabled: the session and the key stop at once.
    let made = browser
        .send(
            "POST",
            "/api/console/account/api-keys",
            Some(json!({ "name": "ci", "scope": "write", "password": "correct horse battery" })),
        )
        .await;
    let cli = accounts
        .client()
        .ip("198.51.100.20")
        .bearer(made.body["key"].as_str().unwrap());
    sqlx::query("UPDATE users SET status = 'disabled' WHERE email = 'dave@example.com'")
        .execute(&accounts.db.pool)
        .await
        .unwrap();
    assert_eq!(
        browser.send("GET", "/api/auth/me", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        cli.send("GET", "/api/console/clusters", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        login(
            &accounts,
            "dave@example.com",
            "correct horse battery",
            "198.51.100.21"
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );

    // Unauthenticated console routes are 401, admin routes 403 for a user.
    let anonymous = accounts.client().ip("198.51.100.22");
    for path in [
        "/api/console/clusters",
        "/api/console/account/api-keys",
        "/api/console/node-events?cluster_id=00000000-0000-0000-0000-000000000000",
    ] {
        assert_eq!(
            anonymous.send("GET", path, None).await.status,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
    let erin = signed_up(&accounts, "erin@example.com", "correct horse battery").await;
    assert_eq!(
        erin.send("GET", "/api/console/admin/cluster-jobs", None)
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    // The admin named by KUBEBYON_ADMIN_EMAIL is one once confirmed.
    let boss = signed_up(&accounts, "boss@example.com", "correct horse battery").await;
    assert_eq!(
        boss.send("GET", "/api/console/admin/cluster-jobs", None)
            .await
            .status,
        StatusCode::OK
    );
    // Each user sees their own activity.
    let activity = erin
        .send("GET", "/api/console/account/activity", None)
        .await;
    let actions: Vec<&str> = activity
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["user.verify_email", "user.register"]);
}

#[tokio::test]
async fn login_brute_force_is_answered_429_with_retry_after() {
    let accounts = platform().build().await;
    signed_up(&accounts, "frank@example.com", "correct horse battery").await;
    let guess = |ip: String| {
        let accounts = &accounts;
        async move { login(accounts, "frank@example.com", "guess guess guess", &ip).await }
    };
    // One address guessing: its own bucket fills (10 failures per 15 minutes).
    let mut statuses = Vec::new();
    for _ in 0..12 {
        let reply = guess("203.0.113.1".into()).await;
        statuses.push(reply.status);
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            let retry: u64 = reply.headers[header::RETRY_AFTER]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=900).contains(&retry), "{retry}");
            assert_eq!(reply.body["code"], "rate_limited");
        }
    }
    assert_eq!(statuses[..10], [StatusCode::UNAUTHORIZED; 10]);
    assert_eq!(statuses[10..], [StatusCode::TOO_MANY_REQUESTS; 2]);
    // The owner, elsewhere, is not locked out by it.
    let reply = login(
        &accounts,
        "frank@example.com",
        "correct horse battery",
        "198.51.100.77",
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    // A look-alike of the address is no other spelling of the same account:
    // it is refused as an address, and has no bucket to start afresh in.
    let reply = login(
        &accounts,
        "frİnk@example.com",
        "guess guess guess",
        "203.0.113.1",
    )
    .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.body
    );
    // Guessing spread over many addresses meets the account's wider net
    // (50 failures per 15 minutes), whatever address comes next.
    for i in 0..40 {
        let reply = guess(format!("203.0.113.{}", 10 + i / 4)).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    assert_eq!(
        guess("203.0.113.200".into()).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn no_password_token_key_or_code_reaches_the_logs() {
    let (captured, _guard) = tests::logs::capture();
    let accounts = platform().build().await;
    let password = "correct horse battery";
    let browser = signed_up(&accounts, "grace@example.com", password).await;
    let made = browser
        .send(
            "POST",
            "/api/console/account/api-keys",
            Some(json!({ "name": "ci", "scope": "write", "password": "correct horse battery" })),
        )
        .await;
    let key = made.body["key"].as_str().unwrap().to_string();
    let cli = accounts.client().ip("198.51.100.30").bearer(&key);
    assert_eq!(
        cli.send("GET", "/api/console/clusters", None).await.status,
        StatusCode::OK
    );
    let wrong = login(
        &accounts,
        "grace@example.com",
        "a wrong password here",
        "198.51.100.31",
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let anonymous = accounts.client().ip("198.51.100.32");
    anonymous
        .send(
            "POST",
            "/api/auth/password-reset",
            Some(json!({ "email": "grace@example.com" })),
        )
        .await;
    let code = accounts.mail().code_for("grace@example.com").await;
    let new_password = "battery staple horse";
    let reply = anonymous
        .send(
            "POST",
            "/api/auth/password-reset/confirm",
            Some(
                json!({ "email": "grace@example.com", "code": code, "new_password": new_password }),
            ),
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);

    let logs = captured.text();
    assert!(
        logs.contains("/api/auth/login"),
        "the requests were logged ({} bytes)",
        logs.len()
    );
    for (what, secret) in [
        ("password", password.to_string()),
        ("wrong password", "a wrong password here".to_string()),
        ("new password", new_password.to_string()),
        ("session token", browser.session().unwrap().to_string()),
        ("CSRF token", browser.csrf().unwrap().to_string()),
        ("API key", key),
        ("mail body with the code", format!("is {code}")),
    ] {
        assert!(!logs.contains(&secret), "the {what} is in the logs");
    }
}

#[tokio::test]
async fn admins_disable_promote_and_delete_users() {
    let accounts = platform().build().await;
    let boss = signed_up(&accounts, "boss@example.com", "correct horse battery").await;
    let erin = signed_up(&accounts, "erin@example.com", "correct horse battery").await;
    let me = erin.send("GET", "/api/auth/me", None).await;
    let erin_id = me.body["id"].as_str().unwrap().to_string();
    let boss_id = boss.send("GET", "/api/auth/me", None).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();

    let found = boss
        .send("GET", "/api/console/admin/users?q=erin", None)
        .await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.body);
    assert_eq!(found.body.as_array().unwrap().len(), 1);
    assert_eq!(found.body[0]["email"], "erin@example.com");

    // Pages, newest first: a page of one, then the users created before it,
    // without repeating it; a filter that matches the admin alone is one row.
    let first = boss
        .send("GET", "/api/console/admin/users?limit=1", None)
        .await;
    assert_eq!(first.body[0]["email"], "erin@example.com", "{}", first.body);
    let before = first.body[0]["created_at"].as_str().unwrap();
    let next = boss
        .send(
            "GET",
            &format!(
                "/api/console/admin/users?limit=1&before={}",
                url::form_urlencoded::byte_serialize(before.as_bytes()).collect::<String>()
            ),
            None,
        )
        .await;
    assert_eq!(next.status, StatusCode::OK, "{}", next.body);
    assert_eq!(next.body[0]["email"], "boss@example.com", "{}", next.body);
    let admins = boss
        .send("GET", "/api/console/admin/users?role=admin", None)
        .await;
    assert_eq!(admins.body.as_array().unwrap().len(), 1, "{}", admins.body);
    assert_eq!(admins.body[0]["email"], "boss@example.com");

    // Two users created at the same instant: the cursor's id lists the
    // second after the first instead of skipping it (the instant alone
    // means "created before it").
    sqlx::query("UPDATE users SET created_at = '2026-12-01T00:00:00Z'")
        .execute(&accounts.db.pool)
        .await
        .unwrap();
    let first = boss
        .send("GET", "/api/console/admin/users?limit=1", None)
        .await;
    let (at, id) = (
        first.body[0]["created_at"].as_str().unwrap(),
        first.body[0]["id"].as_str().unwrap(),
    );
    let at = url::form_urlencoded::byte_serialize(at.as_bytes()).collect::<String>();
    let next = boss
        .send(
            "GET",
            &format!("/api/console/admin/users?limit=1&before={at}&before_id={id}"),
            None,
        )
        .await;
    assert_eq!(next.status, StatusCode::OK, "{}", next.body);
    assert_eq!(next.body.as_array().unwrap().len(), 1, "{}", next.body);
    assert_ne!(next.body[0]["id"], first.body[0]["id"]);
    let skipped = boss
        .send(
            "GET",
            &format!("/api/console/admin/users?before={at}"),
            None,
        )
        .await;
    assert_eq!(
        skipped.body.as_array().unwrap().len(),
        0,
        "{}",
        skipped.body
    );
    let stray = boss
        .send(
            "GET",
            &format!("/api/console/admin/users?before_id={id}"),
            None,
        )
        .await;
    assert_eq!(
        (stray.status, stray.body["errors"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("before_id"))
    );

    let changed = boss
        .send(
            "PATCH",
            &format!("/api/console/admin/users/{erin_id}"),
            Some(json!({ "status": "disabled" })),
        )
        .await;
    assert_eq!(
        (changed.status, changed.body["status"].as_str()),
        (StatusCode::OK, Some("disabled"))
    );
    assert_eq!(
        erin.send("GET", "/api/auth/me", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    let disabled = boss
        .send("GET", "/api/console/admin/users?status=disabled", None)
        .await;
    assert_eq!(
        disabled.body.as_array().unwrap().len(),
        1,
        "{}",
        disabled.body
    );
    assert_eq!(disabled.body[0]["email"], "erin@example.com");
    assert_eq!(
        login(
            &accounts,
            "erin@example.com",
            "correct horse battery",
            "198.51.100.40"
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );
    let changed = boss
        .send(
            "PATCH",
            &format!("/api/console/admin/users/{erin_id}"),
            Some(json!({ "status": "active", "role": "admin" })),
        )
        .await;
    assert_eq!(
        (
            changed.body["status"].as_str(),
            changed.body["role"].as_str()
        ),
        (Some("active"), Some("admin"))
    );
    let erin = erin.signed_in(
        &login(
            &accounts,
            "erin@example.com",
            "correct horse battery",
            "198.51.100.40",
        )
        .await,
    );
    assert_eq!(
        erin.send("GET", "/api/console/admin/users", None)
            .await
            .status,
        StatusCode::OK
    );
    let refused = boss
        .send(
            "PATCH",
            &format!("/api/console/admin/users/{boss_id}"),
            Some(json!({ "role": "user" })),
        )
        .await;
    assert_eq!(
        (refused.status, refused.body["code"].as_str()),
        (StatusCode::CONFLICT, Some("cannot_change_self"))
    );

    // A user with a cluster cannot be deleted; one without can, and is gone.
    let made = erin.send( "POST", "/api/console/clusters", Some(json!({ "name": "keep", "workload_cpu_limit_milli_cores": 1000, "workload_memory_limit_mib": 1024 })))
        .await;
    assert_eq!(made.status, StatusCode::ACCEPTED, "{}", made.body);
    let refused = boss
        .send(
            "DELETE",
            &format!("/api/console/admin/users/{erin_id}"),
            None,
        )
        .await;
    assert_eq!(
        (refused.status, refused.body["code"].as_str()),
        (StatusCode::CONFLICT, Some("user_has_clusters"))
    );
    let frank = signed_up(&accounts, "frank@example.com", "correct horse battery").await;
    let key = frank
        .send(
            "POST",
            "/api/console/account/api-keys",
            Some(json!({ "name": "k", "scope": "write", "password": "correct horse battery" })),
        )
        .await
        .body["key"]
        .as_str()
        .unwrap()
        .to_string();
    let frank_id = frank.send("GET", "/api/auth/me", None).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let deleted = boss
        .send(
            "DELETE",
            &format!("/api/console/admin/users/{frank_id}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.body);
    let cli = accounts.client().ip("198.51.100.41").bearer(&key);
    assert_eq!(
        cli.send("GET", "/api/console/clusters", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        login(
            &accounts,
            "frank@example.com",
            "correct horse battery",
            "198.51.100.41"
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );
    let all = boss.send("GET", "/api/console/admin/users", None).await;
    assert!(!all.body.to_string().contains("frank@example.com"));

    // Admin actions are in everyone's audit stream.
    let audit = boss
        .send(
            "GET",
            &format!("/api/console/admin/audit-events?actor_user_id={boss_id}"),
            None,
        )
        .await;
    let actions: Vec<&str> = audit
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        &actions[..4],
        [
            "admin.user.delete",
            "admin.user.update",
            "admin.user.update",
            "user.verify_email"
        ]
    );
}

fn settings_body(sink_port: u16) -> Value {
    json!({
        "public_base_url": "https://kubebyon.example.com", "join_base_url": null,
        "managed_workload_ingress_base_domain": null, "managed_workload_ingress_dns_provider": null,
        "managed_workload_ingress_dns_zone_id": null, "managed_workload_ingress_dns_endpoint": null,
        "managed_workload_ingress_dns_access_key_id": null, "managed_workload_ingress_dns_record_ttl": 300,
        "default_cluster_public_access_mode": "loadbalancer", "github_oauth_client_id": "gh-client",
        "google_oauth_client_id": null, "captcha_enabled": false, "captcha_verify_url": null,
        "captcha_site_key": null, "smtp_host": "127.0.0.1", "smtp_port": sink_port, "smtp_username": null,
        "smtp_from": "KubeBYON <robot@kubebyon.example.com>", "smtp_tls": "none", "outbound_webhook_url": null,
    })
}

#[tokio::test]
async fn system_settings_seal_their_secrets_and_drive_the_mail() {
    // The environment's SMTP_URL points nowhere: mail can only go through the settings.
    let accounts = platform()
        .env(
            "SMTP_URL",
            &format!("smtp://127.0.0.1:{}", tests::free_port()),
        )
        .env("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY)
        .build()
        .await;
    let mut body = settings_body(accounts.mail().port);
    let anonymous = accounts.client().ip("198.51.100.50");
    // Nobody can confirm an account before the admin sets SMTP up; so seed the admin.
    sqlx::query(
        "INSERT INTO users (email, display_name, password_hash, role, email_verified_at) VALUES ('boss@example.com', 'Boss', $1, 'admin', now())",
    )
    .bind(shared::accounts::auth::hash_password("correct horse battery".into()).await.unwrap())
    .execute(&accounts.db.pool)
    .await
    .unwrap();
    let boss = anonymous.signed_in(
        &login(
            &accounts,
            "boss@example.com",
            "correct horse battery",
            "198.51.100.50",
        )
        .await,
    );
    body["secrets"] =
        json!({ "github_oauth_client_secret": "gh-secret-123456", "smtp_password": null });
    let saved = boss
        .send("PUT", "/api/console/admin/settings", Some(body.clone()))
        .await;
    assert_eq!(saved.status, StatusCode::OK, "{}", saved.body);
    assert_eq!(saved.body["secrets"]["github_oauth_client_secret"], true);
    assert_eq!(saved.body["secrets"]["smtp_password"], false);
    assert_eq!(saved.body["github_oauth_client_id"], "gh-client");
    let read = boss.send("GET", "/api/console/admin/settings", None).await;
    assert!(!read.body.to_string().contains("gh-secret-123456"));
    let (sealed,): (Vec<u8>,) =
        sqlx::query_as("SELECT github_oauth_client_secret_encrypted FROM system_settings")
            .fetch_one(&accounts.db.pool)
            .await
            .unwrap();
    assert!(
        !sealed.windows(16).any(|w| w == b"gh-secret-123456"),
        "sealed at rest"
    );
    let audit = boss
        .send("GET", "/api/console/admin/audit-events", None)
        .await;
    assert!(
        audit
            .body
            .to_string()
            .contains("github_oauth_client_secret")
    );
    assert!(!audit.body.to_string().contains("gh-secret-123456"));

    // Absent secrets are kept.
    body["secrets"] = json!({});
    let saved = boss
        .send("PUT", "/api/console/admin/settings", Some(body.clone()))
        .await;
    assert_eq!(saved.body["secrets"]["github_oauth_client_secret"], true);

    // Mail now goes through the settings' SMTP server, from its sender.
    let reply = anonymous.send( "POST", "/api/auth/register", Some(json!({ "email": "henry@example.com", "password": "correct horse battery", "display_name": "Henry" })))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    accounts.mail().code_for("henry@example.com").await;
    assert!(
        accounts
            .mail()
            .messages()
            .iter()
            .any(|m| m.contains("robot@kubebyon.example.com"))
    );

    // Bad input is named; captcha needs its URL and secret.
    body["smtp_tls"] = json!("sometimes");
    body["captcha_enabled"] = json!(true);
    let refused = boss
        .send("PUT", "/api/console/admin/settings", Some(body))
        .await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    let fields = crate::harness::problem_fields(&refused.body);
    assert_eq!(fields, ["smtp_tls", "captcha_enabled"]);
}

#[tokio::test]
async fn secrets_cannot_be_stored_without_the_settings_key() {
    let accounts = platform().build().await;
    let boss = signed_up(&accounts, "boss@example.com", "correct horse battery").await;
    let mut body = settings_body(accounts.mail().port);
    body["secrets"] = json!({ "captcha_secret": "s3cret" });
    let refused = boss
        .send("PUT", "/api/console/admin/settings", Some(body))
        .await;
    assert_eq!(
        (refused.status, refused.body["code"].as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("settings_key_missing")
        )
    );
}

/// The platform with GitHub and Google pointed at one loopback provider.
async fn with_oauth() -> (TestApp, tests::oauth::OAuthProvider, Client) {
    let provider = tests::oauth::OAuthProvider::start("kb-client", "kb-client-secret").await;
    let url = provider.url.clone();
    let accounts = [
        ("KUBEBYON_GITHUB_AUTHORIZE_URL", "/authorize"),
        ("KUBEBYON_GITHUB_TOKEN_URL", "/token"),
        ("KUBEBYON_GITHUB_API_URL", ""),
        ("KUBEBYON_GOOGLE_AUTHORIZE_URL", "/authorize"),
        ("KUBEBYON_GOOGLE_TOKEN_URL", "/token"),
        ("KUBEBYON_GOOGLE_USERINFO_URL", "/userinfo"),
    ]
    .into_iter()
    .fold(
        platform()
            .env("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY)
            .env("KUBEBYON_PUBLIC_BASE_URL", "https://kubebyon.example.com"),
        |builder, (name, path)| builder.env(name, &format!("{url}{path}")),
    )
    .build()
    .await;
    let boss = signed_up(&accounts, "boss@example.com", "correct horse battery").await;
    let mut body = settings_body(accounts.mail().port);
    body["github_oauth_client_id"] = json!("kb-client");
    body["google_oauth_client_id"] = json!("kb-client");
    body["secrets"] = json!({ "github_oauth_client_secret": "kb-client-secret", "google_oauth_client_secret": "kb-client-secret" });
    let saved = boss
        .send("PUT", "/api/console/admin/settings", Some(body))
        .await;
    assert_eq!(saved.status, StatusCode::OK, "{}", saved.body);
    (accounts, provider, boss)
}

/// A browser going through the provider: our start, the provider's consent,
/// and the callback as the provider's redirect lands on it. `tamper` may
/// change the login cookie before the callback.
async fn oauth_login(
    accounts: &TestApp,
    provider: &str,
    tamper: impl FnOnce(String) -> String,
) -> Reply {
    oauth_login_returning(accounts, provider, "/clusters", tamper).await
}

/// An OAuth login started with `return_to` (as it appears in the query string).
async fn oauth_login_returning(
    accounts: &TestApp,
    provider: &str,
    return_to: &str,
    tamper: impl FnOnce(String) -> String,
) -> Reply {
    let browser = accounts.client().ip("198.51.100.60");
    let started = browser
        .send(
            "GET",
            &format!("/api/auth/oauth/{provider}/start?return_to={return_to}"),
            None,
        )
        .await;
    assert_eq!(started.status, StatusCode::SEE_OTHER, "{}", started.body);
    let cookie = started.cookie("kb_oauth").expect("the login cookie");
    let location = started.headers[header::LOCATION]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        location.contains("code_challenge_method=S256") && location.contains("state="),
        "{location}"
    );
    let consent = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(&location)
        .send()
        .await
        .unwrap();
    assert_eq!(consent.status().as_u16(), 302);
    let back = consent.headers()["location"].to_str().unwrap().to_string();
    let path = back
        .strip_prefix("https://kubebyon.example.com")
        .expect("the redirect URI is the platform's callback");
    browser
        .header("cookie", format!("kb_oauth={}", tamper(cookie)))
        .send("GET", path, None)
        .await
}

fn person(subject: &str, email: &str, verified: bool) -> tests::oauth::Person {
    tests::oauth::Person {
        subject: subject.into(),
        email: email.into(),
        email_verified: verified,
        name: "Octo Cat".into(),
    }
}

#[tokio::test]
async fn oauth_logs_in_new_and_linked_accounts_through_state_and_pkce() {
    let (accounts, provider, _boss) = with_oauth().await;

    // A new account, made by GitHub.
    provider.log_in_as(person("4242", "octo@example.com", true));
    let reply = oauth_login(&accounts, "github", |c| c).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    assert_eq!(reply.headers[header::LOCATION], "/clusters");
    let octo = (accounts.client().ip("198.51.100.60")).signed_in(&reply);
    let me = octo.send("GET", "/api/auth/me", None).await;
    assert_eq!(
        (me.body["email"].as_str(), me.body["has_password"].as_bool()),
        (Some("octo@example.com"), Some(false))
    );
    // Again: the same account, through the link.
    let again = oauth_login(&accounts, "github", |c| c).await;
    let again = octo.signed_in(&again);
    assert_eq!(
        again.send("GET", "/api/auth/me", None).await.body["id"],
        me.body["id"]
    );

    // An existing password account is linked through Google's verified email.
    let alice = signed_up(&accounts, "alice@example.com", "correct horse battery").await;
    let alice_id = alice.send("GET", "/api/auth/me", None).await.body["id"].clone();
    provider.log_in_as(person("google-sub-1", "alice@example.com", true));
    let reply = oauth_login(&accounts, "google", |c| c).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let linked = alice.signed_in(&reply);
    assert_eq!(
        linked.send("GET", "/api/auth/me", None).await.body["id"],
        alice_id
    );
    let history = alice.send("GET", "/api/console/account/logins", None).await;
    assert_eq!(history.body[0]["method"], "google");

    // An unverified address links to nothing.
    signed_up(&accounts, "bob@example.com", "correct horse battery").await;
    provider.log_in_as(person("google-sub-2", "bob@example.com", false));
    let reply = oauth_login(&accounts, "google", |c| c).await;
    assert_eq!(
        (reply.status, reply.body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("oauth_email_unverified"))
    );
    let (links,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM external_identities WHERE subject = 'google-sub-2'")
            .fetch_one(&accounts.db.pool)
            .await
            .unwrap();
    assert_eq!(links, 0);
}

#[tokio::test]
async fn oauth_refuses_a_foreign_state_and_a_wrong_pkce_verifier() {
    use base64::Engine;
    let (accounts, provider, _boss) = with_oauth().await;
    provider.log_in_as(person("777", "mallory@example.com", true));
    let decode = |c: &str| -> Value {
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .unwrap(),
        )
        .unwrap()
    };
    let encode = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());

    // The callback arrives with another login's state.
    let reply = oauth_login(&accounts, "github", |c| {
        let mut pending = decode(&c);
        pending["state"] = json!("someone-elses-state");
        encode(&pending)
    })
    .await;
    assert_eq!(
        (reply.status, reply.body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("oauth_state_mismatch"))
    );
    // No cookie at all.
    let reply = oauth_login(&accounts, "github", |_| String::new()).await;
    assert_eq!(reply.body["code"], "oauth_state_mismatch");

    // The code is exchanged with the wrong PKCE verifier: the provider refuses it.
    let reply = oauth_login(&accounts, "github", |c| {
        let mut pending = decode(&c);
        pending["verifier"] = json!("not-the-verifier-that-made-the-challenge-0000000000");
        encode(&pending)
    })
    .await;
    assert_eq!(
        (reply.status, reply.body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("oauth_refused")),
        "{}",
        reply.body
    );
    assert!(
        reply.body["detail"]
            .as_str()
            .unwrap()
            .contains("invalid_grant")
    );
    let (users,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM users WHERE email = 'mallory@example.com'")
            .fetch_one(&accounts.db.pool)
            .await
            .unwrap();
    assert_eq!(users, 0, "no account came of it");
}

/// A captcha provider's verify endpoint: solved when the answer is `human`.
async fn captcha_provider() -> String {
    use axum::{Form, routing::post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/siteverify", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/siteverify",
        post(|Form(form): Form<HashMap<String, String>>| async move {
            let solved = form.get("secret").map(String::as_str) == Some("captcha-secret")
                && form.get("response").map(String::as_str) == Some("human");
            axum::Json(json!({ "success": solved }))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn an_enabled_captcha_guards_register_login_and_codes() {
    let accounts = platform()
        .env("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY)
        // The captcha provider is a loopback server over plain HTTP.
        .env("KUBEBYON_ALLOW_PRIVATE_OUTBOUND", "true")
        .build()
        .await;
    let boss = signed_up(&accounts, "boss@example.com", "correct horse battery").await;
    let mut body = settings_body(accounts.mail().port);
    body["smtp_host"] = Value::Null;
    body["captcha_enabled"] = json!(true);
    body["captcha_verify_url"] = json!(captcha_provider().await);
    body["secrets"] = json!({ "captcha_secret": "captcha-secret" });
    let saved = boss
        .send("PUT", "/api/console/admin/settings", Some(body))
        .await;
    assert_eq!(saved.status, StatusCode::OK, "{}", saved.body);

    let anonymous = accounts.client().ip("198.51.100.70");
    let register = |token: Option<&str>| {
        let mut body = json!({ "email": "ivy@example.com", "password": "correct horse battery", "display_name": "Ivy" });
        if let Some(token) = token {
            body["captcha_token"] = json!(token);
        }
        anonymous.send("POST", "/api/auth/register", Some(body))
    };
    for token in [None, Some("robot")] {
        let reply = register(token).await;
        assert_eq!(
            (reply.status, reply.body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("captcha_failed")),
            "{token:?}"
        );
    }
    assert_eq!(register(Some("human")).await.status, StatusCode::ACCEPTED);
    let login = |token: Option<&str>| {
        let mut body = json!({ "email": "boss@example.com", "password": "correct horse battery" });
        if let Some(token) = token {
            body["captcha_token"] = json!(token);
        }
        anonymous.send("POST", "/api/auth/login", Some(body))
    };
    assert_eq!(login(None).await.status, StatusCode::BAD_REQUEST);
    assert_eq!(login(Some("human")).await.status, StatusCode::OK);
    let reset = anonymous
        .send(
            "POST",
            "/api/auth/password-reset",
            Some(json!({ "email": "boss@example.com" })),
        )
        .await;
    assert_eq!(reset.body["code"], "captcha_failed");
}

/// The envelope recipients of every message the sink holds.
fn recipients(accounts: &TestApp) -> Vec<String> {
    accounts
        .mail()
        .messages()
        .iter()
        .flat_map(|m| {
            m.lines()
                .filter_map(|l| l.strip_prefix("X-RcptTo: "))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test]
async fn a_reset_for_a_look_alike_address_reaches_neither_the_attacker_nor_the_account() {
    let accounts = platform().build().await;
    signed_up(&accounts, "victim@gmail.com", "correct horse battery").await;
    let attacker = accounts.client().ip("203.0.113.66");
    let before = recipients(&accounts);
    assert_eq!(before, ["victim@gmail.com"], "the sign-up code only");
    // PostgreSQL's lower() maps U+0130 to 'i': 'gmaİl.com' once matched 'gmail.com'.
    for lookalike in ["victim@gmaİl.com", "victim@GMAİL.COM"] {
        let reply = attacker
            .send(
                "POST",
                "/api/auth/password-reset",
                Some(json!({ "email": lookalike })),
            )
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
        let reply = attacker.send(
                "POST",
                "/api/auth/password-reset/confirm",
                Some(json!({ "email": lookalike, "code": "123456", "new_password": "attacker owns this" })),
            )
            .await;
        assert_eq!(reply.body["code"], "invalid_code", "{}", reply.body);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(recipients(&accounts), before, "no code went anywhere");
    // The victim's password still opens the account; the attacker's does not.
    assert_eq!(
        login(
            &accounts,
            "victim@gmail.com",
            "correct horse battery",
            "198.51.100.5"
        )
        .await
        .status,
        StatusCode::OK
    );
    assert_eq!(
        login(
            &accounts,
            "victim@gmail.com",
            "attacker owns this",
            "198.51.100.5"
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );
    // The owner's own reset, typed in any case, mails the stored address only.
    let reply = attacker
        .send(
            "POST",
            "/api/auth/password-reset",
            Some(json!({ "email": " Victim@GMAIL.com " })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    accounts.mail().code_for("victim@gmail.com").await;
    assert_eq!(
        recipients(&accounts),
        ["victim@gmail.com", "victim@gmail.com"]
    );
}

#[tokio::test]
async fn addresses_that_are_not_one_plain_mailbox_are_refused_before_anything_is_sent() {
    let accounts = platform().build().await;
    let client = accounts.client().ip("203.0.113.67");
    for email in [
        "x<sink2@example.org>",
        "\"sink2@example.org\"@example.net",
        "sink2@example.org, other@example.org",
        "sink2@example.org\r\nBcc: other@example.org",
        "vİctim@gmail.com",
    ] {
        let reply = client.send(
                "POST",
                "/api/auth/register",
                Some(json!({ "email": email, "password": "correct horse battery", "display_name": "X" })),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{email:?}: {}",
            reply.body
        );
        assert_eq!(reply.body["errors"][0]["field"], "email");
    }
    // A 100 kB address is a bad address, not a server error.
    let huge = format!("{}@example.org", "a".repeat(100_000));
    for path in [
        "/api/auth/login",
        "/api/auth/password-reset",
        "/api/auth/register",
    ] {
        let reply = client.send(
                "POST",
                path,
                Some(json!({ "email": huge, "password": "correct horse battery", "display_name": "X" })),
            )
            .await;
        assert!(
            reply.status == StatusCode::UNPROCESSABLE_ENTITY
                || reply.status == StatusCode::BAD_REQUEST,
            "{path}: {} {}",
            reply.status,
            reply.body
        );
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        recipients(&accounts).is_empty(),
        "{:?}",
        recipients(&accounts)
    );
    let (users,): (i64,) = sqlx::query_as("SELECT count(*) FROM users")
        .fetch_one(&accounts.db.pool)
        .await
        .unwrap();
    assert_eq!(users, 0);
}

async fn register_dana(client: &Client, password: &str) -> Reply {
    let body = json!({ "email": "dana@example.com", "password": password, "display_name": "Dana" });
    client.send("POST", "/api/auth/register", Some(body)).await
}

async fn verify_dana(client: &Client, code: &str, password: &str) -> Reply {
    let body = json!({ "email": "dana@example.com", "code": code, "password": password });
    client
        .send("POST", "/api/auth/verify-email", Some(body))
        .await
}

#[tokio::test]
async fn a_second_registration_cannot_ride_on_the_owners_code() {
    let accounts = platform().build().await;
    let owner = accounts.client().ip("198.51.100.40");
    let attacker = accounts.client().ip("203.0.113.40");
    assert_eq!(
        register_dana(&owner, "owner's own password").await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        register_dana(&attacker, "attacker's password").await.status,
        StatusCode::ACCEPTED
    );
    // The owner's mailbox holds the newest code; with the owner's password it does not confirm the attacker's.
    let code = accounts.mail().code_for("dana@example.com").await;
    let reply = verify_dana(&owner, &code, "owner's own password").await;
    assert_eq!(
        (reply.status, reply.body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_code"))
    );
    // Nor does anything the attacker can send without the code.
    let reply = verify_dana(&attacker, "000000", "attacker's password").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    // Before confirmation a right password and a wrong one get the same answer.
    let right = login(
        &accounts,
        "dana@example.com",
        "attacker's password",
        "203.0.113.40",
    )
    .await;
    let wrong = login(
        &accounts,
        "dana@example.com",
        "not the password",
        "203.0.113.40",
    )
    .await;
    assert_eq!((right.status, &right.body), (wrong.status, &wrong.body));
    // The owner registers again and confirms with their password.
    assert_eq!(
        register_dana(&owner, "owner's own password").await.status,
        StatusCode::ACCEPTED
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let code = accounts.mail().code_for("dana@example.com").await;
    let reply = verify_dana(&owner, &code, "owner's own password").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(
        login(
            &accounts,
            "dana@example.com",
            "attacker's password",
            "203.0.113.40"
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        login(
            &accounts,
            "dana@example.com",
            "owner's own password",
            "198.51.100.40"
        )
        .await
        .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn an_oauth_login_takes_an_unconfirmed_address_from_whoever_registered_it() {
    let (accounts, provider, _boss) = with_oauth().await;
    let attacker = accounts.client().ip("203.0.113.41");
    let reply = attacker.send(
            "POST",
            "/api/auth/register",
            Some(json!({ "email": "erin@example.com", "password": "attacker's password", "display_name": "Erin" })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    // The owner signs in with Google, which has verified the address.
    provider.log_in_as(person("google-erin", "Erin@Example.com", true));
    let reply = oauth_login(&accounts, "google", |c| c).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let owner = attacker.signed_in(&reply);
    let me = owner.send("GET", "/api/auth/me", None).await;
    assert_eq!(
        (
            me.body["email"].as_str(),
            me.body["email_verified"].as_bool(),
            me.body["has_password"].as_bool()
        ),
        (Some("erin@example.com"), Some(true), Some(false)),
        "the unproven password is gone"
    );
    assert_eq!(
        login(
            &accounts,
            "erin@example.com",
            "attacker's password",
            "203.0.113.41"
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn an_oauth_login_returns_only_to_a_path_on_this_site() {
    let (accounts, provider, _boss) = with_oauth().await;
    provider.log_in_as(person("9001", "oscar@example.com", true));
    // %2F%09%2F decodes to "/\t/": browsers drop the tab and leave for evil.example.
    for return_to in [
        "%2F%09%2Fevil.example",
        "%2F%5Cevil.example",
        "%2F%2Fevil.example",
        "https:%2F%2Fevil.example",
    ] {
        let reply = oauth_login_returning(&accounts, "github", return_to, |c| c).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        assert_eq!(reply.headers[header::LOCATION], "/", "{return_to}");
    }
}

#[tokio::test]
async fn a_forged_forwarded_for_neither_buys_fresh_buckets_nor_lands_in_the_history() {
    // Exposed directly (no trusted proxy): the peer address is the client's.
    let accounts = platform()
        .env("KUBEBYON_TRUSTED_PROXY_HOPS", "0")
        .build()
        .await;
    let http = Client::http(&accounts.base_url, std::time::Duration::from_secs(30));
    // 32 logins that straddle the limit's window edge would count in two.
    crate::harness::clear_of_window_edge(shared::accounts::auth::LOGIN_PER_IP.window).await;
    let mut statuses = Vec::new();
    for i in 0..32 {
        let reply = http
            .clone()
            .header("x-forwarded-for", format!("203.0.113.{i}"))
            .send(
                "POST",
                "/api/auth/login",
                Some(json!({ "email": format!("nobody{i}@example.com"), "password": "guess guess guess" })),
            )
            .await;
        statuses.push(reply.status.as_u16());
    }
    assert_eq!(statuses[..30], [401; 30]);
    assert_eq!(
        statuses[30..],
        [429, 429],
        "one address, one bucket, whatever the header says"
    );
    let recorded: Vec<(Option<String>,)> =
        sqlx::query_as("SELECT DISTINCT host(ip) FROM login_events")
            .fetch_all(&accounts.db.pool)
            .await
            .unwrap();
    assert_eq!(recorded, [(Some("127.0.0.1".to_string()),)]);
}

async fn ask_reset(accounts: &TestApp, email: &str) -> (StatusCode, Value) {
    let client = accounts.client().ip("203.0.113.90");
    let reply = client
        .send(
            "POST",
            "/api/auth/password-reset",
            Some(json!({ "email": email })),
        )
        .await;
    (reply.status, reply.body)
}

async fn add_real_account(accounts: &TestApp) {
    sqlx::query(
        "INSERT INTO users (email, display_name, password_hash, email_verified_at)
         VALUES ('real@example.com', 'Real', 'x', now())",
    )
    .execute(&accounts.db.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_reset_answers_alike_for_real_and_unknown_addresses_whatever_the_mail_server_does() {
    // The mail server is down: a real address gets what an unknown one gets.
    let closed = format!("smtp://127.0.0.1:{}", tests::free_port());
    let down = platform().env("SMTP_URL", &closed).build().await;
    add_real_account(&down).await;
    let (known, unknown) = (
        ask_reset(&down, "real@example.com").await,
        ask_reset(&down, "nobody@example.com").await,
    );
    assert_eq!(known.0, StatusCode::ACCEPTED, "{}", known.1);
    assert_eq!(known, unknown);
    // No mail server configured at all: 503 for both, before any lookup.
    let none = TestApp::builder("accounts-test")
        .accounts()
        .console()
        .build()
        .await;
    add_real_account(&none).await;
    let (known, unknown) = (
        ask_reset(&none, "real@example.com").await,
        ask_reset(&none, "nobody@example.com").await,
    );
    assert_eq!(
        (known.0, known.1["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("mail_not_configured"))
    );
    assert_eq!(known, unknown);
}

#[tokio::test]
async fn api_keys_are_scoped_expire_cannot_mint_keys_and_die_with_the_password() {
    let accounts = platform().build().await;
    let browser = signed_up(&accounts, "kim@example.com", "correct horse battery").await;
    let make = |body: Value| {
        let browser = &browser;
        async move {
            browser
                .send("POST", "/api/console/account/api-keys", Some(body))
                .await
        }
    };
    // The password is asked again, and the lifetime is bounded.
    for (body, field) in [
        (json!({ "name": "a", "scope": "write" }), "password"),
        (
            json!({ "name": "a", "scope": "write", "password": "not it at all" }),
            "password",
        ),
        (
            json!({ "name": "a", "scope": "write", "password": "correct horse battery", "expires_in_days": 0 }),
            "expires_in_days",
        ),
        (
            json!({ "name": "a", "scope": "write", "password": "correct horse battery", "expires_in_days": 366 }),
            "expires_in_days",
        ),
    ] {
        let reply = make(body).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.body
        );
        assert_eq!(reply.body["errors"][0]["field"], field);
    }
    let reply = make(json!({ "name": "a", "password": "correct horse battery" })).await;
    assert_eq!(
        reply.status,
        StatusCode::BAD_REQUEST,
        "the scope is chosen, never assumed"
    );

    let key_client = |reply: &Reply| {
        accounts
            .client()
            .ip("198.51.100.31")
            .bearer(reply.body["key"].as_str().unwrap())
    };
    let reader =
        make(json!({ "name": "dashboards", "scope": "read", "password": "correct horse battery" }))
            .await;
    assert_eq!(reader.status, StatusCode::CREATED, "{}", reader.body);
    assert_eq!(reader.body["api_key"]["scope"], "read");
    let reader = key_client(&reader);
    let writer = make(json!({ "name": "ci", "scope": "write", "password": "correct horse battery", "expires_in_days": 7 })).await;
    assert_eq!(writer.status, StatusCode::CREATED, "{}", writer.body);
    let expires: chrono::DateTime<chrono::Utc> = writer.body["api_key"]["expires_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (expires - chrono::Utc::now() - chrono::TimeDelta::days(7))
            .num_seconds()
            .abs()
            < 60
    );
    let writer = key_client(&writer);

    // A read key reads and writes nothing.
    let cluster = json!({ "name": "scoped", "workload_cpu_limit_milli_cores": 1000, "workload_memory_limit_mib": 1024 });
    assert_eq!(
        reader
            .send("GET", "/api/console/clusters", None)
            .await
            .status,
        StatusCode::OK
    );
    let refused = reader
        .send("POST", "/api/console/clusters", Some(cluster.clone()))
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    // No key makes, revokes or changes credentials.
    let minted = writer
        .send(
            "POST",
            "/api/console/account/api-keys",
            Some(json!({ "name": "more", "scope": "write", "password": "correct horse battery" })),
        )
        .await;
    assert_eq!(minted.status, StatusCode::FORBIDDEN, "{}", minted.body);
    let changed = writer.send( "POST", "/api/auth/change-password", Some(json!({ "current_password": "correct horse battery", "new_password": "key holder's password" })))
        .await;
    assert_eq!(changed.status, StatusCode::FORBIDDEN, "{}", changed.body);

    // An expired key is no key.
    sqlx::query(
        "UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE scope = 'read'",
    )
    .execute(&accounts.db.pool)
    .await
    .unwrap();
    assert_eq!(
        reader
            .send("GET", "/api/console/clusters", None)
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    // A new password revokes every key.
    assert_eq!(
        writer
            .send("GET", "/api/console/clusters", None)
            .await
            .status,
        StatusCode::OK
    );
    let reply = browser.send( "POST", "/api/auth/change-password", Some(json!({ "current_password": "correct horse battery", "new_password": "battery staple horse" })))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.body);
    assert_eq!(
        writer
            .send("GET", "/api/console/clusters", None)
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn settings_send_secrets_only_over_https_to_public_hosts() {
    let accounts = platform()
        .env("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY)
        .build()
        .await;
    let boss = signed_up(&accounts, "boss@example.com", "correct horse battery").await;
    for (field, value) in [
        (
            "captcha_verify_url",
            json!("http://challenges.example.com/siteverify"),
        ),
        (
            "captcha_verify_url",
            json!("https://169.254.169.254/latest/meta-data/"),
        ),
        (
            "managed_workload_ingress_dns_endpoint",
            json!("https://10.0.0.7:5055"),
        ),
        ("outbound_webhook_url", json!("https://localhost/hook")),
        (
            "outbound_webhook_url",
            json!("https://[::ffff:127.0.0.1]/hook"),
        ),
        ("join_base_url", json!("http://kubebyon.example.com")),
        ("smtp_username", json!("mailer")),
    ] {
        let mut body = settings_body(accounts.mail().port);
        body[field] = value.clone();
        let reply = boss
            .send("PUT", "/api/console/admin/settings", Some(body))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}={value}: {}",
            reply.body
        );
        let expected = if field == "smtp_username" {
            "smtp_tls"
        } else {
            field
        };
        assert_eq!(reply.body["errors"][0]["field"], expected, "{}", reply.body);
    }
    let mut body = settings_body(accounts.mail().port);
    body["captcha_verify_url"] = json!("https://challenges.example.com/siteverify");
    body["join_base_url"] = json!("https://kubebyon.example.com");
    let reply = boss
        .send("PUT", "/api/console/admin/settings", Some(body))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
}

#[tokio::test]
async fn a_user_sees_their_sessions_and_signs_out_one_or_everywhere_else() {
    let accounts = platform().build().await;
    let laptop = signed_up(&accounts, "lee@example.com", "correct horse battery").await;
    let phone = laptop.signed_in(
        &login(
            &accounts,
            "lee@example.com",
            "correct horse battery",
            "198.51.100.81",
        )
        .await,
    );
    let tablet = laptop.signed_in(
        &login(
            &accounts,
            "lee@example.com",
            "correct horse battery",
            "198.51.100.82",
        )
        .await,
    );
    let listed = laptop
        .send("GET", "/api/console/account/sessions", None)
        .await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    let sessions = listed.body.as_array().unwrap();
    assert_eq!(sessions.len(), 3);
    assert_eq!(sessions.iter().filter(|s| s["current"] == true).count(), 1);
    assert!(sessions.iter().any(|s| s["ip"] == "198.51.100.82"));
    assert!(sessions.iter().all(|s| s.get("token_hash").is_none()));

    // Another user cannot end Lee's sessions: they are not found for them.
    let other = signed_up(&accounts, "mo@example.com", "correct horse battery").await;
    let tablet_id = tablet
        .send("GET", "/api/console/account/sessions", None)
        .await
        .body
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["current"] == true)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/api/console/account/sessions/{tablet_id}");
    assert_eq!(
        other.send("DELETE", &path, None).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        laptop.send("DELETE", &path, None).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        tablet.send("GET", "/api/auth/me", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Everywhere else: the phone goes, the laptop stays.
    let ended = laptop
        .send("DELETE", "/api/console/account/sessions", None)
        .await;
    assert_eq!(ended.body["ended"], 1, "{}", ended.body);
    assert_eq!(
        phone.send("GET", "/api/auth/me", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        laptop.send("GET", "/api/auth/me", None).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn sessions_end_after_their_idle_timeout_and_their_absolute_lifetime() {
    let accounts = platform().build().await;
    let idle = signed_up(&accounts, "ivy@example.com", "correct horse battery").await;
    let reply = login(
        &accounts,
        "ivy@example.com",
        "correct horse battery",
        "198.51.100.90",
    )
    .await;
    // The cookie lives as long as the session may: 12 hours by default.
    let set_cookie = reply
        .headers
        .get_all(axum::http::header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert!(set_cookie[0].contains("Max-Age=43200"), "{set_cookie:?}");
    let old = idle.signed_in(&reply);
    let me = |client: Client| async move {
        client
            .send("GET", "/api/console/account/sessions", None)
            .await
            .status
    };
    assert_eq!(me(idle.clone()).await, StatusCode::OK);
    assert_eq!(me(old.clone()).await, StatusCode::OK);

    // Unused for 31 minutes: over the 30-minute idle timeout.
    sqlx::query(
        "UPDATE sessions SET last_used_at = now() - interval '31 minutes'
         WHERE ip = '198.51.100.90'::inet",
    )
    .execute(&accounts.db.pool)
    .await
    .unwrap();
    assert_eq!(me(old).await, StatusCode::UNAUTHORIZED);

    // Used all along, but signed in longer ago than the absolute lifetime.
    sqlx::query("UPDATE sessions SET expires_at = now() - interval '1 second'")
        .execute(&accounts.db.pool)
        .await
        .unwrap();
    assert_eq!(me(idle).await, StatusCode::UNAUTHORIZED);
}

/// Gives the account a live kubeconfig credential on a cluster; returns its id.
async fn live_kubeconfig(accounts: &TestApp, email: &str) -> uuid::Uuid {
    let cluster = tests::handlers::seed_cluster(&accounts.db.pool).await;
    sqlx::query_scalar(
        "INSERT INTO kubeconfig_credentials (cluster_id, user_id, service_account_name, expires_at)
         SELECT $1, id, 'kubebyon-user-x', now() + interval '8 hours' FROM users WHERE email = $2
         RETURNING id",
    )
    .bind(cluster)
    .bind(email)
    .fetch_one(&accounts.db.pool)
    .await
    .unwrap()
}

async fn revoke_reason(accounts: &TestApp, credential: uuid::Uuid) -> Option<String> {
    sqlx::query_scalar("SELECT revoke_reason FROM kubeconfig_credentials WHERE id = $1")
        .bind(credential)
        .fetch_one(&accounts.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_new_password_revokes_every_kubeconfig_of_the_account() {
    let accounts = platform().build().await;
    let browser = signed_up(&accounts, "erin@example.com", "correct horse battery").await;
    signed_up(&accounts, "frank@example.com", "correct horse battery").await;
    let before_change = live_kubeconfig(&accounts, "erin@example.com").await;
    let others = live_kubeconfig(&accounts, "frank@example.com").await;

    let reply = browser.send( "POST", "/api/auth/change-password", Some(json!({ "current_password": "correct horse battery", "new_password": "battery staple horse" })))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.body);
    assert_eq!(
        revoke_reason(&accounts, before_change).await.as_deref(),
        Some("password_changed")
    );
    assert_eq!(
        revoke_reason(&accounts, others).await,
        None,
        "another account's kubeconfig is untouched"
    );

    let before_reset = live_kubeconfig(&accounts, "erin@example.com").await;
    let anonymous = accounts.client().ip("198.51.100.11");
    reset_password(
        &accounts,
        &anonymous,
        "erin@example.com",
        "staple horse battery",
    )
    .await;
    assert_eq!(
        revoke_reason(&accounts, before_reset).await.as_deref(),
        Some("password_changed")
    );
    let audit: Value = sqlx::query_scalar(
        "SELECT metadata FROM audit_events WHERE action = 'user.password_reset' ORDER BY created_at DESC LIMIT 1",
    )
    .fetch_one(&accounts.db.pool)
    .await
    .unwrap();
    assert_eq!(audit["kubeconfigs_revoked"], 1);
}

/// The review's attack: five resets for a victim's address from one source
/// blocked the victim's own reset, resend and registration for an hour from
/// anywhere. Now the stranger fills only their own bucket (and, over IPv6,
/// their /64 is one source); the victim resets from elsewhere.
#[tokio::test]
async fn a_stranger_cannot_block_a_victims_reset() {
    let accounts = platform().build().await;
    signed_up(&accounts, "victim@example.com", "correct horse battery").await;
    let ask = |ip: &'static str, path: &'static str, body: Value| {
        let accounts = &accounts;
        async move {
            let client = accounts.client().ip(ip);
            client.send("POST", path, Some(body)).await.status
        }
    };
    let reset = json!({ "email": "victim@example.com" });
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(ask("203.0.113.66", "/api/auth/password-reset", reset.clone()).await);
    }
    assert_eq!(statuses[..3], [StatusCode::ACCEPTED; 3]);
    assert_eq!(statuses[3..], [StatusCode::TOO_MANY_REQUESTS; 2]);
    // Other addresses of the same IPv6 /64 are the same source.
    let mut v6 = Vec::new();
    for ip in [
        "2001:db8:7:7::1",
        "2001:db8:7:7::2",
        "2001:db8:7:7::3",
        "2001:db8:7:7:ffff::9",
    ] {
        v6.push(ask(ip, "/api/auth/password-reset", reset.clone()).await);
    }
    assert_eq!(
        v6,
        [
            StatusCode::ACCEPTED,
            StatusCode::ACCEPTED,
            StatusCode::ACCEPTED,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // Resending a registration code is counted apart from resets.
    assert_eq!(
        ask("203.0.113.66", "/api/auth/resend-code", reset.clone()).await,
        StatusCode::ACCEPTED,
        "a full reset bucket is not the resend one"
    );
    // The registration's code and the six resets' have arrived (mail leaves
    // after the answer): the newest is read, so the victim's own is the next.
    for _ in 0..100 {
        if accounts.mail().messages().len() >= 7 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(accounts.mail().messages().len(), 7);
    accounts.mail().code_for("victim@example.com").await;
    // The victim, from their own address: the reset goes through.
    let victim = accounts.client().ip("198.51.100.23");
    reset_password(
        &accounts,
        &victim,
        "victim@example.com",
        "a brand new passphrase",
    )
    .await;
}

/// Codes asked from several sources do not buy more guesses at a 6-digit
/// code: wrong codes are counted per account (25 an hour) whatever code they
/// were for, and per account and source (10), so one source alone cannot
/// use the account's up and lock its owner out.
#[tokio::test]
async fn more_codes_buy_no_more_guesses() {
    // Every guess in one window of the account's count (hourly, aligned to
    // the epoch): a run straddling the hour would count in two.
    crate::harness::clear_of_window_edge(shared::accounts::auth::CODE_GUESSES_PER_ACCOUNT.window)
        .await;
    let accounts = platform().build().await;
    signed_up(&accounts, "target@example.com", "correct horse battery").await;
    let call = |ip: String, path: &'static str, body: Value| {
        let accounts = &accounts;
        async move {
            let client = accounts.client().ip(&ip);
            client.send("POST", path, Some(body)).await
        }
    };
    let guess = |ip: String| {
        call(
            ip,
            "/api/auth/password-reset/confirm",
            json!({ "email": "target@example.com", "code": "000000", "new_password": "a brand new passphrase" }),
        )
    };
    // One source guessing: its own bucket (10) fills, not the account's.
    let mut statuses = Vec::new();
    for _ in 0..11 {
        statuses.push(guess("203.0.113.40".into()).await.status);
    }
    assert_eq!(statuses[..10], [StatusCode::BAD_REQUEST; 10]);
    assert_eq!(statuses[10], StatusCode::TOO_MANY_REQUESTS);
    // Codes asked for from other sources, and guessed at from them: the
    // account's 25 are used up after 15 more, fresh codes or not.
    for round in 0..2 {
        let asked = call(
            format!("203.0.113.{}", 50 + round),
            "/api/auth/password-reset",
            json!({ "email": "target@example.com" }),
        )
        .await;
        assert_eq!(asked.status, StatusCode::ACCEPTED);
        for _ in 0..10 {
            let reply = guess(format!("198.51.100.{}", 60 + round)).await;
            if round == 1 && reply.status == StatusCode::TOO_MANY_REQUESTS {
                break;
            }
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
        }
    }
    let reply = guess("198.51.100.99".into()).await;
    assert_eq!(
        (reply.status, reply.body["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited")),
        "{}",
        reply.body
    );
}
