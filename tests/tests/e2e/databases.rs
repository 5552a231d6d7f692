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

use shared::databases::records::DatabaseConvergence;
use shared::domain::JobPayload;
use std::path::PathBuf;

use axum::http::StatusCode;
use base64::Engine;
use local::EmbeddedPostgres;
use serde_json::{Value, json};
use shared::jobs::Processed;
use sqlx::{
    Connection, PgConnection,
    postgres::{PgConnectOptions, PgSslMode},
};
use uuid::Uuid;

use crate::harness::{SETTINGS_KEY, TestApp};
use tests::pgtls::authority;

/// The external instance: a private PostgreSQL over TLS, its TCP
/// connections authenticated by password; the test reaches it as its
/// superuser through the Unix socket.
pub(crate) struct Instance {
    _pg: EmbeddedPostgres,
    dir: PathBuf,
    pub(crate) port: u16,
    pub(crate) ca_pem: String,
}

impl Instance {
    /// The server, with the admin role `kbadmin` (password
    /// `admin-secret-1`), which may create roles and databases.
    pub(crate) async fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("kbdb-{}", Uuid::new_v4().simple()));
        let port = tests::free_port();
        let pg = EmbeddedPostgres::start(&dir, port)
            .await
            .expect("postgres starts");
        let dir = dir.canonicalize().unwrap();
        let ca_pem = tests::pgtls::serve_tls_with_passwords(&dir);
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

