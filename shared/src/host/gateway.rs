//! The shared workload Gateway of the host, which the workload edge serves
//! clusters' sites on, as the settings name it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::config::{ConfigError, Millis, Source};

/// The shared workload Gateway (`KUBEBYON_EDGE_GATEWAY_NAME`, in
/// `KUBEBYON_EDGE_GATEWAY_NAMESPACE`, default `kubebyon`) clusters' sites
/// are served on, and its listeners' names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadGateway {
    pub name: String,
    pub namespace: String,
    /// `KUBEBYON_EDGE_HTTP_LISTENER` (default `http`): the chart's :80
    /// listener.
    pub http_listener: String,
    /// HTTPS, where cert-manager issues the edge's certificates.
    pub https: Option<Https>,
    /// `KUBEBYON_EDGE_RESYNC_MS` (default 5 minutes): how long a
    /// cluster's edge goes before it is converged again, whatever changed.
    pub resync: Duration,
}

impl WorkloadGateway {
    /// The Gateway the settings name, if any.
    pub fn from_source(source: &dyn Source) -> Result<Option<Self>, ConfigError> {
        let Some(name) = source.get("KUBEBYON_EDGE_GATEWAY_NAME") else {
            return Ok(None);
        };
        Ok(Some(Self {
            name,
            namespace: source
                .get("KUBEBYON_EDGE_GATEWAY_NAMESPACE")
                .unwrap_or_else(|| "kubebyon".into()),
            http_listener: source
                .get("KUBEBYON_EDGE_HTTP_LISTENER")
                .unwrap_or_else(|| "http".into()),
            https: https(source)?,
            resync: RESYNC.read(source)?,
        }))
    }
}

const RESYNC: Millis = Millis::new("KUBEBYON_EDGE_RESYNC_MS", 5 * 60 * 1000);

/// HTTPS on the edge: `KUBEBYON_EDGE_ISSUER` (`ClusterIssuer/<name>` or
/// `Issuer/<name>`, in the Gateway's namespace) turns it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Https {
    /// `KUBEBYON_EDGE_HTTPS_LISTENER` (default `https`): the listener the
    /// platform's own names are served on.
    pub listener: String,
    /// `KUBEBYON_EDGE_HTTPS_PORT` (default 443).
    pub port: u16,
    pub issuer: IssuerRef,
    /// `KUBEBYON_EDGE_SELF_MANAGED_ISSUER` (default the issuer): for the
    /// hostnames users point at the platform themselves.
    pub self_managed_issuer: IssuerRef,
    /// `KUBEBYON_EDGE_SAN_LIMIT` (default 100, Let's Encrypt's): the most
    /// names one certificate holds.
    pub san_limit: usize,
    /// `KUBEBYON_EDGE_HTTPS_REDIRECT` (default true): plain HTTP requests
    /// are redirected to HTTPS.
    pub redirect: bool,
}

/// A cert-manager issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerRef {
    pub kind: String,
    pub name: String,
}

impl IssuerRef {
    fn parse(name: &'static str, raw: &str) -> Result<Self, ConfigError> {
        match raw.split_once('/') {
            Some((kind @ ("ClusterIssuer" | "Issuer"), issuer))
                if !issuer.is_empty() && issuer.len() <= 253 =>
            {
                Ok(Self {
                    kind: kind.into(),
                    name: issuer.into(),
                })
            }
            _ => Err(ConfigError::Invalid {
                name,
                reason: "must be ClusterIssuer/<name> or Issuer/<name>".into(),
            }),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({"group": "cert-manager.io", "kind": self.kind, "name": self.name})
    }
}

fn https(source: &dyn Source) -> Result<Option<Https>, ConfigError> {
    let Some(issuer) = source.get("KUBEBYON_EDGE_ISSUER") else {
        return Ok(None);
    };
    let issuer = IssuerRef::parse("KUBEBYON_EDGE_ISSUER", &issuer)?;
    let self_managed_issuer = match source.get("KUBEBYON_EDGE_SELF_MANAGED_ISSUER") {
        Some(raw) => IssuerRef::parse("KUBEBYON_EDGE_SELF_MANAGED_ISSUER", &raw)?,
        None => issuer.clone(),
    };
    let san_limit: usize = crate::config::parse_or(source, "KUBEBYON_EDGE_SAN_LIMIT", 100)?;
    if !(1..=1000).contains(&san_limit) {
        return Err(ConfigError::Invalid {
            name: "KUBEBYON_EDGE_SAN_LIMIT",
            reason: "must be from 1 to 1000".into(),
        });
    }
    Ok(Some(Https {
        listener: source
            .get("KUBEBYON_EDGE_HTTPS_LISTENER")
            .unwrap_or_else(|| "https".into()),
        port: crate::config::parse_or(source, "KUBEBYON_EDGE_HTTPS_PORT", 443)?,
        issuer,
        self_managed_issuer,
        san_limit,
        redirect: crate::config::parse_or(source, "KUBEBYON_EDGE_HTTPS_REDIRECT", true)?,
    }))
}
