//! The fleet data generator (`tests/bench/fleet.sql`) against the schema as
//! the migrations leave it: at a small size it makes exactly the rows asked
//! for, through every constraint and trigger, and a second run adds nothing.

use tests::database::TestDb;

const SIZES: [(&str, i64); 13] = [
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
    ("orders", 80),
    ("logins", 500),
    ("week", 1),
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
        "orders",
        "login_events",
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
        // And the first cluster's week, a sample a minute.
        size("samples") + size("week") * 7 * 24 * 60,
        size("audit"),
        size("jobs"),
        size("jobs"),
        size("hostnames"),
        size("deliveries"),
        size("orders"),
        size("logins"),
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

/// Tables that grow with the fleet: a list that reads one of them must read
/// only its page.
const FLEET_TABLES: [&str; 15] = [
    "users",
    "organizations",
    "organization_members",
    "clusters",
    "nodes",
    "node_events",
    "control_plane_metrics_snapshots",
    "audit_events",
    "login_events",
    "cluster_operations",
    "cluster_jobs",
    "orders",
    "workload_ingress_hostname_bindings",
    "notification_deliveries",
    "organization_usage",
];

/// Statements without a page that must still read a bounded number of rows
/// whatever the size of the fleet: the entitlement check (every create,
/// join and node registration runs it under the organization's lock).
const POINT_READS: [&str; 1] = ["FROM organization_usage WHERE organization_id = $1"];

/// Why a plan node reads more than its page: a sequential scan of a fleet
/// table, an index walk that filters without an index condition (its rows
/// before the page are read and dropped), an optional filter
/// (`($n IS NULL OR …)`, never an index condition), or a sort, hash or
/// aggregate over a sequential scan or a whole index.
fn unbounded(node: &serde_json::Value, found: &mut Vec<String>) {
    /// A scan of a fleet table bounded by no index condition.
    fn whole_scan(node: &serde_json::Value) -> bool {
        let on_fleet = node["Relation Name"]
            .as_str()
            .is_some_and(|table| FLEET_TABLES.contains(&table));
        let kind = node["Node Type"].as_str().unwrap_or_default();
        on_fleet
            && (kind == "Seq Scan"
                || (kind.starts_with("Index") && node.get("Index Cond").is_none()))
    }
    fn reads_all(node: &serde_json::Value) -> bool {
        whole_scan(node)
            || node["Plans"]
                .as_array()
                .is_some_and(|plans| plans.iter().any(reads_all))
    }
    let table = node["Relation Name"].as_str().unwrap_or_default();
    let kind = node["Node Type"].as_str().unwrap_or_default();
    if whole_scan(node) {
        if kind == "Seq Scan" {
            found.push(format!("a sequential scan of {table}"));
        } else if node.get("Filter").is_some() {
            found.push(format!(
                "a filtered walk of {table} by {}",
                node["Index Name"]
            ));
        }
    }
    // `($n IS NULL OR …)`: a condition the plan cannot use for any call,
    // so it reads what the filter then drops.
    if node["Filter"]
        .as_str()
        .is_some_and(|filter| filter.contains(" IS NULL) OR ") && filter.contains("($"))
    {
        found.push(format!("an optional filter on {table}: {}", node["Filter"]));
    }
    if ["Sort", "Incremental Sort", "Hash", "Aggregate"].contains(&kind)
        && node["Plans"]
            .as_array()
            .is_some_and(|plans| plans.iter().any(reads_all))
    {
        found.push(format!("a {kind} of a whole table"));
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        unbounded(child, found);
    }
}

/// Every list statement the code runs — each `SELECT … LIMIT $n` of
/// `.sqlx/` that reads a fleet table — planned generically, as PostgreSQL
/// plans a prepared statement after five runs, on generated data: each
/// reads its page through index conditions, never a whole table (the
/// rules of [`unbounded`]). A statement shared by filtered and unfiltered
/// calls (`$n IS NULL OR …`), a keyset cursor that is only a filter, or a
/// list without an index in its order fails here.
#[tokio::test]
async fn every_list_reads_its_page_through_an_index_even_when_planned_generically() {
    let db = TestDb::new().await;
    generate(
        &db,
        &[
            ("users", 10000),
            ("clusters", 20000),
            ("big", 2000),
            ("nodes", 20000),
            ("node_events", 50000),
            ("samples", 20000),
            ("audit", 50000),
            ("jobs", 30000),
            ("hostnames", 2000),
            ("deliveries", 5000),
            ("orders", 5000),
            ("logins", 20000),
            ("week", 0),
        ],
    );

    let queries = concat!(env!("CARGO_MANIFEST_DIR"), "/../.sqlx");
    let limit = regex::Regex::new(r"(?i)\bLIMIT \$\d+").unwrap();
    let reads = regex::Regex::new(r"(?i)\b(?:FROM|JOIN)\s+([a-z_]+)\b").unwrap();
    let writes = regex::Regex::new(r"(?i)\b(INSERT|UPDATE|DELETE|FOR UPDATE)\b").unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .unwrap();
    let (mut checked, mut failures) = (Vec::new(), Vec::new());
    for entry in std::fs::read_dir(queries).unwrap() {
        let data: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        let query = data["query"].as_str().unwrap();
        let reads_fleet = reads
            .captures_iter(query)
            .any(|table| FLEET_TABLES.contains(&&table[1]));
        let listed = limit.is_match(query) || POINT_READS.iter().any(|read| query.contains(read));
        if !listed || writes.is_match(query) || !reads_fleet {
            continue;
        }
        let values: Vec<&str> = data["describe"]["parameters"]["Left"]
            .as_array()
            .unwrap()
            .iter()
            .map(|kind| match kind.as_str().unwrap_or("Text") {
                "Text" => "'x'",
                "Uuid" => "md5('fleet-cluster-7')::uuid",
                "Int2" | "Int4" | "Int8" => "50",
                "Float8" => "1",
                "Bool" => "false",
                "Timestamptz" => "now()",
                "TextArray" | "UuidArray" | "Int4Array" | "Int8Array" => "'{}'",
                other => panic!("a parameter of type {other}"),
            })
            .collect();
        sqlx::query(sqlx::AssertSqlSafe(format!("PREPARE listed AS {query}")))
            .execute(&mut *conn)
            .await
            .unwrap();
        let explain = if values.is_empty() {
            "EXPLAIN (FORMAT JSON) EXECUTE listed".to_string()
        } else {
            format!(
                "EXPLAIN (FORMAT JSON) EXECUTE listed({})",
                values.join(", ")
            )
        };
        let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        sqlx::query("DEALLOCATE listed")
            .execute(&mut *conn)
            .await
            .unwrap();
        let mut found = Vec::new();
        unbounded(&plan[0]["Plan"], &mut found);
        if !found.is_empty() {
            failures.push(format!(
                "{}\n  {}\n{:#}",
                found.join("; "),
                query,
                plan[0]["Plan"]
            ));
        }
        checked.push(query.to_string());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The lists this pins, by a phrase of each: a statement renamed away
    // from this check fails here instead of leaving it.
    for list in [
        "FROM cluster_jobs WHERE status = $1",
        "FROM audit_events WHERE actor_user_id = $1",
        "WHERE organization_id = $1 AND id < $2",
        "WHERE o.status = $1 AND o.created_at < $2",
        "AND role = $1 AND status = ANY($2)",
        "WHERE deleted_at IS NULL AND (created_at, id) < ($1, $2)\n                   ORDER BY",
        "WHERE status = $1 AND deleted_at IS NULL AND (created_at, id) < ($2, $3)",
        "AND status = $1 AND (created_at, id) < ($2, $3)",
        "WHERE organization_id = $1 AND deleted_at IS NULL AND (created_at, id) < ($2, $3)",
        "WHERE cluster_id = $1 AND type = ANY($2)",
        POINT_READS[0],
        "FROM login_events WHERE user_id = $1",
    ] {
        assert!(
            checked.iter().any(|query| query.contains(list)),
            "no list statement holds {list:?}"
        );
    }
}

/// Rows of `table` whose `column` is older than `days`, and the others.
async fn split(db: &TestDb, table: &str, column: &str, days: i64) -> (i64, i64) {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FILTER (WHERE {column} < now() - make_interval(days => {days})),
                count(*) FILTER (WHERE {column} >= now() - make_interval(days => {days}))
         FROM {table}"
    )))
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Retention on generated histories: a run deletes at most `batch` ×
/// `batches` rows of each, only rows past their age, and runs drain the
/// rest; nothing younger goes.
#[tokio::test]
async fn histories_are_pruned_by_age_in_bounded_batches() {
    let db = TestDb::new().await;
    generate(&db, &SIZES);
    let days = |n: u64| std::time::Duration::from_secs(n * 86_400);
    let config = shared::app::retention::Config {
        ages: [
            ("node_events", days(30)),
            ("audit_events", days(30)),
            ("login_events", days(10)),
            ("finished_jobs", days(20)),
        ]
        .into(),
        batch: 40,
        batches: 3,
    };
    let histories = [
        ("node_events", "observed_at", 30),
        ("audit_events", "created_at", 30),
        ("login_events", "created_at", 10),
        ("cluster_jobs", "finished_at", 20),
    ];
    let mut before = Vec::new();
    for (table, column, days) in histories {
        let (old, young) = split(&db, table, column, days).await;
        assert!(old > 120, "{table}: {old} rows past their age to prune");
        before.push((old, young));
    }

    let mut conn = db.pool.acquire().await.unwrap();
    let first = shared::app::retention::prune(&mut conn, &config)
        .await
        .unwrap();
    assert_eq!(
        [
            first.0["node_events"],
            first.0["audit_events"],
            first.0["login_events"],
            first.0["finished_jobs"]
        ],
        [120; 4],
        "one run: three full batches of each"
    );
    let mut runs = 1;
    while shared::app::retention::prune(&mut conn, &config)
        .await
        .unwrap()
        .total()
        > 0
    {
        runs += 1;
        assert!(runs < 100, "the histories drain");
    }
    for ((table, column, days), (_, young)) in histories.into_iter().zip(before) {
        assert_eq!(
            split(&db, table, column, days).await,
            (0, young),
            "{table}: every row past its age gone, every younger one kept"
        );
    }
}

