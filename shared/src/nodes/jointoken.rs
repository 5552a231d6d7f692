//! Join tokens: kubeadm bootstrap tokens (`<id>.<secret>`) that the platform
//! hands out once, stores only as a hash, and limits in time and uses; and the
//! join script served for them.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::api::ObjectMeta;

use crate::{domain, host::Join};

const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A freshly made token. Its plaintext leaves the process once, in the
/// response that created it; `Debug` never shows it.
pub struct JoinToken {
    id: String,
    secret: String,
}

impl std::fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinToken")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl JoinToken {
    /// A new random token from the operating system's CSPRNG.
    pub fn generate() -> Self {
        Self {
            id: random_string(6),
            secret: random_string(16),
        }
    }

    /// The public half, also the display prefix and the Secret's name suffix.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn plaintext(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    pub fn hash(&self) -> Vec<u8> {
        hash(&self.plaintext())
    }

    /// The bootstrap token Secret the control plane authenticates the
    /// joining kubelet with, in `join`'s group, expiring with the token.
    pub fn bootstrap_secret(&self, expires_at: DateTime<Utc>, join: Join) -> Secret {
        let data = [
            ("token-id", self.id.as_str()),
            ("token-secret", self.secret.as_str()),
            ("usage-bootstrap-authentication", "true"),
            ("usage-bootstrap-signing", "true"),
            ("auth-extra-groups", join.bootstrap_group()),
            (
                "expiration",
                &expires_at.to_rfc3339_opts(SecondsFormat::Secs, true),
            ),
            ("description", "KubeBYON join token"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect();
        Secret {
            metadata: ObjectMeta {
                name: Some(bootstrap_secret_name(&self.id)),
                namespace: Some("kube-system".into()),
                labels: Some(
                    [
                        // vCluster's join endpoint takes only tokens it knows by this label.
                        (join == Join::VclusterEndpoint)
                            .then(|| ("vcluster.loft.sh/token".to_string(), "true".to_string())),
                        Some(("app.kubernetes.io/managed-by".into(), "kubebyon".into())),
                    ]
                    .into_iter()
                    .flatten()
                    .collect(),
                ),
                ..ObjectMeta::default()
            },
            type_: Some("bootstrap.kubernetes.io/token".into()),
            data: Some(data),
            ..Secret::default()
        }
    }
}

pub fn bootstrap_secret_name(token_id: &str) -> String {
    format!("bootstrap-token-{token_id}")
}

/// Creates the token's bootstrap Secret in the cluster; `Ok(false)` when a
/// Secret of that name exists already (a token id collision: make another).
pub async fn create_bootstrap_secret(
    client: kube::Client,
    secret: &Secret,
) -> Result<bool, crate::host::HostError> {
    let api: kube::Api<Secret> = kube::Api::namespaced(client, "kube-system");
    match api.create(&kube::api::PostParams::default(), secret).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// Deletes a bootstrap Secret: the token stops authenticating at once. An
/// absent Secret is not an error.
pub async fn delete_bootstrap_secret(
    client: kube::Client,
    name: &str,
) -> Result<(), crate::host::HostError> {
    let api: kube::Api<Secret> = kube::Api::namespaced(client, "kube-system");
    match api.delete(name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// SHA-256 of a presented token: what the database keeps and looks up by.
pub fn hash(plaintext: &str) -> Vec<u8> {
    crate::secretbox::hash(plaintext)
}

/// Whether a presented string has the shape of a token (checked before any lookup).
pub fn well_formed(raw: &str) -> bool {
    let valid = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    raw.split_once('.')
        .is_some_and(|(id, secret)| valid(id, 6) && valid(secret, 16))
}

fn random_string(len: usize) -> String {
    // 252 is the largest multiple of 36 below 256: rejecting the rest keeps every
    // character equally likely.
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 32];
    while out.len() < len {
        getrandom::fill(&mut buf).expect("the operating system's random source failed");
        for b in buf {
            if b < 252 && out.len() < len {
                out.push(ALPHABET[(b % 36) as usize] as char);
            }
        }
    }
    out
}

/// Checks node labels a token puts on the nodes it joins: Kubernetes label
/// syntax, at most 20, and none in the `kubernetes.io`/`k8s.io` namespaces
/// except `node-role.kubernetes.io/*`.
pub fn validate_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    if labels.len() > 20 {
        return Err("at most 20 labels".into());
    }
    for (key, value) in labels {
        let (prefix, _) =
            domain::label_key_parts(key).map_err(|m| format!("label `{key}`: {m}"))?;
        if let Some(prefix) = prefix {
            let reserved = prefix == "kubernetes.io"
                || prefix.ends_with(".kubernetes.io")
                || prefix == "k8s.io"
                || prefix.ends_with(".k8s.io");
            if reserved && prefix != "node-role.kubernetes.io" {
                return Err(format!(
                    "label `{key}`: the kubernetes.io and k8s.io prefixes are reserved (node-role.kubernetes.io is allowed)"
                ));
            }
        }
        if !domain::is_label_value(value) {
            return Err(format!(
                "label `{key}`: the value must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
            ));
        }
    }
    Ok(())
}

/// What the join script is rendered from.
#[derive(Debug)]
pub struct ScriptParams<'a> {
    pub cluster_name: &'a str,
    /// The token as presented in the URL (already checked to be well formed).
    pub token: &'a str,
    pub attempt_id: uuid::Uuid,
    /// Where the script reports its steps.
    pub report_url: &'a str,
    /// The cluster's API endpoint, `scheme://host:port`.
    pub endpoint: &'a str,
    /// PEM of the cluster's CA, when its endpoint is HTTPS.
    pub ca_pem: Option<&'a str>,
    /// Allowed clock difference with the platform, in seconds.
    pub max_clock_skew_secs: u64,
    /// How the node joins.
    pub join: Join,
    /// The cluster's Kubernetes minor, which the node's kubeadm and kubelet match.
    pub kubernetes_version: &'a str,
    /// The server a joined kubelet's `kubelet.conf` names, when it is not
    /// `endpoint`: the address the control plane advertises to its nodes.
    pub kubelet_server: Option<&'a str>,
}

/// kubeadm's pin of a CA (`--discovery-token-ca-cert-hash`):
/// `sha256:<hex>` of its certificate's SubjectPublicKeyInfo; `None` when
/// `ca_pem` holds no certificate.
pub fn ca_cert_hash(ca_pem: &str) -> Option<String> {
    use sha2::Digest;
    let (_, pem) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).ok()?;
    let certificate = pem.parse_x509().ok()?;
    let digest = sha2::Sha256::digest(certificate.tbs_certificate.subject_pki.raw);
    Some(format!(
        "sha256:{}",
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

const SCRIPT: &str = include_str!("join.sh");

/// The POSIX shell script for one join attempt. Every value is single-quoted.
pub fn render_script(params: &ScriptParams<'_>) -> String {
    let vars = [
        ("cluster_name", quote(params.cluster_name)),
        ("token", quote(params.token)),
        ("attempt_id", quote(&params.attempt_id.to_string())),
        ("report_url", quote(params.report_url)),
        ("endpoint", quote(params.endpoint)),
        ("ca_pem", quote(params.ca_pem.unwrap_or_default())),
        ("max_clock_skew", params.max_clock_skew_secs.to_string()),
        (
            "join_method",
            quote(match params.join {
                Join::Kubeadm => "kubeadm",
                Join::VclusterEndpoint => "vcluster",
            }),
        ),
        (
            "ca_hash",
            quote(&params.ca_pem.and_then(ca_cert_hash).unwrap_or_default()),
        ),
        ("kubernetes_version", quote(params.kubernetes_version)),
        (
            "kubelet_server",
            quote(params.kubelet_server.unwrap_or_default()),
        ),
    ];
    let mut script = SCRIPT.to_string();
    for (name, value) in vars {
        script = script.replace(&format!("@{name}@"), &value);
    }
    script
}

/// Single-quotes a value for POSIX sh.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_have_the_kubeadm_shape_and_differ() {
        let a = JoinToken::generate();
        let b = JoinToken::generate();
        assert!(well_formed(&a.plaintext()), "{}", a.plaintext());
        assert_ne!(a.plaintext(), b.plaintext());
        assert_eq!(a.hash(), hash(&a.plaintext()));
        assert!(!format!("{a:?}").contains(&a.secret));
    }

    #[test]
    fn malformed_tokens_are_refused_before_lookup() {
        for raw in [
            "",
            "abcdef",
            "abcdef.",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdefg",
            "abcdef.0123456789abcde!",
        ] {
            assert!(!well_formed(raw), "{raw}");
        }
        assert!(well_formed("abc123.0123456789abcdef"));
    }

    #[test]
    fn the_bootstrap_secret_is_what_kubeadm_reads() {
        let token = JoinToken::generate();
        let expires = DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let secret = token.bootstrap_secret(expires, Join::Kubeadm);
        assert_eq!(
            secret.metadata.name.unwrap(),
            format!("bootstrap-token-{}", token.id())
        );
        assert_eq!(secret.type_.unwrap(), "bootstrap.kubernetes.io/token");
        let data = secret.data.unwrap();
        let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
        assert_eq!(text("expiration"), "2026-11-29T12:00:00Z");
        assert_eq!(text("token-secret"), token.secret);
        assert_eq!(text("usage-bootstrap-authentication"), "true");
        assert_eq!(
            text("auth-extra-groups"),
            "system:bootstrappers:kubebyon:join"
        );
        assert!(
            !secret
                .metadata
                .labels
                .unwrap()
                .contains_key("vcluster.loft.sh/token")
        );
    }

    #[test]
    fn labels_follow_kubernetes_syntax_and_avoid_reserved_prefixes() {
        let ok = BTreeMap::from([
            ("zone".to_string(), "eu-1".to_string()),
            ("node-role.kubernetes.io/worker".into(), "".into()),
            ("example.com/gpu".into(), "a100".into()),
        ]);
        assert_eq!(validate_labels(&ok), Ok(()));
        for (k, v) in [
            ("kubernetes.io/hostname", "x"),
            ("Bad Key", "x"),
            ("zone", "-x"),
            ("UPPER.example/x", "y"),
        ] {
            let labels = BTreeMap::from([(k.to_string(), v.to_string())]);
            assert!(validate_labels(&labels).is_err(), "{k}={v}");
        }
    }

    #[test]
    fn values_are_quoted_for_the_shell() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        let script = render_script(&ScriptParams {
            cluster_name: "demo",
            token: "abc123.0123456789abcdef",
            attempt_id: uuid::Uuid::nil(),
            report_url: "http://127.0.0.1:1/report",
            endpoint: "http://127.0.0.1:2",
            ca_pem: None,
            max_clock_skew_secs: 60,
            join: Join::Kubeadm,
            kubernetes_version: "1.33",
            kubelet_server: None,
        });
        assert!(script.contains("KB_TOKEN='abc123.0123456789abcdef'"));
        assert!(script.contains("KB_MAX_SKEW=60"));
        assert!(script.contains("KB_JOIN_METHOD='kubeadm'"));
        assert!(script.contains("KB_KUBERNETES='1.33'"));
        assert!(!script.contains("@token@") && !script.contains("@endpoint@"));
    }
}
