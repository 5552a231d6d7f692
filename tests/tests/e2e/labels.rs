//! Labels of a cluster (docs/labels.md): set whole, read back, found by a
//! kubectl-style selector, paged; refused whole when one key or value is bad
//! (look-alike letters, the platform's prefix, too many, too long); another
//! user's clusters neither readable nor found; two writers take turns; every
//! change audited.

use axum::http::StatusCode;
use serde_json::{Value, json};
use shared::jobs::Processed;
use uuid::Uuid;

use crate::harness::{Client, TestApp};

async fn put(platform: &TestApp, id: &str, labels: Value) -> (StatusCode, Value) {
    platform
        .call(
            "PUT",
            &format!("/api/console/clusters/{id}/labels"),
            Some(json!({ "labels": labels })),
        )
        .await
}

/// The names of the clusters a query finds for `client`, and the next cursor.
async fn find_as(client: &Client, query: &str) -> (Vec<String>, Value) {
    let (status, body) = client
        .call("GET", &format!("/api/console/cluster-labels?{query}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{query}: {body}");
    let names = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    (names, body["next_cursor"].clone())
}

async fn find(platform: &TestApp, query: &str) -> (Vec<String>, Value) {
    find_as(&platform.client(), query).await
}

fn selector(text: &str) -> String {
    format!(
        "selector={}",
        url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>()
    )
}

#[tokio::test]
async fn labels_are_set_read_and_found_by_selector() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let web = platform.create("web", "nodeport").await;
    let db = platform.create("db", "nodeport").await;
    let gpu = platform.create("gpu", "nodeport").await;
    platform.create("bare", "nodeport").await;
    // Ready, so that a delete below runs at once rather than behind its create.
    platform.drive().await;

    let (status, body) = put(
        &platform,
        &web,
        json!({ "env": "prod", "tier": "web", "example.com/team": "shop" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["labels"]["example.com/team"], "shop");
    put(&platform, &db, json!({ "env": "prod", "tier": "db" })).await;
    put(&platform, &gpu, json!({ "env": "staging", "gpu": "" })).await;

    let (status, body) = platform
        .call("GET", &format!("/api/console/clusters/{web}/labels"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({ "cluster_id": web, "labels": { "env": "prod", "tier": "web", "example.com/team": "shop" } })
    );

    for (query, wanted) in [
        ("", vec!["bare", "db", "gpu", "web"]),
        ("env=prod", vec!["db", "web"]),
        ("env==prod,tier!=db", vec!["web"]),
        // `!=` selects a cluster without the key too, as Kubernetes does.
        ("tier!=db", vec!["bare", "gpu", "web"]),
        ("gpu", vec!["gpu"]),
        ("!gpu", vec!["bare", "db", "web"]),
        ("env in (staging, dev)", vec!["gpu"]),
        ("env notin (prod)", vec!["bare", "gpu"]),
        ("tier in (web,db), example.com/team=shop", vec!["web"]),
        ("env=nowhere", vec![]),
    ] {
        let (names, _) = find(&platform, &selector(query)).await;
        assert_eq!(names, wanted, "{query}");
    }

    // Paged by name.
    let (first, cursor) = find(&platform, "limit=3").await;
    assert_eq!(first, ["bare", "db", "gpu"]);
    assert_eq!(cursor, "gpu");
    let (rest, cursor) = find(&platform, "limit=3&cursor=gpu").await;
    assert_eq!((rest, cursor), (vec!["web".to_string()], Value::Null));

    // A whole set replaces the old one; `{}` removes them all.
    put(&platform, &web, json!({ "env": "dev" })).await;
    let (names, _) = find(&platform, &selector("tier")).await;
    assert_eq!(names, ["db"]);
    let (status, body) = put(&platform, &db, json!({})).await;
    assert_eq!((status, &body["labels"]), (StatusCode::OK, &json!({})));
    let (names, _) = find(&platform, &selector("env")).await;
    assert_eq!(names, ["gpu", "web"]);

    // Every change is audited with the keys it removed and set; a write
    // that changes nothing is not.
    put(&platform, &gpu, json!({ "env": "staging", "gpu": "" })).await;
    let audits: Vec<(Uuid, Value)> = sqlx::query_as(
        "SELECT cluster_id, metadata FROM audit_events WHERE action = 'cluster.labels_set' ORDER BY id",
    )
    .fetch_all(&platform.db.pool)
    .await
    .unwrap();
    let web_id: Uuid = web.parse().unwrap();
    let db_id: Uuid = db.parse().unwrap();
    assert_eq!(audits.len(), 5, "{audits:?}");
    assert_eq!(
        audits[3],
        (
            web_id,
            json!({ "removed": ["example.com/team", "tier"], "set": ["env"] })
        )
    );
    assert_eq!(
        audits[4],
        (db_id, json!({ "removed": ["env", "tier"], "set": [] }))
    );

    // A deleted cluster is no longer found, nor its labels readable.
    let (status, _) = platform
        .call("DELETE", &format!("/api/console/clusters/{gpu}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(platform.drive().await[0].1, Processed::Succeeded);
    let (names, _) = find(&platform, &selector("env")).await;
    assert_eq!(names, ["web"]);
    let (status, body) = put(&platform, &gpu, json!({ "env": "x" })).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn bad_labels_and_selectors_are_refused_whole() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let id = platform.create("alpha", "nodeport").await;
    put(&platform, &id, json!({ "env": "prod" })).await;

    let too_many: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (labels_sent, field) in [
        (json!({ "еnv": "prod" }), "labels.еnv"), // a Cyrillic е
        (json!({ "env": "prоd" }), "labels.env"), // a Cyrillic о
        (
            json!({ "kubebyon.io/plan": "free" }),
            "labels.kubebyon.io/plan",
        ),
        (json!({ "Example.com/x": "y" }), "labels.Example.com/x"),
        (json!({ "env": "a".repeat(64) }), "labels.env"),
        (
            json!({ "k".repeat(64): "v" }),
            &*format!("labels.{}", "k".repeat(64)),
        ),
        (json!({ "": "v" }), "labels."),
        (json!({ "ok": "fine", "bad key": "x" }), "labels.bad key"),
        (Value::Object(too_many), "labels"),
    ] {
        let (status, body) = put(&platform, &id, labels_sent.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{labels_sent}: {body}"
        );
        assert_eq!(body["code"], "validation_failed");
        let fields = crate::harness::problem_fields(&body);
        assert_eq!(fields, [field], "{labels_sent}: {body}");
    }
    // A value that is not a string is not the documented shape.
    let (status, body) = put(&platform, &id, json!({ "replicas": 3 })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Nothing half-written: the old set stands.
    let (_, body) = platform
        .call("GET", &format!("/api/console/clusters/{id}/labels"), None)
        .await;
    assert_eq!(body["labels"], json!({ "env": "prod" }));

    for query in [
        selector("env=prod,"),
        selector("env in (a"),
        selector("env>1"),
        selector("énv=prod"),
        selector(&"a,".repeat(2049)),
        selector(&vec!["k"; 33].join(",")),
        "limit=0".into(),
        "limit=201".into(),
        format!("cursor={}", "x".repeat(257)),
    ] {
        let (status, body) = platform
            .call("GET", &format!("/api/console/cluster-labels?{query}"), None)
            .await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}: {body}",
            query.chars().take(60).collect::<String>()
        );
    }
}

#[tokio::test]
async fn another_users_clusters_are_neither_read_nor_found_and_writers_take_turns() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let id = platform.create("alpha", "nodeport").await;
    put(&platform, &id, json!({ "env": "prod" })).await;

    let stranger: Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name) VALUES ('stranger@example.com', 'Stranger') RETURNING id",
    )
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    for (method, body) in [("GET", None), ("PUT", Some(json!({ "labels": {} })))] {
        let (status, answer) = platform
            .call_as(
                stranger,
                method,
                &format!("/api/console/clusters/{id}/labels"),
                body,
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method}: {answer}");
    }
    let (names, _) = find_as(&platform.client_as(stranger), &selector("env=prod")).await;
    assert!(names.is_empty(), "{names:?}");

    // Twenty writers at once, each a whole set of its own: every write
    // answers, and what is left is one writer's set, not a mixture.
    let platform = &platform;
    let writes = (0..20).map(|i| {
        let id = id.clone();
        async move {
            put(
                platform,
                &id,
                json!({ "writer": format!("w{i}"), format!("only-w{i}"): "" }),
            )
            .await
        }
    });
    for (status, body) in futures_util::future::join_all(writes).await {
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (_, body) = platform
        .call("GET", &format!("/api/console/clusters/{id}/labels"), None)
        .await;
    let set = body["labels"].as_object().unwrap();
    let writer = set["writer"].as_str().unwrap();
    assert_eq!(set.len(), 2, "{body}");
    assert!(set.contains_key(&format!("only-{writer}")), "{body}");
}
