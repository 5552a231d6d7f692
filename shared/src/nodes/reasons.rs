//! What a join script found at each step, and why a join attempt ended: codes
//! with parameters, which the console words in its reader's language, beside
//! the English text the script prints and the ledger keeps (`detail`,
//! `reason`) for readers that know no code.

use std::collections::BTreeMap;

use crate::domain::text_enum;

text_enum! {
    /// What a join script found at one of its steps; its parameters are the
    /// step's `params`.
    JoinDetailCode {
        OsChecking => "os_checking",
        /// `name`, `kernel`.
        Os => "os",
        /// `kernel`.
        OsNotLinux => "os_not_linux",
        /// `arch`.
        Arch => "arch",
        /// `arch`.
        ArchUnsupported => "arch_unsupported",
        Root => "root",
        RootRequired => "root_required",
        CgroupV2 => "cgroup_v2",
        CgroupV1 => "cgroup_v1",
        /// `controller`, `controllers`.
        CgroupControllerMissing => "cgroup_controller_missing",
        CgroupMemoryDisabled => "cgroup_memory_disabled",
        CgroupMissing => "cgroup_missing",
        SwapOff => "swap_off",
        /// `devices`.
        SwapOn => "swap_on",
        NoKubelet => "no_kubelet",
        /// `cluster`.
        AlreadyNode => "already_node",
        AlreadyJoined => "already_joined",
        /// `server`.
        LeavingCluster => "leaving_cluster",
        /// `server`, `cluster`.
        JoinedElsewhere => "joined_elsewhere",
        PortsFree => "ports_free",
        /// `ports`.
        PortsBusy => "ports_busy",
        /// `seconds`.
        ClockInSync => "clock_in_sync",
        /// `seconds`, `max`.
        ClockSkewed => "clock_skewed",
        ClockUnknown => "clock_unknown",
        DnsIpEndpoint => "dns_ip_endpoint",
        DnsUnchecked => "dns_unchecked",
        /// `host`, `address`.
        DnsResolved => "dns_resolved",
        /// `host`.
        DnsUnresolved => "dns_unresolved",
        /// `endpoint`.
        ApiReached => "api_reached",
        /// `endpoint`.
        ApiUnresolved => "api_unresolved",
        /// `endpoint`.
        ApiRefused => "api_refused",
        /// `endpoint`.
        ApiTimeout => "api_timeout",
        /// `endpoint`, `error`.
        ApiUntrusted => "api_untrusted",
        /// `endpoint`, `error`.
        ApiUnreachable => "api_unreachable",
        /// `missing`, `version`.
        KubeadmMissing => "kubeadm_missing",
        /// `version`.
        KubeadmFound => "kubeadm_found",
        JoinTakingUse => "join_taking_use",
        /// `message`.
        JoinRefused => "join_refused",
        NoBootstrapToken => "no_bootstrap_token",
        /// `error`.
        JoinScriptUnavailable => "join_script_unavailable",
        /// `status`, `output`.
        JoinScriptFailed => "join_script_failed",
        /// `status`, `output`.
        KubeadmFailed => "kubeadm_failed",
        ApprovalWaiting => "approval_waiting",
        /// `message`.
        ApprovalRefused => "approval_refused",
        Approved => "approved",
        ApprovalTimeout => "approval_timeout",
        KubeletRegistered => "kubelet_registered",
        /// `hostname`.
        Joined => "joined",
    }
}

text_enum! {
    /// Why a join attempt was refused or failed; its parameters are the
    /// attempt's `reason_params`.
    JoinReasonCode {
        ClusterDeleted => "cluster_deleted",
        TokenUsedUp => "token_used_up",
        TokenExpired => "token_expired",
        TokenRevoked => "token_revoked",
        TokenUnusable => "token_unusable",
        /// `status`.
        ClusterNotReady => "cluster_not_ready",
        CaUnreadable => "ca_unreadable",
        CaUnknown => "ca_unknown",
        HostnameRequired => "hostname_required",
        /// `hostname`.
        NodeExists => "node_exists",
        /// `hostname`.
        HostnameRacing => "hostname_racing",
        /// `plan`, `limit`, `usage`.
        PlanNodeLimit => "plan_node_limit",
        ClusterGone => "cluster_gone",
        BootstrapNotTaken => "bootstrap_not_taken",
        /// `step`: the step's own code and parameters say what it found.
        StepFailed => "step_failed",
    }
}

