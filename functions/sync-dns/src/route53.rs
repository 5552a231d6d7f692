//! DNS automation on Route53 (aws-sdk-route53): `sync-dns` converges the
//! hosted zone of the platform's base domain to the database.
//!
//! Wanted: a CNAME `<cluster>-<id>.<base domain>` → the edge target for every
//! live cluster with the managed ingress on, and a CNAME `<hostname>` → that
//! cluster name for every platform-managed hostname binding. Owned: the
//! records the platform made, as recorded on their cluster or binding; only
//! those are ever changed or deleted. A wanted name where the zone holds a
//! record the platform did not make is a conflict recorded on its owner, and
//! left alone; a name that is free is made with CREATE, which Route53 refuses
//! rather than overwrite what appeared meanwhile.
//! The zone is listed once per run; changes go in as few calls as Route53's
//! limits allow (1,000 records and 32,000 value characters a call, an UPSERT
//! counting twice), and a run with nothing to change makes no change call.
//! A refused call is tried again change by change, so one clash fails its
//! own owner only.
//! Records left in a zone the settings no longer name are retired: deleted
//! from that zone, each former zone on its own, where it still holds our value.

use std::collections::HashMap;

use aws_sdk_route53::{
    Client,
    config::{BehaviorVersion, Credentials, Region},
    types::{Change, ChangeAction, ChangeBatch, ResourceRecord, ResourceRecordSet, RrType},
};
use secrecy::ExposeSecret;
use serde::Serialize;
use shared::{
    config::Settings,
    domain::DnsManagementStatus,
    ingress::{
        dns::{cluster_record, is_under, normalize},
        records::{self, Owner},
        settings::{self, column},
    },
    settings::open,
};
use sqlx::PgPool;

/// Route53's limits on one change call: 1,000 ResourceRecord elements and
/// 32,000 characters of values, an UPSERT counting twice.
pub const MAX_RECORDS_PER_CALL: usize = 1000;
pub const MAX_VALUE_CHARS_PER_CALL: usize = 32_000;

/// Cuts changes into calls within Route53's limits; `weigh` gives a change's
/// (records, value characters) as Route53 counts them.
pub fn batches<T>(changes: &[T], weigh: impl Fn(&T) -> (usize, usize)) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut records, mut chars) = (0, 0, 0);
    for (i, change) in changes.iter().enumerate() {
        let (r, c) = weigh(change);
        if i > start && (records + r > MAX_RECORDS_PER_CALL || chars + c > MAX_VALUE_CHARS_PER_CALL)
        {
            out.push(&changes[start..i]);
            (start, records, chars) = (i, 0, 0);
        }
        records += r;
        chars += c;
    }
    if start < changes.len() {
        out.push(&changes[start..]);
    }
    out
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DnsReport {
    pub wanted: u64,
    pub upserted: u64,
    pub deleted: u64,
    pub change_calls: u64,
    pub failed: u64,
    /// Wanted names where the zone holds a record the platform did not make.
    pub conflicts: u64,
    /// Self-managed bindings whose resolution was looked at.
    pub observed: u64,
    /// Self-managed bindings whose DNS challenge was found this run.
    pub verified: u64,
    /// Why nothing was done, when the DNS provider is not configured.
    pub skipped: Option<&'static str>,
}

/// The zone and a client for it, from the system settings.
pub struct Zone {
    pub client: Client,
    pub zone_id: String,
    pub base_domain: String,
    pub ttl: i64,
    pub edge_target: Option<String>,
}

