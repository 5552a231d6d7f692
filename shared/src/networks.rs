//! A cluster's pod and service networks: one block of each, allocated from
//! the pools the platform is configured with as the cluster is created (in
//! the create request's transaction), given to its control plane (the
//! vCluster chart's `networking.podCIDR` and `networking.serviceCIDR`), and
//! released when its host namespace is gone.
//!
//! No two clusters' networks overlap, so the host can route to any
//! cluster's pods by address (the workload edge, the nodes' PodCIDR
//! routes). Allocators take one lock, so concurrent creates are served one
//! after the other and each takes the lowest free block; the table's
//! exclusion constraint (`cluster_networks_no_overlap`) refuses an overlap
//! whatever took it.

use std::{fmt, net::Ipv4Addr, str::FromStr};

use sqlx::PgConnection;
use uuid::Uuid;

use crate::config::{ConfigError, Part, Source};

/// An IPv4 network: its first address and prefix length, the address
/// holding no bit past the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Block {
    first: u32,
    prefix: u8,
}

impl Block {
    pub fn new(address: Ipv4Addr, prefix: u8) -> Option<Self> {
        let first = u32::from(address);
        (prefix <= 32 && first & !mask(prefix) == 0).then_some(Self { first, prefix })
    }

    pub fn prefix(self) -> u8 {
        self.prefix
    }

    fn size(self) -> u64 {
        1 << (32 - self.prefix)
    }

    fn start(self) -> u64 {
        u64::from(self.first)
    }

    /// One past its last address.
    fn end(self) -> u64 {
        self.start() + self.size()
    }

    pub fn overlaps(self, other: Self) -> bool {
        self.start() < other.end() && other.start() < self.end()
    }

    /// Whether `other` lies wholly inside it.
    pub fn contains(self, other: Self) -> bool {
        self.start() <= other.start() && other.end() <= self.end()
    }
}

fn mask(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.first), self.prefix)
    }
}

impl FromStr for Block {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let (address, prefix) = raw
            .split_once('/')
            .ok_or_else(|| format!("{raw:?} is not an IPv4 CIDR such as 10.64.0.0/10"))?;
        let address: Ipv4Addr = address
            .parse()
            .map_err(|_| format!("{raw:?} is not an IPv4 CIDR such as 10.64.0.0/10"))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= 32)
            .ok_or_else(|| format!("{raw:?} has no prefix length of 0–32"))?;
        Self::new(address, prefix).ok_or_else(|| {
            format!("{raw:?} has address bits past its prefix: write the network's first address")
        })
    }
}

/// What a block is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Pod,
    Service,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pod => "pod",
            Self::Service => "service",
        }
    }
}

/// Where blocks of one purpose are taken from: the pools, in the order
/// they are used, and the prefix length of each cluster's block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pools {
    pub pools: Vec<Block>,
    pub prefix: u8,
}

impl Pools {
    /// The first block of the pools' size, pool by pool and lowest first,
    /// that overlaps none of `taken`.
    pub fn first_free(&self, taken: &[Block]) -> Option<Block> {
        let mut taken = taken.to_vec();
        taken.sort_unstable();
        let size = 1u64 << (32 - self.prefix);
        self.pools.iter().find_map(|pool| {
            let mut candidate = pool.start();
            for used in taken.iter().filter(|t| t.overlaps(*pool)) {
                if used.start() >= candidate + size {
                    break;
                }
                candidate = candidate.max(used.end()).next_multiple_of(size);
            }
            (candidate + size <= pool.end()).then(|| Block {
                first: u32::try_from(candidate).expect("inside an IPv4 pool"),
                prefix: self.prefix,
            })
        })
    }
}

/// The pools clusters' networks are taken from: `KUBEBYON_POD_CIDR_POOLS`
/// (comma-separated IPv4 CIDRs, default `10.64.0.0/10`) in blocks of
/// `KUBEBYON_POD_CIDR_PREFIX` (default 19: 32 nodes' `/24`s), and
/// `KUBEBYON_SERVICE_CIDR_POOLS` (default `10.128.0.0/10`) in blocks of
/// `KUBEBYON_SERVICE_CIDR_PREFIX` (default 22: 1,024 Services). No two
/// pools may overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub pods: Pools,
    pub services: Pools,
}

