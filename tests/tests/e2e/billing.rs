//! Plans, entitlements and Stripe: the limits a plan sets are enforced in the
//! write's own transaction (cluster create and update, join tokens,
//! hostnames, joins), an order is paid through a Checkout Session on the
//! loopback Stripe API and a webhook signed by the official `stripe`
//! library's helper, and each event is applied once.

use axum::http::StatusCode;
use uuid::Uuid;

use crate::harness::{Client, STRIPE_WEBHOOK_SECRET, TestApp};

/// The `Stripe-Signature` header the official library's helper makes.
fn stripe_header(payload: &str, secret: &str, timestamp: i64) -> String {
    let output = std::process::Command::new(tests::moto::python())
        .args([
            "-c",
            "import sys, stripe; print(stripe.WebhookSignature.generate_signature_header(sys.stdin.read(), sys.argv[1], int(sys.argv[2])))",
            secret,
            &timestamp.to_string(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(payload.as_bytes())?;
            child.wait_with_output()
        })
        .expect("python with stripe (scripts/test.sh installs it)");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// A platform with a host and the loopback Stripe API.
async fn platform() -> TestApp {
    TestApp::builder("worker-b").host().stripe().build().await
}

/// A plan, made through the back office.
async fn plan(
    b: &TestApp,
    name: &str,
    clusters: i64,
    nodes: i64,
    cpu: i64,
    hostnames: i64,
) -> String {
    let (status, plan) = b
        .call(
            "POST",
            "/api/console/admin/plans",
            Some(serde_json::json!({
                "name": name, "max_clusters": clusters, "max_nodes": nodes,
                "max_cpu_milli_cores": cpu, "max_memory_mib": 65536, "max_hostnames": hostnames,
                "price_minor_units": if name == "Free" { 0 } else { 1900 }, "currency": "usd",
            })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{plan}");
    plan["id"].as_str().unwrap().to_string()
}

async fn make_default(b: &TestApp, plan_id: &str) {
    sqlx::query("UPDATE billing_settings SET default_plan_id = $1::uuid")
        .bind(plan_id)
        .execute(&b.db.pool)
        .await
        .unwrap();
}

async fn entitlements(b: &TestApp) -> serde_json::Value {
    let (status, body) = b
        .call("GET", "/api/console/account/entitlements", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Posts an event to the webhook with a `Stripe-Signature` header.
async fn deliver(b: &TestApp, payload: &str, signature: &str) -> (StatusCode, serde_json::Value) {
    let reply = b
        .client()
        .header("stripe-signature", signature)
        .send_bytes(
            "POST",
            "/api/billing/stripe/webhook",
            "application/json",
            payload,
        )
        .await;
    (reply.status, reply.body)
}

fn event(id: &str, kind: &str, order_id: &str, session_id: &str) -> String {
    serde_json::json!({
        "id": id, "object": "event", "api_version": "2024-06-20", "type": kind,
        "created": chrono::Utc::now().timestamp(),
        "data": { "object": {
            "id": session_id, "object": "checkout.session", "client_reference_id": order_id,
            "payment_status": if kind == "checkout.session.completed" { "paid" } else { "unpaid" },
            "payment_intent": "pi_3AbcDef", "status": "complete",
            "amount_total": 1900, "currency": "usd",
        }},
    })
    .to_string()
}

fn limit_refusal(
    status: StatusCode,
    body: &serde_json::Value,
) -> (StatusCode, &str, &str, i64, i64, i64, i64) {
    let l = &body["plan_limit"];
    (
        status,
        body["code"].as_str().unwrap_or_default(),
        l["resource"].as_str().unwrap_or_default(),
        l["limit"].as_i64().unwrap_or(-1),
        l["usage"].as_i64().unwrap_or(-1),
        l["requested"].as_i64().unwrap_or(-1),
        l["excess"].as_i64().unwrap_or(-1),
    )
}

fn create_body(name: &str, cpu: i64) -> serde_json::Value {
    serde_json::json!({
        "name": name, "workload_cpu_limit_milli_cores": cpu, "workload_memory_limit_mib": 1024,
        "public_access_mode": "nodeport",
    })
}

#[tokio::test]
async fn a_hostname_let_go_frees_its_place_in_the_plan() {
    let b = platform().await;
    let free = plan(&b, "Free", 1, 1, 2000, 1).await;
    make_default(&b, &free).await;
    let (status, body) = b
        .call(
            "POST",
            "/api/console/clusters",
            Some(create_body("one", 1500)),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let cluster = body["cluster"]["id"].as_str().unwrap().to_string();
    b.drive().await;
    let hostnames = format!("/api/console/clusters/{cluster}/hostnames");
    let bind = |name: &'static str| {
        let (b, hostnames) = (&b, hostnames.clone());
        async move {
            b.call(
                "POST",
                &hostnames,
                Some(serde_json::json!({ "hostname": name })),
            )
            .await
        }
    };
    let (status, shop) = bind("shop.example.org").await;
    assert_eq!(status, StatusCode::CREATED, "{shop}");
    let (status, body) = bind("blog.example.org").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("plan_limit_exceeded")),
        "{body}"
    );
    // Unbound, the name no longer counts: another takes its place.
    let (status, _) = b
        .call(
            "DELETE",
            &format!("{hostnames}/{}", shop["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(entitlements(&b).await["usage"]["hostnames"], 0);
    let (status, body) = bind("blog.example.org").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(entitlements(&b).await["usage"]["hostnames"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_the_limit_creates_tokens_and_hostnames_are_refused_with_the_numbers_until_a_paid_plan_lifts_them()
 {
    let b = platform().await;
    // Without a default plan nothing is limited.
    assert_eq!(entitlements(&b,).await["source"], "unlimited");
    let free = plan(&b, "Free", 1, 1, 2000, 1).await;
    let pro = plan(&b, "Pro", 5, 10, 32000, 10).await;
    make_default(&b, &free).await;

    let (status, body) = b
        .call(
            "POST",
            "/api/console/clusters",
            Some(create_body("one", 2500)),
        )
        .await;
    assert_eq!(
        limit_refusal(status, &body),
        (
            StatusCode::FORBIDDEN,
            "plan_limit_exceeded",
            "cpu_milli_cores",
            2000,
            0,
            2500,
            500
        ),
        "{body}"
    );
    // The console's billing page, a route it serves.
    let upgrade = body["plan_limit"]["upgrade_url"].as_str().unwrap();
    let page = &upgrade[upgrade.find("://").unwrap() + 3..];
    let page = &page[page.find('/').unwrap()..];
    assert!(console::CLIENT_ROUTES.contains(&page), "{upgrade}");
    assert_eq!(page, "/billing");
    assert_eq!(b.count("clusters").await, 0, "nothing is written");

    let (status, body) = b
        .call(
            "POST",
            "/api/console/clusters",
            Some(create_body("one", 1500)),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let cluster = body["cluster"]["id"].as_str().unwrap().to_string();
    b.drive().await;
    assert_eq!(b.cluster(&cluster).await["status"], "ready");

    let (status, body) = b
        .call(
            "POST",
            "/api/console/clusters",
            Some(create_body("two", 100)),
        )
        .await;
    assert_eq!(
        limit_refusal(status, &body),
        (
            StatusCode::FORBIDDEN,
            "plan_limit_exceeded",
            "clusters",
            1,
            1,
            1,
            1
        ),
        "{body}"
    );
    // Raising the cluster's CPU past the plan is refused too.
    let (status, body) = b
        .call(
            "PATCH",
            &format!("/api/console/clusters/{cluster}"),
            Some(serde_json::json!({ "workload_cpu_limit_milli_cores": 2100 })),
        )
        .await;
    assert_eq!(
        limit_refusal(status, &body),
        (
            StatusCode::FORBIDDEN,
            "plan_limit_exceeded",
            "cpu_milli_cores",
            2000,
            1500,
            600,
            100
        ),
        "{body}"
    );

    // A token cannot promise more nodes than the plan has left.
    let tokens = format!("/api/console/clusters/{cluster}/tokens");
    let (status, body) = b
        .call("POST", &tokens, Some(serde_json::json!({ "max_uses": 2 })))
        .await;
    assert_eq!(
        limit_refusal(status, &body),
        (
            StatusCode::FORBIDDEN,
            "plan_limit_exceeded",
            "nodes",
            1,
            0,
            2,
            1
        ),
        "{body}"
    );
    let (status, body) = b
        .call("POST", &tokens, Some(serde_json::json!({ "max_uses": 1 })))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let hostnames = format!("/api/console/clusters/{cluster}/hostnames");
    let (status, body) = b
        .call(
            "POST",
            &hostnames,
            Some(serde_json::json!({ "hostname": "shop.example.org" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = b
        .call(
            "POST",
            &hostnames,
            Some(serde_json::json!({ "hostname": "blog.example.org" })),
        )
        .await;
    assert_eq!(
        limit_refusal(status, &body),
        (
            StatusCode::FORBIDDEN,
            "plan_limit_exceeded",
            "hostnames",
            1,
            1,
            1,
            1
        ),
        "{body}"
    );

    let e = entitlements(&b).await;
    assert_eq!(
        (e["source"].as_str(), e["plan"]["name"].as_str()),
        (Some("default"), Some("Free")),
        "{e}"
    );
    assert_eq!(e["usage"]["clusters"], 1);
    assert_eq!(e["usage"]["cpu_milli_cores"], 1500);
    assert_eq!(e["usage"]["hostnames"], 1);
    assert_eq!(e["remaining"]["cpu_milli_cores"], 500);
    assert_eq!(e["over_limit"], serde_json::json!([]));
    // One notification per resource refused, however often.
    let limit_notices: Vec<String> = sqlx::query_scalar(
        "SELECT payload->>'resource' FROM notification_outbox WHERE kind = 'plan_limit_reached' ORDER BY id",
    )
    .fetch_all(&b.db.pool)
    .await
    .unwrap();
    assert_eq!(
        limit_notices,
        ["cpu_milli_cores", "clusters", "nodes", "hostnames"]
    );

    // Buying Pro: a pending order and its Checkout Session.
    let (status, checkout) = b
        .call(
            "POST",
            "/api/console/billing/orders",
            Some(serde_json::json!({ "plan_id": pro })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{checkout}");
    let order = checkout["order"]["id"].as_str().unwrap().to_string();
    let session = checkout["order"]["stripe_checkout_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(checkout["order"]["status"], "pending");
    assert_eq!(
        checkout["checkout_url"].as_str(),
        Some(format!("https://checkout.stripe.com/c/pay/{session}").as_str())
    );
    let sent = &b.stripe().requests()[0];
    assert_eq!(
        sent.idempotency_key.as_deref(),
        Some(format!("kubebyon-order-{order}").as_str())
    );
    assert_eq!(sent.authorization.as_deref(), Some("Bearer sk_test_51Abc"));
    for (field, value) in [
        ("mode", "payment"),
        ("client_reference_id", order.as_str()),
        ("line_items[0][quantity]", "1"),
        ("line_items[0][price_data][currency]", "usd"),
        ("line_items[0][price_data][unit_amount]", "1900"),
        ("line_items[0][price_data][product_data][name]", "Pro"),
        ("customer", "cus_Test000001"),
    ] {
        assert_eq!(sent.field(field), Some(value), "{field} in {:?}", sent.form);
    }
    // The organization is the Stripe customer, made at its first checkout
    // with the paying owner's address for receipts.
    let organization: Uuid = sqlx::query_scalar(
        "SELECT id FROM organizations WHERE stripe_customer_id = 'cus_Test000001'",
    )
    .fetch_one(&b.db.pool)
    .await
    .unwrap();
    let made = &b.stripe().customer_requests()[0];
    assert_eq!(
        made.idempotency_key.as_deref(),
        Some(format!("kubebyon-organization-{organization}").as_str())
    );
    assert_eq!(made.field("email"), Some("dev@kubebyon.local"));
    assert_eq!(
        made.field("metadata[organization_id]"),
        Some(organization.to_string().as_str())
    );
    assert_eq!(
        checkout["order"]["organization_id"],
        organization.to_string()
    );
    // Stripe sends the buyer back to the console's billing page, a route
    // the console serves, with the order and the outcome.
    for (field, outcome) in [("success_url", "success"), ("cancel_url", "cancelled")] {
        let url = reqwest::Url::parse(sent.field(field).unwrap()).unwrap();
        assert!(
            console::CLIENT_ROUTES.contains(&url.path()),
            "{field} {url}"
        );
        assert_eq!(
            url.query(),
            Some(format!("order={order}&checkout={outcome}").as_str())
        );
    }
    // The same choice again resumes the order and its session, without
    // asking Stripe for another.
    let (status, again) = b
        .call(
            "POST",
            "/api/console/billing/orders",
            Some(serde_json::json!({ "plan_id": pro })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["order"]["id"], checkout["order"]["id"]);
    assert_eq!(again["checkout_url"], checkout["checkout_url"]);
    assert_eq!((b.stripe().requests().len(), b.stripe().sessions()), (1, 1));
    // A free plan needs no order.
    let (status, body) = b
        .call(
            "POST",
            "/api/console/billing/orders",
            Some(serde_json::json!({ "plan_id": free })),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "a free plan needs no order: {body}"
    );

    // Hostile webhooks: a bad signature, a stale one, an unsigned body.
    let now = chrono::Utc::now().timestamp();
    let paid = event("evt_1Paid", "checkout.session.completed", &order, &session);
    for (signature, why) in [
        (
            stripe_header(&paid, "whsec_someone_else", now),
            "no v1 signature matches",
        ),
        (
            stripe_header(&paid, STRIPE_WEBHOOK_SECRET, now - 301),
            "outside the 300 s tolerance",
        ),
        (String::new(), "missing or malformed"),
    ] {
        let (status, body) = deliver(&b, &paid, &signature).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_signature")),
            "{body}"
        );
        assert!(body["detail"].as_str().unwrap().contains(why), "{body}");
    }
    let tampered = paid.replace("pi_3AbcDef", "pi_3Other");
    let (status, _) = deliver(
        &b,
        &tampered,
        &stripe_header(&paid, STRIPE_WEBHOOK_SECRET, now),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(b.count("stripe_events").await, 0);

    // Two deliveries of one event at once: one state change.
    let signature = stripe_header(&paid, STRIPE_WEBHOOK_SECRET, now);
    let (first, second) = tokio::join!(
        deliver(&b, &paid, &signature),
        deliver(&b, &paid, &signature)
    );
    let mut outcomes = [
        first.1["outcome"].as_str().unwrap().to_string(),
        second.1["outcome"].as_str().unwrap().to_string(),
    ];
    outcomes.sort();
    assert_eq!((first.0, second.0), (StatusCode::OK, StatusCode::OK));
    assert_eq!(outcomes, ["applied", "replayed"]);
    let paid_audits: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE action = 'billing.order.paid'")
            .fetch_one(&b.db.pool)
            .await
            .unwrap();
    assert_eq!(paid_audits, 1);
    // A replay later changes nothing either.
    let (status, body) =
        deliver(&b, &paid, &stripe_header(&paid, STRIPE_WEBHOOK_SECRET, now)).await;
    assert_eq!(
        (status, body["outcome"].as_str()),
        (StatusCode::OK, Some("replayed"))
    );
    // An expiry that arrives after the payment does not undo it.
    let expired = event("evt_2Expired", "checkout.session.expired", &order, &session);
    let (status, body) = deliver(
        &b,
        &expired,
        &stripe_header(&expired, STRIPE_WEBHOOK_SECRET, now),
    )
    .await;
    assert_eq!(
        (status, body["outcome"].as_str()),
        (StatusCode::OK, Some("no_change"))
    );
    // Other types are acknowledged and ignored.
    let other = event("evt_3Other", "customer.created", &order, &session);
    let (status, body) = deliver(
        &b,
        &other,
        &stripe_header(&other, STRIPE_WEBHOOK_SECRET, now),
    )
    .await;
    assert_eq!(
        (status, body["outcome"].as_str()),
        (StatusCode::OK, Some("ignored"))
    );

    let (_, read) = b
        .call("GET", &format!("/api/console/billing/orders/{order}"), None)
        .await;
    assert_eq!(
        (
            read["status"].as_str(),
            read["stripe_payment_intent_id"].as_str()
        ),
        (Some("paid"), Some("pi_3AbcDef")),
        "{read}"
    );
    assert!(read["checkout_url"].is_null());
    let e = entitlements(&b).await;
    assert_eq!(
        (
            e["source"].as_str(),
            e["plan"]["name"].as_str(),
            e["order_id"].as_str()
        ),
        (Some("order"), Some("Pro"), Some(order.as_str())),
        "{e}"
    );
    let order_paid: i64 =
        sqlx::query_scalar("SELECT count(*) FROM notification_outbox WHERE kind = 'order_paid'")
            .fetch_one(&b.db.pool)
            .await
            .unwrap();
    assert_eq!(order_paid, 1);

    // What was refused passes now.
    let (status, body) = b
        .call(
            "POST",
            "/api/console/clusters",
            Some(create_body("two", 100)),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, _) = b
        .call("POST", &tokens, Some(serde_json::json!({ "max_uses": 2 })))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = b
        .call(
            "POST",
            &hostnames,
            Some(serde_json::json!({ "hostname": "blog.example.org" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);

    // An administrator cancels the paid order (a refund): the default plan
    // applies again, nothing is deleted, and the entitlement says what is over.
    let (status, body) = b
        .call(
            "POST",
            &format!("/api/console/admin/orders/{order}/cancel"),
            None,
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{body}"
    );
    let e = entitlements(&b).await;
    assert_eq!(e["plan"]["name"], "Free");
    assert_eq!(
        e["over_limit"],
        serde_json::json!(["clusters", "hostnames"]),
        "{e}"
    );
    assert_eq!(e["remaining"]["clusters"], -1);
    let audited: (String, serde_json::Value) = sqlx::query_as(
        "SELECT target_id, metadata FROM audit_events WHERE action = 'admin.order.cancel'",
    )
    .fetch_one(&b.db.pool)
    .await
    .unwrap();
    assert_eq!(audited.0, order);
    assert_eq!(audited.1["previous_status"], "paid");
    assert_eq!(b.count("clusters").await, 2);
    let (status, body) = b
        .call(
            "POST",
            &format!("/api/console/admin/orders/{order}/cancel"),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("order_cancelled"))
    );
    let (status, orders) = b
        .call("GET", "/api/console/admin/orders?status=cancelled", None)
        .await;
    assert_eq!(
        (status, orders.as_array().map(Vec::len)),
        (StatusCode::OK, Some(1))
    );

    // The review's replay: a later, signed `async_payment_succeeded` (a new
    // event id) for the order the administrator cancelled pays nothing; it is
    // audited for a refund.
    let late = event(
        "evt_4LatePayment",
        "checkout.session.async_payment_succeeded",
        &order,
        &session,
    );
    let (status, body) =
        deliver(&b, &late, &stripe_header(&late, STRIPE_WEBHOOK_SECRET, now)).await;
    assert_eq!(
        (status, body["outcome"].as_str()),
        (StatusCode::OK, Some("no_change")),
        "{body}"
    );
    let (_, read) = b
        .call("GET", &format!("/api/console/billing/orders/{order}"), None)
        .await;
    assert_eq!(
        read["status"], "cancelled",
        "an administrator's cancel is final"
    );
    assert_eq!(entitlements(&b,).await["plan"]["name"], "Free");
    let refund_audits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE action = 'billing.order.payment_after_cancel'",
    )
    .fetch_one(&b.db.pool)
    .await
    .unwrap();
    assert_eq!(refund_audits, 1);
}

/// The review's billing findings: an administrator's cancel of a pending
/// order expires its Checkout Session and stays final when a `completed`
/// arrives; a payment of another amount or currency, or from an object that
/// is not the order's Checkout Session (a Payment Link on the same account),
/// pays nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_order_stays_cancelled_and_only_its_own_session_at_its_price_pays_it() {
    let b = platform().await;
    let pro = plan(&b, "Pro", 3, 3, 8000, 3).await;
    let (status, checkout) = b
        .call(
            "POST",
            "/api/console/billing/orders",
            Some(serde_json::json!({ "plan_id": pro })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{checkout}");
    let order = checkout["order"]["id"].as_str().unwrap().to_string();
    let session = checkout["order"]["stripe_checkout_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let now = chrono::Utc::now().timestamp();
    let deliver = |payload: String| {
        let b = &b;
        async move {
            let (status, body) = deliver(
                b,
                &payload,
                &stripe_header(&payload, STRIPE_WEBHOOK_SECRET, now),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body["outcome"].as_str().unwrap().to_string()
        }
    };
    let status_of = |order: String| {
        let b = &b;
        async move {
            b.call("GET", &format!("/api/console/billing/orders/{order}"), None)
                .await
                .1["status"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };

    // Wrong amount, wrong currency, not a Checkout Session: nothing is paid.
    let cheap = event("evt_5Cheap", "checkout.session.completed", &order, &session)
        .replace("\"amount_total\":1900", "\"amount_total\":100");
    assert!(cheap.contains("\"amount_total\":100"), "{cheap}");
    assert_eq!(deliver(cheap).await, "no_change");
    let euros = event("evt_6Euros", "checkout.session.completed", &order, &session)
        .replace("\"currency\":\"usd\"", "\"currency\":\"eur\"");
    assert_eq!(deliver(euros).await, "no_change");
    let link = event(
        "evt_7Link",
        "checkout.session.completed",
        &order,
        "plink_1Other",
    );
    assert_eq!(deliver(link).await, "no_change");
    assert_eq!(status_of(order.clone()).await, "pending");
    let mismatches: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE action = 'billing.order.payment_wrong_amount'",
    )
    .fetch_one(&b.db.pool)
    .await
    .unwrap();
    assert_eq!(mismatches, 2);

    // An administrator cancels it while pending: the session is expired at
    // Stripe first, and a `completed` arriving afterwards pays nothing.
    assert!(b.stripe().expired().is_empty());
    let (status, body) = b
        .call(
            "POST",
            &format!("/api/console/admin/orders/{order}/cancel"),
            None,
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{body}"
    );
    assert_eq!(
        b.stripe().expired(),
        std::slice::from_ref(&session),
        "the session was expired first"
    );
    let completed = event(
        "evt_8Completed",
        "checkout.session.completed",
        &order,
        &session,
    );
    assert_eq!(deliver(completed).await, "no_change");
    assert_eq!(status_of(order).await, "cancelled");
}

/// One cluster create by each client, all at once: how many were accepted,
/// and how many refused at the plan's limit.
async fn creates_at_once(clients: impl Iterator<Item = Client>) -> (usize, usize) {
    let creates = clients.enumerate().map(|(i, client)| async move {
        client
            .call(
                "POST",
                "/api/console/clusters",
                Some(create_body(&format!("race-{i}"), 100)),
            )
            .await
    });
    let answers = futures_util::future::join_all(creates).await;
    let accepted = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::ACCEPTED)
        .count();
    let refused = answers
        .iter()
        .filter(|(s, body)| *s == StatusCode::FORBIDDEN && body["code"] == "plan_limit_exceeded")
        .count();
    assert_eq!(accepted + refused, answers.len(), "{answers:?}");
    (accepted, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_creates_at_the_last_free_slot_let_exactly_one_through() {
    let b = platform().await;
    let plan = plan(&b, "Free", 1, 1, 100_000, 1).await;
    make_default(&b, &plan).await;
    assert_eq!(creates_at_once((0..20).map(|_| b.client())).await, (1, 19));
    assert_eq!(b.count("clusters").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_order_survives_stripe_being_down_and_a_user_can_cancel_it() {
    let b = platform().await;
    let pro = plan(&b, "Pro", 5, 10, 32000, 10).await;
    b.stripe().fail_next(1);
    let (status, body) = b
        .call(
            "POST",
            "/api/console/billing/orders",
            Some(serde_json::json!({ "plan_id": pro })),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_GATEWAY, Some("stripe_unavailable")),
        "{body}"
    );
    let (_, orders) = b.call("GET", "/api/console/billing/orders", None).await;
    let order = orders[0]["id"].as_str().unwrap().to_string();
    assert_eq!(orders[0]["status"], "pending");
    // The retry carries the same key and makes the one session.
    let (status, body) = b
        .call(
            "POST",
            "/api/console/billing/orders",
            Some(serde_json::json!({ "plan_id": pro })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let keys: Vec<_> = b
        .stripe()
        .requests()
        .into_iter()
        .map(|r| r.idempotency_key)
        .collect();
    assert_eq!(
        keys,
        [
            Some(format!("kubebyon-order-{order}")),
            Some(format!("kubebyon-order-{order}"))
        ]
    );
    // Unknown plans and bodies are refused before anything is written.
    let (status, _) = b
        .call(
            "POST",
            "/api/console/billing/orders",
            Some(serde_json::json!({ "plan_id": Uuid::new_v4() })),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = b
        .call(
            "POST",
            "/api/console/billing/orders",
            Some(serde_json::json!({ "plan_id": pro, "amount": 1 })),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "an unknown field is refused"
    );

    // Paid at Stripe meanwhile: cancelling is refused, its event settles it.
    b.stripe().complete("cs_test_a1000001");
    let (status, body) = b
        .call(
            "POST",
            &format!("/api/console/billing/orders/{order}/cancel"),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("order_paid_in_stripe")),
        "{body}"
    );
    // Open again (a stand-in's shortcut): cancelling expires the session first.
    b.stripe().reopen("cs_test_a1000001");
    let (status, body) = b
        .call(
            "POST",
            &format!("/api/console/billing/orders/{order}/cancel"),
            None,
        )
        .await;
    assert_eq!(
        (
            status,
            body["status"].as_str(),
            body["cancel_reason"].as_str()
        ),
        (StatusCode::OK, Some("cancelled"), Some("user")),
        "{body}"
    );
    assert_eq!(
        b.stripe().expired(),
        ["cs_test_a1000001", "cs_test_a1000001"]
    );
    let (status, body) = b
        .call(
            "POST",
            &format!("/api/console/billing/orders/{order}/cancel"),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("order_not_pending"))
    );
    // An expiry for the cancelled order changes nothing; the user stays unlimited.
    let expired = event(
        "evt_9Expired",
        "checkout.session.expired",
        &order,
        "cs_test_a1000001",
    );
    let now = chrono::Utc::now().timestamp();
    let (status, body) = deliver(
        &b,
        &expired,
        &stripe_header(&expired, STRIPE_WEBHOOK_SECRET, now),
    )
    .await;
    assert_eq!(
        (status, body["outcome"].as_str()),
        (StatusCode::OK, Some("no_change")),
        "{body}"
    );
    assert_eq!(entitlements(&b,).await["source"], "unlimited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_join_past_the_plan_is_refused_with_a_message_the_script_prints() {
    let b = platform().await;
    let plan = plan(&b, "Free", 1, 2, 100_000, 1).await;
    make_default(&b, &plan).await;
    let (cluster, _) = b.create_ready("edge", "nodeport").await;
    let (status, token) = b
        .call(
            "POST",
            &format!("/api/console/clusters/{cluster}/tokens"),
            Some(serde_json::json!({ "max_uses": 2 })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{token}");
    let plaintext = token["plaintext"].as_str().unwrap().to_string();
    // The plan shrinks after the token was made: the join endpoint decides.
    let (status, _) = b
        .call(
            "PUT",
            &format!("/api/console/admin/plans/{plan}"),
            Some(serde_json::json!({
                "name": "Free", "max_clusters": 1, "max_nodes": 1, "max_cpu_milli_cores": 100_000,
                "max_memory_mib": 65536, "max_hostnames": 1, "price_minor_units": 0, "currency": "usd",
            })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let join = |host: &'static str| {
        let machine = b.machine(&plaintext);
        async move {
            let script = machine.send("GET", "/join", None).await;
            assert_eq!(script.status, 200);
            let attempt = script
                .body
                .as_str()
                .expect("a script")
                .lines()
                .find_map(|line| {
                    line.strip_prefix("KB_ATTEMPT=")
                        .map(|a| a.trim_matches('\'').to_string())
                })
                .unwrap();
            let (status, reply) = machine
                .call(
                    "POST",
                    "/join/steps",
                    Some(serde_json::json!({ "attempt_id": attempt, "step": "join", "status": "running", "hostname": host })),
                )
                .await;
            (status.as_u16(), reply)
        }
    };
    let (status, first) = join("node-a").await;
    assert_eq!(status, 200, "{first}");
    assert!(first["bootstrap_token"].is_string());
    // The first join is under way: it holds the one node the plan allows.
    let (status, second) = join("node-b").await;
    assert_eq!(status, 403, "{second}");
    let message = second["message"].as_str().unwrap();
    assert!(
        message.starts_with("the Free plan allows 1 node(s) and 1 are in use or joining; remove a node or upgrade at ")
            && !message.contains('"'),
        "{message}"
    );
    let outcome: (String, String) =
        sqlx::query_as("SELECT outcome, reason FROM join_attempts WHERE hostname = 'node-b'")
            .fetch_one(&b.db.pool)
            .await
            .unwrap();
    assert_eq!(
        (outcome.0.as_str(), outcome.1.as_str()),
        ("refused", message)
    );
    let uses: i32 = sqlx::query_scalar("SELECT use_count FROM tokens")
        .fetch_one(&b.db.pool)
        .await
        .unwrap();
    assert_eq!(uses, 1, "the refused join took no use");
    // The owner hears of it, as of every refusal by the plan.
    let told: Vec<serde_json::Value> = sqlx::query_scalar(
        "SELECT payload FROM notification_outbox WHERE kind = 'plan_limit_reached'",
    )
    .fetch_all(&b.db.pool)
    .await
    .unwrap();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        (
            &told[0]["resource"],
            &told[0]["requested"],
            &told[0]["usage"]
        ),
        (
            &serde_json::json!("nodes"),
            &serde_json::json!(1),
            &serde_json::json!(1)
        )
    );
}

/// A shared organization named Acme: the development user its owner, and
/// four more members (an admin and three members).
async fn acme(b: &TestApp) -> (Uuid, Vec<(Uuid, &'static str)>) {
    let organization: Uuid =
        sqlx::query_scalar("INSERT INTO organizations (name) VALUES ('Acme') RETURNING id")
            .fetch_one(&b.db.pool)
            .await
            .unwrap();
    let mut members = vec![(b.development_user(), "owner")];
    for (i, role) in ["admin", "member", "member", "member"]
        .into_iter()
        .enumerate()
    {
        let user: Uuid = sqlx::query_scalar(
            "INSERT INTO users (email, display_name, role, email_verified_at)
             VALUES ($1, 'Member', 'user', now()) RETURNING id",
        )
        .bind(format!("m{i}@acme.example"))
        .fetch_one(&b.db.pool)
        .await
        .unwrap();
        members.push((user, role));
    }
    for (user, role) in &members {
        sqlx::query(
            "INSERT INTO organization_members (organization_id, user_id, role) VALUES ($1, $2, $3)",
        )
        .bind(organization)
        .bind(user)
        .bind(role)
        .execute(&b.db.pool)
        .await
        .unwrap();
    }
    (organization, members)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_organizations_plan_counts_every_members_clusters_and_only_its_owners_pay() {
    let b = platform().await;
    let free = plan(&b, "Free", 1, 1, 100_000, 1).await;
    make_default(&b, &free).await;
    let pro = plan(&b, "Pro", 5, 10, 32000, 10).await;
    let (acme, members) = acme(&b).await;
    let as_member = |user: Uuid| {
        b.client_as(user)
            .header("kubebyon-organization", acme.to_string())
    };

    // Five members, four creates each, at the organization's one free slot:
    // exactly one cluster, whoever asked.
    let clients = members
        .iter()
        .flat_map(|(user, _)| (0..4).map(move |_| as_member(*user)));
    assert_eq!(creates_at_once(clients).await, (1, 19));
    let in_acme: i64 =
        sqlx::query_scalar("SELECT count(*) FROM clusters WHERE organization_id = $1")
            .bind(acme)
            .fetch_one(&b.db.pool)
            .await
            .unwrap();
    assert_eq!(in_acme, 1);
    // The refusals told the organization's owner (who chooses its plan),
    // once, naming it; the members who were refused chose nothing.
    let told: Vec<(Uuid, serde_json::Value)> = sqlx::query_as(
        "SELECT user_id, payload FROM notification_outbox WHERE kind = 'plan_limit_reached'",
    )
    .fetch_all(&b.db.pool)
    .await
    .unwrap();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].0, b.development_user());
    assert_eq!(
        (
            told[0].1["organization"].as_str(),
            told[0].1["resource"].as_str()
        ),
        (Some("Acme"), Some("clusters"))
    );
    // A member's personal organization has its own plan and its own slot.
    let (member, _) = members[2];
    let (status, body) = b
        .client_as(member)
        .call(
            "POST",
            "/api/console/clusters",
            Some(create_body("mine", 100)),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    // Every member reads the organization's plan and usage.
    let (status, seen) = as_member(member)
        .call("GET", "/api/console/account/entitlements", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{seen}");
    assert_eq!(
        (
            seen["plan"]["name"].as_str(),
            seen["usage"]["clusters"].as_i64()
        ),
        (Some("Free"), Some(1))
    );

    // Owners and admins read its orders; members do not; only owners pay.
    let (admin, _) = members[1];
    let (status, orders) = as_member(admin)
        .call("GET", "/api/console/billing/orders", None)
        .await;
    assert_eq!((status, orders), (StatusCode::OK, serde_json::json!([])));
    let (status, body) = as_member(member)
        .call("GET", "/api/console/billing/orders", None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    let buy = serde_json::json!({ "plan_id": pro });
    let (status, body) = as_member(admin)
        .call("POST", "/api/console/billing/orders", Some(buy.clone()))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden")),
        "{body}"
    );
    assert!(b.stripe().customer_requests().is_empty());
    let (status, checkout) = as_member(b.development_user())
        .call("POST", "/api/console/billing/orders", Some(buy.clone()))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{checkout}");
    let order = checkout["order"]["id"].as_str().unwrap().to_string();
    let session = checkout["order"]["stripe_checkout_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(checkout["order"]["organization_id"], acme.to_string());
    assert_eq!(
        checkout["order"]["user_id"],
        b.development_user().to_string()
    );
    // The organization is the Stripe customer, named after it.
    let customer = b.stripe().customer_requests();
    assert_eq!(customer.len(), 1);
    assert_eq!(customer[0].field("name"), Some("Acme"));
    assert_eq!(
        b.stripe().requests().last().unwrap().field("customer"),
        Some(b.stripe().customers()[0].as_str())
    );
    // The admin sees the order now; another organization's member does not,
    // even by its id.
    let (status, seen) = as_member(admin)
        .call("GET", &format!("/api/console/billing/orders/{order}"), None)
        .await;
    assert_eq!(
        (status, seen["id"].as_str()),
        (StatusCode::OK, Some(order.as_str()))
    );
    let (status, _) = b
        .client_as(member)
        .call("GET", &format!("/api/console/billing/orders/{order}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Paid: the organization's plan is Pro, for every member's creates; the
    // owner's personal organization keeps the default plan.
    let now = chrono::Utc::now().timestamp();
    let paid = event(
        "evt_1AcmePaid",
        "checkout.session.completed",
        &order,
        &session,
    );
    let (status, receipt) =
        deliver(&b, &paid, &stripe_header(&paid, STRIPE_WEBHOOK_SECRET, now)).await;
    assert_eq!(
        (status, receipt["outcome"].as_str()),
        (StatusCode::OK, Some("applied"))
    );
    let (status, body) = as_member(member)
        .call(
            "POST",
            "/api/console/clusters",
            Some(create_body("after-pro", 100)),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let personal = entitlements(&b).await;
    assert_eq!(personal["plan"]["name"], "Free");
    // A second organization of the same owner is a second customer.
    let (status, checkout) = b
        .call("POST", "/api/console/billing/orders", Some(buy))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{checkout}");
    assert_eq!(b.stripe().customers().len(), 2);
    assert_ne!(checkout["order"]["organization_id"], acme.to_string());
    // An admin reads the billing events in the organization's activity.
    let (status, activity) = as_member(admin)
        .call(
            "GET",
            &format!("/api/console/organizations/{acme}/activity"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{activity}");
    let actions: Vec<&str> = activity
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(
        actions.contains(&"billing.order.create") && actions.contains(&"billing.order.paid"),
        "{actions:?}"
    );
}