/// The configured zone, or why there is none.
pub async fn zone(
    pool: &PgPool,
    env: &Settings,
) -> Result<Result<Zone, &'static str>, sqlx::Error> {
    let stored = settings::load(pool).await?;
    let f = &stored.fields;
    let (Some("route53"), Some(zone_id), Some(base)) = (
        f.managed_workload_ingress_dns_provider.as_deref(),
        f.managed_workload_ingress_dns_zone_id.clone(),
        f.managed_workload_ingress_base_domain.clone(),
    ) else {
        return Ok(Err("no Route53 zone and base domain are configured"));
    };
    let key = env.secret_box();
    let http = aws_smithy_http_client::Builder::new().tls_provider(
        aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ),
    );
    // The DNS credentials go only to a name that resolves to public addresses
    // when connecting, unless private destinations are allowed.
    let http = if env.allow_private_outbound {
        http.build_https()
    } else {
        http.build_with_resolver(shared::outbound::PublicOnly)
    };
    let mut config = aws_sdk_route53::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(http)
        .region(Region::new("us-east-1"));
    // The access key in the settings, else the function's own credentials
    // (under Lambda its role's, allowed only the zone by the template).
    let credentials = match f.managed_workload_ingress_dns_access_key_id.clone() {
        Some(id) => match open(
            key.as_ref(),
            column::DNS_SECRET,
            stored.dns_secret.as_deref(),
        ) {
            Ok(Some(secret)) => Credentials::new(
                id,
                secret.expose_secret().to_string(),
                None,
                None,
                "kubebyon-settings",
            ),
            _ => return Ok(Err("the Route53 access key's secret cannot be opened")),
        },
        None => match &env.aws_credentials {
            Some(own) => Credentials::new(
                own.access_key_id.clone(),
                own.secret_access_key.expose_secret().to_string(),
                own.session_token
                    .as_ref()
                    .map(|t| t.expose_secret().to_string()),
                None,
                "environment",
            ),
            None => {
                return Ok(Err(
                    "no Route53 access key is configured and the function has no AWS credentials of its own",
                ));
            }
        },
    };
    config = config.credentials_provider(credentials);
    if let Some(endpoint) = f.managed_workload_ingress_dns_endpoint.clone() {
        config = config.endpoint_url(endpoint);
    }
    Ok(Ok(Zone {
        client: Client::from_conf(config.build()),
        zone_id,
        base_domain: normalize(&base),
        ttl: i64::from(f.managed_workload_ingress_dns_record_ttl),
        edge_target: f
            .managed_workload_ingress_edge_target
            .as_deref()
            .map(normalize),
    }))
}

/// What a zone holds at one name: its CNAME (value, ttl), and the types of
/// any other records there.
#[derive(Debug, Default)]
struct Listed {
    cname: Option<(String, i64)>,
    others: Vec<String>,
}

/// Every name in a zone with what it holds.
async fn list_records(client: &Client, zone_id: &str) -> Result<HashMap<String, Listed>, String> {
    let mut out: HashMap<String, Listed> = HashMap::new();
    let mut next: Option<(String, RrType)> = None;
    loop {
        let mut request = client.list_resource_record_sets().hosted_zone_id(zone_id);
        if let Some((name, kind)) = next.take() {
            request = request.start_record_name(name).start_record_type(kind);
        }
        let page = request.send().await.map_err(|e| {
            format!(
                "listing the zone: {}",
                aws_sdk_route53::error::DisplayErrorContext(e)
            )
        })?;
        for set in page.resource_record_sets() {
            let listed = out.entry(normalize(set.name())).or_default();
            match (set.r#type(), set.resource_records().first()) {
                (RrType::Cname, Some(value)) => {
                    listed.cname = Some((normalize(value.value()), set.ttl().unwrap_or_default()));
                }
                (kind, _) => listed.others.push(kind.as_str().to_string()),
            }
        }
        match (
            page.is_truncated(),
            page.next_record_name(),
            page.next_record_type(),
        ) {
            (true, Some(name), Some(kind)) => next = Some((name.to_string(), kind.clone())),
            _ => return Ok(out),
        }
    }
}

/// Sends changes in one call; the error as we record it.
async fn send_changes(
    client: &Client,
    zone_id: &str,
    comment: &str,
    changes: Vec<Change>,
) -> Result<(), String> {
    client
        .change_resource_record_sets()
        .hosted_zone_id(zone_id)
        .change_batch(
            ChangeBatch::builder()
                .comment(comment)
                .set_changes(Some(changes))
                .build()
                .expect("changes are set"),
        )
        .send()
        .await
        .map(|_| ())
        .map_err(|err| {
            format!(
                "changing the zone: {}",
                aws_sdk_route53::error::DisplayErrorContext(err)
            )
        })
}

fn change(action: ChangeAction, name: &str, value: &str, ttl: i64) -> Change {
    let set = ResourceRecordSet::builder()
        .name(name)
        .r#type(RrType::Cname)
        .ttl(ttl)
        .resource_records(
            ResourceRecord::builder()
                .value(value)
                .build()
                .expect("value is set"),
        )
        .build()
        .expect("name and type are set");
    Change::builder()
        .action(action)
        .resource_record_set(set)
        .build()
        .expect("action and set are set")
}

