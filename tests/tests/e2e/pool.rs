//! The connection pool every function builds (`db::lazy_pool`): when it tests
//! a connection before handing it out.

use std::time::Duration;

use shared::db::{self, TEST_IF_IDLE_FOR};
use sqlx::PgPool;
use tests::database::TestDb;

async fn backend_pid(pool: &PgPool) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(pool)
        .await
}

/// Ends the backend of `pid` and waits until it is gone.
async fn terminate(db: &TestDb, pid: i32) {
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(pid)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(ended);
}

/// One idle connection, given back and tested by the pool.
async fn pool_with_one_idle_connection(db: &TestDb) -> (PgPool, i32) {
    let url = secrecy::SecretString::from(db.url.clone());
    let pool = db::lazy_pool(&url, 1, db::Workload::Requests).unwrap();
    let pid = backend_pid(&pool).await.unwrap();
    while pool.num_idle() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (pool, pid)
}

#[tokio::test]
async fn a_connection_lost_while_idle_for_a_while_is_replaced_before_use() {
    let db = TestDb::new().await;
    let (pool, first) = pool_with_one_idle_connection(&db).await;
    terminate(&db, first).await;
    tokio::time::sleep(TEST_IF_IDLE_FOR + Duration::from_millis(100)).await;

    let second = backend_pid(&pool).await.expect("a tested connection");
    assert_ne!(second, first);
}

/// Under load a connection is back in the pool for microseconds: it is handed
/// out without a round trip, so a statement on one the server dropped in that
/// moment fails once, and the pool replaces it.
#[tokio::test]
async fn a_connection_idle_for_less_than_a_second_is_handed_out_untested() {
    let db = TestDb::new().await;
    let (pool, first) = pool_with_one_idle_connection(&db).await;
    terminate(&db, first).await;

    assert!(backend_pid(&pool).await.is_err());
    let replaced = backend_pid(&pool).await.expect("a new connection");
    assert_ne!(replaced, first);
}
