//! DNS automation against a Route53-compatible server (moto), checked with a
//! client we did not write (boto3): cluster CNAMEs, platform-managed and
//! self-managed hostnames proven by a DNS TXT challenge (a loopback DNS
//! server), names the platform keeps, records the platform did not make left
//! alone, one refused change failing only its owner, deletions that touch
//! only our records, no change call when nothing changed, and an outage
//! recorded then recovered.

use std::collections::HashMap;

use axum::http::StatusCode;
use serde_json::json;
use shared::{config::Settings, ingress::settings::column, secretbox::SecretBox};
use tests::{dnsserver::DnsServer, moto::Moto};

use crate::harness::TestApp;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

async fn configure(platform: &TestApp, moto_url: &str, zone: &str) -> Settings {
    configure_with(platform, moto_url, zone, None).await
}

/// Configures the zone; hostname challenges are looked up through `resolver`.
async fn configure_with(
    platform: &TestApp,
    moto_url: &str,
    zone: &str,
    resolver: Option<std::net::SocketAddr>,
) -> Settings {
    let resolver = resolver.map(|a| a.to_string());
    let mut env = HashMap::from([("KUBEBYON_SETTINGS_KEY", KEY)]);
    if let Some(resolver) = resolver.as_deref() {
        env.insert("KUBEBYON_DNS_RESOLVER", resolver);
    }
    let settings = Settings::from_source(&env).unwrap();
    let sealed = SecretBox::new(settings.settings_key.as_ref().unwrap())
        .unwrap()
        .seal(column::DNS_SECRET, "test");
    sqlx::query(
        "UPDATE system_settings SET managed_workload_ingress_base_domain = 'apps.example.com',
                managed_workload_ingress_dns_provider = 'route53', managed_workload_ingress_dns_zone_id = $1,
                managed_workload_ingress_dns_endpoint = $2, managed_workload_ingress_dns_access_key_id = 'test',
                managed_workload_ingress_dns_secret_encrypted = $3, managed_workload_ingress_dns_record_ttl = 300,
                managed_workload_ingress_edge_target = 'edge.example.net'",
    )
    .bind(zone)
    .bind(moto_url)
    .bind(sealed)
    .execute(&platform.db.pool)
    .await
    .unwrap();
    settings
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_dns_converges_route53_to_the_database_and_touches_only_its_own_records() {
    let moto = Moto::start().await;
    let zone = moto.create_zone("apps.example.com");
    moto.put_cname(&zone, "other.apps.example.com", "somewhere.example.org");
    let platform = TestApp::builder("worker-b").host().build().await;
    let resolver = DnsServer::start().await;
    let settings = configure_with(&platform, &moto.url, &zone, Some(resolver.addr)).await;
    let sync = || sync_dns::route53::sync(&platform.db.pool, &settings);

    let id = platform.create_with_ingress("omega").await;
    platform.drive().await;
    let cluster_name = format!("omega-{}.apps.example.com", &id.replace('-', "")[..8]);

    let bind = |hostname: &str| {
        let platform = &platform;
        let (id, hostname) = (id.clone(), hostname.to_string());
        async move {
            platform
                .call(
                    "POST",
                    &format!("/api/console/clusters/{id}/hostnames"),
                    Some(json!({ "hostname": hostname })),
                )
                .await
        }
    };
    let (status, shop) = bind("shop.apps.example.com").await;
    assert_eq!(
        (status, shop["dns_management_scope"].as_str()),
        (StatusCode::CREATED, Some("platform_managed")),
        "{shop}"
    );
    let (status, www) = bind("www.customer.test").await;
    assert_eq!(
        (
            status,
            www["dns_management_scope"].as_str(),
            www["verified"].as_bool()
        ),
        (StatusCode::CREATED, Some("self_managed"), Some(false))
    );
    // The owner proves the name with the TXT record the answer names.
    assert_eq!(
        www["verification_record_name"],
        "_kubebyon-challenge.www.customer.test"
    );
    resolver.publish_txt(
        www["verification_record_name"].as_str().unwrap(),
        www["verification_record_value"].as_str().unwrap(),
    );
    let (status, body) = bind("shop.apps.example.com").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("hostname_taken"))
    );
    let (status, _) = bind("*.apps.example.com").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    let report = sync().await.unwrap();
    assert_eq!(
        (
            report.upserted,
            report.change_calls,
            report.failed,
            report.verified
        ),
        (2, 1, 0, 1),
        "{report:?}"
    );
    let records = moto.cnames(&zone);
    assert_eq!(
        records.get(&cluster_name).map(String::as_str),
        Some("edge.example.net"),
        "{records:?}"
    );
    assert_eq!(records.get("shop.apps.example.com"), Some(&cluster_name));
    assert!(
        !records.keys().any(|k| k.contains("customer")),
        "self-managed names get no record"
    );
    let cluster = platform.cluster(&id).await;
    assert_eq!(
        cluster["managed_workload_ingress_cname_target"],
        cluster_name.as_str()
    );
    let (_, bindings) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/hostnames"),
            None,
        )
        .await;
    let by_name = |name: &str| {
        bindings
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["hostname"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        by_name("shop.apps.example.com")["dns_management_status"],
        "synced"
    );
    assert_eq!(
        by_name("www.customer.test")["dns_management_status"],
        "not_resolving"
    );

    // Nothing changed: no change call.
    let report = sync().await.unwrap();
    assert_eq!((report.change_calls, report.upserted), (0, 0), "{report:?}");

    // The DNS server is unreachable: the error is recorded, and the next run recovers.
    sqlx::query("UPDATE system_settings SET managed_workload_ingress_dns_endpoint = $1")
        .bind(format!("http://127.0.0.1:{}", tests::free_port()))
        .execute(&platform.db.pool)
        .await
        .unwrap();
    let (_, api) = bind("blog.apps.example.com").await;
    let report = sync().await.unwrap();
    assert!(report.failed >= 1, "{report:?}");
    let (_, bindings) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/hostnames"),
            None,
        )
        .await;
    let failed = bindings
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == api["id"])
        .unwrap()
        .clone();
    assert_eq!(failed["dns_management_status"], "error", "{failed}");
    assert!(
        failed["dns_management_last_error"]
            .as_str()
            .unwrap()
            .contains("listing the zone")
    );
    sqlx::query("UPDATE system_settings SET managed_workload_ingress_dns_endpoint = $1")
        .bind(&moto.url)
        .execute(&platform.db.pool)
        .await
        .unwrap();
    let report = sync().await.unwrap();
    assert_eq!((report.upserted, report.failed), (1, 0), "{report:?}");
    assert!(moto.cnames(&zone).contains_key("blog.apps.example.com"));

    // Unbinding removes that record only.
    let shop_id = shop["id"].as_str().unwrap();
    let (status, _) = platform
        .call(
            "DELETE",
            &format!("/api/console/clusters/{id}/hostnames/{shop_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let report = sync().await.unwrap();
    assert_eq!(report.deleted, 1, "{report:?}");
    let records = moto.cnames(&zone);
    assert!(!records.contains_key("shop.apps.example.com"));
    assert!(records.contains_key(&cluster_name));
    assert_eq!(
        records.get("other.apps.example.com").map(String::as_str),
        Some("somewhere.example.org")
    );

    // Deleting the cluster removes its records; someone else's stays.
    let (status, _) = platform
        .call("DELETE", &format!("/api/console/clusters/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    platform.drive().await;
    let report = sync().await.unwrap();
    assert_eq!(report.deleted, 2, "the cluster's and blog's: {report:?}");
    let records = moto.cnames(&zone);
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records.contains_key("other.apps.example.com"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_zone_gets_the_records_and_each_former_zone_is_cleaned_on_its_own() {
    let moto = Moto::start().await;
    let old = moto.create_zone("apps.example.com");
    let new = moto.create_zone("apps.example.com");
    let platform = TestApp::builder("worker-b").host().build().await;
    let settings = configure(&platform, &moto.url, &old).await;
    let sync = || sync_dns::route53::sync(&platform.db.pool, &settings);
    let id = platform.create_with_ingress("kappa").await;
    platform.drive().await;
    let (status, _) = platform
        .call(
            "POST",
            &format!("/api/console/clusters/{id}/hostnames"),
            Some(json!({ "hostname": "shop.apps.example.com" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    sync().await.unwrap();
    assert_eq!(moto.cnames(&old).len(), 2, "{:?}", moto.cnames(&old));
    moto.put_cname(&old, "other.apps.example.com", "somewhere.example.org");

    // The settings name another zone; a record is also left in a zone that
    // no longer exists, whose listing fails.
    sqlx::query("UPDATE system_settings SET managed_workload_ingress_dns_zone_id = $1")
        .bind(&new)
        .execute(&platform.db.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO dns_retired_records (zone_id, name, value) VALUES ('ZNOSUCHZONE', 'x.apps.example.com', 'edge.example.net')")
        .execute(&platform.db.pool)
        .await
        .unwrap();
    let report = sync().await.unwrap();
    assert_eq!(
        (report.upserted, report.deleted, report.failed),
        (2, 2, 1),
        "{report:?}"
    );
    let cluster_name = format!("kappa-{}.apps.example.com", &id.replace('-', "")[..8]);
    let moved = moto.cnames(&new);
    assert_eq!(
        moved.get("shop.apps.example.com"),
        Some(&cluster_name),
        "{moved:?}"
    );
    assert_eq!(
        moved.get(&cluster_name).map(String::as_str),
        Some("edge.example.net")
    );
    // Only the record someone else made stays in the former zone.
    assert_eq!(
        moto.cnames(&old).into_iter().collect::<Vec<_>>(),
        [(
            "other.apps.example.com".to_string(),
            "somewhere.example.org".to_string()
        )]
    );
    let left: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT zone_id, last_error FROM dns_retired_records")
            .fetch_all(&platform.db.pool)
            .await
            .unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].0, "ZNOSUCHZONE");
    assert!(
        left[0]
            .1
            .as_deref()
            .is_some_and(|e| e.contains("listing the zone")),
        "{left:?}"
    );
    let zone_of: (String,) = sqlx::query_as(
        "SELECT managed_workload_ingress_dns_zone_id FROM clusters WHERE id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(zone_of.0, new);

    // Nothing else to change: the failing zone is tried again, nothing is sent.
    let report = sync().await.unwrap();
    assert_eq!((report.change_calls, report.failed), (0, 1), "{report:?}");
}

async fn ingress_cluster(platform: &TestApp, name: &str) -> String {
    let id = platform.create_with_ingress(name).await;
    platform.drive().await;
    id
}

async fn bind_as(
    platform: &TestApp,
    user: Option<uuid::Uuid>,
    cluster: &str,
    hostname: &str,
) -> (StatusCode, serde_json::Value) {
    let path = format!("/api/console/clusters/{cluster}/hostnames");
    let body = Some(json!({ "hostname": hostname }));
    match user {
        Some(user) => platform.call_as(user, "POST", &path, body).await,
        None => platform.call("POST", &path, body).await,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn names_the_platform_keeps_and_other_clusters_names_cannot_be_bound() {
    let moto = Moto::start().await;
    let zone = moto.create_zone("apps.example.com");
    let platform = TestApp::builder("worker-b").host().build().await;
    configure(&platform, &moto.url, &zone).await;
    let mine = ingress_cluster(&platform, "mine").await;
    let theirs = ingress_cluster(&platform, "theirs").await;
    let label = |id: &str, name: &str| format!("{name}-{}", &id.replace('-', "")[..8]);
    let (mine_label, theirs_label) = (label(&mine, "mine"), label(&theirs, "theirs"));

    for reserved in [
        "console.apps.example.com".to_string(),
        "api.apps.example.com".to_string(),
        "deep.www.apps.example.com".to_string(),
        format!("{theirs_label}.apps.example.com"),
        format!("www.{theirs_label}.apps.example.com"),
        format!("{mine_label}.apps.example.com"),
        // The form of a cluster's name, which a later cluster may get.
        "future-0123abcd.apps.example.com".to_string(),
        // The edge every cluster name points at.
        "edge.example.net".to_string(),
    ] {
        let (status, body) = bind_as(&platform, None, &mine, &reserved).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::CONFLICT, Some("hostname_reserved")),
            "{reserved}: {body}"
        );
    }
    // Under one's own cluster name is one's own.
    let (status, body) = bind_as(
        &platform,
        None,
        &mine,
        &format!("www.{mine_label}.apps.example.com"),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (count,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM workload_ingress_hostname_bindings")
            .fetch_one(&platform.db.pool)
            .await
            .unwrap();
    assert_eq!(count, 1, "nothing refused was written");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_the_platform_did_not_make_is_a_conflict_and_one_refused_change_fails_only_its_owner()
 {
    let moto = Moto::start().await;
    let zone = moto.create_zone("apps.example.com");
    moto.put_cname(&zone, "taken.apps.example.com", "foreign.example.org");
    let platform = TestApp::builder("worker-b").host().build().await;
    let settings = configure(&platform, &moto.url, &zone).await;
    let sync = || sync_dns::route53::sync(&platform.db.pool, &settings);
    let id = ingress_cluster(&platform, "sigma").await;
    for hostname in ["taken.apps.example.com", "shop.apps.example.com"] {
        let (status, body) = bind_as(&platform, None, &id, hostname).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let report = sync().await.unwrap();
    assert_eq!(
        (report.conflicts, report.upserted, report.failed),
        (1, 2, 0),
        "the cluster's name and shop go in, taken is left alone: {report:?}"
    );
    let records = moto.cnames(&zone);
    assert_eq!(
        records.get("taken.apps.example.com").map(String::as_str),
        Some("foreign.example.org"),
        "someone else's record is untouched"
    );
    let (_, bindings) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/hostnames"),
            None,
        )
        .await;
    let taken = bindings
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["hostname"] == "taken.apps.example.com")
        .unwrap();
    assert_eq!(taken["dns_management_status"], "error");
    assert!(
        taken["dns_management_last_error"]
            .as_str()
            .unwrap()
            .contains("did not make"),
        "{taken}"
    );

    // The platform's base domain is now wider than the zone: changes for
    // names outside the zone are refused by Route53. The call that carries
    // them fails; each change is tried on its own, and only those owners fail.
    sqlx::query("UPDATE system_settings SET managed_workload_ingress_base_domain = 'example.com'")
        .execute(&platform.db.pool)
        .await
        .unwrap();
    let (status, body) = bind_as(&platform, None, &id, "blog.example.com").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = bind_as(&platform, None, &id, "news.apps.example.com").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let report = sync().await.unwrap();
    assert!(report.change_calls >= 2, "{report:?}");
    assert!(
        moto.cnames(&zone).contains_key("news.apps.example.com"),
        "the change inside the zone went in despite the refused ones: {report:?}"
    );
    let (_, bindings) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/hostnames"),
            None,
        )
        .await;
    let status_of = |name: &str| {
        bindings
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["hostname"] == name)
            .unwrap()["dns_management_status"]
            .clone()
    };
    assert_eq!(status_of("news.apps.example.com"), "synced");
    assert_eq!(status_of("blog.example.com"), "error");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_self_managed_name_is_held_only_by_the_cluster_that_proves_it() {
    let moto = Moto::start().await;
    let zone = moto.create_zone("apps.example.com");
    let platform = TestApp::builder("worker-b").host().build().await;
    let resolver = DnsServer::start().await;
    let settings = configure_with(&platform, &moto.url, &zone, Some(resolver.addr)).await;
    let owner_cluster = ingress_cluster(&platform, "real").await;
    let squatter: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name, role, email_verified_at)
         VALUES ('squatter@example.com', 'Squatter', 'user', now()) RETURNING id",
    )
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    let (status, body) = platform
        .call_as(
            squatter,
            "POST",
            "/api/console/clusters",
            Some(json!({ "name": "squat", "workload_cpu_limit_milli_cores": 1000, "workload_memory_limit_mib": 1024,
                         "public_access_mode": "nodeport", "managed_workload_ingress_enabled": true })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    platform.drive().await;
    let squat_cluster = body["cluster"]["id"].as_str().unwrap().to_string();

    // The squatter claims the name first: a claim, not a hold.
    let (status, squat) =
        bind_as(&platform, Some(squatter), &squat_cluster, "www.google.com").await;
    assert_eq!(
        (status, squat["verified"].as_bool()),
        (StatusCode::CREATED, Some(false)),
        "{squat}"
    );
    let (status, real) = bind_as(&platform, None, &owner_cluster, "www.google.com").await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "an unproven claim does not block the owner: {real}"
    );

    // Without the record, or with the other claim's value, nothing is proven.
    // The API looks challenges up through the loopback resolver too.
    let owner = shared::accounts::users::ensure_development_user(&platform.db.pool)
        .await
        .unwrap();
    let verify = |user: Option<uuid::Uuid>, cluster: String, binding: String| {
        let client = platform.client_serving(shared::http::AppState {
            identity: shared::http::Identity::Development(user.unwrap_or(owner)),
            settings: std::sync::Arc::new(settings.clone()),
            ..platform.state.clone()
        });
        let path = format!("/api/console/clusters/{cluster}/hostnames/{binding}/verify");
        async move { client.call("POST", &path, None).await }
    };
    let real_id = real["id"].as_str().unwrap().to_string();
    let squat_id = squat["id"].as_str().unwrap().to_string();
    let (status, body) = verify(None, owner_cluster.clone(), real_id.clone()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("hostname_not_verified"))
    );
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("_kubebyon-challenge.www.google.com"),
        "{body}"
    );
    // The squatter publishes their value somewhere they control: not the name.
    resolver.publish_txt(
        "_kubebyon-challenge.www.google.com.evil.example",
        squat["verification_record_value"].as_str().unwrap(),
    );
    // The owner publishes their own value.
    resolver.publish_txt(
        "_kubebyon-challenge.www.google.com",
        real["verification_record_value"].as_str().unwrap(),
    );
    let (status, body) = verify(Some(squatter), squat_cluster.clone(), squat_id.clone()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("hostname_not_verified")),
        "another claim's value proves nothing for this one"
    );
    let (status, body) = verify(None, owner_cluster.clone(), real_id.clone()).await;
    assert_eq!(
        (status, body["verified"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{body}"
    );

    // The name is now held: the squatter's claim is gone and cannot come back.
    let (_, listed) = platform
        .call_as(
            squatter,
            "GET",
            &format!("/api/console/clusters/{squat_cluster}/hostnames"),
            None,
        )
        .await;
    assert_eq!(listed.as_array().unwrap().len(), 0, "{listed}");
    let (status, body) = bind_as(&platform, Some(squatter), &squat_cluster, "www.google.com").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("hostname_taken"))
    );
    // Nor a name nested under it, or over it: either would serve pages and
    // cookies as the owner's.
    for nested in ["login.www.google.com", "a.b.www.google.com", "google.com"] {
        let (status, body) = bind_as(&platform, Some(squatter), &squat_cluster, nested).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::CONFLICT, Some("hostname_taken")),
            "{nested}: {body}"
        );
    }
    // A look-alike that only ends the same way is another name.
    let (status, body) = bind_as(
        &platform,
        Some(squatter),
        &squat_cluster,
        "notwww.google.com",
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // An unproven claim is neither observed nor followed for TLS; sync-dns
    // proves claims whose record appeared.
    let (_, pending) = bind_as(&platform, None, &owner_cluster, "shop.customer.test").await;
    let report = sync_dns::route53::sync(&platform.db.pool, &settings)
        .await
        .unwrap();
    assert_eq!((report.verified, report.observed), (0, 1), "{report:?}");
    resolver.publish_txt(
        pending["verification_record_name"].as_str().unwrap(),
        pending["verification_record_value"].as_str().unwrap(),
    );
    let report = sync_dns::route53::sync(&platform.db.pool, &settings)
        .await
        .unwrap();
    assert_eq!((report.verified, report.observed), (1, 2), "{report:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn dns_credentials_go_to_no_name_that_resolves_to_a_private_address() {
    let moto = Moto::start().await;
    let zone = moto.create_zone("apps.example.com");
    let platform = TestApp::builder("worker-b").host().build().await;
    // The same server, named: `localhost` stands for a public-looking name
    // whose DNS answer turned private after the endpoint was saved.
    let named = moto.url.replace("127.0.0.1", "localhost");
    assert_ne!(named, moto.url);
    let settings = configure(&platform, &named, &zone).await;
    ingress_cluster(&platform, "rebound").await;
    let report = sync_dns::route53::sync(&platform.db.pool, &settings)
        .await
        .unwrap();
    assert!(report.failed >= 1, "{report:?}");
    assert!(
        moto.cnames(&zone).is_empty(),
        "nothing reached the server: {:?}",
        moto.cnames(&zone)
    );
    // Where private destinations are allowed, the same name is used.
    let allowed = Settings::from_source(&HashMap::from([
        ("KUBEBYON_SETTINGS_KEY", KEY),
        ("KUBEBYON_ALLOW_PRIVATE_OUTBOUND", "true"),
    ]))
    .unwrap();
    let report = sync_dns::route53::sync(&platform.db.pool, &allowed)
        .await
        .unwrap();
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(moto.cnames(&zone).len(), 1, "{:?}", moto.cnames(&zone));
}

/// With no access key in the settings, `sync-dns` signs with the function's
/// own credentials (under Lambda, its role's); with neither it does nothing
/// and says why.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_stored_key_route53_is_reached_with_the_functions_own_credentials() {
    let moto = Moto::start().await;
    let zone = moto.create_zone("apps.example.com");
    let platform = TestApp::builder("worker-b").host().build().await;
    configure(&platform, &moto.url, &zone).await;
    sqlx::query(
        "UPDATE system_settings SET managed_workload_ingress_dns_access_key_id = NULL,
                managed_workload_ingress_dns_secret_encrypted = NULL",
    )
    .execute(&platform.db.pool)
    .await
    .unwrap();
    ingress_cluster(&platform, "roled").await;

    let without = Settings::from_source(&HashMap::from([("KUBEBYON_SETTINGS_KEY", KEY)])).unwrap();
    let report = sync_dns::route53::sync(&platform.db.pool, &without)
        .await
        .unwrap();
    assert_eq!(
        report.skipped,
        Some(
            "no Route53 access key is configured and the function has no AWS credentials of its own"
        )
    );
    assert!(moto.cnames(&zone).is_empty());

    let with_role = Settings::from_source(&HashMap::from([
        ("KUBEBYON_SETTINGS_KEY", KEY),
        ("AWS_ACCESS_KEY_ID", "ASIAROLEEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", "role-secret"),
        ("AWS_SESSION_TOKEN", "role-session-token"),
    ]))
    .unwrap();
    let report = sync_dns::route53::sync(&platform.db.pool, &with_role)
        .await
        .unwrap();
    assert_eq!((report.skipped, report.failed), (None, 0), "{report:?}");
    assert_eq!(moto.cnames(&zone).len(), 1, "{:?}", moto.cnames(&zone));
}
