//! Tests that pin how the backbone uses PostgreSQL rather than what it does:
//! the plans its claims get and the connections it opens. A change that
//! fails one is not a wrong result but a cost that came back.

use queues::inprocess;
use shared::clusters::ClusterCreation;
use shared::{
    db::{self},
    domain::JobPayload,
    jobs::Processed,
};
use tests::{
    database::TestDb,
    handlers::{Behaviour, CLAIM_OF_A_SET, CLAIM_OF_ONE, ScriptedHandler, create_jobs, sweep},
};

use crate::backbone::{job_of_a_dead_worker, settings, worker, worker_on_one_connection};

/// The name of the claim's prepared statement on `conn`.
async fn claim_statement(conn: &mut sqlx::PgConnection, pattern: &str) -> String {
    sqlx::query_scalar(
        "SELECT name FROM pg_prepared_statements
         WHERE statement LIKE $1 AND statement NOT LIKE '%pg_prepared_statements%'",
    )
    .bind(pattern)
    .fetch_one(conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_sweep_on_a_cold_pool_opens_one_connection() {
    let db = TestDb::new().await;
    job_of_a_dead_worker(&db, 3).await;

    let url = secrecy::SecretString::from(db.url.clone());
    let cold = db::lazy_pool(&url, 4, db::Workload::Requests).unwrap();
    let handler = ScriptedHandler::new(ClusterCreation::KIND, Behaviour::Succeed);
    let (dispatcher, _runner) = inprocess::channel(worker(&db, "worker-b", handler), 1);
    let report = sweep(&cold, &dispatcher, &settings()).await.unwrap();
    assert_eq!((report.requeued, report.published), (1, 1));
    assert_eq!(cold.size(), 1, "connections the sweep opened");
}

#[tokio::test]
async fn a_job_workers_pool_plans_the_claim_once() {
    let db = TestDb::new().await;
    let mut plans = Vec::new();
    for workload in [db::Workload::Requests, db::Workload::Jobs] {
        // Every claim and the check below share the one connection.
        let (pool, worker) = worker_on_one_connection(&db, workload, "planner", Behaviour::Succeed);
        for _ in 0..8 {
            let [lone, pair @ ..] = &create_jobs(&db.pool, 3).await[..] else {
                unreachable!()
            };
            assert_eq!(worker.process(*lone).await.unwrap(), Processed::Succeeded);
            assert_eq!(
                worker.process_batch(pair).await.unwrap(),
                vec![Processed::Succeeded; 2]
            );
        }
        let mut conn = pool.acquire().await.unwrap();
        for (statement, pattern) in [("one", CLAIM_OF_ONE), ("set", CLAIM_OF_A_SET)] {
            let claim = claim_statement(&mut conn, pattern).await;
            let (generic, custom): (i64, i64) = sqlx::query_as(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1",
            )
            .bind(claim)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
            plans.push((workload, statement, generic + custom, custom));
        }
    }
    assert_eq!(
        plans,
        vec![
            (db::Workload::Requests, "one", 8, 5),
            (db::Workload::Requests, "set", 8, 5),
            (db::Workload::Jobs, "one", 8, 0),
            (db::Workload::Jobs, "set", 8, 0),
        ],
        "(workload, claim statement, claims, claims planned for their parameters)"
    );
}

/// The claims' generic plans, made at their first execution on a nearly
/// empty table, find the wake-ups' jobs by primary key: not by scanning the
/// table, nor through the status indexes, whose entries for the earlier
/// versions of every job grow with each job run until a vacuum.
#[tokio::test]
async fn a_claim_planned_on_a_nearly_empty_table_goes_by_primary_key() {
    let db = TestDb::new().await;
    // The claims are prepared on the one connection, and explained on it below.
    let (pool, worker) =
        worker_on_one_connection(&db, db::Workload::Jobs, "first", Behaviour::CompleteAlone);
    let messages = create_jobs(&db.pool, 3).await;
    assert_eq!(
        worker.process(messages[0]).await.unwrap(),
        Processed::Succeeded
    );
    assert_eq!(
        worker.process_batch(&messages[1..]).await.unwrap(),
        vec![Processed::Succeeded; 2]
    );

    let mut conn = pool.acquire().await.unwrap();
    for (pattern, arguments) in [
        (CLAIM_OF_A_SET, "'{}', '{}', 'w', 30"),
        (
            CLAIM_OF_ONE,
            "'00000000-0000-0000-0000-000000000000', 'cluster_create', 'w', 30",
        ),
    ] {
        let claim = claim_statement(&mut conn, pattern).await;
        // The name comes from the server's own catalog.
        let plan: Vec<String> = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "EXPLAIN EXECUTE {claim}({arguments})"
        )))
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|row| sqlx::Row::get(row, 0))
        .collect();
        let plan = plan.join("\n");
        assert!(
            plan.contains("Index Scan using cluster_jobs_pkey on cluster_jobs j "),
            "{plan}"
        );
        assert!(
            !plan.contains("Seq Scan on cluster_jobs") && !plan.contains("Bitmap"),
            "{plan}"
        );
    }
}
