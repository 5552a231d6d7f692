//! Proof that whoever binds a self-managed hostname controls its DNS: a TXT
//! record `_kubebyon-challenge.<hostname>` holding
//! `kubebyon-verification=<token>`, the token made for that binding. Looked
//! up through `KUBEBYON_DNS_RESOLVER` (a resolver's `ip:port`) when set,
//! else the system's resolvers.

use std::{net::SocketAddr, time::Duration};

use hickory_resolver::{
    Resolver,
    config::{NameServerConfig, ResolverConfig},
    net::runtime::TokioRuntimeProvider,
    proto::rr::RData,
};

/// The label the challenge record sits under.
pub const CHALLENGE_LABEL: &str = "_kubebyon-challenge";
const VALUE_PREFIX: &str = "kubebyon-verification=";
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// A new challenge token: 32 characters from the operating system's CSPRNG.
pub fn new_token() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn record_name(hostname: &str) -> String {
    format!("{CHALLENGE_LABEL}.{hostname}")
}

pub fn record_value(token: &str) -> String {
    format!("{VALUE_PREFIX}{token}")
}

/// The TXT values published at `name` (each record's strings joined). An
/// absent name answers none; a resolver that cannot answer is an error.
pub async fn txt_values(resolver: Option<SocketAddr>, name: &str) -> Result<Vec<String>, String> {
    let builder = match resolver {
        Some(addr) => {
            let mut server = NameServerConfig::udp_and_tcp(addr.ip());
            for connection in &mut server.connections {
                connection.port = addr.port();
            }
            Resolver::builder_with_config(
                ResolverConfig::from_name_servers(vec![server]),
                TokioRuntimeProvider::default(),
            )
        }
        None => Resolver::builder_tokio().map_err(|e| format!("no DNS resolver: {e}"))?,
    };
    let mut builder = builder;
    builder.options_mut().timeout = LOOKUP_TIMEOUT;
    builder.options_mut().attempts = 1;
    // Fresh answers: a record the owner just made must be seen.
    builder.options_mut().cache_size = 0;
    let resolver = builder
        .build()
        .map_err(|e| format!("no DNS resolver: {e}"))?;
    let fqdn = format!("{name}.");
    match tokio::time::timeout(LOOKUP_TIMEOUT * 2, resolver.txt_lookup(fqdn.as_str())).await {
        Err(_) => Err(format!("looking up {name} timed out")),
        Ok(Ok(lookup)) => Ok(lookup
            .answers()
            .iter()
            .filter_map(|record| match &record.data {
                RData::TXT(txt) => Some(
                    txt.txt_data
                        .iter()
                        .map(|part| String::from_utf8_lossy(part).into_owned())
                        .collect::<String>(),
                ),
                _ => None,
            })
            .collect()),
        Ok(Err(err)) if err.is_no_records_found() || err.is_nx_domain() => Ok(Vec::new()),
        Ok(Err(err)) => Err(format!("looking up {name}: {err}")),
    }
}

/// Whether `hostname`'s challenge holds `token`: `Err` says what was found.
pub async fn check(
    resolver: Option<SocketAddr>,
    hostname: &str,
    token: &str,
) -> Result<(), String> {
    let name = record_name(hostname);
    let wanted = record_value(token);
    let values = txt_values(resolver, &name).await?;
    if values.iter().any(|v| v.trim() == wanted) {
        return Ok(());
    }
    Err(if values.is_empty() {
        format!("no TXT record at {name}; create one with the value {wanted}")
    } else {
        format!(
            "the TXT records at {name} do not hold {wanted} (found {})",
            values.len()
        )
    })
}

/// What a check of a binding's challenge concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Found: the binding now holds its name.
    Verified,
    /// Found, but another cluster's binding proved the name first.
    Taken,
    /// Not found; what the lookup saw.
    NotFound(String),
}

/// Looks a binding's challenge up and records what was found.
pub async fn check_and_record(
    pool: &sqlx::PgPool,
    resolver: Option<SocketAddr>,
    pending: &crate::ingress::records::Unverified,
) -> Result<Verdict, sqlx::Error> {
    use crate::ingress::records;
    match check(resolver, &pending.hostname, &pending.token).await {
        Ok(()) => {
            let mut tx = pool.begin().await?;
            match records::mark_verified(&mut tx, pending.id).await {
                Ok(_) => {
                    tx.commit().await?;
                    Ok(Verdict::Verified)
                }
                Err(err)
                    if crate::error::unique_violation(&err)
                        == Some("idx_workload_ingress_hostname_bindings_hostname") =>
                {
                    drop(tx);
                    records::record_unverified(
                        pool,
                        pending.id,
                        "the TXT record was found, but another cluster proved this name first",
                    )
                    .await?;
                    Ok(Verdict::Taken)
                }
                Err(err) => Err(err),
            }
        }
        Err(message) => {
            records::record_unverified(pool, pending.id, &message).await?;
            Ok(Verdict::NotFound(message))
        }
    }
}

/// Checks the unverified bindings the longest unchecked first, at most
/// `limit` of them. Returns how many were verified.
pub async fn check_pending(
    pool: &sqlx::PgPool,
    resolver: Option<SocketAddr>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let mut verified = 0;
    for pending in crate::ingress::records::unverified(pool, limit).await? {
        if check_and_record(pool, resolver, &pending).await? == Verdict::Verified {
            verified += 1;
        }
    }
    Ok(verified)
}
