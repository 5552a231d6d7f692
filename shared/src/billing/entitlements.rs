//! What an organisation may have now: one function of its orders (the plan
//! of the latest paid order, else the default plan named in the settings),
//! and what its clusters hold. Every write that adds to a limited resource
//! takes the organisation's entitlement lock first, in its own transaction,
//! so two writes at the last free slot — by any of its members — are
//! serialized and the second sees the first.

use serde::Serialize;
use sqlx::PgConnection;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::{ApiError, ExtendedProblem, Problem};

/// A limit of the organisation's plan that a request would pass.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema, PartialEq, Eq)]
pub struct PlanLimit {
    /// `clusters`, `nodes`, `cpu_milli_cores`, `memory_mib`, `hostnames` or
    /// `databases`.
    pub resource: String,
    /// The plan's name.
    pub plan: String,
    pub limit: i64,
    /// What the organisation has now.
    pub usage: i64,
    /// What the request adds.
    pub requested: i64,
    /// `usage + requested - limit`: by how much the request passes the limit.
    pub excess: i64,
    /// Where an owner can choose a bigger plan.
    pub upgrade_url: String,
}

/// The answer to a request past the plan: 403 `plan_limit_exceeded`, whose
/// extension member `plan_limit` says which limit and by how much.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct PlanLimitProblem {
    #[serde(flatten)]
    pub problem: Problem,
    pub plan_limit: PlanLimit,
}

impl From<PlanLimit> for ApiError {
    fn from(limit: PlanLimit) -> Self {
        let detail = format!(
            "{} would exceed the {} plan's limit of {} by {} (in use: {}, requested: {}); upgrade at {}",
            limit.resource,
            limit.plan,
            limit.limit,
            limit.excess,
            limit.usage,
            limit.requested,
            limit.upgrade_url
        );
        let mut extensions = serde_json::Map::new();
        extensions.insert(
            "plan_limit".into(),
            serde_json::to_value(limit).expect("a plan limit serializes"),
        );
        ApiError::Extended(Box::new(ExtendedProblem {
            status: axum::http::StatusCode::FORBIDDEN,
            code: "plan_limit_exceeded",
            title: "Plan limit exceeded",
            detail,
            extensions,
        }))
    }
}

/// Where the plan an organisation has comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanSource {
    /// Their latest paid order.
    Order,
    /// No paid order: the default plan of the settings.
    Default,
    /// No paid order and no default plan: nothing is limited.
    Unlimited,
}

/// The plan an organisation has.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlanRef {
    pub id: Uuid,
    pub name: String,
}

/// One count per limited resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Amounts {
    pub clusters: i64,
    pub nodes: i64,
    pub cpu_milli_cores: i64,
    pub memory_mib: i64,
    pub hostnames: i64,
    pub databases: i64,
}

impl Amounts {
    fn each(&self) -> [(&'static str, i64); 6] {
        [
            ("clusters", self.clusters),
            ("nodes", self.nodes),
            ("cpu_milli_cores", self.cpu_milli_cores),
            ("memory_mib", self.memory_mib),
            ("hostnames", self.hostnames),
            ("databases", self.databases),
        ]
    }
}

/// An organisation's plan, its limits and their use.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Entitlement {
    pub source: PlanSource,
    /// Absent when nothing is limited.
    pub plan: Option<PlanRef>,
    /// The paid order the plan comes from.
    pub order_id: Option<Uuid>,
    /// Absent when nothing is limited.
    pub limits: Option<Amounts>,
    /// Live clusters, live nodes (and joins under way), the clusters' summed
    /// workload CPU and memory limits, hostname bindings, tenant databases.
    pub usage: Amounts,
}

/// A request's additions to the organisation's usage.
pub type Request = Amounts;

impl Entitlement {
    /// What is left of each limit (negative when a downgrade left the
    /// organisation over it); absent when nothing is limited.
    pub fn remaining(&self) -> Option<Amounts> {
        self.limits.map(|l| Amounts {
            clusters: l.clusters - self.usage.clusters,
            nodes: l.nodes - self.usage.nodes,
            cpu_milli_cores: l.cpu_milli_cores - self.usage.cpu_milli_cores,
            memory_mib: l.memory_mib - self.usage.memory_mib,
            hostnames: l.hostnames - self.usage.hostnames,
            databases: l.databases - self.usage.databases,
        })
    }