/// A platform whose instances may be on private addresses (the tests'
/// servers are on loopback).
async fn platform(worker: &'static str) -> TestApp {
    TestApp::builder(worker)
        .host()
        .env("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY)
        .env("KUBEBYON_ALLOW_PRIVATE_OUTBOUND", "true")
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

/// `POST …/databases/{id}/{action}` (`retry`, `rotate`).
async fn act(app: &TestApp, cluster: &str, record: &Value, action: &str) -> (StatusCode, Value) {
    app.call(
        "POST",
        &format!(
            "/api/console/clusters/{cluster}/databases/{}/{action}",
            record["id"].as_str().unwrap()
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
    // Where no server is (a cloud's metadata endpoint), whatever the policy.
    for (field, address) in [("host", "169.254.169.254"), ("hostaddr", "fe80::1")] {
        let mut metadata = instance.registration("main", "kbadmin", "admin-secret-1");
        metadata[field] = address.into();
        let (status, body) = app.call("POST", instances, Some(metadata)).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                Some("database_instance_unreachable")
            ),
            "{body}"
        );
        assert!(
            body["detail"].as_str().unwrap().contains("link-local"),
            "{body}"
        );
    }
    // A platform that keeps to public addresses refuses the loopback one.
    let public_only = TestApp::builder("worker-db-public")
        .env("KUBEBYON_SETTINGS_KEY", SETTINGS_KEY)
        .build()
        .await;
    let (status, body) = public_only
        .call(
            "POST",
            instances,
            Some(instance.registration("main", "kbadmin", "admin-secret-1")),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("a private address"),
        "{body}"
    );
    assert_eq!(app.count("database_instances").await, 0);

    let saved = register(&app, &instance).await;
    // The stored password goes to no other server: a new host, port or TLS
    // check needs it again, and nothing changes without it.
    let one = format!("{instances}/{}", saved["id"].as_str().unwrap());
    for (field, value) in [
        ("host", json!("127.0.0.1")),
        ("port", json!(instance.port + 1)),
        ("tls_mode", json!("require")),
    ] {
        let mut moved = instance.registration("main", "kbadmin", "admin-secret-1");
        moved.as_object_mut().unwrap().remove("admin_password");
        moved[field] = value;
        let (status, body) = app.call("PUT", &one, Some(moved)).await;
        assert_eq!(
            (status, body["errors"][0]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("admin_password")),
            "{field}: {body}"
        );
    }
    let (_, kept) = app.call("GET", &one, None).await;
    assert_eq!(
        (&kept["host"], &kept["tls_mode"]),
        (&json!("localhost"), &json!("verify-full"))
    );
    // The same server, the password left out: kept, and checked with it.
    let mut same = instance.registration("main", "kbadmin", "admin-secret-1");
    same.as_object_mut().unwrap().remove("admin_password");
    let (status, body) = app.call("PUT", &one, Some(same)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
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
    assert_eq!(audit.len(), 3, "two made, one replaced");
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
        |_| DatabaseConvergence {},
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
    let (status, body) = act(&app, &cluster, &orders, "rotate").await;
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

// The platform projects credentials with the cluster's admin credential:
// never into the cluster's own namespaces (where the tenant may write no
// Secret: bootstrap tokens live in kube-system), never over a Secret it did
// not make, and it removes only the one it made.
#[tokio::test(flavor = "multi_thread")]
async fn a_credential_goes_only_where_the_tenant_may_write_and_removes_only_its_own_secret() {
    let instance = Instance::start().await;
    let app = platform("worker-db-secrets").await;
    register(&app, &instance).await;
    let (cluster, namespace) = app.create_ready("vault", "nodeport").await;
    for system in [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "kubebyon-ingress",
    ] {
        let (status, body) = app
            .call(
                "POST",
                &format!("/api/console/clusters/{cluster}/databases"),
                Some(json!({"name": "tokens", "namespace": system, "secret_name": "bootstrap-token-abcdef"})),
            )
            .await;
        assert_eq!(
            (status, body["errors"][0]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("namespace")),
            "{system}: {body}"
        );
    }
    // The tenant's own Secret under the name a credential asks for.
    let vcluster = app.sim().vcluster(&namespace, "vault").unwrap();
    let theirs = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": "app-config", "namespace": "default" },
        "data": { "mine": "bWluZQ==" },
    });
    vcluster.put(theirs).unwrap();
    let record = ask(
        &app,
        &cluster,
        json!({"name": "orders", "secret_name": "app-config"}),
    )
    .await;
    app.drive().await;
    let (_, failed) = database(&app, &cluster, &record["id"]).await;
    assert_eq!(failed["phase"], "failed", "{failed}");
    assert!(
        failed["last_error"]
            .as_str()
            .unwrap()
            .contains("did not make for this database"),
        "{failed}"
    );
    let kept = secret(&app, &namespace, "vault", "app-config").unwrap();
    assert_eq!(kept, json!({ "mine": "mine" }), "left as it was");
    // Removing the database leaves the tenant's Secret too.
    remove_with_policy(&app, &cluster, &record).await;
    assert_eq!(
        secret(&app, &namespace, "vault", "app-config").unwrap(),
        json!({ "mine": "mine" })
    );
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

/// The plan's `max_databases` is checked under the organisation's
/// entitlement lock, in the transaction that writes the record: of eight
/// databases asked for at once with two places left, two are accepted and
/// six refused with the limit's numbers; the usage the account reads says
/// two; a database removed gives its place back once it is forgotten.
#[tokio::test(flavor = "multi_thread")]
async fn the_plan_limits_databases_even_when_asked_for_at_once() {
    let instance = Instance::start().await;
    let app = platform("worker-db-plan").await;
    register(&app, &instance).await;
    let (cluster, _) = app.create_ready("counted", "nodeport").await;
    let plan = tests::handlers::default_plan(&app.db.pool, "Two databases", 5, 5).await;
    sqlx::query("UPDATE plans SET max_databases = 2 WHERE id = $1")
        .bind(plan)
        .execute(&app.db.pool)
        .await
        .unwrap();
    let path = format!("/api/console/clusters/{cluster}/databases");
    let replies = futures_util::future::join_all(
        (0..8).map(|i| app.call("POST", &path, Some(json!({"name": format!("db{i}")})))),
    )
    .await;
    let (accepted, refused): (Vec<_>, Vec<_>) = replies
        .into_iter()
        .partition(|(status, _)| *status == StatusCode::ACCEPTED);
    assert_eq!(accepted.len(), 2, "{accepted:?} {refused:?}");
    for (status, body) in &refused {
        assert_eq!(*status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["code"], "plan_limit_exceeded", "{body}");
        assert_eq!(
            (
                &body["plan_limit"]["resource"],
                &body["plan_limit"]["limit"],
                &body["plan_limit"]["usage"]
            ),
            (&json!("databases"), &json!(2), &json!(2)),
            "{body}"
        );
    }
    let (_, listed) = app.call("GET", &path, None).await;
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    let (_, entitlements) = app
        .call("GET", "/api/console/account/entitlements", None)
        .await;
    assert_eq!(
        (
            &entitlements["usage"]["databases"],
            &entitlements["limits"]["databases"],
            &entitlements["remaining"]["databases"]
        ),
        (&json!(2), &json!(2), &json!(0)),
        "{entitlements}"
    );

    app.drive().await;
    let gone = remove_with_policy(&app, &cluster, &accepted[0].1["database"]).await;
    assert_eq!(gone["status"], 404, "forgotten: {gone}");
    let next = ask(&app, &cluster, json!({"name": "db_next"})).await;
    assert_eq!(next["phase"], "planned");
    let (status, body) = app
        .call("POST", &path, Some(json!({"name": "db_over"})))
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::FORBIDDEN, &json!("plan_limit_exceeded")),
        "{body}"
    );
}

async fn change(
    app: &TestApp,
    cluster: &str,
    record: &Value,
    extensions: Value,
) -> (StatusCode, Value) {
    app.call(
        "PATCH",
        &format!(
            "/api/console/clusters/{cluster}/databases/{}",
            record["id"].as_str().unwrap()
        ),
        Some(json!({ "extensions": extensions })),
    )
    .await
}

async fn extensions_in(instance: &Instance, database: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT extname::text FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY 1",
    )
    .fetch_all(&mut instance.superuser_in(database).await)
    .await
    .unwrap()
}