/// What one owner needs: its record made (`target`) or gone (`None`).
struct Plan<'a> {
    owner: Owner,
    name: String,
    target: Option<String>,
    /// What the platform recorded of this owner's record.
    recorded: &'a records::DnsOwner,
}

/// Self-managed hostname challenges one run looks up, at most.
const VERIFICATIONS_PER_RUN: i64 = 50;

/// One run: check pending hostname challenges, converge the zone, record per-owner results, observe
/// self-managed bindings.
pub async fn sync(pool: &PgPool, env: &Settings) -> anyhow::Result<DnsReport> {
    let mut report = DnsReport {
        verified: shared::ingress::dnsproof::check_pending(
            pool,
            env.part::<shared::ingress::config::Config>()?.dns_resolver,
            VERIFICATIONS_PER_RUN,
        )
        .await?,
        ..DnsReport::default()
    };
    let zone = match zone(pool, env).await? {
        Ok(zone) => zone,
        Err(why) => {
            report.skipped = Some(why);
            return Ok(report);
        }
    };
    records::retire_other_zones(pool, &zone.zone_id).await?;
    let owners = records::owners(pool).await?;
    let mut plans = Vec::new();
    for owner in &owners {
        let cluster_name =
            cluster_record(&owner.vcluster_name, owner.cluster_id, &zone.base_domain);
        let wanted = owner.wanted;
        match owner.owner {
            Owner::Cluster(_) => {
                if wanted {
                    match &zone.edge_target {
                        Some(edge) => plans.push(Plan {
                            recorded: owner,
                            owner: owner.owner,
                            name: cluster_name,
                            target: Some(edge.clone()),
                        }),
                        None => records::record_failure(
                            pool,
                            owner.owner,
                            "no edge target is configured (managed_workload_ingress_edge_target)",
                        )
                        .await?,
                    }
                } else if let Some(name) = &owner.recorded_name {
                    plans.push(Plan {
                        recorded: owner,
                        owner: owner.owner,
                        name: name.clone(),
                        target: None,
                    });
                }
            }
            Owner::Binding(_) => {
                let hostname = owner.hostname.clone().unwrap_or_default();
                if wanted && is_under(&hostname, &zone.base_domain) {
                    plans.push(Plan {
                        recorded: owner,
                        owner: owner.owner,
                        name: hostname,
                        target: Some(cluster_name),
                    });
                } else if let Some(name) = &owner.recorded_name {
                    plans.push(Plan {
                        recorded: owner,
                        owner: owner.owner,
                        name: name.clone(),
                        target: None,
                    });
                }
            }
        }
    }
    report.wanted = plans.iter().filter(|p| p.target.is_some()).count() as u64;
    let current = match list_records(&zone.client, &zone.zone_id).await {
        Ok(current) => current,
        Err(error) => {
            for plan in &plans {
                records::record_failure(pool, plan.owner, &error).await?;
            }
            report.failed = plans.len() as u64;
            return Ok(report);
        }
    };
    let mut changes: Vec<(Change, &Plan, bool, usize)> = Vec::new();
    let mut settled: Vec<&Plan> = Vec::new();
    for plan in &plans {
        let recorded = Some(plan.recorded)
            .filter(|o| o.recorded_name.as_deref() == Some(plan.name.as_str()))
            .and_then(|o| o.recorded_target.as_deref().map(normalize));
        let listed = current.get(&plan.name);
        // The listed value, or — when the server's answer carried none we can
        // read — the value we recorded when we set it.
        let cname = listed.and_then(|l| l.cname.as_ref()).map(|(listed, ttl)| {
            let value = if listed.is_empty() {
                recorded.clone()
            } else {
                Some(listed.clone())
            };
            (value, *ttl)
        });
        let others = listed.map_or(&[][..], |l| l.others.as_slice());
        let ours = matches!(&cname, Some((Some(value), _)) if Some(value) == recorded.as_ref());
        match (&plan.target, &cname) {
            (Some(target), Some((Some(value), ttl))) if value == target && others.is_empty() => {
                if *ttl == zone.ttl || !ours {
                    settled.push(plan);
                } else {
                    changes.push((
                        change(ChangeAction::Upsert, &plan.name, target, zone.ttl),
                        plan,
                        true,
                        target.len(),
                    ));
                }
            }
            (Some(target), Some(_)) if ours && others.is_empty() => changes.push((
                change(ChangeAction::Upsert, &plan.name, target, zone.ttl),
                plan,
                true,
                target.len(),
            )),
            (Some(target), None) if others.is_empty() => changes.push((
                change(ChangeAction::Create, &plan.name, target, zone.ttl),
                plan,
                true,
                target.len(),
            )),
            (Some(_), _) => {
                let mut held: Vec<&str> = others.iter().map(String::as_str).collect();
                if cname.is_some() {
                    held.push("CNAME");
                }
                report.conflicts += 1;
                records::record_failure(
                    pool,
                    plan.owner,
                    &format!(
                        "{} already holds a record the platform did not make ({}); it is left alone: remove it, or bind another name",
                        plan.name,
                        held.join(", ")
                    ),
                )
                .await?;
            }
            (None, Some((Some(value), ttl))) if ours => {
                let length = value.len();
                changes.push((
                    change(ChangeAction::Delete, &plan.name, value, *ttl),
                    plan,
                    false,
                    length,
                ));
            }
            // Gone, or changed by someone else since: no longer ours to delete.
            (None, _) => settled.push(plan),
        }
    }
    for plan in settled {
        let o = plan.recorded;
        let unchanged = o.fresh
            && o.recorded_name.as_deref() == plan.target.as_ref().map(|_| plan.name.as_str())
            && o.recorded_target.as_deref() == plan.target.as_deref();
        if unchanged {
            continue;
        }
        records::record_success(
            pool,
            plan.owner,
            plan.target.as_deref().map(|_| plan.name.as_str()),
            plan.target.as_deref(),
            &zone.zone_id,
        )
        .await?;
    }
    let weigh = |(_, _, upsert, length): &(Change, &Plan, bool, usize)| {
        let times = if *upsert { 2 } else { 1 };
        (times, times * length)
    };
    for batch in batches(&changes, weigh) {
        let all = batch.iter().map(|(c, ..)| c.clone()).collect();
        report.change_calls += 1;
        let outcomes: Vec<Result<(), String>> =
            match send_changes(&zone.client, &zone.zone_id, "kubebyon sync-dns", all).await {
                Ok(()) => vec![Ok(()); batch.len()],
                // One refused change fails its whole call: try each on its
                // own, so the others go in and only the clash is recorded.
                Err(_) if batch.len() > 1 => {
                    let mut each = Vec::with_capacity(batch.len());
                    for (single, ..) in batch {
                        report.change_calls += 1;
                        each.push(
                            send_changes(
                                &zone.client,
                                &zone.zone_id,
                                "kubebyon sync-dns",
                                vec![single.clone()],
                            )
                            .await,
                        );
                    }
                    each
                }
                Err(error) => vec![Err(error)],
            };
        for ((_, plan, upsert, _), outcome) in batch.iter().zip(outcomes) {
            match outcome {
                Ok(()) => {
                    if *upsert {
                        report.upserted += 1;
                    } else {
                        report.deleted += 1;
                    }
                    records::record_success(
                        pool,
                        plan.owner,
                        plan.target.as_deref().map(|_| plan.name.as_str()),
                        plan.target.as_deref(),
                        &zone.zone_id,
                    )
                    .await?;
                }
                Err(error) => {
                    tracing::warn!(zone = %zone.zone_id, name = %plan.name, error, "a DNS change was refused");
                    report.failed += 1;
                    records::record_failure(pool, plan.owner, &error).await?;
                }
            }
        }
    }
    clean_retired(pool, &zone.client, &mut report).await?;
    report.observed = observe_self_managed(pool, &zone.base_domain).await?;
    if report.change_calls > 0 || report.failed > 0 {
        tracing::info!(?report, "sync-dns");
    }
    Ok(report)
}

