//! The kubeconfigs' own settings, from the environment ([`crate::config::Part`]).

use crate::{
    config::{ConfigError, Part, Source, parse_or},
    kubeconfigs::credential::MIN_SECONDS,
};

/// The lifetimes of a kubeconfig's token.
#[derive(Debug, Clone)]
pub struct Config {
    /// `KUBEBYON_KUBECONFIG_DEFAULT_TTL_SECONDS` (default 8 h): lifetime of
    /// a kubeconfig's token when the download does not ask for one.
    pub default_ttl_seconds: i64,
    /// `KUBEBYON_KUBECONFIG_MAX_TTL_SECONDS` (default 24 h, at most a year):
    /// the longest lifetime a kubeconfig's token may be given.
    pub max_ttl_seconds: i64,
    /// `KUBEBYON_KUBECONFIG_EXEC_TTL_SECONDS` (default 10 minutes, 600 to
    /// 3,600): lifetime of each token `kubebyon credential` renews kubectl's
    /// access with, so a revoked key or user stops kubectl this soon.
    pub exec_ttl_seconds: i64,
}

impl Part for Config {
    fn read(source: &dyn Source) -> Result<Self, ConfigError> {
        let (default_ttl_seconds, max_ttl_seconds) = ttls(source)?;
        let name = "KUBEBYON_KUBECONFIG_EXEC_TTL_SECONDS";
        let exec_ttl_seconds: i64 = parse_or(source, name, MIN_SECONDS)?;
        if !(MIN_SECONDS..=3600).contains(&exec_ttl_seconds) {
            return Err(ConfigError::Invalid {
                name,
                reason: format!("must be between {MIN_SECONDS} and 3600 seconds"),
            });
        }
        Ok(Self {
            default_ttl_seconds,
            max_ttl_seconds,
            exec_ttl_seconds,
        })
    }
}

/// The default and longest lifetimes of a kubeconfig's token, in seconds:
/// each between the ten minutes the Kubernetes API issues at least and a
/// year, the default not above the longest.
fn ttls(source: &dyn Source) -> Result<(i64, i64), ConfigError> {
    const YEAR: i64 = 365 * 86_400;
    let bounded = |name: &'static str, default: i64| -> Result<i64, ConfigError> {
        let value: i64 = parse_or(source, name, default)?;
        if !(MIN_SECONDS..=YEAR).contains(&value) {
            return Err(ConfigError::Invalid {
                name,
                reason: format!("must be between {} and {YEAR} seconds", MIN_SECONDS),
            });
        }
        Ok(value)
    };
    let default = bounded("KUBEBYON_KUBECONFIG_DEFAULT_TTL_SECONDS", 8 * 3600)?;
    let max = bounded("KUBEBYON_KUBECONFIG_MAX_TTL_SECONDS", 86_400)?;
    if default > max {
        return Err(ConfigError::Invalid {
            name: "KUBEBYON_KUBECONFIG_DEFAULT_TTL_SECONDS",
            reason: "must not exceed KUBEBYON_KUBECONFIG_MAX_TTL_SECONDS".into(),
        });
    }
    Ok((default, max))
}
