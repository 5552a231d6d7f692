//! Prepares a database holding the fleet data (`tests/bench/fleet.sql`) for
//! the route benchmark (`tests/bench/routes.py`): an API key for each
//! caller it measures, and the ids its routes name. Prints one JSON object.
//! Run it on a scratch database only: it adds keys that sign in as the
//! fleet's users.

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]

use anyhow::Context;
use shared::accounts::{self, KeyScope, NewApiKey, auth};
use uuid::Uuid;

/// A write key of `user_id`'s own, for a day.
async fn key_of(pool: &sqlx::PgPool, user_id: Uuid) -> anyhow::Result<String> {
    let (key, prefix) = auth::new_api_key();
    accounts::insert_api_key(
        pool,
        &NewApiKey {
            user_id,
            organization: None,
            name: "fleet benchmark",
            prefix: &prefix,
            token_hash: &auth::hash_secret(&key),
            scope: KeyScope::Write,
            lifetime: chrono::TimeDelta::days(1),
        },
    )
    .await?;
    Ok(key)
}

/// The generator's user `n`.
async fn user(pool: &sqlx::PgPool, n: u32) -> anyhow::Result<Uuid> {
    sqlx::query_scalar("SELECT id FROM users WHERE id = md5($1)::uuid")
        .bind(format!("fleet-user-{n}"))
        .fetch_optional(pool)
        .await?
        .with_context(|| format!("no fleet-user-{n}: run tests/bench/fleet.sql first"))
}

/// `owner`'s live cluster with the most metrics samples (the generator gives
/// its first clusters a week of them), then the most nodes.
async fn cluster_of(pool: &sqlx::PgPool, owner: Uuid) -> anyhow::Result<Uuid> {
    Ok(sqlx::query_scalar(
        "SELECT c.id FROM clusters c WHERE c.owner_user_id = $1 AND c.deleted_at IS NULL
         ORDER BY (SELECT count(*) FROM control_plane_metrics_snapshots s
                   WHERE s.cluster_id = c.id AND s.collected_at > now() - interval '7 days') DESC,
                  (SELECT count(*) FROM nodes n WHERE n.cluster_id = c.id) DESC, c.id
         LIMIT 1",
    )
    .bind(owner)
    .fetch_one(pool)
    .await?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").context("DATABASE_URL")?;
    let pool = sqlx::PgPool::connect(&url).await?;
    // The generator's users: 1 the administrator, 2 the one with thousands
    // of clusters, 7 one with a few.
    let (admin, big, small) = (
        user(&pool, 1).await?,
        user(&pool, 2).await?,
        user(&pool, 7).await?,
    );
    let (big_cluster, small_cluster) = (
        cluster_of(&pool, big).await?,
        cluster_of(&pool, small).await?,
    );
    let node: Uuid = sqlx::query_scalar("SELECT id FROM nodes WHERE cluster_id = $1 LIMIT 1")
        .bind(big_cluster)
        .fetch_one(&pool)
        .await?;
    let organization: Uuid =
        sqlx::query_scalar("SELECT organization_id FROM clusters WHERE id = $1")
            .bind(big_cluster)
            .fetch_one(&pool)
            .await?;
    println!(
        "{}",
        serde_json::json!({
            "admin_key": key_of(&pool, admin).await?,
            "big_key": key_of(&pool, big).await?,
            "small_key": key_of(&pool, small).await?,
            "admin": admin, "big": big, "small": small,
            "big_cluster": big_cluster, "small_cluster": small_cluster,
            "node": node, "organization": organization,
        })
    );
    Ok(())
}
