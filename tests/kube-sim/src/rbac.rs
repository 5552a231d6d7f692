//! The RBAC authorizer of a host's API server, for identities other than its
//! admin (service-account tokens issued through the TokenRequest API), as
//! kube-apiserver evaluates it:
//!
//! - A request is allowed when a rule of a role bound to the user matches it
//!   (`plugin/pkg/auth/authorizer/rbac/rbac.go`): ClusterRoleBindings
//!   everywhere, RoleBindings (to a Role of their namespace or a ClusterRole)
//!   in their namespace only. Rules match as `pkg/apis/rbac/v1/
//!   evaluation_helpers.go` says: `*` or the verb, `*` or the API group, `*`,
//!   the resource (`pods/exec` with its subresource) or `*/<subresource>`,
//!   and no `resourceNames` or the object's name (so a rule with names never
//!   allows `create` or `list`). A ServiceAccount subject without a
//!   namespace means the binding's.
//! - Server-side apply that would create the object also needs `create`
//!   (`apiserver/pkg/endpoints/handlers/patch.go` authorizes the create it
//!   turns into).
//! - `pods/exec` over a WebSocket is authorized as `create`, as it is with
//!   `AuthorizePodWebsocketUpgradeCreatePermission` (on by default since 1.31).
//! - Writing a Role or ClusterRole needs `escalate` on it or every
//!   permission it grants; writing a RoleBinding or ClusterRoleBinding needs
//!   `bind` on the role it refers to or every permission that role grants,
//!   in the binding's namespace (`pkg/registry/rbac/escalation_check.go`,
//!   `rolebinding/policybased/storage.go`).
//!
//! Every decision about such an identity is kept ([`Access`]), so a test can
//! compare what a ServiceAccount was granted with what it used.

use serde_json::Value;

use crate::{registry, store::Store};

/// What a request asks to do.
#[derive(Debug, Clone)]
pub(crate) struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// One request of an identity the RBAC authorizer decided about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Access {
    pub user: String,
    pub verb: String,
    pub group: String,
    /// The resource, with `/<subresource>` when there is one.
    pub resource: String,
    /// Empty at the cluster scope.
    pub namespace: String,
    /// Empty for a collection.
    pub name: String,
    pub allowed: bool,
}

fn kind(api_version: &str, kind: &str) -> &'static registry::ResourceType {
    registry::find_kind(api_version, kind).expect("RBAC kinds are served")
}

fn strings(value: &Value, key: &str) -> Vec<String> {
    value[key]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `rule` allows the request (`RuleAllows`).
fn rule_allows(rule: &Value, request: &Attributes) -> bool {
    let has = |key: &str, wanted: &str| strings(rule, key).iter().any(|v| v == "*" || v == wanted);
    let combined = match request.subresource.as_str() {
        "" => request.resource.clone(),
        sub => format!("{}/{sub}", request.resource),
    };
    let resource_matches = strings(rule, "resources").iter().any(|r| {
        r == "*"
            || *r == combined
            || (!request.subresource.is_empty() && *r == format!("*/{}", request.subresource))
    });
    let names = strings(rule, "resourceNames");
    has("verbs", &request.verb)
        && has("apiGroups", &request.group)
        && resource_matches
        && (names.is_empty() || names.contains(&request.name))
}

/// Whether a binding's `subject` is the user (`appliesToUser`).
fn subject_is(subject: &Value, binding_namespace: &str, user: &str, groups: &[String]) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str() {
        Some("User") => name == user,
        Some("Group") => groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let namespace = subject["namespace"]
                .as_str()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(binding_namespace);
            user == format!("system:serviceaccount:{namespace}:{name}")
        }
        _ => false,
    }
}

/// The rules of the role a binding in `namespace` refers to, if it exists.
fn role_rules(store: &Store, role_ref: &Value, namespace: &str) -> Option<Vec<Value>> {
    let name = role_ref["name"].as_str().unwrap_or_default();
    let role = match role_ref["kind"].as_str() {
        Some("ClusterRole") => store.get(
            kind("rbac.authorization.k8s.io/v1", "ClusterRole"),
            "",
            name,
        ),
        Some("Role") => store.get(
            kind("rbac.authorization.k8s.io/v1", "Role"),
            namespace,
            name,
        ),
        _ => return None,
    };
    role.ok()
        .map(|role| role["rules"].as_array().cloned().unwrap_or_default())
}

/// The rules a binding grants: none when its role does not exist (yet).
fn referenced_rules(store: &Store, role_ref: &Value, namespace: &str) -> Vec<Value> {
    role_rules(store, role_ref, namespace).unwrap_or_default()
}

