//! Benchmark of `sync-dns` converging a large zone: N records wanted (one
//! cluster CNAME and N − 1 platform-managed hostnames), against moto's
//! Route53-compatible server on loopback. Measures the first run (every record
//! made) and a second run with nothing to change: time and change calls.
//!
//! Usage: `bench-sync-dns [--records N]` (default 10,000); prints one JSON line.
//! Needs `DATABASE_URL` and the test venv with moto (`scripts/test.sh` installs it).

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]
// The Route53 client makes deep futures.
#![recursion_limit = "256"]

use std::{collections::HashMap, time::Instant};

use anyhow::Context;
use serde_json::json;
use sqlx::PgPool;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let records: i64 = match args.iter().position(|a| a == "--records") {
        Some(i) => args
            .get(i + 1)
            .context("--records needs a value")?
            .parse()?,
        None => 10_000,
    };
    let moto = tests::moto::Moto::start().await;
    let zone = moto.create_zone("apps.example.com");
    let db = tests::database::TestDb::new().await;
    let (first, first_report, second, second_report) =
        run(&db.pool, &moto.url, &zone, records).await?;
    let listed = moto.cnames(&zone).len();
    println!(
        "{}",
        json!({
            "bench": "sync-dns",
            "records": records,
            "records_in_zone_after": listed,
            "first_run_ms": (first * 1000.0).round(),
            "first_run_change_calls": first_report.change_calls,
            "first_run_upserted": first_report.upserted,
            "second_run_ms": (second * 1000.0).round(),
            "second_run_change_calls": second_report.change_calls,
        })
    );
    Ok(())
}

type Runs = (
    f64,
    sync_dns::route53::DnsReport,
    f64,
    sync_dns::route53::DnsReport,
);

async fn run(pool: &PgPool, moto_url: &str, zone: &str, records: i64) -> anyhow::Result<Runs> {
    let owner = shared::accounts::users::ensure_development_user(pool).await?;
    let settings =
        shared::config::Settings::from_source(&HashMap::from([("KUBEBYON_SETTINGS_KEY", KEY)]))?;
    let sealed = shared::secretbox::SecretBox::new(settings.settings_key.as_ref().context("key")?)?
        .seal(shared::ingress::settings::column::DNS_SECRET, "test");
    sqlx::query(
        "UPDATE system_settings SET managed_workload_ingress_base_domain = 'apps.example.com',
                managed_workload_ingress_dns_provider = 'route53', managed_workload_ingress_dns_zone_id = $1,
                managed_workload_ingress_dns_endpoint = $2, managed_workload_ingress_dns_access_key_id = 'test',
                managed_workload_ingress_dns_secret_encrypted = $3, managed_workload_ingress_edge_target = 'edge.example.net'",
    )
    .bind(zone)
    .bind(moto_url)
    .bind(sealed)
    .execute(pool)
    .await?;
    let cluster: (uuid::Uuid,) = sqlx::query_as(
        "INSERT INTO clusters (owner_user_id, name, vcluster_name, namespace, kubernetes_version,
                               workload_cpu_limit_milli_cores, workload_memory_limit_mib,
                               control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
                               public_access_mode, api_endpoint, status, kubeconfig_available, kubeconfig_available_at,
                               managed_workload_ingress_enabled)
         VALUES ($1, 'bench', 'bench', 'kb-bench', '1.33', 4000, 8192, 500, 1024, 'nodeport',
                 'http://127.0.0.1:1', 'ready', true, now(), true) RETURNING id",
    )
    .bind(owner)
    .fetch_one(pool)
    .await?;
    sqlx::query(
        "INSERT INTO workload_ingress_hostname_bindings (cluster_id, hostname, dns_management_scope, verified_at)
         SELECT $1, 'h' || n || '.apps.example.com', 'platform_managed', now() FROM generate_series(1, $2) AS n",
    )
    .bind(cluster.0)
    .bind(records - 1)
    .execute(pool)
    .await?;
    let started = Instant::now();
    let first_report = sync_dns::route53::sync(pool, &settings).await?;
    let first = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let second_report = sync_dns::route53::sync(pool, &settings).await?;
    let second = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        first_report.failed == 0 && second_report.upserted == 0,
        "{first_report:?} {second_report:?}"
    );
    Ok((first, first_report, second, second_report))
}
