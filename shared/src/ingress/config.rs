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
        })
    }
}