    /// The resources whose usage is above their limit (after a downgrade).
    pub fn over_limit(&self) -> Vec<&'static str> {
        self.passed_limits()
            .map(|(resource, _, _)| resource)
            .collect()
    }

    /// The limits the organisation is past already (a downgrade, a lowered
    /// plan), as refusals of a request for nothing more: what
    /// `sync-clusters` tells its owners.
    pub fn passed(&self, upgrade_url: &str) -> Vec<PlanLimit> {
        let Some(plan) = &self.plan else {
            return Vec::new();
        };
        self.passed_limits()
            .map(|(resource, limit, usage)| PlanLimit {
                resource: resource.into(),
                plan: plan.name.clone(),
                limit,
                usage,
                requested: 0,
                excess: usage - limit,
                upgrade_url: upgrade_url.into(),
            })
            .collect()
    }

    /// (resource, limit, usage) of each limit the usage is above.
    fn passed_limits(&self) -> impl Iterator<Item = (&'static str, i64, i64)> {
        self.limits
            .into_iter()
            .flat_map(|limits| limits.each().into_iter().zip(self.usage.each()))
            .filter(|((_, limit), (_, usage))| usage > limit)
            .map(|((resource, limit), (_, usage))| (resource, limit, usage))
    }

    /// The first limit the request would pass. A resource the request does
    /// not add to never refuses it, even when the organisation is over that limit
    /// already: a downgrade stops growth, it does not stop other work.
    pub fn exceeded(&self, request: &Request, upgrade_url: &str) -> Option<PlanLimit> {
        let (limits, plan) = (self.limits?, self.plan.as_ref()?);
        limits
            .each()
            .into_iter()
            .zip(self.usage.each())
            .zip(request.each())
            .find_map(|(((resource, limit), (_, usage)), (_, requested))| {
                (requested > 0 && usage + requested > limit).then(|| PlanLimit {
                    resource: resource.into(),
                    plan: plan.name.clone(),
                    limit,
                    usage,
                    requested,
                    excess: usage + requested - limit,
                    upgrade_url: upgrade_url.into(),
                })
            })
    }

    /// [`Entitlement::exceeded`] as the API's refusal.
    pub fn require(&self, request: &Request, upgrade_url: &str) -> Result<(), ApiError> {
        match self.exceeded(request, upgrade_url) {
            Some(limit) => Err(limit.into()),
            None => Ok(()),
        }
    }
}

/// Where owners choose a bigger plan: the console's billing page.
pub fn upgrade_url(public_base_url: &str) -> String {
    format!("{}/billing", public_base_url.trim_end_matches('/'))
}