/// A code's parameters: a few short texts by name.
pub type Params = BTreeMap<String, String>;

pub const MAX_PARAMS: usize = 8;
pub const MAX_PARAM_CHARS: usize = 300;

/// Whether `name` names a step or a param: 1–32 lowercase letters, digits
/// or `_`, starting with a letter.
pub fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.as_bytes()[0].is_ascii_lowercase()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Why a step's parameters cannot be recorded, if they cannot.
pub fn invalid_params(params: &Params) -> Option<&'static str> {
    if params.len() > MAX_PARAMS {
        return Some("params must have at most 8 entries");
    }
    if !params.keys().all(|k| valid_name(k)) {
        return Some("a param's name must be 1–32 lowercase letters, digits or '_'");
    }
    if params.values().any(|v| v.chars().count() > MAX_PARAM_CHARS) {
        return Some("a param's value must be at most 300 characters");
    }
    if params.values().any(|v| crate::domain::hides_text(v)) {
        return Some(
            "a param's value must be plain text: no control, direction or zero-width characters",
        );
    }
    None
}

/// Why a join attempt was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinReason {
    ClusterDeleted,
    TokenUsedUp,
    TokenExpired,
    TokenRevoked,
    TokenUnusable,
    ClusterNotReady {
        status: String,
    },
    CaUnreadable,
    CaUnknown,
    HostnameRequired,
    NodeExists {
        hostname: String,
    },
    HostnameRacing {
        hostname: String,
    },
    PlanNodeLimit {
        plan: String,
        limit: i64,
        usage: i64,
        upgrade_url: String,
    },
    ClusterGone,
    BootstrapNotTaken,
    StepFailed {
        step: String,
        detail: Option<String>,
    },
}

impl JoinReason {
    pub fn code(&self) -> JoinReasonCode {
        match self {
            Self::ClusterDeleted => JoinReasonCode::ClusterDeleted,
            Self::TokenUsedUp => JoinReasonCode::TokenUsedUp,
            Self::TokenExpired => JoinReasonCode::TokenExpired,
            Self::TokenRevoked => JoinReasonCode::TokenRevoked,
            Self::TokenUnusable => JoinReasonCode::TokenUnusable,
            Self::ClusterNotReady { .. } => JoinReasonCode::ClusterNotReady,
            Self::CaUnreadable => JoinReasonCode::CaUnreadable,
            Self::CaUnknown => JoinReasonCode::CaUnknown,
            Self::HostnameRequired => JoinReasonCode::HostnameRequired,
            Self::NodeExists { .. } => JoinReasonCode::NodeExists,
            Self::HostnameRacing { .. } => JoinReasonCode::HostnameRacing,
            Self::PlanNodeLimit { .. } => JoinReasonCode::PlanNodeLimit,
            Self::ClusterGone => JoinReasonCode::ClusterGone,
            Self::BootstrapNotTaken => JoinReasonCode::BootstrapNotTaken,
            Self::StepFailed { .. } => JoinReasonCode::StepFailed,
        }
    }

