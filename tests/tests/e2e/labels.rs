//! Labels of a cluster (docs/labels.md): set whole, read back, found by a
//! kubectl-style selector, paged; refused whole when one key or value is bad
//! (look-alike letters, the platform's prefix, too many, too long); another
//! user's clusters neither readable nor found; two writers take turns; every
//! change audited.

use axum::{Router, http::StatusCode};
use serde_json::{Value, json};
use shared::{
    http::{AppState, Identity, with_common_layers},
    jobs::Processed,
};
use uuid::Uuid;

use crate::platform::{Platform, send};

/// The labels function's router, serving as `user`.
fn labels_as(platform: &Platform, user: Uuid) -> Router {
    let (_, router) = local::ROUTERS
        .iter()
        .find(|(name, _)| *name == "api-labels")
        .expect("api-labels in the manifest");
    let state = AppState {
        identity: Identity::Development(user),
        ..platform.state.clone()
    };
    with_common_layers(router(), state)
}

fn owner(platform: &Platform) -> Uuid {
    match platform.state.identity {
        Identity::Development(user) => user,
        Identity::Accounts => unreachable!("the platform serves as the development user"),
    }
}

async fn put(router: &Router, id: &str, labels: Value) -> (StatusCode, Value) {
    send(
        router.clone(),
        "PUT",
        &format!("/api/console/clusters/{id}/labels"),
        Some(json!({ "labels": labels })),
    )
    .await
}

/// The names of the clusters `selector` finds, and the next cursor.
async fn find(router: &Router, query: &str) -> (Vec<String>, Value) {
    let (status, body) = send(
        router.clone(),
        "GET",
        &format!("/api/console/cluster-labels?{query}"),
        None,
    )
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

fn selector(text: &str) -> String {
    format!(
        "selector={}",
        url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>()
    )
}

#[tokio::test]
async fn labels_are_set_read_and_found_by_selector() {
    let platform = Platform::new().await;
    let labels = labels_as(&platform, owner(&platform));
    let web = platform.create("web", "nodeport").await;
    let db = platform.create("db", "nodeport").await;
    let gpu = platform.create("gpu", "nodeport").await;
    platform.create("bare", "nodeport").await;
    // Ready, so that a delete below runs at once rather than behind its create.
    platform.drive().await;

    let (status, body) = put(
        &labels,
        &web,
        json!({ "env": "prod", "tier": "web", "example.com/team": "shop" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["labels"]["example.com/team"], "shop");
    put(&labels, &db, json!({ "env": "prod", "tier": "db" })).await;
    put(&labels, &gpu, json!({ "env": "staging", "gpu": "" })).await;

    let (status, body) = send(
        labels.clone(),
        "GET",
        &format!("/api/console/clusters/{web}/labels"),
        None,
    )
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
        let (names, _) = find(&labels, &selector(query)).await;
        assert_eq!(names, wanted, "{query}");
    }

    // Paged by name.
    let (first, cursor) = find(&labels, "limit=3").await;
    assert_eq!(first, ["bare", "db", "gpu"]);
    assert_eq!(cursor, "gpu");
    let (rest, cursor) = find(&labels, "limit=3&cursor=gpu").await;
    assert_eq!((rest, cursor), (vec!["web".to_string()], Value::Null));

    // A whole set replaces the old one; `{}` removes them all.
    put(&labels, &web, json!({ "env": "dev" })).await;
    let (names, _) = find(&labels, &selector("tier")).await;
    assert_eq!(names, ["db"]);
    let (status, body) = put(&labels, &db, json!({})).await;
    assert_eq!((status, &body["labels"]), (StatusCode::OK, &json!({})));
    let (names, _) = find(&labels, &selector("env")).await;
    assert_eq!(names, ["gpu", "web"]);

    // Every change is audited with the keys it removed and set; a write
    // that changes nothing is not.
    put(&labels, &gpu, json!({ "env": "staging", "gpu": "" })).await;
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
    let (names, _) = find(&labels, &selector("env")).await;
    assert_eq!(names, ["web"]);
    let (status, body) = put(&labels, &gpu, json!({ "env": "x" })).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn bad_labels_and_selectors_are_refused_whole() {
    let platform = Platform::new().await;
    let labels = labels_as(&platform, owner(&platform));
    let id = platform.create("alpha", "nodeport").await;
    put(&labels, &id, json!({ "env": "prod" })).await;

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
        let (status, body) = put(&labels, &id, labels_sent.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{labels_sent}: {body}"
        );
        assert_eq!(body["code"], "validation_failed");
        let fields = crate::platform::problem_fields(&body);
        assert_eq!(fields, [field], "{labels_sent}: {body}");
    }
    // A value that is not a string is not the documented shape.
    let (status, body) = put(&labels, &id, json!({ "replicas": 3 })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Nothing half-written: the old set stands.
    let (_, body) = send(
        labels.clone(),
        "GET",
        &format!("/api/console/clusters/{id}/labels"),
        None,
    )
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
        let (status, body) = send(
            labels.clone(),
            "GET",
            &format!("/api/console/cluster-labels?{query}"),
            None,
        )
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
    let platform = Platform::new().await;
    let mine = labels_as(&platform, owner(&platform));
    let id = platform.create("alpha", "nodeport").await;
    put(&mine, &id, json!({ "env": "prod" })).await;

    let stranger = labels_as(&platform, Uuid::new_v4());
    for (method, body) in [("GET", None), ("PUT", Some(json!({ "labels": {} })))] {
        let (status, answer) = send(
            stranger.clone(),
            method,
            &format!("/api/console/clusters/{id}/labels"),
            body,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method}: {answer}");
    }
    let (names, _) = find(&stranger, &selector("env=prod")).await;
    assert!(names.is_empty(), "{names:?}");

    // Twenty writers at once, each a whole set of its own: every write
    // answers, and what is left is one writer's set, not a mixture.
    let writes = (0..20).map(|i| {
        let mine = mine.clone();
        let id = id.clone();
        async move {
            put(
                &mine,
                &id,
                json!({ "writer": format!("w{i}"), format!("only-w{i}"): "" }),
            )
            .await
        }
    });
    for (status, body) in futures_util::future::join_all(writes).await {
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (_, body) = send(
        mine.clone(),
        "GET",
        &format!("/api/console/clusters/{id}/labels"),
        None,
    )
    .await;
    let set = body["labels"].as_object().unwrap();
    let writer = set["writer"].as_str().unwrap();
    assert_eq!(set.len(), 2, "{body}");
    assert!(set.contains_key(&format!("only-{writer}")), "{body}");
}