/// Takes the organisation's entitlement lock until the end of the
/// transaction and reads the entitlement under it. `None` when there is no
/// such organisation.
pub async fn lock(
    tx: &mut PgConnection,
    organization_id: Uuid,
) -> Result<Option<Entitlement>, sqlx::Error> {
    let locked = sqlx::query_scalar!(
        "SELECT id FROM organizations WHERE id = $1 FOR NO KEY UPDATE",
        organization_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    if locked.is_none() {
        return Ok(None);
    }
    read(tx, organization_id).await.map(Some)
}

/// [`lock`] for the organisation of a cluster (the join endpoint knows the
/// cluster, not the organisation), with the organisation's id.
pub async fn lock_for_cluster(
    tx: &mut PgConnection,
    cluster_id: Uuid,
) -> Result<Option<(Uuid, Entitlement)>, sqlx::Error> {
    let organization = sqlx::query_scalar!(
        "SELECT organization_id FROM clusters WHERE id = $1",
        cluster_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    match organization {
        Some(organization) => Ok(lock(tx, organization).await?.map(|e| (organization, e))),
        None => Ok(None),
    }
}

/// The organisations that may be past a limit of their plan, by id: those
/// whose kept usage is above a limit of their plan (`organization_plan`:
/// that of the latest paid order, else the default), and those with a join under way, which only
/// [`read`] counts. One statement over every organisation's usage row,
/// instead of a read per organisation: what `sync-clusters` reads [`read`]
/// for, each cycle.
pub async fn maybe_past_their_plan(db: &mut PgConnection) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT u.organization_id AS "organization_id!"
           FROM organization_usage u
           CROSS JOIN LATERAL organization_plan(u.organization_id) chosen
           JOIN plans plan ON plan.id = chosen.plan_id
           WHERE u.clusters > 0
             AND (u.clusters > plan.max_clusters OR u.nodes > plan.max_nodes
                  OR u.cpu_milli_cores > plan.max_cpu_milli_cores
                  OR u.memory_mib > plan.max_memory_mib OR u.hostnames > plan.max_hostnames
                  OR u.databases > plan.max_databases
                  OR EXISTS (SELECT 1 FROM join_attempts a JOIN clusters c ON c.id = a.cluster_id
                             WHERE a.outcome = 'joining' AND a.node_id IS NULL
                               AND a.bootstrap_expires_at > now()
                               AND c.organization_id = u.organization_id AND c.deleted_at IS NULL))
           ORDER BY u.organization_id"#
    )
    .fetch_all(db)
    .await
}