    /// The parameters the console words the code with.
    pub fn params(&self) -> Params {
        let pairs: Vec<(&str, String)> = match self {
            Self::ClusterNotReady { status } => vec![("status", status.clone())],
            Self::NodeExists { hostname } | Self::HostnameRacing { hostname } => {
                vec![("hostname", hostname.clone())]
            }
            Self::PlanNodeLimit {
                plan, limit, usage, ..
            } => vec![
                ("plan", plan.clone()),
                ("limit", limit.to_string()),
                ("usage", usage.to_string()),
            ],
            Self::StepFailed { step, .. } => vec![("step", step.clone())],
            _ => vec![],
        };
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// The English text: what the script prints, and the ledger's `reason`.
    pub fn message(&self) -> String {
        match self {
            Self::ClusterDeleted => "the cluster of this join token was deleted".into(),
            Self::TokenUsedUp => "this join token has been used up".into(),
            Self::TokenExpired => "this join token has expired".into(),
            Self::TokenRevoked => "this join token was revoked".into(),
            Self::TokenUnusable => "this join token cannot be used".into(),
            Self::ClusterNotReady { status } => {
                format!("the cluster is {status}; run the command again once it is ready")
            }
            Self::CaUnreadable => "the platform could not read the cluster's certificate authority; try again shortly".into(),
            Self::CaUnknown => {
                "the cluster's certificate authority is not known yet; try again shortly".into()
            }
            Self::HostnameRequired => "the join step must carry the machine's host name".into(),
            Self::NodeExists { hostname } => format!(
                "a node named {hostname} is already part of this cluster; remove it first or join under another host name"
            ),
            Self::HostnameRacing { hostname } => {
                format!("another machine is joining as {hostname}; use another host name")
            }
            Self::PlanNodeLimit {
                plan,
                limit,
                usage,
                upgrade_url,
            } => format!(
                "the {plan} plan allows {limit} node(s) and {usage} are in use or joining; remove a node or upgrade at {upgrade_url}"
            ),
            Self::ClusterGone => "the cluster is gone".into(),
            Self::BootstrapNotTaken => "the cluster's control plane did not take a bootstrap token for this join; the use was given back, run the command again".into(),
            Self::StepFailed { step, detail } => match detail {
                Some(detail) => format!("{step}: {detail}"),
                None => format!("{step} failed"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_few_short_and_plainly_named() {
        let one = |k: &str, v: &str| Params::from([(k.to_string(), v.to_string())]);
        assert_eq!(invalid_params(&one("devices", "2")), None);
        assert!(invalid_params(&one("Devices", "2")).is_some());
        assert!(invalid_params(&one("", "2")).is_some());
        assert!(
            invalid_params(&one("dеvices", "2")).is_some(),
            "a Cyrillic е"
        );
        assert!(invalid_params(&one("error", &"x".repeat(301))).is_some());
        assert_eq!(invalid_params(&one("error", &"é".repeat(300))), None);
        let many: Params = (0..9).map(|i| (format!("p{i}"), String::new())).collect();
        assert!(invalid_params(&many).is_some());
    }

    /// The codes the join script sends: the word after the step in its
    /// `ok`, `warn`, `skip` and `fail` calls, after the status in `report`.
    fn codes_of_the_script() -> Vec<String> {
        let word = |w: &str| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        let mut codes = Vec::new();
        for line in include_str!("join.sh").lines() {
            if line.trim_start().starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let call = |i: usize, code_at: usize| {
                words
                    .get(i + 1)
                    .filter(|step| word(step))
                    .and(words.get(i + code_at))
            };
            // A `report` call first: its status may be `ok`.
            let report = (0..words.len())
                .filter(|&i| words[i].ends_with("report"))
                .find_map(|i| call(i, 3));
            let helper = || {
                (0..words.len())
                    .filter(|&i| matches!(words[i], "ok" | "warn" | "skip" | "fail"))
                    .find_map(|i| call(i, 2))
            };
            if let Some(code) = report.or_else(helper) {
                codes.push(code.to_string());
            }
        }
        codes
    }

    #[test]
    fn the_join_script_sends_every_code_of_the_enum_and_no_other() {
        let sent = codes_of_the_script();
        assert!(sent.len() > 40, "found {} calls: {sent:?}", sent.len());
        let unknown: Vec<&String> = sent
            .iter()
            .filter(|c| JoinDetailCode::parse(c).is_none())
            .collect();
        assert!(
            unknown.is_empty(),
            "the API would refuse these: {unknown:?}"
        );
        let unsent: Vec<&str> = JoinDetailCode::ALL
            .iter()
            .map(|c| c.as_str())
            .filter(|c| !sent.iter().any(|s| s == c))
            .collect();
        assert!(unsent.is_empty(), "codes no script sends: {unsent:?}");
    }

    #[test]
    fn a_failed_step_names_its_step_and_keeps_its_detail_in_the_text() {
        let reason = JoinReason::StepFailed {
            step: "swap".into(),
            detail: Some("swap is on".into()),
        };
        assert_eq!(reason.code().as_str(), "step_failed");
        assert_eq!(reason.params()["step"], "swap");
        assert_eq!(reason.message(), "swap: swap is on");
    }
}
