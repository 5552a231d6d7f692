//! The admission webhook inside every cluster (docs/admission.md): the
//! cluster's own API server asks the platform about each Pod, workload and
//! Node it is about to create or change, and the platform refuses what would
//! take the cluster past its workload CPU/memory limits (or its owner past
//! the plan's node limit), saying which limit and by how much.
//!
//! Parts: [`review`] (the `AdmissionReview` documents), [`demand`] (what a
//! pod and a workload ask for), [`store`] (the per-cluster secrets, the
//! observed usage and the reservations, with their SQL), [`registration`]
//! (the `ValidatingWebhookConfiguration` applied inside the cluster), and
//! here the weighing itself.

pub mod authorizer;
pub mod demand;
pub mod registration;
pub mod review;
pub mod store;

use demand::Requests;

/// How long a cluster's API server waits for the webhook's answer; also how
/// far before an observation a reservation still counts.
pub const REVIEW_TIMEOUT_SECONDS: i64 = 5;

/// Namespaces whose objects are never weighed nor counted: the cluster's
/// own and the platform's ([`crate::clusters::SYSTEM_NAMESPACES`]).
pub const EXEMPT_NAMESPACES: [&str; 4] = crate::clusters::SYSTEM_NAMESPACES;

pub fn exempt(namespace: Option<&str>) -> bool {
    namespace.is_some_and(|ns| EXEMPT_NAMESPACES.contains(&ns))
}

/// A limit a request would pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excess {
    /// `cpu` or `memory`.
    pub resource: &'static str,
    pub limit: i64,
    pub in_use: i64,
    pub requested: i64,
    pub excess: i64,
}

impl Excess {
    /// `m` (millicores) or `Mi`: how the resource's figures are written.
    pub fn unit(&self) -> &'static str {
        if self.resource == "cpu" { "m" } else { "Mi" }
    }

    fn label(&self) -> &'static str {
        if self.resource == "cpu" {
            "CPU"
        } else {
            "memory"
        }
    }

    /// `the cluster "demo" allows 2000m of CPU requests; 1500m are in use and
    /// Deployment "web" asks for 1000m more: 500m over the limit`.
    pub fn message(&self, cluster: &str, object: &str) -> String {
        let u = self.unit();
        format!(
            "the cluster {cluster:?} allows {limit}{u} of {label} requests; {in_use}{u} are in use and {object} asks for {requested}{u} more: {excess}{u} over the limit",
            limit = self.limit,
            label = self.label(),
            in_use = self.in_use,
            requested = self.requested,
            excess = self.excess,
        )
    }
}

/// The first limit that `in_use + requested` passes, CPU before memory. A
/// request that adds nothing passes whatever is in use (lowering a limit
/// never stops what shrinks).
pub fn weigh(limits: Requests, in_use: Requests, requested: Requests) -> Option<Excess> {
    [
        (
            "cpu",
            limits.cpu_milli_cores,
            in_use.cpu_milli_cores,
            requested.cpu_milli_cores,
        ),
        (
            "memory",
            limits.memory_mib,
            in_use.memory_mib,
            requested.memory_mib,
        ),
    ]
    .into_iter()
    .find_map(|(resource, limit, in_use, requested)| {
        let total = in_use.saturating_add(requested);
        (requested > 0 && total > limit).then(|| Excess {
            resource,
            limit,
            in_use,
            requested,
            excess: total.saturating_sub(limit),
        })
    })
}

/// What admission brings to the platform: nothing the platform lists yet: its webhook is its own function.
pub const CAPABILITY: crate::capability::Capability =
    crate::capability::Capability::named("admission");

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cpu: i64, memory: i64) -> Requests {
        Requests {
            cpu_milli_cores: cpu,
            memory_mib: memory,
        }
    }

    #[test]
    fn a_request_past_a_limit_is_weighed_with_its_numbers() {
        let limits = r(2000, 4096);
        assert_eq!(weigh(limits, r(1500, 0), r(500, 10)), None, "exactly at");
        let over = weigh(limits, r(1500, 0), r(1000, 10)).unwrap();
        assert_eq!(
            (
                over.resource,
                over.limit,
                over.in_use,
                over.requested,
                over.excess
            ),
            ("cpu", 2000, 1500, 1000, 500)
        );
        assert_eq!(
            over.message("demo", "Deployment \"web\""),
            "the cluster \"demo\" allows 2000m of CPU requests; 1500m are in use and Deployment \"web\" asks for 1000m more: 500m over the limit"
        );
        let memory = weigh(limits, r(0, 4000), r(0, 200)).unwrap();
        assert_eq!((memory.resource, memory.excess), ("memory", 104));
        assert!(memory.message("demo", "Pod \"p\"").contains("104Mi over"));
    }

    #[test]
    fn what_adds_nothing_passes_an_exceeded_limit_and_huge_figures_do_not_wrap() {
        assert_eq!(weigh(r(100, 100), r(5000, 5000), r(0, 0)), None);
        let huge = weigh(r(100, 100), r(i64::MAX, 0), r(i64::MAX, 0)).unwrap();
        assert_eq!(huge.excess, i64::MAX - 100);
    }

    #[test]
    fn the_platform_and_system_namespaces_are_exempt() {
        assert!(exempt(Some("kube-system")));
        assert!(exempt(Some("kubebyon-ingress")));
        assert!(!exempt(Some("default")));
        assert!(!exempt(Some("kube-systen")));
        // Look-alikes: a non-breaking hyphen, a Cyrillic `у`, a trailing dot.
        assert!(!exempt(Some("kube\u{2011}system")));
        assert!(!exempt(Some("kube-s\u{443}stem")));
        assert!(!exempt(Some("kube-system.")));
        assert!(!exempt(Some("KUBE-SYSTEM")));
        assert!(!exempt(None));
    }
}
