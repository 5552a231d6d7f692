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

fn generate(db: &TestDb) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/fleet.sql");
    let mut command = std::process::Command::new("psql");
    command.arg(&db.url).args(["-q", "-f", script]);
    for (name, size) in SIZES {
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
    generate(&db);
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
    generate(&db);
    assert_eq!(counts(&db).await, expected, "a second run adds nothing");
}
