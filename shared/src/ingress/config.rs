//! The ingress capability's own settings, from the environment
//! ([`crate::config::Part`]).

use std::net::SocketAddr;

use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

use crate::config::{ConfigError, Part, Source};

#[derive(Debug, Clone)]
pub struct Config {
    /// `KUBEBYON_DNS_RESOLVER` (`ip:port`): the resolver hostname proofs
    /// (DNS TXT challenges) are looked up through; the system's when unset.
    pub dns_resolver: Option<SocketAddr>,
    /// `KUBEBYON_ROUTE_AGENT_TOKEN`: the credential the route agents present
    /// (`Authorization: Bearer`) to read the route plan and report; unset,
    /// their routes answer 503.
    pub route_agent_token: Option<SecretString>,
    /// `KUBEBYON_ROUTE_MODE`: who programs the route plan on the host.
    pub route_mode: RouteMode,
}

/// Who programs the route plan ([`super::edge::routes`]) on the host's
/// nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteMode {
    /// `routeagent` (the default): `route-agent` on every host node, from
    /// the plan the platform serves it.
    Agents,
    /// `local`: the platform's own process (the `sync-edge` schedule), on
    /// the machine it runs on, which is the host's one node, for a host of
    /// one machine. It reports as the agent of that node would.
    Local {
        /// `KUBEBYON_ROUTE_NODE`: that node's name; the machine's
        /// hostname when unset.
        node: String,
        /// `KUBEBYON_ROUTE_NETNS`: the network namespace (`ip netns`) to
        /// program instead of the process's own.
        netns: Option<String>,
    },
}

impl Config {
    /// Whether `presented` is the route agents' token, compared without
    /// stopping at the first difference (on digests of equal length).
    pub fn is_route_agent(&self, presented: &str) -> bool {
        self.route_agent_token.as_ref().is_some_and(|token| {
            let digest = |s: &str| Sha256::digest(s.as_bytes());
            subtle::ConstantTimeEq::ct_eq(
                &digest(token.expose_secret())[..],
                &digest(presented)[..],
            )
            .into()
        })
    }
}

impl Part for Config {
    fn read(source: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            dns_resolver: source
                .get("KUBEBYON_DNS_RESOLVER")
                .map(|raw| {
                    raw.parse().map_err(|_| ConfigError::Invalid {
                        name: "KUBEBYON_DNS_RESOLVER",
                        reason: "must be an ip:port, such as 10.0.0.2:53".into(),
                    })
                })
                .transpose()?,
            route_agent_token: match source.get("KUBEBYON_ROUTE_AGENT_TOKEN") {
                Some(token) if token.len() < 32 => {
                    return Err(ConfigError::Invalid {
                        name: "KUBEBYON_ROUTE_AGENT_TOKEN",
                        reason: "must be at least 32 characters".into(),
                    });
                }
                token => token.map(SecretString::from),
            },
            route_mode: route_mode(source)?,
        })
    }
}

fn route_mode(source: &dyn Source) -> Result<RouteMode, ConfigError> {
    match source.get("KUBEBYON_ROUTE_MODE").as_deref() {
        None | Some("routeagent") => return Ok(RouteMode::Agents),
        Some("local") => {}
        Some(_) => {
            return Err(ConfigError::Invalid {
                name: "KUBEBYON_ROUTE_MODE",
                reason: "must be routeagent or local".into(),
            });
        }
    }
    let node = match source.get("KUBEBYON_ROUTE_NODE") {
        Some(node) => node,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
    };
    if !is_node_name(&node) {
        return Err(ConfigError::Invalid {
            name: "KUBEBYON_ROUTE_NODE",
            reason: "must be the host node's name (lowercase DNS labels, 253 characters at most); the machine's hostname is not one".into(),
        });
    }
    let netns = source.get("KUBEBYON_ROUTE_NETNS");
    if netns
        .as_deref()
        .is_some_and(|n| n.is_empty() || n.contains('/') || n.starts_with('.'))
    {
        return Err(ConfigError::Invalid {
            name: "KUBEBYON_ROUTE_NETNS",
            reason: "must be a network namespace's name, as `ip netns` lists it".into(),
        });
    }
    Ok(RouteMode::Local { node, netns })
}

/// A Kubernetes node's name: a DNS subdomain (lowercase labels of at most
/// 63 characters, 253 in all).
pub fn is_node_name(name: &str) -> bool {
    (1..=253).contains(&name.len())
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn mode(pairs: &[(&'static str, &'static str)]) -> Result<RouteMode, ConfigError> {
        Config::read(&pairs.iter().copied().collect::<HashMap<_, _>>()).map(|c| c.route_mode)
    }

    #[test]
    fn the_route_mode_is_agents_unless_local_is_asked_for() {
        assert_eq!(mode(&[]).unwrap(), RouteMode::Agents);
        assert_eq!(
            mode(&[("KUBEBYON_ROUTE_MODE", "routeagent")]).unwrap(),
            RouteMode::Agents
        );
        assert_eq!(
            mode(&[
                ("KUBEBYON_ROUTE_MODE", "local"),
                ("KUBEBYON_ROUTE_NODE", "host-1.example"),
                ("KUBEBYON_ROUTE_NETNS", "edge"),
            ])
            .unwrap(),
            RouteMode::Local {
                node: "host-1.example".into(),
                netns: Some("edge".into())
            }
        );
        for bad in [
            &[("KUBEBYON_ROUTE_MODE", "Local")][..],
            &[
                ("KUBEBYON_ROUTE_MODE", "local"),
                ("KUBEBYON_ROUTE_NODE", "Host_1"),
            ],
            &[
                ("KUBEBYON_ROUTE_MODE", "local"),
                ("KUBEBYON_ROUTE_NODE", "h"),
                ("KUBEBYON_ROUTE_NETNS", "../x"),
            ],
        ] {
            assert!(mode(bad).is_err(), "{bad:?}");
        }
    }
}