/// What each organization holds, counted from the rows: what
/// `organization_usage` must say (clusters, nodes, CPU, memory, hostnames,
/// databases).
const RECOUNT: &str = "
    SELECT o.id,
        (SELECT count(*) FROM clusters c WHERE c.organization_id = o.id AND c.deleted_at IS NULL),
        (SELECT count(*) FROM nodes n JOIN clusters c ON c.id = n.cluster_id
         WHERE c.organization_id = o.id AND c.deleted_at IS NULL
           AND n.deleted_at IS NULL AND n.status <> 'deleted'),
        (SELECT coalesce(sum(c.workload_cpu_limit_milli_cores), 0)::bigint FROM clusters c
         WHERE c.organization_id = o.id AND c.deleted_at IS NULL),
        (SELECT coalesce(sum(c.workload_memory_limit_mib), 0)::bigint FROM clusters c
         WHERE c.organization_id = o.id AND c.deleted_at IS NULL),
        (SELECT count(*) FROM workload_ingress_hostname_bindings b JOIN clusters c ON c.id = b.cluster_id
         WHERE c.organization_id = o.id AND c.deleted_at IS NULL AND b.deleted_at IS NULL),
        (SELECT count(*) FROM tenant_databases d JOIN clusters c ON c.id = d.cluster_id
         WHERE c.organization_id = o.id AND c.deleted_at IS NULL AND d.deleted_at IS NULL)
    FROM organizations o ORDER BY o.id";