/// Extensions are made in the database as its own role: a `trusted` one is
/// made and usable by the credential; more are added later, none removed;
/// one the server lets only a superuser make, or does not have, stops the
/// database `failed` with the reason, nothing else made; look-alike names
/// never reach the server.
#[tokio::test(flavor = "multi_thread")]
async fn extensions_are_made_as_the_database_s_owner_and_only_added() {
    let instance = Instance::start().await;
    let app = platform("worker-db-extensions").await;
    register(&app, &instance).await;
    let (cluster, namespace) = app.create_ready("crypt", "nodeport").await;
    let path = format!("/api/console/clusters/{cluster}/databases");
    for (bad, field) in [
        (json!(["PgCrypto"]), "extensions[0]"),
        (json!(["pgcrypto", "рgcrypto"]), "extensions[1]"), // Cyrillic er
        (json!(["pgcrypto", "pgcrypto"]), "extensions[1]"),
        (json!(["x\"; DROP DATABASE postgres; --"]), "extensions[0]"),
        (
            json!((0..17).map(|i| format!("e{i}")).collect::<Vec<_>>()),
            "extensions",
        ),
    ] {
        let (status, body) = app
            .call(
                "POST",
                &path,
                Some(json!({"name": "vault", "extensions": bad})),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(
            crate::harness::problem_fields(&body).contains(&field),
            "{field}: {body}"
        );
    }
    assert_eq!(app.call("GET", &path, None).await.1, json!([]));

    let vault = ask(
        &app,
        &cluster,
        json!({"name": "vault", "extensions": ["pgcrypto"]}),
    )
    .await;
    app.drive().await;
    let (_, vault) = database(&app, &cluster, &vault["id"]).await;
    assert_eq!(vault["phase"], "ready", "{vault}");
    let name = vault["database_name"].as_str().unwrap().to_string();
    let credential = secret(&app, &namespace, "crypt", "vault-postgres").unwrap();
    let mut own = instance
        .connect(&name, credential["password"].as_str().unwrap(), &name)
        .await
        .unwrap();
    let bytes: Vec<u8> = sqlx::query_scalar("SELECT gen_random_bytes(8)")
        .fetch_one(&mut own)
        .await
        .unwrap();
    assert_eq!(bytes.len(), 8);
    let owner: String = sqlx::query_scalar(
        "SELECT r.rolname::text FROM pg_extension e JOIN pg_roles r ON r.oid = e.extowner
         WHERE e.extname = 'pgcrypto'",
    )
    .fetch_one(&mut own)
    .await
    .unwrap();
    assert_eq!(owner, name, "made as the database's own role");

    // Added later; the same list again changes nothing; one left out is
    // refused.
    let (status, body) = change(&app, &cluster, &vault, json!(["pgcrypto", "citext"])).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["database"]["phase"], "database_created", "{body}");
    app.drive().await;
    let (_, vault) = database(&app, &cluster, &vault["id"]).await;
    assert_eq!(vault["phase"], "ready", "{vault}");
    assert_eq!(
        extensions_in(&instance, &name).await,
        ["citext", "pgcrypto"]
    );
    let (status, body) = change(&app, &cluster, &vault, json!(["citext", "pgcrypto"])).await;
    assert_eq!(
        (status, &body["phase"]),
        (StatusCode::OK, &json!("ready")),
        "{body}"
    );
    let (status, body) = change(&app, &cluster, &vault, json!(["citext"])).await;
    assert_eq!(
        (status, &body["code"]),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!("extensions_append_only")
        ),
        "{body}"
    );

    // Only a superuser may make file_fdw: the database stops with the
    // reason; what it had stays, and the credential still logs in.
    let (status, body) = change(
        &app,
        &cluster,
        &vault,
        json!(["pgcrypto", "citext", "file_fdw"]),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    app.drive().await;
    let (_, vault) = database(&app, &cluster, &vault["id"]).await;
    assert_eq!(vault["phase"], "failed", "{vault}");
    let error = vault["last_error"].as_str().unwrap();
    assert!(
        error.contains("file_fdw") && error.contains("permission denied"),
        "{error}"
    );
    assert_eq!(
        extensions_in(&instance, &name).await,
        ["citext", "pgcrypto"]
    );
    instance
        .connect(&name, credential["password"].as_str().unwrap(), &name)
        .await
        .expect("the credential is untouched");

    // One the server does not have.
    let other = ask(
        &app,
        &cluster,
        json!({"name": "ghost", "extensions": ["no_such_extension"]}),
    )
    .await;
    app.drive().await;
    let (_, other) = database(&app, &cluster, &other["id"]).await;
    assert_eq!(other["phase"], "failed", "{other}");
    assert!(
        other["last_error"]
            .as_str()
            .unwrap()
            .contains("no_such_extension is not available"),
        "{other}"
    );
}