/// Deletes the records left in zones the platform no longer manages, where
/// the zone still holds the value the platform set; one zone's failure is
/// recorded on its records and does not stop the others.
async fn clean_retired(
    pool: &PgPool,
    client: &Client,
    report: &mut DnsReport,
) -> Result<(), sqlx::Error> {
    let retired = records::retired(pool).await?;
    for records in retired.chunk_by(|a, b| a.zone_id == b.zone_id) {
        let zone_id = &records[0].zone_id;
        let names =
            |rs: &[&records::Retired]| rs.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        let all: Vec<&records::Retired> = records.iter().collect();
        let listed = match list_records(client, zone_id).await {
            Ok(listed) => listed,
            Err(error) => {
                report.failed += all.len() as u64;
                records::retired_failure(pool, zone_id, &names(&all), &error).await?;
                continue;
            }
        };
        let cname_of = |name: &str| listed.get(&normalize(name)).and_then(|l| l.cname.clone());
        let (ours, gone): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| {
            cname_of(&r.name)
                .is_some_and(|(value, _)| value.is_empty() || value == normalize(&r.value))
        });
        // Gone already, or changed by someone else since: nothing to delete.
        records::forget_retired(pool, zone_id, &names(&gone)).await?;
        let changes: Vec<(Change, &records::Retired)> = ours
            .into_iter()
            .map(|r| {
                let ttl = cname_of(&r.name).map_or(0, |(_, ttl)| ttl);
                (change(ChangeAction::Delete, &r.name, &r.value, ttl), r)
            })
            .collect();
        for batch in batches(&changes, |(_, r)| (1, r.value.len())) {
            let result = send_changes(
                client,
                zone_id,
                "kubebyon sync-dns: zone no longer managed",
                batch.iter().map(|(c, _)| c.clone()).collect(),
            )
            .await;
            report.change_calls += 1;
            let batch_names: Vec<String> = batch.iter().map(|(_, r)| r.name.clone()).collect();
            match result {
                Ok(()) => {
                    report.deleted += batch.len() as u64;
                    records::forget_retired(pool, zone_id, &batch_names).await?;
                }
                Err(error) => {
                    tracing::warn!(zone = %zone_id, error, "deleting records from a former zone failed");
                    report.failed += batch.len() as u64;
                    records::retired_failure(pool, zone_id, &batch_names, &error).await?;
                }
            }
        }
    }
    Ok(())
}