type Usage = (uuid::Uuid, i64, i64, i64, i64, i64, i64);

async fn kept_usage(db: &TestDb) -> Vec<Usage> {
    sqlx::query_as(
        "SELECT o.id, u.clusters, u.nodes, u.cpu_milli_cores, u.memory_mib, u.hostnames, u.databases
         FROM organizations o JOIN organization_usage u ON u.organization_id = o.id ORDER BY o.id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// One of the writes that change what an organization holds, in a
/// transaction of its own that waits a moment before it commits, so that
/// writes to the same cluster overlap.
async fn racing_write(db: &TestDb, cluster_id: uuid::Uuid, kind: u32, seed: u64, pause_ms: u64) {
    let mut tx = db.pool.begin().await.unwrap();
    match kind {
        0 => {
            let nodes: Vec<_> = (0..3)
                .map(|i| {
                    shared::nodes::NodeSnapshot::named(
                        format!("racer-{seed}-{i}"),
                        shared::domain::NodeStatus::Ready,
                    )
                })
                .collect();
            let nodes: Vec<_> = nodes.iter().collect();
            shared::nodes::upsert_all(&mut tx, cluster_id, &nodes)
                .await
                .unwrap();
        }
        1 => shared::clusters::mark_deleted(&mut tx, cluster_id)
            .await
            .unwrap(),
        2 => {
            let node: Option<uuid::Uuid> = sqlx::query_scalar(
                "SELECT id FROM nodes WHERE cluster_id = $1 AND deleted_at IS NULL LIMIT 1",
            )
            .bind(cluster_id)
            .fetch_optional(&mut *tx)
            .await
            .unwrap();
            if let Some(node) = node {
                shared::nodes::mark_deleted(&mut tx, node).await.unwrap();
            }
        }
        3 => {
            sqlx::query(
                "UPDATE clusters SET workload_cpu_limit_milli_cores = workload_cpu_limit_milli_cores + 100,
                        workload_memory_limit_mib = workload_memory_limit_mib + 64
                 WHERE id = $1",
            )
            .bind(cluster_id)
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        4 => {
            sqlx::query(
                "INSERT INTO workload_ingress_hostname_bindings
                     (cluster_id, hostname, status, dns_management_scope, dns_management_status, verified_at)
                 VALUES ($1, 'racer-' || $2 || '.apps.example.test', 'active', 'platform_managed',
                         'synced', now())",
            )
            .bind(cluster_id)
            .bind(seed.to_string())
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        6 => {
            sqlx::query(
                "INSERT INTO tenant_databases (cluster_id, organization_id, instance_id, name,
                                               database_name, role_name, secret_name)
                 SELECT c.id, c.organization_id, (SELECT id FROM database_instances LIMIT 1),
                        'racer_' || $2, 'racer_' || $2 || '_' || left(replace(c.id::text, '-', ''), 8),
                        'racer_' || $2 || '_' || left(replace(c.id::text, '-', ''), 8), 'racer-' || $2
                 FROM clusters c WHERE c.id = $1",
            )
            .bind(cluster_id)
            .bind(seed.to_string())
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        7 => {
            sqlx::query(
                "UPDATE tenant_databases SET deleted_at = now()
                 WHERE id = (SELECT id FROM tenant_databases
                             WHERE cluster_id = $1 AND deleted_at IS NULL LIMIT 1)",
            )
            .bind(cluster_id)
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        _ => {
            sqlx::query(
                "UPDATE workload_ingress_hostname_bindings SET deleted_at = now()
                 WHERE id = (SELECT id FROM workload_ingress_hostname_bindings
                             WHERE cluster_id = $1 AND deleted_at IS NULL LIMIT 1)",
            )
            .bind(cluster_id)
            .execute(&mut *tx)
            .await
            .unwrap();
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(pause_ms)).await;
    tx.commit().await.unwrap();
}

/// The usage row the entitlement check reads is kept by triggers in the
/// writes' own transactions: after the generator (bulk inserts) and after
/// rounds of writes racing on the same clusters — nodes joining and
/// leaving, hostnames bound and let go, databases asked for and forgotten,
/// limits raised, while the cluster is
/// being deleted — it equals a count of the rows, for every organization,
/// and the check reads it; no write waited on another in a cycle (a
/// deadlock fails the write, and the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_usage_the_plan_check_reads_equals_a_recount_after_racing_writes() {
    let db = TestDb::new().await;
    generate(
        &db,
        &[
            ("users", 40),
            ("clusters", 200),
            ("big", 60),
            ("nodes", 600),
            ("hostnames", 60),
            ("node_events", 0),
            ("samples", 0),
            ("audit", 0),
            ("jobs", 0),
            ("deliveries", 0),
            ("orders", 0),
            ("logins", 0),
            ("week", 0),
        ],
    );
    let recount = || async {
        sqlx::query_as::<_, Usage>(RECOUNT)
            .fetch_all(&db.pool)
            .await
            .unwrap()
    };
    assert_eq!(
        kept_usage(&db).await,
        recount().await,
        "after the generator"
    );

    // The server the racing databases are recorded on.
    sqlx::query(
        "INSERT INTO database_instances (name, host, tls_mode, admin_role, admin_password_encrypted)
         VALUES ('racers', 'db.example.test', 'require', 'admin', '\\x00')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // The big user's clusters: one organization, so every write below
    // contends for its row.
    let clusters: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT id FROM clusters WHERE owner_user_id = md5('fleet-user-2')::uuid ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut rng = fastrand::Rng::with_seed(52);
    for round in 0..clusters.len() as u64 {
        let cluster = clusters[round as usize];
        // Every other cluster is deleted while the other writes run.
        let writes = (0..5).map(|i| {
            let kind = if i == 0 && round % 2 == 0 {
                1
            } else {
                [0, 2, 3, 4, 5, 6, 7][rng.usize(0..7)]
            };
            racing_write(&db, cluster, kind, round * 10 + i, rng.u64(0..4))
        });
        futures_util::future::join_all(writes).await;
    }
    let kept = kept_usage(&db).await;
    assert_eq!(kept, recount().await, "after the racing writes");
    let big: Usage = sqlx::query_as(
        "SELECT u.organization_id, u.clusters, u.nodes, u.cpu_milli_cores, u.memory_mib, u.hostnames,
                u.databases
         FROM organization_usage u JOIN organizations o ON o.id = u.organization_id
         WHERE o.personal_user_id = md5('fleet-user-2')::uuid",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(big.1, clusters.len() as i64 / 2, "half its clusters left");

    let mut conn = db.pool.acquire().await.unwrap();
    let read = shared::billing::entitlements::read(&mut conn, big.0)
        .await
        .unwrap();
    assert_eq!(
        (
            read.usage.clusters,
            read.usage.nodes,
            read.usage.cpu_milli_cores,
            read.usage.memory_mib,
            read.usage.hostnames,
            read.usage.databases
        ),
        (big.1, big.2, big.3, big.4, big.5, big.6),
        "the check reads the row"
    );
}