/// The worker dies between each write to the server (or to the cluster)
/// and the checkpoint that records it: the checkpoint's write, and the
/// `failed` one after it, are refused by a trigger on the platform's
/// database, as if the process had stopped there. Each run finds the write
/// before it done and redoes it; the last ends `ready` with one role, one
/// database, one registry row of each, the extension, the Secret, and the
/// credential generated once.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_each_write_and_its_checkpoint_resumes_to_one_of_each() {
    let instance = Instance::start().await;
    let app = platform("worker-db-crash").await;
    register(&app, &instance).await;
    let (cluster, namespace) = app.create_ready("sturdy", "nodeport").await;
    sqlx::raw_sql(
        "CREATE TABLE test_crash_at (phase text);
         CREATE FUNCTION test_crash() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.phase <> OLD.phase
                AND (NEW.phase = 'failed' OR NEW.phase IN (SELECT phase FROM test_crash_at)) THEN
                 RAISE EXCEPTION 'the worker stops before the % checkpoint', NEW.phase;
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER test_crash BEFORE UPDATE ON tenant_databases
         FOR EACH ROW EXECUTE FUNCTION test_crash();",
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let (status, reply) = app
        .call(
            "POST",
            &format!("/api/console/clusters/{cluster}/databases"),
            Some(json!({"name": "ledger", "extensions": ["pgcrypto"]})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    let record: Uuid = reply["database"]["id"].as_str().unwrap().parse().unwrap();
    let name = reply["database"]["database_name"]
        .as_str()
        .unwrap()
        .to_string();
    let job_id: Uuid = sqlx::query_scalar(
        "UPDATE cluster_jobs SET max_attempts = 20 WHERE operation_id = $1::uuid RETURNING id",
    )
    .bind(reply["operation_id"].as_str().unwrap())
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    let job = shared::jobs::JobMessage {
        job_id,
        job_type: shared::databases::records::DatabaseConvergence::KIND.job_type,
    };
    let worker = app.worker("worker-db-crash");
    let run = || async {
        sqlx::query("UPDATE cluster_jobs SET run_after = now() WHERE id = $1")
            .bind(job_id)
            .execute(&app.db.pool)
            .await
            .unwrap();
        worker.process(job).await.unwrap()
    };
    let phase = || async {
        sqlx::query_scalar::<_, String>("SELECT phase FROM tenant_databases WHERE id = $1")
            .bind(record)
            .fetch_one(&app.db.pool)
            .await
            .unwrap()
    };
    let registered = |kind: &'static str| {
        let name = name.clone();
        let instance = &instance;
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM kubebyon_registry.objects WHERE kind = $1 AND name = $2",
            )
            .bind(kind)
            .bind(&name)
            .fetch_one(&mut instance.superuser().await)
            .await
            .unwrap()
        }
    };
    let mut sealed: Option<Vec<u8>> = None;
    for (checkpoint, before) in [
        ("credential_created", "planned"),
        ("role_created", "credential_created"),
        ("database_created", "role_created"),
        ("secret_projected", "database_created"),
        ("ready", "secret_projected"),
    ] {
        sqlx::query("DELETE FROM test_crash_at")
            .execute(&app.db.pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO test_crash_at VALUES ($1)")
            .bind(checkpoint)
            .execute(&app.db.pool)
            .await
            .unwrap();
        assert_eq!(run().await, Processed::RetryScheduled, "{checkpoint}");
        assert_eq!(phase().await, before, "the {checkpoint} checkpoint is lost");
        // What the step wrote before the worker stopped.
        match checkpoint {
            "credential_created" => {
                sealed = sqlx::query_scalar(
                    "SELECT password_encrypted FROM tenant_databases WHERE id = $1",
                )
                .bind(record)
                .fetch_one(&app.db.pool)
                .await
                .unwrap();
                assert!(sealed.is_some(), "the credential is stored");
            }
            "role_created" => {
                assert!(instance.exists("role", &name).await);
                assert_eq!(registered("role").await, 1);
            }
            "database_created" => {
                assert!(instance.exists("database", &name).await);
                assert_eq!(registered("database").await, 1);
            }
            "secret_projected" => {
                assert!(secret(&app, &namespace, "sturdy", "ledger-postgres").is_some());
                assert_eq!(extensions_in(&instance, &name).await, ["pgcrypto"]);
            }
            _ => {}
        }
    }
    sqlx::query("DELETE FROM test_crash_at")
        .execute(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(run().await, Processed::Succeeded);
    assert_eq!(phase().await, "ready");
    let counts: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_roles WHERE rolname = $1),
                (SELECT count(*) FROM pg_database WHERE datname = $1)",
    )
    .bind(&name)
    .fetch_one(&mut instance.superuser().await)
    .await
    .unwrap();
    assert_eq!(counts, (1, 1));
    assert_eq!(
        (registered("role").await, registered("database").await),
        (1, 1)
    );
    let still: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT password_encrypted FROM tenant_databases WHERE id = $1")
            .bind(record)
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(still, sealed, "the credential was generated once");
    let credential = secret(&app, &namespace, "sturdy", "ledger-postgres").unwrap();
    let mut own = instance
        .connect(&name, credential["password"].as_str().unwrap(), &name)
        .await
        .expect("the projected credential logs in");
    let bytes: Vec<u8> = sqlx::query_scalar("SELECT gen_random_bytes(4)")
        .fetch_one(&mut own)
        .await
        .unwrap();
    assert_eq!(bytes.len(), 4);

    // A worker whose lease is gone (its attempt ended) writes nothing.
    let stale = shared::jobs::ClaimedJob {
        id: job_id,
        cluster_id: cluster.parse().unwrap(),
        operation_id: reply["operation_id"].as_str().unwrap().parse().unwrap(),
        job_type: shared::databases::records::DatabaseConvergence::KIND.job_type,
        payload: json!({}),
        attempt: 1,
        max_attempts: 20,
        worker_id: "worker-db-stale".into(),
        due_for: std::time::Duration::ZERO,
        trace_parent: None,
    };
    let records = shared::databases::records::record_phase(
        &app.db.pool,
        &stale,
        record,
        shared::databases::records::Phase::Planned,
        &shared::databases::records::condition("Ready", false, "Planned", "set back"),
        None,
        None,
    )
    .await
    .unwrap();
    assert!(!records, "the write is fenced");
    assert_eq!(phase().await, "ready");
}

