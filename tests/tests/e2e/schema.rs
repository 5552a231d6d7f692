//! The migrations apply to an empty database and the database enforces the
//! invariants the application relies on.

use shared::clusters::ClusterCreation;
use std::path::{Path, PathBuf};

use shared::domain::JobPayload;
use tests::{
    database::TestDb,
    handlers::{enqueue, seed_cluster},
};

const TABLES: [&str; 20] = [
    "dns_retired_records",
    "users",
    "external_identities",
    "sessions",
    "login_events",
    "email_verification_codes",
    "notification_settings",
    "api_keys",
    "clusters",
    "cluster_operations",
    "cluster_jobs",
    "tokens",
    "nodes",
    "node_events",
    "control_plane_metrics_snapshots",
    "workload_ingress_hostname_bindings",
    "audit_events",
    "plans",
    "orders",
    "system_settings",
];

const NAMED_INDEXES: [&str; 19] = [
    "idx_clusters_owner_user_id_created_at",
    "idx_clusters_status",
    "idx_clusters_namespace_vcluster_name_active",
    "idx_cluster_operations_cluster_created_at",
    "idx_cluster_jobs_status_created_at",
    "idx_cluster_jobs_cluster_created_at",
    "idx_cluster_jobs_pending_publish",
    "idx_cluster_jobs_active_cluster",
    "idx_tokens_cluster_created_at",
    "idx_tokens_cluster_status",
    "idx_nodes_cluster_created_at",
    "idx_nodes_cluster_deleted_at",
    "idx_node_events_cluster_observed_at",
    "idx_control_plane_metrics_cluster_collected_at",
    "idx_workload_ingress_hostname_bindings_hostname",
    "idx_workload_ingress_hostname_bindings_cluster_created_at",
    "idx_api_keys_user_id_created_at",
    "idx_orders_user_created_at",
    "idx_orders_user_status_paid_at",
];

fn constraint_of(err: sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(db) => db.constraint().unwrap_or_default().to_string(),
        other => panic!("expected a constraint violation, got {other}"),
    }
}

#[tokio::test]
async fn migrations_create_every_table_and_named_index_on_an_empty_database() {
    let db = TestDb::empty().await;
    shared::MIGRATOR
        .run(&db.pool)
        .await
        .expect("migrations apply");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for table in TABLES {
        assert!(tables.iter().any(|t| t == table), "missing table {table}");
    }
    let indexes: Vec<String> =
        sqlx::query_scalar("SELECT indexname::text FROM pg_indexes WHERE schemaname = 'public'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    for index in NAMED_INDEXES {
        assert!(indexes.iter().any(|i| i == index), "missing index {index}");
    }
    // Running them again is a no-op.
    shared::MIGRATOR
        .run(&db.pool)
        .await
        .expect("migrations are idempotent");
}

#[tokio::test]
async fn a_second_active_job_for_one_cluster_is_rejected() {
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    enqueue(&db.pool, cluster, ClusterCreation::of, 3).await;
    let mut tx = db.pool.begin().await.unwrap();
    let err = shared::jobs::enqueue(
        &mut tx,
        shared::jobs::NewJob {
            cluster_id: cluster,
            kind: shared::clusters::ClusterDeletion::KIND,
            requested_by: None,
            payload: &serde_json::json!({}),
            max_attempts: 3,
        },
    )
    .await
    .unwrap_err();
    assert_eq!(constraint_of(err), "idx_cluster_jobs_active_cluster");
}