/// Whether RBAC allows the request.
pub(crate) fn allows(store: &Store, user: &str, groups: &[String], request: &Attributes) -> bool {
    let bindings = |api_kind: &str, namespace: Option<&str>| {
        store
            .list(
                kind("rbac.authorization.k8s.io/v1", api_kind),
                namespace,
                None,
                None,
            )
            .unwrap_or_default()
    };
    let mut bound = bindings("ClusterRoleBinding", None)
        .into_iter()
        .map(|binding| (binding, String::new()))
        .collect::<Vec<_>>();
    if !request.namespace.is_empty() {
        bound.extend(
            bindings("RoleBinding", Some(&request.namespace))
                .into_iter()
                .map(|binding| (binding, request.namespace.clone())),
        );
    }
    bound.iter().any(|(binding, namespace)| {
        binding["subjects"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| subject_is(s, namespace, user, groups)))
            && referenced_rules(store, &binding["roleRef"], namespace)
                .iter()
                .any(|rule| rule_allows(rule, request))
    })
}

/// The first permission in `rules` the user does not hold in `namespace`
/// (`ConfirmNoEscalation`), each rule taken apart verb by verb, group by
/// group, resource by resource and name by name; `*` is held only as `*`.
fn first_not_held(
    store: &Store,
    user: &str,
    groups: &[String],
    rules: &[Value],
    namespace: &str,
) -> Option<String> {
    for rule in rules {
        let names = match strings(rule, "resourceNames") {
            names if names.is_empty() => vec![String::new()],
            names => names,
        };
        for verb in strings(rule, "verbs") {
            for group in strings(rule, "apiGroups") {
                for combined in strings(rule, "resources") {
                    let (resource, subresource) = match combined.split_once('/') {
                        Some((r, s)) => (r.to_string(), s.to_string()),
                        None => (combined.clone(), String::new()),
                    };
                    for name in &names {
                        let atom = Attributes {
                            verb: verb.clone(),
                            group: group.clone(),
                            resource: resource.clone(),
                            subresource: subresource.clone(),
                            namespace: namespace.to_string(),
                            name: name.clone(),
                        };
                        if !allows(store, user, groups, &atom) {
                            return Some(format!(
                                "{{APIGroups:[\"{group}\"], Resources:[\"{combined}\"], Verbs:[\"{verb}\"]{}}}",
                                if name.is_empty() {
                                    String::new()
                                } else {
                                    format!(", ResourceNames:[\"{name}\"]")
                                }
                            ));
                        }
                    }
                }
            }
        }
    }
    None
}

/// Why writing `object` (a Role, ClusterRole, RoleBinding or
/// ClusterRoleBinding) would escalate the user's privileges, if it would.
/// The authorizer's answer about `escalate` or `bind` goes to `record`.
pub(crate) fn escalation(
    store: &Store,
    user: &str,
    groups: &[String],
    request: &Attributes,
    object: &Value,
    record: &mut dyn FnMut(&Attributes, bool),
) -> Option<String> {
    if request.group != "rbac.authorization.k8s.io"
        || !matches!(request.verb.as_str(), "create" | "update" | "patch")
    {
        return None;
    }
    let mut ask = |verb: &str, resource: &str, name: &str| {
        let asked = Attributes {
            verb: verb.into(),
            group: "rbac.authorization.k8s.io".into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: request.namespace.clone(),
            name: name.into(),
        };
        let allowed = allows(store, user, groups, &asked);
        record(&asked, allowed);
        allowed
    };
    let rules = match request.resource.as_str() {
        "roles" | "clusterroles" => {
            if ask("escalate", &request.resource, &request.name) {
                return None;
            }
            object["rules"].as_array().cloned().unwrap_or_default()
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = &object["roleRef"];
            let role_resource = match role_ref["kind"].as_str() {
                Some("Role") => "roles",
                _ => "clusterroles",
            };
            let role_name = role_ref["name"].as_str().unwrap_or_default();
            if ask("bind", role_resource, role_name) {
                return None;
            }
            // The rule resolver cannot read a role that does not exist.
            match role_rules(store, role_ref, &request.namespace) {
                Some(rules) => rules,
                None => {
                    return Some(format!(
                        "{role_resource}.rbac.authorization.k8s.io \"{role_name}\" not found"
                    ));
                }
            }
        }
        _ => return None,
    };
    first_not_held(store, user, groups, &rules, &request.namespace).map(|missing| {
        format!(
            "user \"{user}\" (groups={groups:?}) is attempting to grant RBAC permissions not currently held:\n{missing}"
        )
    })
}