/// A database on a server whose admin role may not create roles, or that
/// stopped answering, stops `failed` with the reason in words and the phase
/// it stopped at; once the cause is gone, a retry walks it on to `ready`,
/// with nothing made twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_refusing_or_silent_server_fails_the_database_in_words_and_a_retry_resumes_it() {
    let instance = Instance::start().await;
    let app = platform("worker-db-failures").await;
    let mut weak = instance.registration("weak", "weak", "weak-secret-1");
    weak["admin_database"] = "weakdb".into();
    let (status, saved) = app
        .call("POST", "/api/console/admin/database-instances", Some(weak))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{saved}");
    assert_eq!(saved["can_create_role"], false);
    let (cluster, _) = app.create_ready("fragile", "nodeport").await;

    // An admin role without CREATEROLE: the server refuses the role.
    let orders = ask(&app, &cluster, json!({"name": "orders"})).await;
    app.drive().await;
    let (_, stopped) = database(&app, &cluster, &orders["id"]).await;
    assert_eq!(stopped["phase"], "failed", "{stopped}");
    let error = stopped["last_error"].as_str().unwrap();
    assert!(
        error.contains("making the role") && error.contains("permission denied"),
        "{error}"
    );
    let ready = stopped["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("Failed"))
    );
    let name = orders["database_name"].as_str().unwrap().to_string();
    assert!(!instance.exists("role", &name).await);
    sqlx::query("ALTER ROLE weak CREATEROLE CREATEDB")
        .execute(&mut instance.superuser().await)
        .await
        .unwrap();
    let (status, body) = act(&app, &cluster, &orders, "retry").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        body["database"]["phase"], "credential_created",
        "resumed where it stopped"
    );
    app.drive().await;
    let (_, resumed) = database(&app, &cluster, &orders["id"]).await;
    assert_eq!(resumed["phase"], "ready", "{resumed}");
    assert!(resumed["last_error"].is_null(), "{resumed}");
    let (status, body) = act(&app, &cluster, &orders, "retry").await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("database_not_stopped")),
        "{body}"
    );

    // The server stops answering (its address now leads nowhere).
    let port = instance.port;
    let closed = tests::free_port();
    sqlx::query("UPDATE database_instances SET port = $1")
        .bind(i32::from(closed))
        .execute(&app.db.pool)
        .await
        .unwrap();
    let payments = ask(&app, &cluster, json!({"name": "payments"})).await;
    app.drive().await;
    let (_, stopped) = database(&app, &cluster, &payments["id"]).await;
    assert_eq!(stopped["phase"], "failed", "{stopped}");
    assert!(
        stopped["last_error"]
            .as_str()
            .unwrap()
            .contains("could not connect to the instance weak as weak"),
        "{stopped}"
    );
    sqlx::query("UPDATE database_instances SET port = $1")
        .bind(i32::from(port))
        .execute(&app.db.pool)
        .await
        .unwrap();
    let (status, body) = act(&app, &cluster, &payments, "retry").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    app.drive().await;
    let (_, resumed) = database(&app, &cluster, &payments["id"]).await;
    assert_eq!(resumed["phase"], "ready", "{resumed}");
    let counts: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_roles WHERE rolname LIKE 'kb\\_%'),
                (SELECT count(*) FROM pg_database WHERE datname LIKE 'kb\\_%')",
    )
    .fetch_one(&mut instance.superuser().await)
    .await
    .unwrap();
    assert_eq!(counts, (2, 2), "one role and one database each");
}

