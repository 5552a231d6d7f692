//! PostgreSQL over TLS, through the pool every function builds
//! (`db::lazy_pool`): a server with a certificate of a private CA, as RDS and
//! most managed PostgreSQL serve, and `DATABASE_URL`'s `sslmode` and
//! `sslrootcert` deciding what the client accepts.

use std::time::Duration;

use local::EmbeddedPostgres;
use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair};
use shared::db;
use tests::pgtls::{authority, write_owned};
use uuid::Uuid;

async fn connection_is_encrypted(url: &str) -> Result<bool, sqlx::Error> {
    let pool = db::lazy_pool(&url.to_string().into(), 1, db::Workload::Requests).unwrap();
    let encrypted = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&pool)
        .await;
    pool.close().await;
    encrypted
}

#[tokio::test]
async fn the_pool_connects_over_tls_and_verifies_the_servers_certificate() {
    let dir = std::env::temp_dir().join(format!("kbtls-{}", Uuid::new_v4().simple()));
    let port = tests::free_port();
    let pg = EmbeddedPostgres::start(&dir, port)
        .await
        .expect("postgres starts");
    let data_dir = dir.canonicalize().unwrap();

    let (ca_pem, ca) = authority("kubebyon-test-db-ca");
    let server_key = KeyPair::generate().unwrap();
    let mut serving = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server = serving.signed_by(&server_key, &ca).unwrap();
    write_owned(&data_dir, "server.crt", &server.pem());
    write_owned(&data_dir, "server.key", &server_key.serialize_pem());
    let ca_file = dir.with_extension("ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let (other_ca_pem, _) = authority("someone-else");
    let other_ca_file = dir.with_extension("other-ca.pem");
    std::fs::write(&other_ca_file, other_ca_pem).unwrap();

    let plain = pg.url();
    let admin = sqlx::PgPool::connect(&plain).await.unwrap();
    sqlx::query("ALTER SYSTEM SET ssl = on")
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query("SELECT pg_reload_conf()")
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;

    let verified = format!(
        "{plain}?sslmode=verify-full&sslrootcert={}",
        ca_file.display()
    );
    // The reload is asynchronous: wait until the server offers TLS.
    let mut answer = connection_is_encrypted(&verified).await;
    for _ in 0..50 {
        if answer.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = connection_is_encrypted(&verified).await;
    }
    assert!(
        answer.expect("verify-full with the server's CA connects"),
        "and the connection is encrypted"
    );
    assert!(
        connection_is_encrypted(&format!("{plain}?sslmode=require"))
            .await
            .expect("require connects"),
    );
    assert!(
        connection_is_encrypted(&format!("{plain}?sslmode=prefer"))
            .await
            .expect("prefer connects"),
        "a server that offers TLS gets it under prefer"
    );

    let refused = connection_is_encrypted(&format!(
        "{plain}?sslmode=verify-full&sslrootcert={}",
        other_ca_file.display()
    ))
    .await
    .expect_err("a certificate no trusted CA signed is refused");
    let message = format!("{refused}").to_lowercase();
    assert!(message.contains("certificate"), "{message}");
    let refused = connection_is_encrypted(&format!("{plain}?sslmode=verify-full"))
        .await
        .expect_err("without its CA, a private CA's certificate is not trusted");
    assert!(
        format!("{refused}").to_lowercase().contains("certificate"),
        "{refused}"
    );

    // A server that takes TCP connections over TLS only (`hostssl`): a
    // plain one is refused, saying why.
    let hba = std::fs::read_to_string(data_dir.join("pg_hba.conf")).unwrap();
    let hostssl: String = hba
        .lines()
        .map(|line| match line.strip_prefix("host ") {
            Some(rest) => format!("hostssl {rest}\n"),
            None => format!("{line}\n"),
        })
        .collect();
    assert_ne!(hba.trim(), hostssl.trim(), "the server had host lines");
    write_owned(&data_dir, "pg_hba.conf", &hostssl);
    let admin = sqlx::PgPool::connect(&verified).await.unwrap();
    sqlx::query("SELECT pg_reload_conf()")
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let disabled = format!("{plain}?sslmode=disable");
    let mut refused = connection_is_encrypted(&disabled).await;
    for _ in 0..50 {
        if refused.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        refused = connection_is_encrypted(&disabled).await;
    }
    let refused = refused.expect_err("a plain connection to a hostssl-only server is refused");
    assert!(
        format!("{refused}").contains("no encryption"),
        "the refusal says the connection was not encrypted: {refused}"
    );
    assert!(
        connection_is_encrypted(&verified).await.unwrap(),
        "verify-full still connects"
    );

    pg.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&ca_file);
    let _ = std::fs::remove_file(&other_ca_file);
}