/// Self-managed bindings: only their public resolution is looked at — does
/// the hostname resolve, and to the addresses of its cluster's name?
async fn observe_self_managed(pool: &PgPool, base_domain: &str) -> Result<u64, sqlx::Error> {
    let bindings = records::self_managed(pool).await?;
    for binding in &bindings {
        let target = cluster_record(&binding.vcluster_name, binding.cluster_id, base_domain);
        let resolve = |name: String| async move {
            tokio::time::timeout(
                std::time::Duration::from_secs(5),
                tokio::net::lookup_host((name.as_str(), 443)),
            )
            .await
            .ok()
            .and_then(Result::ok)
            .map(|addrs| addrs.map(|a| a.ip()).collect::<Vec<_>>())
        };
        let (status, message) = match (
            resolve(binding.hostname.clone()).await,
            resolve(target.clone()).await,
        ) {
            (None, _) => (
                DnsManagementStatus::NotResolving,
                format!(
                    "{} does not resolve; point a CNAME at {target}",
                    binding.hostname
                ),
            ),
            (Some(ours), Some(theirs)) if ours.iter().any(|a| theirs.contains(a)) => (
                DnsManagementStatus::Resolves,
                format!("{} resolves to the cluster's ingress", binding.hostname),
            ),
            (Some(_), _) => (
                DnsManagementStatus::Mismatch,
                format!(
                    "{} resolves elsewhere; point a CNAME at {target}",
                    binding.hostname
                ),
            ),
        };
        records::record_observation(pool, binding.id, status, &message).await?;
    }
    Ok(bindings.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_stay_within_route53s_limits() {
        // UPSERTs of 40-character values: 400 fit the character limit (2 × 40 × 400 = 32,000).
        let upserts = vec![40usize; 1000];
        let cut = batches(&upserts, |len| (2, 2 * len));
        assert_eq!(
            cut.iter().map(|b| b.len()).collect::<Vec<_>>(),
            [400, 400, 200]
        );
        // Short DELETEs: the record limit binds.
        let deletes = vec![5usize; 2500];
        let cut = batches(&deletes, |len| (1, *len));
        assert_eq!(
            cut.iter().map(|b| b.len()).collect::<Vec<_>>(),
            [1000, 1000, 500]
        );
        assert!(batches(&Vec::<usize>::new(), |_| (1, 1)).is_empty());
    }
}
