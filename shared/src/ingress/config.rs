//! The ingress capability's own settings, from the environment
//! ([`crate::config::Part`]).

use std::net::SocketAddr;

use crate::config::{ConfigError, Part, Source};

#[derive(Debug, Clone)]
pub struct Config {
    /// `KUBEBYON_DNS_RESOLVER` (`ip:port`): the resolver hostname proofs
    /// (DNS TXT challenges) are looked up through; the system's when unset.
    pub dns_resolver: Option<SocketAddr>,
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
        })
    }
}
