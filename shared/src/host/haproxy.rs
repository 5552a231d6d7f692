//! The `haproxy` provider of `loadbalancer` clusters: one shared HAProxy
//! listening in TCP mode, which reads the SNI of each TLS ClientHello and
//! forwards the connection, untouched (TLS passthrough), to the cluster's
//! control-plane Service; an unknown name is refused before any byte
//! reaches a cluster. HAProxy learns the clusters from a map, SNI host →
//! `ip/port` ([`map_value`]), which the platform keeps through HAProxy's Runtime API
//! (`add map`, `set map`, `del map` on its admin socket): a change takes
//! effect on the next connection without a reload, and no open connection
//! of any cluster is touched. The configuration that reads the map is the
//! chart's (`infra/helm/kubebyon/files/haproxy.cfg`).
//!
//! Every replica has its own Runtime API and its own copy of the map: the
//! settings name one host that resolves to all of them (a headless
//! Service), and each is written. A replica that restarts starts from the
//! chart's empty map; `sync-haproxy` puts every entry back on its next run.

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use super::error::HostError;
use crate::config::{ConfigError, Source};

/// How long one Runtime API command may take, connection included.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer read: a `show map` of 100,000 clusters.
const MAX_ANSWER: u64 = 16 << 20;

/// Where HAProxy forwards a cluster's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The cluster's public Service's cluster IP, port 443: HAProxy runs
    /// inside the host cluster (`clusterip`, the default).
    ClusterIp,
    /// The host node address and the Service's NodePort: HAProxy runs
    /// outside it (`nodeport`).
    NodePort,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Haproxy {
    /// `KUBEBYON_HAPROXY_BASE_DOMAIN`: clusters are reached as
    /// `<name>-<id prefix>.<base domain>`.
    pub base_domain: String,
    /// `KUBEBYON_HAPROXY_RUNTIME_API` (`host:port`): every address the host
    /// resolves to is one replica's Runtime API.
    pub runtime_api: String,
    /// `KUBEBYON_HAPROXY_MAP`: the map file as HAProxy's configuration
    /// names it (default `/usr/local/etc/haproxy/clusters.map`).
    pub map: String,
    /// `KUBEBYON_HAPROXY_BACKEND`: `clusterip` or `nodeport`.
    pub backend: Backend,
    /// `KUBEBYON_HAPROXY_PORT` (default 443): the port clients dial.
    pub port: u16,
}

impl Haproxy {
    pub fn from_source(source: &dyn Source) -> Result<Self, ConfigError> {
        let required = |name: &'static str| source.get(name).ok_or(ConfigError::Missing { name });
        let base_domain = required("KUBEBYON_HAPROXY_BASE_DOMAIN")?
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if !is_map_word(&base_domain) || !base_domain.contains('.') {
            return Err(ConfigError::Invalid {
                name: "KUBEBYON_HAPROXY_BASE_DOMAIN",
                reason: "must be a DNS name such as clusters.example.com".into(),
            });
        }
        let runtime_api = required("KUBEBYON_HAPROXY_RUNTIME_API")?;
        if !runtime_api
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        {
            return Err(ConfigError::Invalid {
                name: "KUBEBYON_HAPROXY_RUNTIME_API",
                reason: "must be host:port, such as kubebyon-haproxy-runtime.kubebyon.svc:9999"
                    .into(),
            });
        }
        let map = source
            .get("KUBEBYON_HAPROXY_MAP")
            .unwrap_or_else(|| "/usr/local/etc/haproxy/clusters.map".into());
        if !map.starts_with('/') || !is_map_word(&map) {
            return Err(ConfigError::Invalid {
                name: "KUBEBYON_HAPROXY_MAP",
                reason: "must be an absolute path without spaces".into(),
            });
        }
        let backend = match source.get("KUBEBYON_HAPROXY_BACKEND").as_deref() {
            None | Some("clusterip") => Backend::ClusterIp,
            Some("nodeport") => Backend::NodePort,
            Some(_) => {
                return Err(ConfigError::Invalid {
                    name: "KUBEBYON_HAPROXY_BACKEND",
                    reason: "must be clusterip or nodeport".into(),
                });
            }
        };
        let port = match source.get("KUBEBYON_HAPROXY_PORT") {
            None => 443,
            Some(raw) => raw
                .parse()
                .ok()
                .filter(|p| *p > 0)
                .ok_or(ConfigError::Invalid {
                    name: "KUBEBYON_HAPROXY_PORT",
                    reason: "must be a port number".into(),
                })?,
        };
        Ok(Self {
            base_domain,
            runtime_api,
            map,
            backend,
            port,
        })
    }