/// The entitlement without the lock, for reading it: one statement.
///
/// The plan is that of the latest paid order, else the settings' default
/// (`organization_plan`, the one SQL function both this and
/// [`maybe_past_their_plan`] read it through). Usage: clusters not deleted (a failed or deleting one still holds its
/// place), their nodes not deleted plus joins that took a token's use and
/// have no node yet, the clusters' workload limits summed, and the
/// hostnames bound to them. All but the joins are the organisation's
/// `organization_usage` row, kept by triggers in the transaction of every
/// write that changes it (migration `20261208000001`), so the read costs the
/// same for an organisation with 5,000 clusters as for one with five; joins
/// under way are found by their expiry.
pub async fn read(
    db: &mut PgConnection,
    organization_id: Uuid,
) -> Result<Entitlement, sqlx::Error> {
    let r = sqlx::query!(
        r#"WITH plan AS (
               SELECT chosen.order_id, p.id, p.name, p.max_clusters, p.max_nodes,
                      p.max_cpu_milli_cores, p.max_memory_mib, p.max_hostnames, p.max_databases
               FROM organization_plan($1) chosen JOIN plans p ON p.id = chosen.plan_id),
           usage AS (
               SELECT clusters, nodes, cpu_milli_cores, memory_mib, hostnames, databases
               FROM organization_usage WHERE organization_id = $1)
           SELECT
               (SELECT order_id FROM plan) AS order_id,
               (SELECT id FROM plan) AS plan_id,
               (SELECT name FROM plan) AS plan_name,
               (SELECT max_clusters FROM plan) AS max_clusters,
               (SELECT max_nodes FROM plan) AS max_nodes,
               (SELECT max_cpu_milli_cores FROM plan) AS max_cpu,
               (SELECT max_memory_mib FROM plan) AS max_memory,
               (SELECT max_hostnames FROM plan) AS max_hostnames,
               (SELECT max_databases FROM plan) AS max_databases,
               coalesce((SELECT clusters FROM usage), 0) AS "clusters!",
               coalesce((SELECT cpu_milli_cores FROM usage), 0) AS "cpu!",
               coalesce((SELECT memory_mib FROM usage), 0) AS "memory!",
               coalesce((SELECT nodes FROM usage), 0)
               + (SELECT count(*) FROM join_attempts a JOIN clusters c ON c.id = a.cluster_id
                  WHERE a.outcome = 'joining' AND a.node_id IS NULL AND a.bootstrap_expires_at > now()
                    AND c.organization_id = $1 AND c.deleted_at IS NULL) AS "nodes!",
               coalesce((SELECT hostnames FROM usage), 0) AS "hostnames!",
               coalesce((SELECT databases FROM usage), 0) AS "databases!""#,
        organization_id
    )
    .fetch_one(db)
    .await?;
    let usage = Amounts {
        clusters: r.clusters,
        nodes: r.nodes,
        cpu_milli_cores: r.cpu,
        memory_mib: r.memory,
        hostnames: r.hostnames,
        databases: r.databases,
    };
    let plan = match (r.plan_id, r.plan_name) {
        (Some(id), Some(name)) => Some((
            PlanRef { id, name },
            Amounts {
                clusters: r.max_clusters.unwrap_or_default().into(),
                nodes: r.max_nodes.unwrap_or_default().into(),
                cpu_milli_cores: r.max_cpu.unwrap_or_default().into(),
                memory_mib: r.max_memory.unwrap_or_default().into(),
                hostnames: r.max_hostnames.unwrap_or_default().into(),
                databases: r.max_databases.unwrap_or_default().into(),
            },
        )),
        _ => None,
    };
    let source = match (&plan, r.order_id) {
        (None, _) => PlanSource::Unlimited,
        (Some(_), Some(_)) => PlanSource::Order,
        (Some(_), None) => PlanSource::Default,
    };
    let (plan, limits) = plan.unzip();
    Ok(Entitlement {
        source,
        plan,
        order_id: r.order_id,
        limits,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entitlement(limits: Amounts, usage: Amounts) -> Entitlement {
        Entitlement {
            source: PlanSource::Default,
            plan: Some(PlanRef {
                id: Uuid::nil(),
                name: "Free".into(),
            }),
            order_id: None,
            limits: Some(limits),
            usage,
        }
    }

    const LIMITS: Amounts = Amounts {
        clusters: 2,
        nodes: 3,
        cpu_milli_cores: 4000,
        memory_mib: 8192,
        hostnames: 1,
        databases: 2,
    };

    #[test]
    fn the_last_free_slot_is_taken_and_the_next_request_refused_with_the_numbers() {
        let mut usage = Amounts {
            clusters: 1,
            cpu_milli_cores: 1000,
            memory_mib: 1024,
            ..Amounts::default()
        };
        let create = Amounts {
            clusters: 1,
            cpu_milli_cores: 3000,
            memory_mib: 1024,
            ..Amounts::default()
        };
        assert!(entitlement(LIMITS, usage).exceeded(&create, "u").is_none());
        usage.clusters = 2;
        let refused = entitlement(LIMITS, usage).exceeded(&create, "https://p/billing");
        assert_eq!(
            refused,
            Some(PlanLimit {
                resource: "clusters".into(),
                plan: "Free".into(),
                limit: 2,
                usage: 2,
                requested: 1,
                excess: 1,
                upgrade_url: "https://p/billing".into(),
            })
        );
    }

    #[test]
    fn being_over_one_limit_refuses_only_requests_that_add_to_it() {
        let over = entitlement(
            LIMITS,
            Amounts {
                nodes: 5,
                ..Amounts::default()
            },
        );
        assert_eq!(over.over_limit(), ["nodes"]);
        let passed = over.passed("u");
        assert_eq!(passed.len(), 1);
        assert_eq!(
            (
                passed[0].resource.as_str(),
                passed[0].usage,
                passed[0].requested,
                passed[0].excess
            ),
            ("nodes", 5, 0, 2)
        );
        let hostname = Amounts {
            hostnames: 1,
            ..Amounts::default()
        };
        assert!(over.exceeded(&hostname, "u").is_none());
        let node = Amounts {
            nodes: 1,
            ..Amounts::default()
        };
        assert_eq!(over.exceeded(&node, "u").map(|l| l.excess), Some(3));
        assert_eq!(over.remaining().map(|r| r.nodes), Some(-2));
    }

    #[test]
    fn without_a_plan_nothing_is_refused() {
        let unlimited = Entitlement {
            source: PlanSource::Unlimited,
            plan: None,
            order_id: None,
            limits: None,
            usage: Amounts::default(),
        };
        let huge = Amounts {
            clusters: i64::from(i32::MAX),
            ..Amounts::default()
        };
        assert!(unlimited.exceeded(&huge, "u").is_none());
        assert!(unlimited.remaining().is_none());
    }
}
