//! Tenant PostgreSQL databases against a real PostgreSQL server started
//! here as the external instance: TLS with a private CA, passwords checked
//! (SCRAM) on every TCP connection, the platform's own database elsewhere.
//! An administrator registers it (checked as it is saved); a user asks for
//! databases for a cluster; the `database_converge` job walks each to
//! `ready`, its credential projected as a Secret into the simulated
//! vCluster, which logs in with `verify-full`; another database's
//! credential is refused; a database or role the registry does not prove
//! is the platform's is a conflict, untouched; `retain` keeps the data,
//! `delete` drops it.

use std::path::PathBuf;

use axum::http::StatusCode;
use base64::Engine;
use local::EmbeddedPostgres;
use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair};
use serde_json::{Value, json};
use shared::jobs::Processed;
use sqlx::{
    Connection, PgConnection,
    postgres::{PgConnectOptions, PgSslMode},
};
use uuid::Uuid;

use crate::{
    harness::{SETTINGS_KEY, TestApp},
    postgres_tls::{authority, write_owned},
};

/// The external instance: a private PostgreSQL over TLS, its TCP
/// connections authenticated by password; the test reaches it as its
/// superuser through the Unix socket.
struct Instance {
    _pg: EmbeddedPostgres,
    dir: PathBuf,
    port: u16,
    ca_pem: String,
}

