//! Prepares the database of the HTTP benchmark: migrates it, makes one
//! verified user with 50 clusters and an API key, and prints the key (the benchmark's
//! requests authenticate with it, as an API client would).

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]

use anyhow::Context;
use shared::{accounts::auth, db};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").context("DATABASE_URL")?;
    let pool = sqlx::PgPool::connect(&url).await?;
    db::MIGRATOR.run(&pool).await?;
    // One full page of the cluster listing (its default limit is 50) from the start.
    let user_id = bench::seed_clusters(&pool, "bench-http@example.com", 50).await?;
    let (key, prefix) = auth::new_api_key();
    shared::accounts::insert_api_key(
        &pool,
        &shared::accounts::NewApiKey {
            user_id,
            organization: None,
            name: "benchmark",
            prefix: &prefix,
            token_hash: &auth::hash_secret(&key),
            scope: shared::accounts::KeyScope::Write,
            lifetime: chrono::TimeDelta::days(1),
        },
    )
    .await?;
    println!("{key}");
    Ok(())
}
