//! The control-plane engines' settings ([`Config`]), read with the host's.

use crate::{
    config::{ConfigError, Part, Source},
    domain::Engine,
};

/// The engines' settings.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    /// `KUBEBYON_ENGINE` (`kamaji`, the default, or `vcluster`): the engine
    /// a new cluster runs on.
    pub default: Engine,
    /// The vCluster Platform access key private nodes need
    /// (`KUBEBYON_VCLUSTER_PLATFORM_HOST` and
    /// `KUBEBYON_VCLUSTER_ACCESS_KEY`, both or neither).
    pub vcluster_licence: Option<Licence>,
    /// `KUBEBYON_KAMAJI_DATASTORE`: the `DataStore` every cluster's control
    /// plane keeps its state in; unset, Kamaji's default one.
    pub kamaji_datastore: Option<String>,
    /// `KUBEBYON_KAMAJI_NAMESPACE` (default `kamaji-system`): where Kamaji and
    /// its DataStore run on the host, the one namespace a control plane may
    /// reach besides its own.
    pub kamaji_namespace: String,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("default", &self.default)
            .field("vcluster_licence", &self.vcluster_licence.is_some())
            .field("kamaji_datastore", &self.kamaji_datastore)
            .field("kamaji_namespace", &self.kamaji_namespace)
            .finish()
    }
}

/// A vCluster Platform access key: what vCluster's Enterprise build reads
/// from the Secret `external.platform.apiKey.secretName` names (keys
/// `accessKey`, `host`, `project`, `insecure`: loft-sh/vcluster
/// `pkg/platform/secret.go`). Never logged.
#[derive(Clone, PartialEq, Eq)]
pub struct Licence {
    pub host: String,
    pub access_key: String,
}

impl Part for Config {
    fn read(source: &dyn Source) -> Result<Self, ConfigError> {
        const HOST: &str = "KUBEBYON_VCLUSTER_PLATFORM_HOST";
        const KEY: &str = "KUBEBYON_VCLUSTER_ACCESS_KEY";
        let default = match source.get("KUBEBYON_ENGINE") {
            None => Engine::Kamaji,
            Some(raw) => Engine::parse(&raw).ok_or_else(|| ConfigError::Invalid {
                name: "KUBEBYON_ENGINE",
                reason: format!("expected {}, got {raw:?}", Engine::names()),
            })?,
        };
        let vcluster_licence = match (source.get(HOST), source.get(KEY)) {
            (None, None) => None,
            (Some(host), Some(access_key))
                if !host.trim().is_empty() && !access_key.trim().is_empty() =>
            {
                let host = host
                    .trim()
                    .trim_start_matches("https://")
                    .trim_end_matches('/')
                    .to_string();
                if host.contains(['/', '@', ' ']) {
                    return Err(ConfigError::Invalid {
                        name: HOST,
                        reason: "must be the platform's host name (and port), nothing more".into(),
                    });
                }
                Some(Licence {
                    host,
                    access_key: access_key.trim().to_string(),
                })
            }
            _ => {
                return Err(ConfigError::Invalid {
                    name: KEY,
                    reason: format!("{HOST} and {KEY} go together: set both or neither"),
                });
            }
        };
        let config = Self {
            default,
            vcluster_licence,
            kamaji_datastore: source
                .get("KUBEBYON_KAMAJI_DATASTORE")
                .filter(|d| !d.trim().is_empty()),
            kamaji_namespace: source
                .get("KUBEBYON_KAMAJI_NAMESPACE")
                .unwrap_or_else(|| "kamaji-system".into()),
        };
        if let Some(refusal) = config.refusal(config.default) {
            return Err(ConfigError::Invalid {
                name: "KUBEBYON_ENGINE",
                reason: refusal,
            });
        }
        Ok(config)
    }
}

impl Config {
    /// Why no cluster can be made on `engine` now, when none can.
    pub fn refusal(&self, engine: Engine) -> Option<String> {
        match engine {
            Engine::Kamaji => None,
            Engine::Vcluster if self.vcluster_licence.is_none() => Some(
                "vCluster's private nodes are an Enterprise feature: set \
                 KUBEBYON_VCLUSTER_PLATFORM_HOST and KUBEBYON_VCLUSTER_ACCESS_KEY \
                 to the licence's vCluster Platform access key, or use the kamaji engine"
                    .into(),
            ),
            Engine::Vcluster => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::Part;

    fn read(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::read(&HashMap::from_iter(pairs.iter().copied()))
    }

    #[test]
    fn kamaji_is_the_default_and_vcluster_needs_its_licence() {
        let config = read(&[]).unwrap();
        assert_eq!(config.default, Engine::Kamaji);
        let refusal = config.refusal(Engine::Vcluster).unwrap();
        assert!(
            refusal.contains("KUBEBYON_VCLUSTER_ACCESS_KEY"),
            "{refusal}"
        );
        // Naming vCluster without the licence stops the process at start.
        let err = read(&[("KUBEBYON_ENGINE", "vcluster")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("KUBEBYON_ENGINE"), "{err}");
        let licensed = read(&[
            ("KUBEBYON_ENGINE", "vcluster"),
            (
                "KUBEBYON_VCLUSTER_PLATFORM_HOST",
                "https://platform.example/",
            ),
            ("KUBEBYON_VCLUSTER_ACCESS_KEY", "secret-key"),
        ])
        .unwrap();
        assert_eq!(licensed.default, Engine::Vcluster);
        assert_eq!(
            licensed.vcluster_licence.as_ref().unwrap().host,
            "platform.example"
        );
        assert!(!format!("{licensed:?}").contains("secret-key"));
        for bad in [
            vec![("KUBEBYON_ENGINE", "k3s")],
            vec![("KUBEBYON_VCLUSTER_ACCESS_KEY", "key")],
            vec![
                ("KUBEBYON_VCLUSTER_PLATFORM_HOST", "user@platform.example"),
                ("KUBEBYON_VCLUSTER_ACCESS_KEY", "key"),
            ],
        ] {
            assert!(read(&bad).is_err(), "{bad:?}");
        }
    }
}