impl Part for Config {
    fn read(source: &dyn Source) -> Result<Self, ConfigError> {
        // A node's PodCIDR is a /24 (the controller manager's
        // --node-cidr-mask-size); a Service range may not pass 20 bits
        // (kube-apiserver's --service-cluster-ip-range check).
        let pods = pools(source, "KUBEBYON_POD_CIDR_POOLS", "10.64.0.0/10")?;
        let pods = Pools {
            prefix: prefix(source, "KUBEBYON_POD_CIDR_PREFIX", 19, 8..=24, &pods)?,
            pools: pods,
        };
        let services = pools(source, "KUBEBYON_SERVICE_CIDR_POOLS", "10.128.0.0/10")?;
        let services = Pools {
            prefix: prefix(
                source,
                "KUBEBYON_SERVICE_CIDR_PREFIX",
                22,
                12..=28,
                &services,
            )?,
            pools: services,
        };
        let every: Vec<Block> = pods.pools.iter().chain(&services.pools).copied().collect();
        for (i, a) in every.iter().enumerate() {
            if let Some(b) = every[i + 1..].iter().find(|b| a.overlaps(**b)) {
                return Err(ConfigError::Invalid {
                    name: "KUBEBYON_SERVICE_CIDR_POOLS",
                    reason: format!("the pools {a} and {b} overlap"),
                });
            }
        }
        Ok(Self { pods, services })
    }
}

fn pools(
    source: &dyn Source,
    name: &'static str,
    default: &str,
) -> Result<Vec<Block>, ConfigError> {
    let raw = source.get(name).unwrap_or_else(|| default.into());
    let pools = raw
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse()
                .map_err(|reason| ConfigError::Invalid { name, reason })
        })
        .collect::<Result<Vec<Block>, _>>()?;
    if pools.is_empty() {
        return Err(ConfigError::Invalid {
            name,
            reason: "must name at least one IPv4 CIDR".into(),
        });
    }
    Ok(pools)
}

fn prefix(
    source: &dyn Source,
    name: &'static str,
    default: u8,
    allowed: std::ops::RangeInclusive<u8>,
    pools: &[Block],
) -> Result<u8, ConfigError> {
    let prefix: u8 = crate::config::parse_or(source, name, default)?;
    let widest = pools.iter().map(|p| p.prefix).max().unwrap_or(0);
    if !allowed.contains(&prefix) || prefix < widest {
        return Err(ConfigError::Invalid {
            name,
            reason: format!(
                "must be from {} to {} and no shorter than every pool's ({widest})",
                allowed.start(),
                allowed.end()
            ),
        });
    }
    Ok(prefix)
}

/// A cluster's networks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Networks {
    pub pod: Block,
    pub service: Block,
}

