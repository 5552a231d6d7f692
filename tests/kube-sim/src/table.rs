//! Server-side printing: a `GET` that accepts `as=Table` (kubectl's `get`
//! does) is answered with a `meta.k8s.io/v1` Table, the columns a real API
//! server prints for the kind (READY, UP-TO-DATE and AVAILABLE for a
//! Deployment, say), so `kubectl get` reads as it does against a cluster.

use serde_json::{Value, json};

use crate::registry::ResourceType;

/// Whether the `Accept` header asks for a Table.
pub fn wanted(accept: Option<&str>) -> bool {
    accept.is_some_and(|accept| {
        accept
            .split(',')
            .next()
            .is_some_and(|first| first.contains("as=Table"))
    })
}

fn text(object: &Value, pointer: &str) -> String {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn number(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// How long ago `created` (RFC 3339) was, as kubectl shows ages.
fn age(created: &str) -> String {
    let Ok(created) = chrono::DateTime::parse_from_rfc3339(created) else {
        return "<unknown>".into();
    };
    let seconds = (chrono::Utc::now() - created.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 3 => format!("{}m", s / 60),
        s if s < 86400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn condition(object: &Value, kind: &str) -> Option<String> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

/// The columns after NAME and before AGE, with each object's cells.
fn columns(kind: &str) -> &'static [(&'static str, &'static str)] {
    match kind {
        "Namespace" => &[("Status", "string")],
        "Deployment" | "StatefulSet" => &[
            ("Ready", "string"),
            ("Up-to-date", "integer"),
            ("Available", "integer"),
        ],
        "Node" => &[("Status", "string"), ("Version", "string")],
        "Pod" => &[("Status", "string")],
        "Secret" => &[("Type", "string")],
        "Service" => &[("Type", "string"), ("Cluster-IP", "string")],
        _ => &[],
    }
}

fn cells(kind: &str, object: &Value) -> Vec<Value> {
    match kind {
        "Namespace" => vec![json!(
            Some(text(object, "/status/phase"))
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "Active".into())
        )],
        "Deployment" | "StatefulSet" => {
            let wanted = object
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            vec![
                json!(format!(
                    "{}/{wanted}",
                    number(object, "/status/readyReplicas")
                )),
                json!(number(object, "/status/updatedReplicas")),
                json!(number(object, "/status/availableReplicas")),
            ]
        }
        "Node" => vec![
            json!(match condition(object, "Ready").as_deref() {
                Some("True") => "Ready",
                _ => "NotReady",
            }),
            json!(text(object, "/status/nodeInfo/kubeletVersion")),
        ],
        "Pod" => vec![json!(
            Some(text(object, "/status/phase"))
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "Pending".into())
        )],
        "Secret" => vec![json!(
            Some(text(object, "/type"))
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "Opaque".into())
        )],
        "Service" => vec![
            json!(
                Some(text(object, "/spec/type"))
                    .filter(|t| !t.is_empty())
                    .unwrap_or_else(|| "ClusterIP".into())
            ),
            json!(
                Some(text(object, "/spec/clusterIP"))
                    .filter(|t| !t.is_empty())
                    .unwrap_or_else(|| "<none>".into())
            ),
        ],
        _ => Vec::new(),
    }
}

/// `objects` as a Table of `resource`.
pub fn of(resource: &ResourceType, objects: &[Value], resource_version: &str) -> Value {
    let column = |name: &str, kind: &str| {
        json!({"name": name, "type": kind, "format": if name == "Name" { "name" } else { "" },
               "description": "", "priority": 0})
    };
    let mut definitions = vec![column("Name", "string")];
    definitions.extend(columns(resource.kind).iter().map(|(n, t)| column(n, t)));
    definitions.push(column("Age", "string"));
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let mut row = vec![json!(text(object, "/metadata/name"))];
            row.extend(cells(resource.kind, object));
            row.push(json!(age(&text(object, "/metadata/creationTimestamp"))));
            json!({
                "cells": row,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                           "metadata": object.get("metadata").cloned().unwrap_or(Value::Null)},
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry;

    #[test]
    fn a_deployment_row_shows_ready_of_wanted() {
        let deployments = registry::find_kind("apps/v1", "Deployment").unwrap();
        let now = chrono::Utc::now().to_rfc3339();
        let table = of(
            deployments,
            &[
                json!({"metadata": {"name": "hello", "creationTimestamp": now},
                     "spec": {"replicas": 3}, "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}),
            ],
            "7",
        );
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Ready", "Up-to-date", "Available", "Age"]);
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["hello", "2/3", 3, 2, "0s"])
        );
        assert!(wanted(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        )));
        assert!(!wanted(Some("application/json")));
    }
}