/// Runs every job, and the operations queued behind them that `sweep`
/// starts, until none is left.
async fn settle(app: &TestApp) {
    loop {
        app.drive().await;
        let report = tests::handlers::sweep(
            &app.db.pool,
            app.state.publisher.as_ref(),
            &shared::config::JobSettings::default(),
        )
        .await
        .unwrap();
        if report.promoted == 0 {
            break;
        }
    }
}

/// `sync-databases`: a Secret removed from its cluster is projected again
/// (the database set back and the cluster's job enqueued, once); when the
/// cluster is deleted, its databases go by their policy — `retain` keeps
/// the role and the database, `delete` drops them and their registry rows,
/// and one whose registry row was removed by hand stops in `conflict` with
/// nothing dropped — and a second run has nothing left to do.
#[tokio::test(flavor = "multi_thread")]
async fn sync_databases_projects_a_lost_secret_and_removes_a_deleted_cluster_s_databases_by_policy()
{
    let instance = Instance::start().await;
    let app = platform("worker-db-sync").await;
    register(&app, &instance).await;
    let (cluster, namespace) = app.create_ready("tidy", "nodeport").await;
    let kept = ask(&app, &cluster, json!({"name": "kept"})).await;
    let dropped = ask(
        &app,
        &cluster,
        json!({"name": "dropped", "deletion_policy": "delete"}),
    )
    .await;
    let claimed = ask(
        &app,
        &cluster,
        json!({"name": "claimed", "deletion_policy": "delete"}),
    )
    .await;
    // The second request queued a convergence behind the first's job; the
    // third joined it (one convergence reads every record).
    let converges: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM cluster_operations WHERE cluster_id = $1::uuid AND type = 'database_converge'",
    )
    .bind(&cluster)
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(converges, 2);
    // `sweep` starts the queued one once the first is done.
    settle(&app).await;
    let name = |record: &Value| record["database_name"].as_str().unwrap().to_string();
    let enqueuing = sync_databases::Enqueuing {
        publisher: &app.dispatcher,
        max_attempts: 3,
    };

    // A Secret removed in the cluster is projected again.
    assert!(app.sim().vcluster(&namespace, "tidy").unwrap().remove(
        "v1",
        "Secret",
        "default",
        "kept-postgres"
    ));
    let mut report = sync_databases::Report::default();
    sync_databases::reproject_missing(&app.db.pool, app.host(), &enqueuing, &mut report)
        .await
        .unwrap();
    assert_eq!(
        (report.clusters_checked, report.reprojected),
        (1, 1),
        "{report:?}"
    );
    let (_, set_back) = database(&app, &cluster, &kept["id"]).await;
    assert_eq!(set_back["phase"], "database_created", "{set_back}");
    app.drive().await;
    let (_, again) = database(&app, &cluster, &kept["id"]).await;
    assert_eq!(again["phase"], "ready", "{again}");
    let credential = secret(&app, &namespace, "tidy", "kept-postgres").expect("projected again");
    instance
        .connect(
            &name(&kept),
            credential["password"].as_str().unwrap(),
            &name(&kept),
        )
        .await
        .expect("the same credential logs in");
    let mut report = sync_databases::Report::default();
    sync_databases::reproject_missing(&app.db.pool, app.host(), &enqueuing, &mut report)
        .await
        .unwrap();
    assert_eq!(report.reprojected, 0, "nothing is missing now");

    // The cluster deleted, one registry row removed by hand before.
    let mut su = instance.superuser().await;
    sqlx::query("DELETE FROM kubebyon_registry.objects WHERE kind = 'database' AND name = $1")
        .bind(name(&claimed))
        .execute(&mut su)
        .await
        .unwrap();
    let (status, body) = app
        .call("DELETE", &format!("/api/console/clusters/{cluster}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    app.drive().await;
    let key = shared::secretbox::SecretBox::new(&SETTINGS_KEY.to_string().into()).unwrap();
    let mut report = sync_databases::Report::default();
    sync_databases::remove_orphans(&app.db.pool, Some(&key), &mut report)
        .await
        .unwrap();
    assert_eq!(
        (report.retained, report.dropped, report.stopped),
        (1, 1, 1),
        "{report:?}"
    );
    assert!(instance.exists("database", &name(&kept)).await);
    assert!(instance.exists("role", &name(&kept)).await);
    assert!(!instance.exists("database", &name(&dropped)).await);
    assert!(!instance.exists("role", &name(&dropped)).await);
    assert!(
        instance.exists("database", &name(&claimed)).await,
        "not proven: kept"
    );
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM kubebyon_registry.objects WHERE name = ANY ($1)")
            .bind(vec![name(&dropped), name(&claimed)])
            .fetch_one(&mut su)
            .await
            .unwrap();
    assert_eq!(
        rows, 1,
        "the dropped pair's rows are gone; the claimed role's stays"
    );
    let states: Vec<(String, String, bool, Option<String>)> = sqlx::query_as(
        "SELECT name, phase, deleted_at IS NOT NULL, last_error FROM tenant_databases
         WHERE cluster_id = $1::uuid ORDER BY name",
    )
    .bind(&cluster)
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(
        states
            .iter()
            .map(|s| (s.0.as_str(), s.2))
            .collect::<Vec<_>>(),
        [("claimed", false), ("dropped", true), ("kept", true)]
    );
    assert_eq!(states[0].1, "conflict");
    assert!(
        states[0].3.as_deref().unwrap().contains(&name(&claimed)),
        "{states:?}"
    );
    let mut report = sync_databases::Report::default();
    sync_databases::remove_orphans(&app.db.pool, Some(&key), &mut report)
        .await
        .unwrap();
    assert_eq!(
        report,
        sync_databases::Report::default(),
        "nothing left to do"
    );
}