/// No block of this purpose is free.
#[derive(Debug, thiserror::Error)]
pub enum AllocationError {
    #[error("every {} network of the platform's pools is taken", .0.as_str())]
    Exhausted(Purpose),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Takes the lowest free pod and service blocks for `cluster_id` in `tx`
/// (the lock held until it ends). The cluster's row may come later in the
/// same transaction: the reference to it is checked at commit.
pub async fn allocate(
    tx: &mut PgConnection,
    config: &Config,
    cluster_id: Uuid,
) -> Result<Networks, AllocationError> {
    crate::db::advisory_xact_lock(&mut *tx, "cluster_networks").await?;
    let every: Vec<String> = config
        .pods
        .pools
        .iter()
        .chain(&config.services.pools)
        .map(ToString::to_string)
        .collect();
    let mut taken: Vec<Block> = sqlx::query_scalar!(
        r#"SELECT cidr::text AS "cidr!" FROM cluster_networks WHERE cidr && ANY($1::text[]::cidr[])"#,
        &every,
    )
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .filter_map(|c| c.parse().ok())
    .collect();
    let pod = config
        .pods
        .first_free(&taken)
        .ok_or(AllocationError::Exhausted(Purpose::Pod))?;
    taken.push(pod);
    let service = config
        .services
        .first_free(&taken)
        .ok_or(AllocationError::Exhausted(Purpose::Service))?;
    sqlx::query!(
        "INSERT INTO cluster_networks (cidr, cluster_id, purpose)
         VALUES ($1::text::cidr, $3, 'pod'), ($2::text::cidr, $3, 'service')",
        pod.to_string(),
        service.to_string(),
        cluster_id,
    )
    .execute(&mut *tx)
    .await?;
    Ok(Networks { pod, service })
}

/// Every cluster's networks.
pub async fn all(db: impl sqlx::PgExecutor<'_>) -> Result<Vec<Block>, sqlx::Error> {
    Ok(
        sqlx::query_scalar!(r#"SELECT cidr::text AS "cidr!" FROM cluster_networks"#)
            .fetch_all(db)
            .await?
            .iter()
            .filter_map(|c| c.parse().ok())
            .collect(),
    )
}

/// Frees a cluster's networks: its host namespace, and its pods and
/// Services with it, are gone.
pub async fn release(tx: &mut PgConnection, cluster_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM cluster_networks WHERE cluster_id = $1",
        cluster_id
    )
    .execute(tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn block(raw: &str) -> Block {
        raw.parse().unwrap()
    }

    fn pools(raw: &[&str], prefix: u8) -> Pools {
        Pools {
            pools: raw.iter().map(|p| block(p)).collect(),
            prefix,
        }
    }

    #[test]
    fn a_cidr_is_read_only_as_a_network_s_first_address() {
        assert_eq!(block("10.64.0.0/10").to_string(), "10.64.0.0/10");
        for bad in [
            "10.64.0.1/10",
            "10.64.0.0",
            "10.64.0.0/33",
            "fd00::/8",
            "10.64.0.0/-1",
            "１0.64.0.0/10",
        ] {
            assert!(bad.parse::<Block>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_lowest_free_block_is_taken_pool_by_pool_around_what_is_used() {
        let p = pools(&["10.64.0.0/22", "10.96.0.0/23"], 24);
        assert_eq!(p.first_free(&[]), Some(block("10.64.0.0/24")));
        // A hole is filled first; a used block of another size is stepped
        // over to the next boundary.
        let taken = [block("10.64.0.0/24"), block("10.64.2.0/23")];
        assert_eq!(p.first_free(&taken), Some(block("10.64.1.0/24")));
        let taken = [
            block("10.64.0.0/23"),
            block("10.64.2.128/25"),
            block("10.64.3.0/24"),
        ];
        assert_eq!(p.first_free(&taken), Some(block("10.96.0.0/24")));
        // A block wider than the pool, covering it, leaves the next pool.
        assert_eq!(
            p.first_free(&[block("10.64.0.0/16")]),
            Some(block("10.96.0.0/24"))
        );
        let full = [block("10.64.0.0/22"), block("10.96.0.0/23")];
        assert_eq!(p.first_free(&full), None);
    }

    #[test]
    fn the_pools_are_read_checked_and_may_not_overlap() {
        let read = |vars: &[(&str, &str)]| {
            let source: HashMap<&str, &str> = vars.iter().copied().collect();
            Config::read(&source)
        };
        let defaults = read(&[]).unwrap();
        assert_eq!(defaults.pods, pools(&["10.64.0.0/10"], 19));
        assert_eq!(defaults.services, pools(&["10.128.0.0/10"], 22));
        for (name, value) in [
            ("KUBEBYON_POD_CIDR_POOLS", "10.64.0.0/10,10.128.0.0/9"),
            ("KUBEBYON_POD_CIDR_POOLS", " , "),
            ("KUBEBYON_POD_CIDR_POOLS", "10.64.0.1/10"),
            ("KUBEBYON_POD_CIDR_PREFIX", "25"),
            ("KUBEBYON_POD_CIDR_PREFIX", "9"),
            ("KUBEBYON_SERVICE_CIDR_PREFIX", "11"),
        ] {
            assert!(read(&[(name, value)]).is_err(), "{name}={value}");
        }
    }

    proptest! {
        /// Whatever is taken, the block found lies in a pool, has the
        /// pools' prefix and overlaps nothing taken; none is found only
        /// when no such block exists.
        #[test]
        fn a_free_block_is_free_and_none_is_missed(
            used in proptest::collection::vec((0u32..64, 20u8..=28), 0..24),
        ) {
            let p = pools(&["10.64.0.0/20", "10.80.0.0/22"], 24);
            let taken: Vec<Block> = used
                .iter()
                .map(|(i, prefix)| {
                    let first = u32::from(Ipv4Addr::new(10, 64, 0, 0)) + i * 256;
                    Block { first: first & mask(*prefix), prefix: *prefix }
                })
                .collect();
            let every: Vec<Block> = p.pools.iter().flat_map(|pool| {
                (0..pool.size() / 256).map(move |i| Block {
                    first: pool.first + u32::try_from(i).unwrap() * 256,
                    prefix: 24,
                })
            }).collect();
            let expected = every.iter().find(|b| taken.iter().all(|t| !t.overlaps(**b))).copied();
            prop_assert_eq!(p.first_free(&taken), expected);
        }
    }
}
