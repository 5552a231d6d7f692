//! What a pod asks the cluster for, and how many pods a workload runs.
//!
//! A pod's request per resource is the larger of its containers' sum (with
//! sidecars, the init containers that keep running) and its largest other init
//! container, plus `overhead`, as the scheduler counts it. A container that
//! requests nothing takes its limit (as the API server defaults it), else
//! [`DEFAULT_CPU_MILLI_CORES`] / [`DEFAULT_MEMORY_MIB`].

use serde_json::Value;

use crate::host::quantity;

/// What a container without a CPU request or limit is counted for.
pub const DEFAULT_CPU_MILLI_CORES: i64 = 100;
/// What a container without a memory request or limit is counted for.
pub const DEFAULT_MEMORY_MIB: i64 = 128;

/// CPU in millicores and memory in MiB (rounded up), saturating.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    pub cpu_milli_cores: i64,
    pub memory_mib: i64,
}

impl Requests {
    pub fn plus(self, other: Self) -> Self {
        Self {
            cpu_milli_cores: self.cpu_milli_cores.saturating_add(other.cpu_milli_cores),
            memory_mib: self.memory_mib.saturating_add(other.memory_mib),
        }
    }

    pub fn times(self, count: i64) -> Self {
        let count = count.max(0);
        Self {
            cpu_milli_cores: self.cpu_milli_cores.saturating_mul(count),
            memory_mib: self.memory_mib.saturating_mul(count),
        }
    }

    fn max(self, other: Self) -> Self {
        Self {
            cpu_milli_cores: self.cpu_milli_cores.max(other.cpu_milli_cores),
            memory_mib: self.memory_mib.max(other.memory_mib),
        }
    }

    /// What `self` adds to `before`, per resource (never below zero).
    pub fn increase_over(self, before: Self) -> Self {
        Self {
            cpu_milli_cores: self
                .cpu_milli_cores
                .saturating_sub(before.cpu_milli_cores)
                .max(0),
            memory_mib: self.memory_mib.saturating_sub(before.memory_mib).max(0),
        }
    }
}

fn amount(resources: &Value, key: &str, name: &str, scale: f64) -> Option<i64> {
    let raw = resources.get(key)?.get(name)?;
    let text = match raw {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    quantity::quantity_value(&text).map(|v| (v * scale).ceil().clamp(0.0, i64::MAX as f64) as i64)
}

fn resource(resources: &Value, name: &str, scale: f64, default: i64) -> i64 {
    amount(resources, "requests", name, scale)
        .or_else(|| amount(resources, "limits", name, scale))
        .unwrap_or(default)
}

const MIB: f64 = 1.0 / (1024.0 * 1024.0);

fn container(container: &Value) -> Requests {
    let resources = container.get("resources").cloned().unwrap_or(Value::Null);
    Requests {
        cpu_milli_cores: resource(&resources, "cpu", 1000.0, DEFAULT_CPU_MILLI_CORES),
        memory_mib: resource(&resources, "memory", MIB, DEFAULT_MEMORY_MIB),
    }
}

fn list<'a>(spec: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    spec.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// What one pod with this `spec` requests.
pub fn pod(spec: &Value) -> Requests {
    let sidecar = |c: &&Value| c.get("restartPolicy").and_then(Value::as_str) == Some("Always");
    let running = list(spec, "containers")
        .chain(list(spec, "initContainers").filter(sidecar))
        .map(container)
        .fold(Requests::default(), Requests::plus);
    let init = list(spec, "initContainers")
        .filter(|c| !sidecar(c))
        .map(container)
        .fold(Requests::default(), Requests::max);
    let overhead = spec
        .get("overhead")
        .map_or(Requests::default(), |o| Requests {
            cpu_milli_cores: amount(&serde_json::json!({ "o": o }), "o", "cpu", 1000.0)
                .unwrap_or(0),
            memory_mib: amount(&serde_json::json!({ "o": o }), "o", "memory", MIB).unwrap_or(0),
        });
    running.max(init).plus(overhead)
}

/// The kinds the webhook weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pod,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
}

impl Kind {
    pub fn of(group: &str, kind: &str) -> Option<Self> {
        Some(match (group, kind) {
            ("", "Pod") => Self::Pod,
            ("apps", "Deployment") => Self::Deployment,
            ("apps", "ReplicaSet") => Self::ReplicaSet,
            ("apps", "StatefulSet") => Self::StatefulSet,
            ("apps", "DaemonSet") => Self::DaemonSet,
            ("batch", "Job") => Self::Job,
            ("batch", "CronJob") => Self::CronJob,
            _ => return None,
        })
    }
}

