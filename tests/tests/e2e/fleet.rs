//! The fleet data generator (`tests/bench/fleet.sql`) against the schema as
//! the migrations leave it: at a small size it makes exactly the rows asked
//! for, through every constraint and trigger, and a second run adds nothing.

use tests::database::TestDb;

const SIZES: [(&str, i64); 10] = [
    ("users", 60),
    ("clusters", 300),
    ("big", 50),
    ("nodes", 900),
    ("node_events", 2000),
    ("samples", 3000),
    ("audit", 1500),
    ("jobs", 700),
    ("hostnames", 90),
    ("deliveries", 400),
];

/// Runs the generator on `db` with `sizes`.
fn generate(db: &TestDb, sizes: &[(&str, i64)]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/fleet.sql");
    let mut command = std::process::Command::new("psql");
    command.arg(&db.url).args(["-q", "-f", script]);
    for (name, size) in sizes {
        command.args(["-v", &format!("{name}={size}")]);
    }
    let output = command.output().expect("psql runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn counts(db: &TestDb) -> Vec<i64> {
    let mut counts = Vec::new();
    for table in [
        "users",
        "organizations",
        "clusters",
        "nodes",
        "node_events",
        "control_plane_metrics_snapshots",
        "audit_events",
        "cluster_operations",
        "cluster_jobs",
        "workload_ingress_hostname_bindings",
        "notification_deliveries",
    ] {
        counts.push(
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(&db.pool)
                .await
                .unwrap(),
        );
    }
    counts
}

#[tokio::test]
async fn the_fleet_generator_makes_the_rows_asked_for_once() {
    let db = TestDb::new().await;
    generate(&db, &SIZES);
    let size = |name: &str| SIZES.iter().find(|(n, _)| *n == name).unwrap().1;
    let expected = vec![
        size("users"),
        size("users"),
        size("clusters"),
        size("nodes"),
        size("node_events"),
        size("samples"),
        size("audit"),
        size("jobs"),
        size("jobs"),
        size("hostnames"),
        size("deliveries"),
    ];
    assert_eq!(counts(&db).await, expected);
    // The one user with many clusters, in their personal organization.
    let (owned, organizations): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT organization_id) FROM clusters
         WHERE owner_user_id = md5('fleet-user-2')::uuid",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((owned, organizations), (size("big"), 1));
    generate(&db, &SIZES);
    assert_eq!(counts(&db).await, expected, "a second run adds nothing");
}

/// The job lists' statements as the code runs them (their text from the
/// committed query data, `.sqlx/`), planned generically — as PostgreSQL
/// plans a prepared statement after five runs — on generated data: each
/// walks an index in its order, none scans every job.
#[tokio::test]
async fn the_job_lists_walk_an_index_even_when_planned_generically() {
    let db = TestDb::new().await;
    generate(
        &db,
        &[
            ("users", 50),
            ("clusters", 400),
            ("big", 40),
            ("nodes", 10),
            ("node_events", 10),
            ("samples", 10),
            ("audit", 10),
            ("jobs", 30000),
            ("hostnames", 10),
            ("deliveries", 10),
        ],
    );

    let queries = concat!(env!("CARGO_MANIFEST_DIR"), "/../.sqlx");
    let mut checked = 0;
    for entry in std::fs::read_dir(queries).unwrap() {
        let data: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        let query = data["query"].as_str().unwrap();
        if !(query.contains("FROM cluster_jobs")
            && query.contains("ORDER BY created_at DESC, id DESC"))
        {
            continue;
        }
        let values: Vec<&str> = data["describe"]["parameters"]["Left"]
            .as_array()
            .unwrap()
            .iter()
            .map(|kind| match kind.as_str().unwrap() {
                "Text" => "'failed'",
                "Uuid" => "md5('fleet-cluster-7')::uuid",
                "Int8" => "50",
                other => panic!("a parameter of type {other}"),
            })
            .collect();
        let mut conn = db.pool.acquire().await.unwrap();
        sqlx::query("SET plan_cache_mode = force_generic_plan")
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("PREPARE listed AS {query}")))
            .execute(&mut *conn)
            .await
            .unwrap();
        let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "EXPLAIN (FORMAT JSON) EXECUTE listed({})",
            values.join(", ")
        )))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        sqlx::query("DEALLOCATE listed")
            .execute(&mut *conn)
            .await
            .unwrap();
        let text = plan.to_string();
        assert!(
            !text.contains("\"Seq Scan\"") && !text.contains("\"Sort\""),
            "{query}\n{plan:#}"
        );
        assert!(text.contains("Index"), "{plan:#}");
        checked += 1;
    }
    assert!(checked >= 4, "the job lists' statements: {checked}");
}