impl Instance {
    async fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("kbdb-{}", Uuid::new_v4().simple()));
        let port = tests::free_port();
        let pg = EmbeddedPostgres::start(&dir, port)
            .await
            .expect("postgres starts");
        let dir = dir.canonicalize().unwrap();
        let (ca_pem, ca) = authority("kubebyon-test-instance-ca");
        let key = KeyPair::generate().unwrap();
        let mut serving =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let certificate = serving.signed_by(&key, &ca).unwrap();
        write_owned(&dir, "server.crt", &certificate.pem());
        write_owned(&dir, "server.key", &key.serialize_pem());
        write_owned(
            &dir,
            "pg_hba.conf",
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 scram-sha-256\n\
             hostssl all all ::1/128 scram-sha-256\n",
        );
        let instance = Self {
            _pg: pg,
            dir,
            port,
            ca_pem,
        };
        let mut su = instance.superuser().await;
        for statement in [
            "ALTER SYSTEM SET ssl = on",
            "CREATE ROLE kbadmin LOGIN CREATEROLE CREATEDB PASSWORD 'admin-secret-1'",
            "CREATE ROLE weak LOGIN PASSWORD 'weak-secret-1'",
            // Where the registry is made (PostgreSQL 15 no longer lets
            // PUBLIC create in a database's public schema, nor schemas).
            "GRANT CREATE ON DATABASE postgres TO kbadmin",
            // Another admin database, for another instance's registry.
            "CREATE DATABASE weakdb",
            "GRANT CREATE ON DATABASE weakdb TO weak",
            "CREATE ROLE bare LOGIN PASSWORD 'bare-secret-1'",
            "SELECT pg_reload_conf()",
        ] {
            sqlx::query(statement).execute(&mut su).await.unwrap();
        }
        // The reload is asynchronous: until TLS is offered, wait.
        for _ in 0..50 {
            if instance
                .connect("kbadmin", "admin-secret-1", "postgres")
                .await
                .is_ok()
            {
                return instance;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("the instance does not take TLS connections");
    }

    async fn superuser(&self) -> PgConnection {
        self.superuser_in("postgres").await
    }

    /// The superuser's connection to `database`, through the socket.
    async fn superuser_in(&self, database: &str) -> PgConnection {
        PgConnection::connect_with(
            &PgConnectOptions::new()
                .socket(&self.dir)
                .port(self.port)
                .username("postgres")
                .database(database),
        )
        .await
        .unwrap()
    }

    /// A client's connection over TCP with `verify-full` and the CA.
    async fn connect(
        &self,
        role: &str,
        password: &str,
        database: &str,
    ) -> Result<PgConnection, sqlx::Error> {
        PgConnection::connect_with(
            &PgConnectOptions::new_without_pgpass()
                .host("localhost")
                .port(self.port)
                .username(role)
                .password(password)
                .database(database)
                .ssl_mode(PgSslMode::VerifyFull)
                .ssl_root_cert_from_pem(self.ca_pem.clone().into_bytes()),
        )
        .await
    }

    fn registration(&self, name: &str, role: &str, password: &str) -> Value {
        json!({
            "name": name, "host": "localhost", "port": self.port, "tls_mode": "verify-full",
            "ca_bundle": self.ca_pem, "admin_role": role, "admin_password": password,
            "default": true,
        })
    }

    async fn exists(&self, catalog: &str, name: &str) -> bool {
        let (table, column) = match catalog {
            "database" => ("pg_database", "datname"),
            _ => ("pg_roles", "rolname"),
        };
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT EXISTS (SELECT 1 FROM {table} WHERE {column} = $1)"
        )))
        .bind(name)
        .fetch_one(&mut self.superuser().await)
        .await
        .unwrap()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn platform(worker: &'static str) -> TestApp {
    TestApp::builder(worker)
        .host()
        .env("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY)
        .build()
        .await
}

async fn register(app: &TestApp, instance: &Instance) -> Value {
    let (status, body) = app
        .call(
            "POST",
            "/api/console/admin/database-instances",
            Some(instance.registration("main", "kbadmin", "admin-secret-1")),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

async fn ask(app: &TestApp, cluster: &str, body: Value) -> Value {
    let (status, reply) = app
        .call(
            "POST",
            &format!("/api/console/clusters/{cluster}/databases"),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    reply["database"].clone()
}

async fn database(app: &TestApp, cluster: &str, id: &Value) -> (StatusCode, Value) {
    app.call(
        "GET",
        &format!(
            "/api/console/clusters/{cluster}/databases/{}",
            id.as_str().unwrap()
        ),
        None,
    )
    .await
}

/// The projected Secret's values, decoded.
fn secret(app: &TestApp, namespace: &str, release: &str, name: &str) -> Option<Value> {
    let secret = app
        .sim()
        .vcluster(namespace, release)?
        .get("v1", "Secret", "default", name)?;
    let decoded: serde_json::Map<String, Value> = secret["data"]
        .as_object()?
        .iter()
        .map(|(k, v)| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap())
                .unwrap();
            (k.clone(), Value::String(String::from_utf8(bytes).unwrap()))
        })
        .collect();
    Some(Value::Object(decoded))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_is_checked_as_it_is_saved_and_its_password_never_shown() {
    let instance = Instance::start().await;
    let app = platform("worker-db-instances").await;
    let instances = "/api/console/admin/database-instances";

    // A CA that did not sign the server's certificate: refused, nothing kept.
    let (other_ca, _) = authority("someone-else");
    let mut wrong = instance.registration("main", "kbadmin", "admin-secret-1");
    wrong["ca_bundle"] = other_ca.into();
    let (status, body) = app.call("POST", instances, Some(wrong)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("database_instance_unreachable")
        ),
        "{body}"
    );
    assert!(
        body["detail"].as_str().unwrap().contains("certificate"),
        "{body}"
    );
    // A wrong password, the same.
    let (status, body) = app
        .call(
            "POST",
            instances,
            Some(instance.registration("main", "kbadmin", "not-it")),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // No TLS: not allowed here.
    let mut plaintext = instance.registration("main", "kbadmin", "admin-secret-1");
    plaintext["tls_mode"] = "disable".into();
    let (status, body) = app.call("POST", instances, Some(plaintext)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["errors"][0]["field"], "tls_mode", "{body}");
    // A role that cannot make the ownership registry: refused, saying so.
    let (status, body) = app
        .call(
            "POST",
            instances,
            Some(instance.registration("bare", "bare", "bare-secret-1")),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("ownership registry"),
        "{body}"
    );
    assert_eq!(app.count("database_instances").await, 0);

    let saved = register(&app, &instance).await;
    assert!(
        saved["server_version"].as_str().unwrap().starts_with("15"),
        "{saved}"
    );
    assert_eq!(
        (&saved["can_create_role"], &saved["can_create_database"]),
        (&json!(true), &json!(true))
    );
    // A role without CREATEROLE: saved, and the check says so.
    let mut weak = instance.registration("weak", "weak", "weak-secret-1");
    weak["admin_database"] = "weakdb".into();
    weak["default"] = false.into();
    let (status, weak) = app.call("POST", instances, Some(weak)).await;
    assert_eq!(status, StatusCode::CREATED, "{weak}");
    assert_eq!(weak["can_create_role"], false);
    let (_, listed) = app.call("GET", instances, None).await;
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert_eq!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["is_default"] == true)
            .count(),
        1,
        "one default"
    );
    // The password is nowhere in sight: not in answers, not in the audit
    // log, not in the table in the clear.
    let audit: Vec<String> = sqlx::query_scalar(
        "SELECT metadata::text FROM audit_events WHERE target_kind = 'database_instance'",
    )
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(audit.len(), 2);
    let stored: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT admin_password_encrypted FROM database_instances")
            .fetch_all(&app.db.pool)
            .await
            .unwrap();
    for text in [listed.to_string(), audit.join(" ")].into_iter().chain(
        stored
            .iter()
            .map(|b| String::from_utf8_lossy(b).to_string()),
    ) {
        assert!(
            !text.contains("admin-secret-1") && !text.contains("weak-secret-1"),
            "{text}"
        );
    }
    let (status, _) = app
        .call(
            "DELETE",
            &format!("{instances}/{}", weak["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_is_made_owned_and_projected_and_its_credential_logs_in_alone() {
    let instance = Instance::start().await;
    let app = platform("worker-db-ready").await;
    let saved = register(&app, &instance).await;
    let (cluster, namespace) = app.create_ready("shop", "nodeport").await;
    let orders = ask(&app, &cluster, json!({"name": "orders"})).await;
    assert_eq!(orders["phase"], "planned");
    let payments = ask(&app, &cluster, json!({"name": "payments"})).await;
    let done = app.drive().await;
    assert!(
        done.iter().all(|(_, p)| *p == Processed::Succeeded),
        "{done:?}"
    );
    let (_, orders) = database(&app, &cluster, &orders["id"]).await;
    assert_eq!(orders["phase"], "ready", "{orders}");
    assert_eq!(orders["conditions"][0]["type"], "Ready");
    assert_eq!(orders["conditions"][0]["status"], "True");
    let name = orders["database_name"].as_str().unwrap().to_string();
    assert_eq!(
        name,
        format!("kb_{}_orders", &cluster.replace('-', "")[..8])
    );
    // On the server: the role and the database, in the registry as this
    // platform's, this instance's and this record's.
    assert!(instance.exists("role", &name).await && instance.exists("database", &name).await);
    let install: Uuid = sqlx::query_scalar("SELECT install_id FROM system_settings")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    let registered: Vec<(String, Uuid, Uuid, Uuid)> = sqlx::query_as(
        "SELECT kind, install_id, instance_id, record_id FROM kubebyon_registry.objects
         WHERE name = $1 ORDER BY kind",
    )
    .bind(&name)
    .fetch_all(&mut instance.superuser().await)
    .await
    .unwrap();
    let record: Uuid = orders["id"].as_str().unwrap().parse().unwrap();
    let instance_id: Uuid = saved["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        registered,
        [
            ("database".to_string(), install, instance_id, record),
            ("role".to_string(), install, instance_id, record)
        ]
    );

    // The Secret in the cluster, and its credential logging in with
    // verify-full and the CA it carries: a table made and read.
    let projected = secret(&app, &namespace, "shop", "orders-postgres").expect("the Secret");
    assert_eq!(
        (
            &projected["database"],
            &projected["username"],
            &projected["sslmode"]
        ),
        (&json!(name), &json!(name), &json!("verify-full"))
    );
    assert_eq!(projected["ca.crt"], instance.ca_pem.as_str());
    assert!(
        projected["uri"]
            .as_str()
            .unwrap()
            .starts_with(&format!("postgresql://{name}:")),
        "{projected}"
    );
    let password = projected["password"].as_str().unwrap();
    let mut own = instance.connect(&name, password, &name).await.unwrap();
    sqlx::query("CREATE TABLE orders (id int PRIMARY KEY)")
        .execute(&mut own)
        .await
        .unwrap();
    sqlx::query("INSERT INTO orders VALUES (1)")
        .execute(&mut own)
        .await
        .unwrap();
    // The other database's credential cannot connect to this one.
    let other = secret(&app, &namespace, "shop", "payments-postgres").unwrap();
    let refused = instance
        .connect(
            other["username"].as_str().unwrap(),
            other["password"].as_str().unwrap(),
            &name,
        )
        .await
        .expect_err("another tenant's credential is refused");
    assert!(
        refused.to_string().contains("permission denied"),
        "{refused}"
    );
    // The password is sealed in the platform's database.
    let sealed: Vec<u8> =
        sqlx::query_scalar("SELECT password_encrypted FROM tenant_databases WHERE id = $1")
            .bind(record)
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    assert!(!String::from_utf8_lossy(&sealed).contains(password));
    let (_, payments) = database(&app, &cluster, &payments["id"]).await;
    assert_eq!(payments["phase"], "ready", "one job made both: {payments}");

    // The instance is in use: it cannot be removed.
    let (status, body) = app
        .call(
            "DELETE",
            &format!(
                "/api/console/admin/database-instances/{}",
                saved["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("database_instance_in_use"))
    );

    // A lost checkpoint (the phase set back, as if what the job wrote after
    // the role was lost): the next run finds the role and the database its
    // own and ends `ready`, one of each, the credential the same.
    sqlx::query("UPDATE tenant_databases SET phase = 'credential_created' WHERE id = $1")
        .bind(record)
        .execute(&app.db.pool)
        .await
        .unwrap();
    let again = tests::handlers::enqueue(
        &app.db.pool,
        cluster.parse().unwrap(),
        shared::domain::JobType::DatabaseConverge,
        3,
    )
    .await;
    assert_eq!(
        app.worker("worker-db-again").process(again).await.unwrap(),
        Processed::Succeeded
    );
    let (_, resumed) = database(&app, &cluster, &orders["id"]).await;
    assert_eq!(resumed["phase"], "ready", "{resumed}");
    let counts: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_roles WHERE rolname = $1),
                (SELECT count(*) FROM pg_database WHERE datname = $1)",
    )
    .bind(&name)
    .fetch_one(&mut instance.superuser().await)
    .await
    .unwrap();
    assert_eq!(counts, (1, 1));
    instance
        .connect(&name, password, &name)
        .await
        .expect("the credential is the same");

    // Rotation: a new password, set on the role and projected; the old one
    // refused, the data where it was.
    let (status, body) = app
        .call(
            "POST",
            &format!(
                "/api/console/clusters/{cluster}/databases/{}/rotate",
                orders["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    app.drive().await;
    let (_, rotated) = database(&app, &cluster, &orders["id"]).await;
    assert_eq!(rotated["phase"], "ready", "{rotated}");
    let renewed = secret(&app, &namespace, "shop", "orders-postgres").unwrap();
    let new_password = renewed["password"].as_str().unwrap();
    assert_ne!(new_password, password);
    let refused = instance
        .connect(&name, password, &name)
        .await
        .expect_err("the old password is refused");
    assert!(
        refused
            .to_string()
            .contains("password authentication failed"),
        "{refused}"
    );
    let mut renewed_login = instance.connect(&name, new_password, &name).await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&mut renewed_login)
        .await
        .unwrap();
    assert_eq!(rows, 1);

    // The cluster deleted: its databases hold the instance no more.
    let (status, body) = app
        .call("DELETE", &format!("/api/console/clusters/{cluster}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    app.drive().await;
    let (status, body) = app
        .call(
            "DELETE",
            &format!(
                "/api/console/admin/database-instances/{}",
                saved["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_registry_does_not_prove_is_ours_is_a_conflict_left_as_it_is() {
    let instance = Instance::start().await;
    let app = platform("worker-db-conflict").await;
    register(&app, &instance).await;
    let (cluster, _) = app.create_ready("legacy", "nodeport").await;
    // Someone else's database, of the name the platform would derive.
    let theirs = format!("kb_{}_ledger", &cluster.replace('-', "")[..8]);
    let mut su = instance.superuser().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {theirs}")))
        .execute(&mut su)
        .await
        .unwrap();
    let mut inside = instance.superuser_in(&theirs).await;
    sqlx::raw_sql("CREATE TABLE entries (n int); INSERT INTO entries VALUES (42)")
        .execute(&mut inside)
        .await
        .unwrap();
    let ledger = ask(
        &app,
        &cluster,
        json!({"name": "ledger", "deletion_policy": "delete"}),
    )
    .await;
    app.drive().await;
    let (_, ledger) = database(&app, &cluster, &ledger["id"]).await;
    assert_eq!(ledger["phase"], "conflict", "{ledger}");
    assert!(
        ledger["last_error"].as_str().unwrap().contains(&theirs),
        "the error names the object: {ledger}"
    );
    let kept: i32 = sqlx::query_scalar("SELECT n FROM entries")
        .fetch_one(&mut inside)
        .await
        .unwrap();
    assert_eq!(kept, 42, "untouched");
    // Removing it with `delete` drops nothing the registry does not prove
    // is its own: the removal stops in conflict.
    drop(inside);
    let removal = remove_with_policy(&app, &cluster, &ledger).await;
    assert_eq!(
        (&removal["phase"], &removal["deleting"]),
        (&json!("conflict"), &json!(true)),
        "{removal}"
    );
    assert!(instance.exists("database", &theirs).await);
}

async fn remove_with_policy(app: &TestApp, cluster: &str, record: &Value) -> Value {
    let (status, body) = app
        .call(
            "DELETE",
            &format!(
                "/api/console/clusters/{cluster}/databases/{}",
                record["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    app.drive().await;
    database(app, cluster, &record["id"]).await.1
}

#[tokio::test(flavor = "multi_thread")]
async fn retain_keeps_the_data_delete_drops_it_and_a_retained_name_is_not_taken_back() {
    let instance = Instance::start().await;
    let app = platform("worker-db-policies").await;
    register(&app, &instance).await;
    let (cluster, namespace) = app.create_ready("keeper", "nodeport").await;
    let kept = ask(&app, &cluster, json!({"name": "kept"})).await;
    let dropped = ask(
        &app,
        &cluster,
        json!({"name": "dropped", "deletion_policy": "delete"}),
    )
    .await;
    app.drive().await;
    let kept_name = kept["database_name"].as_str().unwrap().to_string();
    let dropped_name = dropped["database_name"].as_str().unwrap().to_string();
    let credential = secret(&app, &namespace, "keeper", "kept-postgres").unwrap();
    let mut own = instance
        .connect(
            &kept_name,
            credential["password"].as_str().unwrap(),
            &kept_name,
        )
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE t (v text); INSERT INTO t VALUES ('still here')")
        .execute(&mut own)
        .await
        .unwrap();
    drop(own);

    let gone = remove_with_policy(&app, &cluster, &kept).await;
    assert_eq!(gone["status"], 404, "the record is forgotten: {gone}");
    let gone = remove_with_policy(&app, &cluster, &dropped).await;
    assert_eq!(gone["status"], 404, "{gone}");
    for name in ["kept-postgres", "dropped-postgres"] {
        assert!(secret(&app, &namespace, "keeper", name).is_none(), "{name}");
    }
    // retain: role, database and data stay; delete: both gone, and their
    // registry rows.
    assert!(instance.exists("role", &kept_name).await);
    let mut su_kept = instance.superuser_in(&kept_name).await;
    let value: String = sqlx::query_scalar("SELECT v FROM t")
        .fetch_one(&mut su_kept)
        .await
        .unwrap();
    assert_eq!(value, "still here");
    assert!(!instance.exists("database", &dropped_name).await);
    assert!(!instance.exists("role", &dropped_name).await);
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM kubebyon_registry.objects WHERE name = $1")
            .bind(&dropped_name)
            .fetch_one(&mut instance.superuser().await)
            .await
            .unwrap();
    assert_eq!(rows, 0);

    // Asked for again under the retained name: a new record, which the
    // registry does not name, so a conflict; the kept database untouched.
    let again = ask(&app, &cluster, json!({"name": "kept"})).await;
    app.drive().await;
    let (_, again) = database(&app, &cluster, &again["id"]).await;
    assert_eq!(again["phase"], "conflict", "{again}");
    let value: String = sqlx::query_scalar("SELECT v FROM t")
        .fetch_one(&mut su_kept)
        .await
        .unwrap();
    assert_eq!(value, "still here");
}
