//! Every capability's own settings, read as a process starts: a missing or
//! malformed variable of any of them stops it there, naming the variable,
//! as the platform's own settings do. A capability's parts are those its
//! declaration lists (`Capability::settings`).

use crate::config::{ConfigError, Settings};

/// Reads (and keeps, in `settings`) the engine's and retention's parts and
/// every capability's.
pub fn check(settings: &Settings) -> Result<(), ConfigError> {
    settings.part::<crate::host::engine::Config>()?;
    settings.part::<super::retention::Config>()?;
    for capability in super::capabilities::ALL {
        for check in capability.settings {
            check(settings)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::nodes;

    #[test]
    fn a_malformed_variable_of_any_capability_stops_the_check_naming_it() {
        for (name, value) in [
            ("KUBEBYON_SESSION_IDLE_SECONDS", "10"),
            ("JOIN_TOKEN_DEFAULT_TTL_MS", "0"),
            ("KUBEBYON_KUBECONFIG_MAX_TTL_SECONDS", "60"),
            ("KUBEBYON_DNS_RESOLVER", "resolver"),
            ("METRICS_RETENTION_MS", "soon"),
            ("NOTIFY_MAX_ATTEMPTS", "0"),
            ("AUDIT_EVENTS_RETENTION_MS", "0"),
            ("RETENTION_BATCH", "0"),
            ("KUBEBYON_ENGINE", "vcluster"),
        ] {
            let settings = Settings::from_source(&HashMap::from([(name, value)])).unwrap();
            match check(&settings) {
                Err(ConfigError::Invalid { name: named, .. }) => assert_eq!(named, name),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
        let settings = Settings::from_source(&HashMap::new()).unwrap();
        check(&settings).unwrap();
        assert_eq!(
            settings
                .part::<nodes::config::Config>()
                .unwrap()
                .join_token_default_ttl,
            std::time::Duration::from_secs(3600)
        );
    }
}
