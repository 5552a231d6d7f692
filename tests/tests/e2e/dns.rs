//! DNS automation against a Route53-compatible server (moto), checked with a
//! client we did not write (boto3): cluster CNAMEs, platform-managed and
//! self-managed hostnames, deletions that touch only our records, no change
//! call when nothing changed, and an outage recorded then recovered.

use std::collections::HashMap;

use axum::http::StatusCode;
use serde_json::json;
use shared::{config::Settings, db::settings::column, secretbox::SecretBox};
use tests::moto::Moto;

use crate::platform::Platform;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

async fn configure(platform: &Platform, moto_url: &str, zone: &str) -> Settings {
    let settings = Settings::from_source(&HashMap::from([("KUBEBYON_SETTINGS_KEY", KEY)])).unwrap();
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
    let platform = Platform::new().await;
    let settings = configure(&platform, &moto.url, &zone).await;
    let sync = || shared::dns::sync(&platform.db.pool, &settings);

    let (status, body) = platform
        .call(
            "POST",
            "/api/console/clusters",
            Some(json!({ "name": "omega", "workload_cpu_limit_milli_cores": 2000, "workload_memory_limit_mib": 4096,
                         "public_access_mode": "nodeport", "managed_workload_ingress_enabled": true })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["cluster"]["id"].as_str().unwrap().to_string();
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
        (status, www["dns_management_scope"].as_str()),
        (StatusCode::CREATED, Some("self_managed"))
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
        (report.upserted, report.change_calls, report.failed),
        (2, 1, 0),
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
    let (_, api) = bind("api.apps.example.com").await;
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
    assert!(moto.cnames(&zone).contains_key("api.apps.example.com"));

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
    assert_eq!(report.deleted, 2, "the cluster's and api's: {report:?}");
    let records = moto.cnames(&zone);
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records.contains_key("other.apps.example.com"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_zone_gets_the_records_and_each_former_zone_is_cleaned_on_its_own() {
    let moto = Moto::start().await;
    let old = moto.create_zone("apps.example.com");
    let new = moto.create_zone("apps.example.com");
    let platform = Platform::new().await;
    let settings = configure(&platform, &moto.url, &old).await;
    let sync = || shared::dns::sync(&platform.db.pool, &settings);
    let (status, body) = platform
        .call(
            "POST",
            "/api/console/clusters",
            Some(json!({ "name": "kappa", "workload_cpu_limit_milli_cores": 2000, "workload_memory_limit_mib": 4096,
                         "public_access_mode": "nodeport", "managed_workload_ingress_enabled": true })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["cluster"]["id"].as_str().unwrap().to_string();
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
