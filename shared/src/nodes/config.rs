//! The nodes' own settings, from the environment ([`crate::config::Part`]).

use std::time::Duration;

use crate::config::{ConfigError, Millis, Part, Source};

/// Join tokens' lifetimes and when a node counts as offline.
#[derive(Debug, Clone)]
pub struct Config {
    /// `JOIN_TOKEN_DEFAULT_TTL_MS` (default 1 h): lifetime of a join token
    /// created without `ttl_seconds`.
    pub join_token_default_ttl: Duration,
    /// `JOIN_TOKEN_MAX_TTL_MS` (default 7 days): the longest lifetime a join
    /// token may be given.
    pub join_token_max_ttl: Duration,
    /// `NODE_OFFLINE_AFTER_MS` (default 2 min): a node whose kubelet has not
    /// posted status for this long is offline.
    pub node_offline_after: Duration,
}

impl Part for Config {
    fn read(source: &dyn Source) -> Result<Self, ConfigError> {
        let join_token_default_ttl =
            Millis::new("JOIN_TOKEN_DEFAULT_TTL_MS", 3_600_000).read(source)?;
        let join_token_max_ttl =
            Millis::new("JOIN_TOKEN_MAX_TTL_MS", 7 * 86_400_000).read(source)?;
        if join_token_default_ttl > join_token_max_ttl {
            return Err(ConfigError::Invalid {
                name: "JOIN_TOKEN_DEFAULT_TTL_MS",
                reason: "must not exceed JOIN_TOKEN_MAX_TTL_MS".into(),
            });
        }
        Ok(Self {
            join_token_default_ttl,
            join_token_max_ttl,
            node_offline_after: Millis::new("NODE_OFFLINE_AFTER_MS", 120_000).read(source)?,
        })
    }
}