#[tokio::test]
async fn every_cluster_state_the_code_names_is_one_the_database_takes_and_reads_back() {
    use shared::domain::{ClusterStatus, ConnectionStatus, IngressStatus, PublicAccessMode};
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    let set = |column: &'static str, value: &'static str| {
        let pool = db.pool.clone();
        async move {
            let sql = match column {
                "status" => "UPDATE clusters SET status = $2 WHERE id = $1",
                "connection_status" => "UPDATE clusters SET connection_status = $2 WHERE id = $1",
                "managed_workload_ingress_status" => {
                    "UPDATE clusters SET managed_workload_ingress_status = $2 WHERE id = $1"
                }
                _ => "UPDATE clusters SET public_access_mode = $2 WHERE id = $1",
            };
            sqlx::query(sql)
                .bind(cluster)
                .bind(value)
                .execute(&pool)
                .await
                .unwrap_or_else(|e| panic!("{column} = {value}: {e}"));
            shared::clusters::get(&pool, cluster)
                .await
                .unwrap()
                .unwrap()
        }
    };
    for status in [
        ClusterStatus::Pending,
        ClusterStatus::Provisioning,
        ClusterStatus::Ready,
        ClusterStatus::Updating,
        ClusterStatus::Deleting,
        ClusterStatus::Failed,
    ] {
        assert_eq!(set("status", status.as_str()).await.status, status);
    }
    for status in [
        ConnectionStatus::Unknown,
        ConnectionStatus::Connected,
        ConnectionStatus::Unreachable,
    ] {
        assert_eq!(
            set("connection_status", status.as_str())
                .await
                .connection_status,
            status
        );
    }
    for status in [
        IngressStatus::Disabled,
        IngressStatus::Provisioning,
        IngressStatus::Ready,
        IngressStatus::Error,
    ] {
        assert_eq!(
            set("managed_workload_ingress_status", status.as_str())
                .await
                .managed_workload_ingress_status,
            status
        );
    }
    for mode in [PublicAccessMode::Nodeport, PublicAccessMode::Loadbalancer] {
        assert_eq!(
            set("public_access_mode", mode.as_str())
                .await
                .public_access_mode,
            mode
        );
    }
    // `deleted` is a state of soft-deleted rows, which live reads leave out.
    sqlx::query("UPDATE clusters SET status = 'deleted', deleted_at = now() WHERE id = $1")
        .bind(cluster)
        .execute(&db.pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn status_columns_only_take_known_values() {
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    let job = enqueue(&db.pool, cluster, ClusterCreation::of, 3).await;
    let err = sqlx::query("UPDATE cluster_jobs SET status = 'exploded' WHERE id = $1")
        .bind(job.job_id)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert_eq!(constraint_of(err), "cluster_jobs_status_check");
    let err = sqlx::query("UPDATE clusters SET status = 'happy' WHERE id = $1")
        .bind(cluster)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert_eq!(constraint_of(err), "clusters_status_check");
    // A running job must hold a lease; a finished one must say when it finished.
    let err = sqlx::query("UPDATE cluster_jobs SET status = 'running' WHERE id = $1")
        .bind(job.job_id)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(constraint_of(err).starts_with("cluster_jobs_"));
    let err = sqlx::query("UPDATE cluster_jobs SET status = 'succeeded' WHERE id = $1")
        .bind(job.job_id)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(constraint_of(err).starts_with("cluster_jobs_"));
}

#[tokio::test]
async fn live_cluster_names_are_unique_per_organization_and_free_again_after_deletion() {
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    let copy = "INSERT INTO clusters (owner_user_id, name, vcluster_name, namespace, kubernetes_version,
                    workload_cpu_limit_milli_cores, workload_memory_limit_mib,
                    control_plane_cpu_request_milli_cores, control_plane_memory_request_mib, public_access_mode)
                SELECT owner_user_id, name, vcluster_name, namespace || '-2', kubernetes_version, 1, 1, 1, 1, 'nodeport'
                FROM clusters WHERE id = $1";
    let err = sqlx::query(copy)
        .bind(cluster)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert_eq!(constraint_of(err), "idx_clusters_organization_name_active");
    sqlx::query("UPDATE clusters SET status = 'deleted', deleted_at = now() WHERE id = $1")
        .bind(cluster)
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(copy)
        .bind(cluster)
        .execute(&db.pool)
        .await
        .expect("name is free after soft delete");
}

#[tokio::test]
async fn updated_at_moves_on_every_update() {
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    let before: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT updated_at FROM clusters WHERE id = $1")
            .bind(cluster)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let after: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "UPDATE clusters SET connection_status = 'connected' WHERE id = $1 RETURNING updated_at",
    )
    .bind(cluster)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(after > before, "{after} should be after {before}");
}