    /// Every replica's Runtime API address.
    pub async fn replicas(&self) -> Result<Vec<SocketAddr>, HostError> {
        let mut found: Vec<SocketAddr> = tokio::net::lookup_host(&self.runtime_api)
            .await
            .map_err(|e| {
                HostError::Transport(format!(
                    "resolving HAProxy's Runtime API {}: {e}",
                    self.runtime_api
                ))
            })?
            .collect();
        found.sort();
        found.dedup();
        if found.is_empty() {
            return Err(HostError::Transport(format!(
                "HAProxy's Runtime API {} resolves to no address",
                self.runtime_api
            )));
        }
        Ok(found)
    }

    /// The map of the replica at `replica`: SNI host → `ip/port`. A map
    /// may hold a key twice (two writers' `add map` at once); a key held
    /// with two values reads as the empty value, which no target equals, so
    /// [`Self::put`] sets every entry of it.
    pub async fn show(&self, replica: SocketAddr) -> Result<BTreeMap<String, String>, HostError> {
        let answer = command(replica, &format!("show map {}", self.map)).await?;
        parse_map(&answer).map_err(|line| refused(replica, "show map", line))
    }

    /// Makes the replica at `replica` map `host` to `target`, given what it
    /// maps now.
    pub async fn put(
        &self,
        replica: SocketAddr,
        current: &BTreeMap<String, String>,
        host: &str,
        target: SocketAddr,
    ) -> Result<(), HostError> {
        let target = map_value(target);
        if current.get(host) == Some(&target) {
            return Ok(());
        }
        let verb = match current.contains_key(host) {
            true => "set",
            false => "add",
        };
        let line = format!("{verb} map {} {} {target}", self.map, checked(host)?);
        expect_silence(replica, &line).await
    }

    /// Removes `host` from the replica at `replica`; nothing when it is not
    /// there.
    pub async fn remove(&self, replica: SocketAddr, host: &str) -> Result<(), HostError> {
        let line = format!("del map {} {}", self.map, checked(host)?);
        let answer = command(replica, &line).await?;
        match answer.trim() {
            "" | "Key not found." => Ok(()),
            other => Err(refused(replica, &line, other)),
        }
    }

    /// Makes every replica map `host` to `target` (`None`: not at all).
    pub async fn put_everywhere(
        &self,
        host: &str,
        target: Option<SocketAddr>,
    ) -> Result<(), HostError> {
        for replica in self.replicas().await? {
            let current = self.show(replica).await?;
            match target {
                Some(target) => self.put(replica, &current, host, target).await?,
                None if current.contains_key(host) => self.remove(replica, host).await?,
                None => {}
            }
        }
        Ok(())
    }
}

/// A `show map` answer, one entry a line:
/// `0x55d0c0e6650 shop-1a2b3c4d.clusters.example.com 10.43.0.7/443`; the
/// first line that is not one, when there is one.
fn parse_map(answer: &str) -> Result<BTreeMap<String, String>, &str> {
    let mut entries: BTreeMap<String, String> = BTreeMap::new();
    for line in answer.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        match (fields.next(), fields.next(), fields.next(), fields.next()) {
            (Some(id), Some(key), Some(value), None) if id.starts_with("0x") => {
                let held = entries
                    .entry(key.to_string())
                    .or_insert_with(|| value.to_string());
                if held != value {
                    held.clear();
                }
            }
            _ => return Err(line),
        }
    }
    Ok(entries)
}

/// How the map holds a target: `10.43.0.7/443`, `fd00::7/443`. The
/// configuration splits it at the `/` (`field(1,/)`, `field(2,/)`), which
/// no address holds, into `set-dst` and `set-dst-port`.
pub fn map_value(target: SocketAddr) -> String {
    format!("{}/{}", target.ip(), target.port())
}