/// How many pods an object of `kind` runs at once, and what each requests.
/// A DaemonSet runs one per node (`nodes`); a Job `parallelism` (at most
/// `completions`); a CronJob one Job at a time.
pub fn workload(kind: Kind, object: &Value, nodes: i64) -> (i64, Requests) {
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let (count, pod_spec) = match kind {
        Kind::Pod => (1, spec),
        Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet => {
            (int(spec, "replicas").unwrap_or(1), template(spec))
        }
        Kind::DaemonSet => (nodes, template(spec)),
        Kind::Job => job(spec),
        Kind::CronJob => job(spec.pointer("/jobTemplate/spec").unwrap_or(&Value::Null)),
    };
    (count.max(0), pod(pod_spec))
}

fn int(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

/// A Job's pods at once: `parallelism`, at most `completions`.
fn job(spec: &Value) -> (i64, &Value) {
    let parallelism = int(spec, "parallelism").unwrap_or(1);
    let pods = int(spec, "completions").map_or(parallelism, |c| parallelism.min(c));
    (pods, template(spec))
}

fn template(spec: &Value) -> &Value {
    spec.pointer("/template/spec").unwrap_or(&Value::Null)
}

/// Whether another object controls this one (a Deployment's ReplicaSet, a
/// CronJob's Job): its owner was weighed already.
pub fn controlled(object: &Value) -> bool {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_pod_counts_requests_then_limits_then_the_default() {
        let spec = json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
            {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "c"},
        ]});
        assert_eq!(
            pod(&spec),
            Requests {
                cpu_milli_cores: 250 + 1000 + DEFAULT_CPU_MILLI_CORES,
                memory_mib: 64 + 1024 + DEFAULT_MEMORY_MIB
            }
        );
    }

    #[test]
    fn init_containers_count_by_the_largest_sidecars_by_their_sum_and_overhead_on_top() {
        let spec = json!({
            "initContainers": [
                {"name": "migrate", "resources": {"requests": {"cpu": "2", "memory": "10Mi"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}},
            ],
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}}}],
            "overhead": {"cpu": "10m", "memory": "1Mi"},
        });
        assert_eq!(
            pod(&spec),
            Requests {
                cpu_milli_cores: 2000 + 10,
                memory_mib: 300 + 1
            }
        );
    }

    #[test]
    fn quantities_round_up_and_a_hostile_figure_saturates_rather_than_wraps() {
        let spec = json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "0.0001", "memory": "1"}}},
        ]});
        assert_eq!(
            pod(&spec),
            Requests {
                cpu_milli_cores: 1,
                memory_mib: 1
            }
        );
        let huge = json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "9e15", "memory": "8Ei"}}},
            {"name": "b", "resources": {"requests": {"cpu": "9e15", "memory": "-5Gi"}}},
        ]});
        let requests = pod(&huge);
        assert_eq!(requests.cpu_milli_cores, i64::MAX);
        assert!(requests.memory_mib >= 0);
        assert_eq!(requests.times(1_000_000).cpu_milli_cores, i64::MAX);
    }

    #[test]
    fn workloads_run_replicas_nodes_or_parallel_pods() {
        let template = json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]}});
        let pod = Requests {
            cpu_milli_cores: 100,
            memory_mib: 100,
        };
        let deployment = json!({"spec": {"replicas": 3, "template": template}});
        assert_eq!(workload(Kind::Deployment, &deployment, 9), (3, pod));
        let unscaled = json!({"spec": {"template": template}});
        assert_eq!(workload(Kind::StatefulSet, &unscaled, 9), (1, pod));
        assert_eq!(workload(Kind::DaemonSet, &unscaled, 4), (4, pod));
        let job = json!({"spec": {"parallelism": 5, "completions": 2, "template": template}});
        assert_eq!(workload(Kind::Job, &job, 0), (2, pod));
        let cron =
            json!({"spec": {"jobTemplate": {"spec": {"parallelism": 3, "template": template}}}});
        assert_eq!(workload(Kind::CronJob, &cron, 0), (3, pod));
        let negative = json!({"spec": {"replicas": -7, "template": template}});
        assert_eq!(workload(Kind::Deployment, &negative, 0).0, 0);
        assert_eq!(Kind::of("apps", "Deployment"), Some(Kind::Deployment));
        assert_eq!(Kind::of("", "Deployment"), None);
    }

    #[test]
    fn only_a_controller_reference_marks_an_object_as_controlled() {
        assert!(controlled(&json!({"metadata": {"ownerReferences": [
            {"kind": "Deployment", "name": "web", "controller": true}]}})));
        assert!(!controlled(&json!({"metadata": {"ownerReferences": [
            {"kind": "ConfigMap", "name": "x"}]}})));
        assert!(!controlled(&json!({"metadata": {}})));
    }
}