#[tokio::test]
async fn every_table_with_updated_at_keeps_it_through_its_trigger() {
    let db = TestDb::new().await;
    let missing: Vec<String> = sqlx::query_scalar(
        "SELECT c.table_name::text FROM information_schema.columns c
         WHERE c.table_schema = 'public' AND c.column_name = 'updated_at'
           AND c.table_name::text <> ALL($1)
           AND NOT EXISTS (
               SELECT 1 FROM pg_trigger t
               WHERE t.tgrelid = format('%I', c.table_name)::regclass
                 AND t.tgname = c.table_name || '_set_updated_at'
                 AND pg_get_triggerdef(t.oid) LIKE
                     '%BEFORE UPDATE%WHEN ((NOT (old.updated_at IS DISTINCT FROM new.updated_at)))%set_updated_at()')
         ORDER BY 1",
    )
    .bind(JOB_TABLES)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(missing.is_empty(), "no updated_at trigger on {missing:?}");
}

/// Tables whose rows the job backbone rewrites a few times per job. They carry
/// no row trigger: with a `BEFORE UPDATE` row trigger PostgreSQL locks each row
/// before updating it (a WAL record per row) even when the trigger's `WHEN`
/// then declines to run, so every statement that updates them stamps
/// `updated_at` itself.
const JOB_TABLES: [&str; 2] = ["cluster_jobs", "cluster_operations"];

#[tokio::test]
async fn the_job_tables_have_no_row_trigger() {
    let db = TestDb::new().await;
    let triggers: Vec<String> = sqlx::query_scalar(
        "SELECT tgrelid::regclass::text || '.' || tgname FROM pg_trigger
         WHERE tgrelid = ANY($1::text[]::regclass[]) AND NOT tgisinternal ORDER BY 1",
    )
    .bind(JOB_TABLES)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        triggers.is_empty(),
        "row triggers on the job tables: {triggers:?}"
    );
}

#[test]
fn every_update_of_a_job_table_stamps_updated_at() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for dir in ["shared", "queues", "functions"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut updates = 0;
    let mut unstamped = Vec::new();
    for file in files {
        // Lower case, one space for every run of whitespace (and line continuations).
        let source = std::fs::read_to_string(&file)
            .unwrap()
            .to_lowercase()
            .replace('\\', " ");
        let text = source.split_whitespace().collect::<Vec<_>>().join(" ");
        for table in JOB_TABLES {
            let statement = format!("update {table} ");
            for (at, _) in text.match_indices(&statement) {
                updates += 1;
                let rest = &text[at..];
                let set_end = [" where ", " from ", " returning "]
                    .iter()
                    .filter_map(|keyword| rest.find(keyword))
                    .min()
                    .unwrap_or(rest.len());
                let set = &rest[..set_end];
                if !set.contains("updated_at =") {
                    unstamped.push(format!("{}: {set}", file.display()));
                }
            }
        }
    }
    assert!(
        updates >= 10,
        "only {updates} updates of the job tables found: the scan is lost"
    );
    assert!(
        unstamped.is_empty(),
        "updates that leave updated_at alone:\n{}",
        unstamped.join("\n")
    );
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.ends_with("target") {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

#[tokio::test]
async fn an_update_that_stamps_updated_at_itself_keeps_its_stamp() {
    let db = TestDb::new().await;
    let cluster = seed_cluster(&db.pool).await;
    let stamp: chrono::DateTime<chrono::Utc> = "2031-01-02T03:04:05Z".parse().unwrap();
    let kept: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "UPDATE clusters SET connection_status = 'connected', updated_at = $2 WHERE id = $1
         RETURNING updated_at",
    )
    .bind(cluster)
    .bind(stamp)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(kept, stamp);
}
