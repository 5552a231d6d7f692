//! Domain types in the product's words. Input is parsed into these once, at the edge.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// A cluster name: an RFC 1123 label of at most 40 characters, starting with a letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterName(String);

impl ClusterName {
    pub const MAX_LEN: usize = 40;

    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN {
            return Err(format!("must be 1 to {} characters", Self::MAX_LEN));
        }
        if !raw
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err("may contain only lowercase letters, digits and '-'".into());
        }
        if !raw.as_bytes()[0].is_ascii_lowercase() {
            return Err("must start with a lowercase letter".into());
        }
        if raw.ends_with('-') {
            return Err("must not end with '-'".into());
        }
        Ok(Self(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An email address in its one canonical form, used to store, look up, rate
/// limit and send: an ASCII local part (letters, digits and RFC 5322's atom
/// characters, dots between them), an IDNA-encoded domain (UTS #46, so
/// `gmaİl.com` becomes `xn--…`, never `gmail.com`), the whole lowercased by
/// ASCII rules only, at most 254 characters. Display names, comments, quoted
/// local parts and address lists are refused: what was typed is the address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EmailAddress(String);

impl EmailAddress {
    /// RFC 5321's limit on a path.
    pub const MAX_LEN: usize = 254;

    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim_matches(|c: char| c.is_ascii_whitespace());
        // Refuse the absurd before any Unicode processing: IDNA work grows with the input.
        if raw.len() > 4 * Self::MAX_LEN {
            return Err(format!("must be at most {} characters", Self::MAX_LEN));
        }
        let (local, domain) = raw
            .rsplit_once('@')
            .ok_or_else(|| "must be an email address: name@example.com".to_string())?;
        if local.is_empty() || local.len() > 64 {
            return Err("the part before @ must be 1 to 64 characters".into());
        }
        if !local.is_ascii() {
            return Err("the part before @ must be ASCII letters, digits or . _ + -".into());
        }
        let atom = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+/=?^_`{|}~-".contains(&b);
        if !local.bytes().all(|b| atom(b) || b == b'.')
            || local.starts_with('.')
            || local.ends_with('.')
            || local.contains("..")
        {
            return Err(
                "the part before @ may hold letters, digits, dots between them and ! # $ % & ' * + / = ? ^ _ ` { | } ~ -"
                    .into(),
            );
        }
        let domain = idna::domain_to_ascii_strict(domain)
            .map_err(|_| "the part after @ is not a valid domain name".to_string())?;
        let labels: Vec<&str> = domain.split('.').collect();
        if labels.len() < 2
            || labels
                .iter()
                .any(|l| l.is_empty() || l.len() > 63 || l.starts_with('-') || l.ends_with('-'))
            || !labels
                .iter()
                .all(|l| l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        {
            return Err("the part after @ must be a domain name such as example.com".into());
        }
        let address = format!(
            "{}@{}",
            local.to_ascii_lowercase(),
            domain.to_ascii_lowercase()
        );
        if address.len() > Self::MAX_LEN {
            return Err(format!("must be at most {} characters", Self::MAX_LEN));
        }
        Ok(Self(address))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EmailAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `text` holds a character that changes how the text around it
/// reads rather than being read: a control character, a direction mark or
/// override (`invoice\u{202e}gpj.exe` shows as `invoiceexe.jpg`), a
/// zero-width character, a line or paragraph separator, or another of
/// Unicode's format characters (category Cf). Text another person reads (an
/// organization's name, a join step's detail) has none.
pub fn hides_text(text: &str) -> bool {
    text.chars().any(|c| {
        c.is_control()
            || matches!(c,
                '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}' | '\u{6dd}' | '\u{70f}'
                | '\u{890}'..='\u{891}' | '\u{8e2}' | '\u{180e}' | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}' | '\u{110bd}' | '\u{110cd}' | '\u{13430}'..='\u{1343f}'
                | '\u{1bca0}'..='\u{1bca3}' | '\u{1d173}'..='\u{1d17a}' | '\u{e0001}'
                | '\u{e0020}'..='\u{e007f}')
    })
}

/// A Kubernetes minor version the platform can run as a vCluster control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesVersion(String);

impl KubernetesVersion {
    pub const SUPPORTED: [&'static str; 4] = ["1.31", "1.32", "1.33", "1.34"];
    pub const DEFAULT: &'static str = "1.33";

    pub fn parse(raw: &str) -> Result<Self, String> {
        let trimmed = raw.strip_prefix('v').unwrap_or(raw);
        if Self::SUPPORTED.contains(&trimmed) {
            Ok(Self(trimmed.to_string()))
        } else {
            Err(format!(
                "unsupported version {raw:?}; supported: {}",
                Self::SUPPORTED.join(", ")
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A node's name as the Kubernetes API accepts it: a DNS subdomain (RFC 1123),
/// lowercase letters, digits, `-` and `.`, labels starting and ending with a
/// letter or digit, 253 characters at most (`ValidateNodeName` in
/// kubernetes/pkg/apis/core/validation). Nothing else is ever stored or
/// shown as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeName(String);

impl NodeName {
    pub const MAX_LEN: usize = 253;

    pub fn parse(raw: &str) -> Result<Self, String> {
        let label_ok = |label: &str| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes.len() <= 63
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        };
        if raw.is_empty() || raw.len() > Self::MAX_LEN || !raw.split('.').all(label_ok) {
            return Err(
                "a node name must be a lowercase DNS subdomain: labels of letters, digits and '-' separated by '.', at most 253 characters".into(),
            );
        }
        Ok(Self(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_inner(self) -> String {
        self.0
    }
}

/// Text-backed enums: the database's CHECK constraints hold the same names.
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema, sqlx::Type)]
        #[serde(rename_all = "snake_case")]
        #[sqlx(type_name = "text", rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in the order the type declares them.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }

            /// The value named `text` exactly.
            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == text)
            }

            /// Every name, for an error that lists them: "a, b or c".
            pub fn names() -> String {
                let names: Vec<&str> = Self::ALL.iter().map(|v| v.as_str()).collect();
                match names.split_last() {
                    Some((last, [])) => last.to_string(),
                    Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                    None => String::new(),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// For the capabilities' own text enums.
pub(crate) use text_enum;

text_enum! {
    /// What runs a cluster's control plane on the host: a Kamaji
    /// `TenantControlPlane` (open source, the default) or a vCluster with
    /// private nodes (an Enterprise feature: the operator's licence).
    Engine {
        Kamaji => "kamaji",
        Vcluster => "vcluster",
    }
}

text_enum! {
    /// What a user may do: `admin` also runs the back office.
    UserRole {
        User => "user",
        Admin => "admin",
    }
}

text_enum! {
    /// Whether a user may sign in (the statuses an administrator sets).
    UserStatus {
        Active => "active",
        Disabled => "disabled",
    }
}

text_enum! {
    /// Where a cluster job is in its life.
    JobStatus {
        Pending => "pending",
        Running => "running",
        Succeeded => "succeeded",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

text_enum! {
    /// Where a cluster is in its life.
    ClusterStatus {
        Pending => "pending",
        Provisioning => "provisioning",
        Ready => "ready",
        Updating => "updating",
        Deleting => "deleting",
        Deleted => "deleted",
        Failed => "failed",
    }
}

impl ClusterStatus {
    /// Whether its control plane should answer (and so can be acted on).
    pub fn is_live(self) -> bool {
        matches!(self, Self::Ready | Self::Updating)
    }
}

text_enum! {
    /// What the platform last saw of a node (its `Ready` condition, or its
    /// absence), or that it is gone.
    NodeStatus {
        /// Registered, no `Ready` condition yet.
        Pending => "pending",
        Ready => "ready",
        NotReady => "not_ready",
        /// The kubelet stopped reporting (`Unknown`, or a stale heartbeat).
        Offline => "offline",
        Deleted => "deleted",
    }
}

text_enum! {
    /// What happened to a node, as its event records it: it appeared
    /// (`joined`), its status changed (to the status of the same name), or it
    /// was removed.
    NodeEventType {
        Joined => "joined",
        Ready => "ready",
        NotReady => "not_ready",
        Pending => "pending",
        Offline => "offline",
        Deleted => "deleted",
    }
}

impl NodeEventType {
    /// The event of a node's status changing to `status`.
    pub fn of_status(status: NodeStatus) -> Self {
        match status {
            NodeStatus::Pending => Self::Pending,
            NodeStatus::Ready => Self::Ready,
            NodeStatus::NotReady => Self::NotReady,
            NodeStatus::Offline => Self::Offline,
            NodeStatus::Deleted => Self::Deleted,
        }
    }
}

text_enum! {
    /// Where a join token is in its life. An active token past its expiry
    /// reads `expired` even before the sweep has recorded it.
    JoinTokenStatus {
        Active => "active",
        Used => "used",
        Expired => "expired",
        Revoked => "revoked",
    }
}

text_enum! {
    /// How a join attempt ended, or where it is.
    JoinOutcome {
        /// The token was not accepted; nothing was handed out.
        Refused => "refused",
        /// The script was served.
        Started => "started",
        /// The script took a use and got its bootstrap token.
        Joining => "joining",
        Succeeded => "succeeded",
        Failed => "failed",
    }
}

text_enum! {
    /// What a join script reported of one of its steps.
    JoinStepStatus {
        Running => "running",
        Ok => "ok",
        Warning => "warning",
        Failed => "failed",
        Skipped => "skipped",
    }
}

text_enum! {
    /// Who keeps a hostname's DNS record.
    DnsManagementScope {
        /// Under the platform's base domain: the platform keeps its CNAME.
        PlatformManaged => "platform_managed",
        /// The owner's own domain: only its resolution is observed.
        SelfManaged => "self_managed",
    }
}

text_enum! {
    /// A hostname's DNS as last synced (platform-managed: `pending`,
    /// `synced`, `error`) or observed (self-managed: `resolves`,
    /// `not_resolving`, `mismatch`).
    DnsManagementStatus {
        Pending => "pending",
        Synced => "synced",
        Error => "error",
        Resolves => "resolves",
        NotResolving => "not_resolving",
        Mismatch => "mismatch",
    }
}

text_enum! {
    /// Where a hostname's certificate comes from.
    TlsMode {
        None => "none",
        /// A cert-manager Certificate in the cluster covers the hostname.
        CertManager => "cert_manager",
        Secret => "secret",
    }
}

text_enum! {
    /// A hostname's certificate, as the cluster's cert-manager reports it.
    TlsStatus {
        None => "none",
        Pending => "pending",
        Ready => "ready",
        Error => "error",
    }
}

text_enum! {
    /// Why a job, and the operation it runs, failed: a small, stable taxonomy
    /// clients switch on (docs/runbooks/jobs.md lists what each means and
    /// what to do). The words of the failure stay in the error message.
    FailureCode {
        /// The host's API, or the cluster's API through it, could not be
        /// reached, or was busy, until the attempts ran out.
        HostUnreachable => "host_unreachable",
        /// The host's or the cluster's API refused the change.
        HostRejected => "host_rejected",
        /// A quota on the host refused the control plane.
        QuotaExceeded => "quota_exceeded",
        /// The control plane's chart failed to install.
        ChartInstallFailed => "chart_install_failed",
        /// The managed ingress controller could not be installed or removed.
        IngressInstallFailed => "ingress_install_failed",
        /// The control plane was not ready in time.
        Timeout => "timeout",
        /// A node's pods did not leave it in time.
        DrainTimeout => "drain_timeout",
        /// The cluster has no API to act on yet.
        ClusterNotReady => "cluster_not_ready",
        /// The cluster was deleted before the operation ran.
        ClusterDeleted => "cluster_deleted",
        /// The platform lacks configuration the operation needs.
        InvalidConfiguration => "invalid_configuration",
        /// The worker running the last attempt stopped before finishing.
        WorkerLost => "worker_lost",
        /// An administrator cancelled the operation before it ran.
        Cancelled => "cancelled",
        /// The platform failed on its side (its database, say).
        Internal => "internal",
        /// A new public endpoint did not answer as the cluster (a TLS
        /// handshake with its CA and `GET /version`) from the platform: the
        /// cluster stays on its old endpoint.
        EndpointUnreachable => "endpoint_unreachable",
    }
}

impl FailureCode {
    /// Whether running the same operation again may succeed with nothing
    /// changed: a user may retry their own failed operation only then.
    pub fn retryable(self) -> bool {
        match self {
            Self::HostUnreachable
            | Self::ChartInstallFailed
            | Self::IngressInstallFailed
            | Self::Timeout
            | Self::DrainTimeout
            | Self::ClusterNotReady
            | Self::WorkerLost
            | Self::Internal
            | Self::EndpointUnreachable => true,
            Self::HostRejected
            | Self::QuotaExceeded
            | Self::ClusterDeleted
            | Self::InvalidConfiguration
            | Self::Cancelled => false,
        }
    }

    /// What the user can do about it, in words.
    pub fn hint(self) -> &'static str {
        match self {
            Self::HostUnreachable => {
                "The platform could not reach the Kubernetes API it acts on. Retry the operation; if it keeps failing, the platform's operator should check the host cluster."
            }
            Self::HostRejected => {
                "The Kubernetes API refused the change. A retry will fail the same way: the platform's operator needs to look at the error."
            }
            Self::QuotaExceeded => {
                "The host cluster has no room for this control plane. Lower the cluster's limits, or ask the platform's operator for more capacity."
            }
            Self::ChartInstallFailed => {
                "The control plane failed to install. Retry the operation; if it fails again, the platform's operator should read the error."
            }
            Self::IngressInstallFailed => {
                "The managed ingress controller could not be installed or removed in the cluster. Retry once the cluster answers and has a node that can run it."
            }
            Self::Timeout => {
                "The control plane did not become ready in time; a busy host can take longer. Retry the operation."
            }
            Self::DrainTimeout => {
                "Pods did not leave the node in time (a disruption budget may hold them). Retry later, or remove the node with force."
            }
            Self::ClusterNotReady => {
                "The cluster's API is not available yet. Retry once the cluster is ready."
            }
            Self::ClusterDeleted => "The cluster was deleted; there is nothing left to act on.",
            Self::InvalidConfiguration => {
                "The platform lacks configuration this operation needs. A retry will fail the same way: the platform's operator must fix the configuration."
            }
            Self::WorkerLost => {
                "The worker running the operation stopped before it finished. Retry the operation."
            }
            Self::Cancelled => {
                "An administrator cancelled the operation. Request the change again to run it."
            }
            Self::Internal => {
                "The platform failed on its side. Retry the operation; if it keeps failing, contact the platform's operator."
            }
            Self::EndpointUnreachable => {
                "The new endpoint did not answer, so the cluster stays on its old one and its kubeconfigs keep working. Retry once the load balancer or proxy in front of it is up; the platform's operator can check it."
            }
        }
    }
}

text_enum! {
    /// Whether the control plane answered its last observation.
    ConnectionStatus {
        Unknown => "unknown",
        Connected => "connected",
        Unreachable => "unreachable",
    }
}

text_enum! {
    /// The managed workload ingress of a cluster.
    IngressStatus {
        Disabled => "disabled",
        Provisioning => "provisioning",
        Ready => "ready",
        Error => "error",
    }
}

text_enum! {
    /// How the control plane is exposed to the user's nodes.
    PublicAccessMode {
        Nodeport => "nodeport",
        Loadbalancer => "loadbalancer",
    }
}

impl FromStr for PublicAccessMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "nodeport" => Ok(Self::Nodeport),
            "loadbalancer" => Ok(Self::Loadbalancer),
            other => Err(format!("unknown public access mode {other:?}")),
        }
    }
}

/// What one kind of job carries, from its producer to its handler: a job of
/// [`JobPayload::KIND`] is enqueued with it (`jobs::encode`) and read back by
/// its handler (`JobContext::payload`), so the two cannot drift.
pub trait JobPayload: Serialize + serde::de::DeserializeOwned {
    const KIND: JobKind;
}

/// A job's type: its `cluster_jobs.type` and the name of its queue. Open:
/// each kind of work declares its own beside its payload type
/// ([`JobPayload::KIND`], as River's `Kind()`), its capability lists it
/// (`capability::Capability::job_kinds`), and the backbone names none. A
/// name read back (a row's `type`, a queue's wake-up) is interned: each
/// distinct name is kept once per process, so a job type is `Copy` on the
/// backbone's hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct JobType(&'static str);

impl JobType {
    /// A job type declared in code; [`JobKind::check`] holds its syntax.
    pub const fn of(name: &'static str) -> Self {
        Self(name)
    }

    /// A job type read back, by name: which ones a process handles is its
    /// handlers' business.
    pub fn named(name: &str) -> Self {
        static NAMES: std::sync::Mutex<std::collections::BTreeSet<&'static str>> =
            std::sync::Mutex::new(std::collections::BTreeSet::new());
        let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        match names.get(name) {
            Some(known) => Self(known),
            None => {
                let kept: &'static str = Box::leak(name.into());
                names.insert(kept);
                Self(kept)
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl<'de> Deserialize<'de> for JobType {
    /// A wake-up's type: the syntax a kind declares, or it is refused (no
    /// name that no kind could have is kept).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(deserializer)?;
        JobKind::check_name("job type", &name).map_err(serde::de::Error::custom)?;
        Ok(Self::named(&name))
    }
}

impl fmt::Display for JobType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// One kind of work on the job backbone, declared by the capability that
/// does it: its type (and queue), the operation its jobs carry out
/// (`cluster_operations.type`), and, for the kinds that move a cluster
/// through its life, what the backbone does to the cluster's status when it
/// retries, promotes, fails or cancels one of its jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobKind {
    pub job_type: JobType,
    pub operation: &'static str,
    pub lifecycle: Option<Lifecycle>,
}

/// What the backbone does to a cluster's status for the jobs of a kind that
/// moves it through its life (created, changed, deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifecycle {
    /// While a retried job waits and runs again.
    pub retried: ClusterStatus,
    /// When a queued operation's job is created, if it changes then.
    pub promoted: Option<ClusterStatus>,
    /// When the job fails: its error, its last attempt's lost lease.
    pub failed: ClusterStatus,
    /// When its pending job is cancelled, for a cluster that has a
    /// kubeconfig; one without is `failed`.
    pub cancelled: ClusterStatus,
}

impl JobKind {
    /// A kind of work that leaves its cluster's status alone.
    pub const fn new(job_type: &'static str, operation: &'static str) -> Self {
        Self {
            job_type: JobType::of(job_type),
            operation,
            lifecycle: None,
        }
    }

    /// A kind that moves its cluster through its life.
    pub const fn moving_the_cluster(
        job_type: &'static str,
        operation: &'static str,
        lifecycle: Lifecycle,
    ) -> Self {
        Self {
            job_type: JobType::of(job_type),
            operation,
            lifecycle: Some(lifecycle),
        }
    }

    /// The declaration's syntax: a type and an operation of 1–40 lowercase
    /// letters, digits and `_` (a queue's name, a row's `type`), starting
    /// with a letter.
    pub fn check(&self) -> Result<(), String> {
        Self::check_name("job type", self.job_type.as_str())?;
        Self::check_name("operation", self.operation)
    }

    fn check_name(what: &str, name: &str) -> Result<(), String> {
        let ok = (1..=40).contains(&name.len())
            && name.as_bytes()[0].is_ascii_lowercase()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{what} {name:?} must be 1 to 40 lowercase letters, digits and '_', starting with a letter"
            ))
        }
    }
}

/// Every kind of work a process knows, with the columns the backbone's
/// statements take them as.
#[derive(Debug, Clone, Default)]
pub struct JobKinds(Vec<JobKind>);

impl JobKinds {
    pub fn new(kinds: impl IntoIterator<Item = JobKind>) -> Self {
        Self(kinds.into_iter().collect())
    }

    pub fn iter(&self) -> impl Iterator<Item = &JobKind> {
        self.0.iter()
    }

    /// The kinds as columns (type, operation, and each lifecycle status,
    /// `None` for a kind without one), for `unnest` in one statement.
    pub fn columns(&self) -> KindColumns {
        let status = |pick: fn(&Lifecycle) -> Option<ClusterStatus>| {
            self.0
                .iter()
                .map(|k| {
                    k.lifecycle
                        .as_ref()
                        .and_then(pick)
                        .map(ClusterStatus::as_str)
                })
                .collect()
        };
        KindColumns {
            job_types: self.0.iter().map(|k| k.job_type.as_str()).collect(),
            operations: self.0.iter().map(|k| k.operation).collect(),
            retried: status(|l| Some(l.retried)),
            promoted: status(|l| l.promoted),
            failed: status(|l| Some(l.failed)),
            cancelled: status(|l| Some(l.cancelled)),
        }
    }
}

/// [`JobKinds::columns`].
pub struct KindColumns {
    pub job_types: Vec<&'static str>,
    pub operations: Vec<&'static str>,
    pub retried: Vec<Option<&'static str>>,
    pub promoted: Vec<Option<&'static str>>,
    pub failed: Vec<Option<&'static str>>,
    pub cancelled: Vec<Option<&'static str>>,
}

/// The prefix (before `/`, when there is one) and the name of a label key
/// with Kubernetes' syntax (k8s.io/apimachinery/pkg/util/validation,
/// `IsQualifiedName`): the name is 1–63 ASCII letters, digits, `-`, `_` and
/// `.`, starting and ending with a letter or digit; the prefix is a lowercase
/// DNS subdomain (RFC 1123) of at most 253 characters. Which prefixes a use
/// of labels keeps for itself is that use's rule.
pub fn label_key_parts(key: &str) -> Result<(Option<&str>, &str), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let dns = (1..=253).contains(&prefix.len())
            && prefix.split('.').all(|part| {
                (1..=63).contains(&part.len())
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !dns {
            return Err(
                "the prefix must be a lowercase DNS subdomain of at most 253 characters, such as example.com"
                    .into(),
            );
        }
    }
    if name.is_empty() || !is_label_value(name) {
        return Err(
            "the name must be 1–63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
                .into(),
        );
    }
    Ok((prefix, name))
}

/// A label value with Kubernetes' syntax (`IsValidLabelValue`): empty, or at
/// most 63 ASCII letters, digits, `-`, `_` and `.`, starting and ending with a
/// letter or digit.
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.is_empty()
        || (bytes.len() <= 63
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_with_marks_that_hide_or_reorder_it_is_told_apart() {
        for hiding in [
            "invoice\u{202e}gpj.exe",
            "a\u{200b}b",
            "a\u{2066}b\u{2069}",
            "line\u{2028}break",
            "bell\u{7}",
            "new\nline",
            "tag\u{e0041}",
            "\u{feff}bom",
        ] {
            assert!(hides_text(hiding), "{hiding:?}");
        }
        for plain in ["Acme GmbH", "阿克米 有限公司", "Café «Zürich»", "emoji 🚀"] {
            assert!(!hides_text(plain), "{plain:?}");
        }
    }

    #[test]
    fn label_keys_and_values_follow_kubernetes() {
        for (key, prefix) in [
            ("env", None),
            ("app.kubernetes.io/name", Some("app.kubernetes.io")),
            ("A_b.c-9", None),
        ] {
            assert_eq!(label_key_parts(key).map(|p| p.0), Ok(prefix), "{key}");
        }
        let long_name = "a".repeat(64);
        let long_prefix = format!("{}a/x", "a.".repeat(127));
        for key in [
            "",
            "-env",
            "env-",
            "Example.com/x",
            "example.com/",
            "/x",
            "a/b/c",
            "ex_ample.com/x",
            long_name.as_str(),
            long_prefix.as_str(),
            "\u{435}nv",   // a Cyrillic е
            "env\u{200b}", // a zero-width space
        ] {
            assert!(label_key_parts(key).is_err(), "{key:?} was accepted");
        }
        for value in ["", "prod", "v1.2_3-x"] {
            assert!(is_label_value(value), "{value}");
        }
        for value in [" prod", "prod!", "-x", &"a".repeat(64), "pr\u{43e}d"] {
            assert!(!is_label_value(value), "{value:?} was accepted");
        }
    }

    #[test]
    fn cluster_names_follow_rfc_1123_labels() {
        assert!(ClusterName::parse("prod-eu-1").is_ok());
        for bad in ["", "Prod", "1abc", "abc-", "a_b", "a.b", &"a".repeat(41)] {
            assert!(ClusterName::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn node_names_are_dns_subdomains_and_nothing_else() {
        for good in ["worker-1", "w", "rack7.worker-1", &"a".repeat(63)] {
            assert!(NodeName::parse(good).is_ok(), "{good}");
        }
        let long = format!("{}.{}", "a".repeat(63), "b".repeat(190));
        assert_eq!(long.len(), 254);
        for bad in [
            "",
            "Worker-1",
            "-worker",
            "worker-",
            "a..b",
            ".a",
            "<img src=x onerror=alert(1)>",
            "worker\u{202e}1-",
            "wоrker", // a Cyrillic о
            "worker_1",
            &"a".repeat(64),
            &long,
            &"a".repeat(1_000_000),
        ] {
            assert!(NodeName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn kubernetes_versions_are_limited_to_supported_minors() {
        assert_eq!(KubernetesVersion::parse("v1.33").unwrap().as_str(), "1.33");
        assert!(KubernetesVersion::parse("1.20").is_err());
        assert!(KubernetesVersion::parse("latest").is_err());
    }

    #[test]
    fn text_enums_read_back_only_their_exact_names() {
        for t in NodeEventType::ALL {
            assert_eq!(NodeEventType::parse(t.as_str()), Some(*t));
            assert_eq!(
                serde_json::to_value(t).unwrap(),
                serde_json::Value::String(t.as_str().into()),
                "the API says what the database holds"
            );
        }
        // Case, padding and a Cyrillic look-alike `а` are other words.
        for bad in ["Ready", " ready", "ready ", "re\u{0430}dy", "", "not-ready"] {
            assert_eq!(NodeEventType::parse(bad), None, "{bad:?}");
        }
        for status in [NodeStatus::Ready, NodeStatus::Offline, NodeStatus::Deleted] {
            assert_eq!(NodeEventType::of_status(status).as_str(), status.as_str());
        }
        assert_eq!(JoinTokenStatus::names(), "active, used, expired or revoked");
    }

    #[test]
    fn a_job_kind_declares_a_queue_name_and_nothing_looking_like_one() {
        assert_eq!(JobKind::new("backup_take", "backup").check(), Ok(()));
        for bad in [
            "",
            "Backup",
            "backup-take",
            "backup.take",
            "1backup",
            "b\u{0430}ckup",
            "backup take",
            &"b".repeat(41),
        ] {
            let bad: &'static str = Box::leak(bad.to_string().into_boxed_str());
            assert!(JobKind::new(bad, "backup").check().is_err(), "{bad:?}");
            assert!(JobKind::new("backup", bad).check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn job_kinds_are_columns_the_backbone_joins_on() {
        let kinds = JobKinds::new([
            JobKind::new("report", "report"),
            JobKind::moving_the_cluster(
                "grow",
                "grow",
                Lifecycle {
                    retried: ClusterStatus::Updating,
                    promoted: None,
                    failed: ClusterStatus::Ready,
                    cancelled: ClusterStatus::Ready,
                },
            ),
        ]);
        let columns = kinds.columns();
        assert_eq!(columns.job_types, ["report", "grow"]);
        assert_eq!(columns.retried, [None, Some("updating")]);
        assert_eq!(columns.promoted, [None, None]);
        assert_eq!(columns.failed, [None, Some("ready")]);
        assert_eq!(columns.operations, ["report", "grow"]);
        assert_eq!(columns.cancelled, [None, Some("ready")]);
        let read_back = JobType::named(&String::from("grow"));
        assert_eq!(read_back, kinds.iter().nth(1).unwrap().job_type);
        assert_eq!(serde_json::to_value(read_back).unwrap(), "grow");
        assert_eq!(
            serde_json::from_value::<JobType>("grow".into()).unwrap(),
            read_back
        );
        // A wake-up naming no type a kind could have is refused, not kept.
        for bad in ["", "Grow", "gr\u{043e}w", "grow-1", "x".repeat(41).as_str()] {
            assert!(
                serde_json::from_value::<JobType>(bad.into()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn email_addresses_have_one_canonical_ascii_form() {
        let ok = |raw: &str| EmailAddress::parse(raw).map(|e| e.to_string());
        assert_eq!(
            ok("  Alice.B+ci@Example.COM ").as_deref(),
            Ok("alice.b+ci@example.com")
        );
        // The look-alike domain is another domain, never the one it imitates.
        let lookalike = ok("victim@gmaİl.com").unwrap();
        assert!(lookalike.starts_with("victim@xn--"), "{lookalike}");
        assert_ne!(lookalike, "victim@gmail.com");
        assert_eq!(
            ok("user@bücher.example").as_deref(),
            Ok("user@xn--bcher-kva.example")
        );
        // Fullwidth letters fold to ASCII under UTS #46: the same domain, said once.
        assert_eq!(ok("a@ｅｘａｍｐｌｅ.com").as_deref(), Ok("a@example.com"));
        for bad in [
            "vİctim@gmail.com",     // a non-ASCII local part
            "x<sink2@example.org>", // a display name around another address
            "\"x\"@example.org",    // a quoted local part
            "a@b@example.org",      // two addresses in one
            "a,b@example.org",
            "a b@example.org",
            "a@example.org\r\nBcc: c@evil.example",
            ".a@example.org",
            "a..b@example.org",
            "a@localhost",
            "a@-x.example",
            "a@exa_mple.org",
            "a@",
            "@example.org",
            "",
        ] {
            assert!(EmailAddress::parse(bad).is_err(), "{bad:?} was accepted");
        }
        let long = format!("{}@example.org", "a".repeat(100_000));
        assert!(EmailAddress::parse(&long).is_err());
        let at_limit = format!("{}@{}.example", "a".repeat(64), "b".repeat(63));
        assert!(EmailAddress::parse(&at_limit).is_ok());
    }
}