/// A word HAProxy's Runtime API takes as one argument: no whitespace, no
/// control character, no `;` (which separates commands), no `\`.
fn is_map_word(word: &str) -> bool {
    !word.is_empty()
        && word.len() <= 1024
        && word
            .chars()
            .all(|c| c.is_ascii_graphic() && c != ';' && c != '\\' && c != '#')
}

fn checked(word: &str) -> Result<&str, HostError> {
    match is_map_word(word) {
        true => Ok(word),
        false => Err(HostError::Invalid(format!(
            "{word:?} cannot be a key of HAProxy's map"
        ))),
    }
}

fn refused(replica: SocketAddr, command: &str, answer: &str) -> HostError {
    HostError::Transport(format!(
        "HAProxy's Runtime API at {replica} refused `{command}`: {}",
        answer.trim()
    ))
}

/// Runs a command whose success is an empty answer.
async fn expect_silence(replica: SocketAddr, line: &str) -> Result<(), HostError> {
    let answer = command(replica, line).await?;
    match answer.trim().is_empty() {
        true => Ok(()),
        false => Err(refused(replica, line, &answer)),
    }
}

/// One Runtime API command on a connection of its own: HAProxy answers and
/// closes it.
async fn command(replica: SocketAddr, line: &str) -> Result<String, HostError> {
    let exchange = async {
        let mut stream = TcpStream::connect(replica).await?;
        stream.write_all(format!("{line}\n").as_bytes()).await?;
        let mut answer = String::new();
        stream.take(MAX_ANSWER).read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(COMMAND_TIMEOUT, exchange).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(HostError::Transport(format!(
            "HAProxy's Runtime API at {replica}: {e}"
        ))),
        Err(_) => Err(HostError::Transport(format!(
            "HAProxy's Runtime API at {replica} did not answer within {COMMAND_TIMEOUT:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(pairs: &[(&'static str, &'static str)]) -> Result<Haproxy, ConfigError> {
        Haproxy::from_source(&pairs.iter().copied().collect::<HashMap<_, _>>())
    }

    #[test]
    fn settings_are_read_strictly() {
        let base = [
            ("KUBEBYON_HAPROXY_BASE_DOMAIN", "Clusters.Example.com."),
            (
                "KUBEBYON_HAPROXY_RUNTIME_API",
                "haproxy-runtime.kubebyon.svc:9999",
            ),
        ];
        let read_ok = read(&base).unwrap();
        assert_eq!(read_ok.base_domain, "clusters.example.com");
        assert_eq!(read_ok.backend, Backend::ClusterIp);
        assert_eq!(read_ok.port, 443);
        for (name, bad) in [
            ("KUBEBYON_HAPROXY_BASE_DOMAIN", "example com"),
            ("KUBEBYON_HAPROXY_BASE_DOMAIN", "localhost"),
            ("KUBEBYON_HAPROXY_RUNTIME_API", "haproxy"),
            ("KUBEBYON_HAPROXY_MAP", "clusters.map"),
            ("KUBEBYON_HAPROXY_MAP", "/a map"),
            ("KUBEBYON_HAPROXY_BACKEND", "loadbalancer"),
            ("KUBEBYON_HAPROXY_PORT", "0"),
        ] {
            let mut pairs: Vec<_> = base.iter().copied().filter(|(n, _)| *n != name).collect();
            pairs.push((name, bad));
            assert!(read(&pairs).is_err(), "{name}={bad}");
        }
    }

    #[test]
    fn a_key_held_twice_with_two_values_equals_no_target() {
        let map = parse_map(
            "0x1 a.example 10.43.0.7/443\n0x2 b.example 10.43.0.8/443\n\
             0x3 b.example 10.43.0.9/443\n0x4 a.example 10.43.0.7/443\n",
        )
        .unwrap();
        assert_eq!(map["a.example"], "10.43.0.7/443");
        assert_eq!(map["b.example"], "");
        assert_eq!(
            parse_map("Unknown map identifier. Please use #<id> or <name>.\n"),
            Err("Unknown map identifier. Please use #<id> or <name>.")
        );
    }

    #[test]
    fn a_key_cannot_smuggle_a_second_command() {
        for word in ["a b", "a;show stat", "a\nshow map", "a\\", "", "é.example"] {
            assert!(!is_map_word(word), "{word:?}");
        }
        assert!(is_map_word("shop-1a2b3c4d.clusters.example.com"));
    }
}
