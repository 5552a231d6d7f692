//! The API's resources as the command line reads them: each struct names
//! the schema of the OpenAPI document (`docs/openapi.json`) it is read from,
//! and a test checks every field against that schema (its name, its JSON
//! type, whether it may be absent), so a change of the API that would break
//! the command line fails the build's tests instead of a user's command.
//! Only the fields the command line shows are read; `--output json` prints
//! the platform's answer whole.

use serde::Deserialize;

/// A struct read from a schema of the document.
#[cfg(test)]
pub trait Model {
    /// Its schema's name under `components.schemas`.
    const SCHEMA: &'static str;
    /// Each field's JSON name and Rust type, as written.
    fn fields() -> &'static [(&'static str, &'static str)];
}

macro_rules! model {
    ($(#[$meta:meta])* $name:ident = $schema:literal { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Deserialize)]
        #[allow(dead_code, non_snake_case)]
        pub struct $name {
            $(pub $field: $ty),*
        }

        #[cfg(test)]
        impl Model for $name {
            const SCHEMA: &'static str = $schema;
            fn fields() -> &'static [(&'static str, &'static str)] {
                &[$((stringify!($field), stringify!($ty))),*]
            }
        }
    };
}

model! {
    /// A cluster as reads answer it, with its nodes and health; the
    /// snapshot a create or an update answers (`Cluster`) lacks those two.
    Cluster = "ClusterWithHealth" {
        id: String,
        name: String,
        status: String,
        connection_status: String,
        kubernetes_version: String,
        api_endpoint: Option<String>,
        workload_cpu_limit_milli_cores: i64,
        workload_memory_limit_mib: i64,
        public_access_mode: String,
        managed_workload_ingress_enabled: bool,
        kubeconfig_available: bool,
        last_error_message: Option<String>,
        created_at: String,
        health: Option<String>,
        nodes: Option<NodeCounts>,
    }
}

model! {
    NodeCounts = "NodeCounts" {
        total: i64,
        ready: i64,
        not_ready: i64,
        offline: i64,
        pending: i64,
    }
}

model! {
    ClusterPage = "ClusterPage" {
        items: Vec<Cluster>,
        next_cursor: Option<String>,
    }
}

model! {
    StageRecord = "StageRecord" {
        stage: String,
        at: String,
    }
}

model! {
    FailureDetail = "FailureDetail" {
        code: String,
        retryable: bool,
        hint: String,
    }
}

model! {
    Operation = "Operation" {
        id: String,
        r#type: String,
        status: String,
        stage: String,
        error_message: Option<String>,
        error: Option<FailureDetail>,
        stages: Vec<StageRecord>,
        created_at: String,
    }
}

model! {
    OperationAccepted = "OperationAccepted" {
        operation: Operation,
        cluster: Cluster,
    }
}

model! {
    Node = "Node" {
        id: String,
        name: String,
        status: String,
        internal_ip: Option<String>,
        kubelet_version: Option<String>,
        last_seen_at: Option<String>,
        created_at: String,
    }
}

model! {
    NodePage = "NodePage" {
        items: Vec<Node>,
        next_cursor: Option<String>,
    }
}

model! {
    NodeEvent = "NodeEvent" {
        r#type: String,
        old_status: Option<String>,
        new_status: Option<String>,
        message: Option<String>,
        observed_at: String,
    }
}

model! {
    Timeline = "Timeline" {
        node: Node,
        events: Vec<NodeEvent>,
        events_omitted: i64,
        observed_seconds: i64,
        ready_seconds: i64,
    }
}

model! {
    Token = "Token" {
        id: String,
        display_prefix: String,
        status: String,
        max_uses: i64,
        use_count: i64,
        description: Option<String>,
        expires_at: String,
    }
}

model! {
    CreatedToken = "CreatedToken" {
        token: Token,
        join_command: String,
    }
}

model! {
    Connection = "Connection" {
        server: String,
        certificate_authority_data: String,
    }
}

model! {
    ExecCredentialStatus = "ExecCredentialStatus" {
        token: String,
        expirationTimestamp: String,
    }
}

model! {
    ExecCredential = "ExecCredential" {
        status: ExecCredentialStatus,
    }
}

model! {
    User = "User" {
        id: String,
        email: String,
        display_name: String,
        role: String,
        status: String,
        created_at: String,
    }
}

model! {
    Step = "Step" {
        step: String,
        status: String,
        detail: Option<String>,
        reported_at: String,
    }
}

model! {
    Attempt = "Attempt" {
        id: String,
        token_prefix: String,
        outcome: String,
        hostname: Option<String>,
        source_ip: Option<String>,
        node_id: Option<String>,
        reason: Option<String>,
        steps: Vec<Step>,
        created_at: String,
    }
}

model! {
    Binding = "Binding" {
        id: String,
        hostname: String,
        verified: bool,
        dns_management_status: String,
        tls_status: String,
        verification_record_name: Option<String>,
        verification_record_value: Option<String>,
        created_at: String,
    }
}

model! {
    Amounts = "Amounts" {
        clusters: i64,
        nodes: i64,
        cpu_milli_cores: i64,
        memory_mib: i64,
        hostnames: i64,
        databases: i64,
    }
}

model! {
    PlanRef = "PlanRef" {
        id: String,
        name: String,
    }
}

model! {
    Entitlement = "Entitlement" {
        source: String,
        plan: Option<PlanRef>,
        limits: Option<Amounts>,
        usage: Amounts,
    }
}

model! {
    Plan = "Plan" {
        id: String,
        name: String,
        max_clusters: i64,
        max_nodes: i64,
        max_cpu_milli_cores: i64,
        max_memory_mib: i64,
        price_minor_units: i64,
        currency: String,
        active: bool,
    }
}

model! {
    Order = "Order" {
        id: String,
        plan_name: String,
        status: String,
        amount: i64,
        currency: String,
        checkout_url: Option<String>,
        created_at: String,
    }
}

model! {
    Checkout = "Checkout" {
        order: Order,
        checkout_url: String,
    }
}

model! {
    Membership = "Membership" {
        id: String,
        name: String,
        personal: bool,
        role: String,
    }
}

model! {
    Member = "Member" {
        user_id: String,
        email: String,
        display_name: String,
        role: String,
        created_at: String,
    }
}

model! {
    Invitation = "Invitation" {
        id: String,
        email: String,
        role: String,
        status: String,
        expires_at: String,
    }
}

model! {
    InvitationMade = "InvitationMade" {
        invitation: Invitation,
        invitation_url: String,
    }
}

model! {
    JobRecord = "JobRecord" {
        id: String,
        cluster_id: String,
        r#type: String,
        status: String,
        attempt_count: i64,
        max_attempts: i64,
        last_error: Option<String>,
        created_at: String,
    }
}

model! {
    ApiKey = "ApiKey" {
        id: String,
        prefix: String,
        name: String,
    }
}

model! {
    DeviceCodeResponse = "DeviceCodeResponse" {
        device_code: String,
        user_code: String,
        verification_uri: String,
        verification_uri_complete: String,
        expires_in: i64,
        interval: i64,
    }
}

model! {
    DeviceTokenResponse = "DeviceTokenResponse" {
        access_token: String,
        expires_in: i64,
        scope: String,
    }
}

model! {
    OAuthError = "OAuthError" {
        error: String,
        error_description: String,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> serde_json::Value {
        let text = include_str!("../../docs/openapi.json");
        serde_json::from_str(text).expect("docs/openapi.json is JSON")
    }

    /// The JSON types a Rust type reads, or `None` for an object of a
    /// schema of its own.
    fn json_type(ty: &str) -> (&'static str, bool) {
        let (inner, optional) = match ty.strip_prefix("Option<") {
            Some(rest) => (rest.trim_end_matches('>').trim(), true),
            None => (ty, false),
        };
        let kind = match inner {
            "String" => "string",
            "i64" => "integer",
            "bool" => "boolean",
            t if t.starts_with("Vec<") => "array",
            _ => "object",
        };
        (kind, optional)
    }

    /// The schema a property refers to, through `$ref`, `allOf` and `oneOf`
    /// with `null`.
    fn resolve<'a>(
        doc: &'a serde_json::Value,
        schema: &'a serde_json::Value,
    ) -> (&'a serde_json::Value, bool) {
        if let Some(reference) = schema.get("$ref").and_then(|r| r.as_str()) {
            let name = reference.trim_start_matches("#/components/schemas/");
            return (&doc["components"]["schemas"][name], false);
        }
        for key in ["oneOf", "anyOf", "allOf"] {
            if let Some(options) = schema.get(key).and_then(|v| v.as_array()) {
                let nullable = options
                    .iter()
                    .any(|o| o.get("type").and_then(|t| t.as_str()) == Some("null"));
                if let Some(other) = options
                    .iter()
                    .find(|o| o.get("type").and_then(|t| t.as_str()) != Some("null"))
                {
                    let (resolved, inner_nullable) = resolve(doc, other);
                    return (resolved, nullable || inner_nullable);
                }
            }
        }
        (schema, false)
    }

    fn types_of(schema: &serde_json::Value) -> Vec<String> {
        match schema.get("type") {
            Some(serde_json::Value::String(t)) => vec![t.clone()],
            Some(serde_json::Value::Array(ts)) => ts
                .iter()
                .filter_map(|t| t.as_str().map(String::from))
                .collect(),
            _ if schema.get("properties").is_some() || schema.get("enum").is_some() => {
                vec![
                    if schema.get("enum").is_some() {
                        "string"
                    } else {
                        "object"
                    }
                    .into(),
                ]
            }
            _ => vec![],
        }
    }

    /// The properties of an object schema and those it is required to
    /// have, through the parts of an `allOf` (a flattened struct).
    fn flattened<'a>(
        doc: &'a serde_json::Value,
        schema: &'a serde_json::Value,
    ) -> (
        std::collections::HashMap<&'a str, &'a serde_json::Value>,
        Vec<&'a str>,
    ) {
        let mut properties = std::collections::HashMap::new();
        let mut required = Vec::new();
        let schema = match schema.get("$ref").and_then(|r| r.as_str()) {
            Some(reference) => {
                &doc["components"]["schemas"][reference.trim_start_matches("#/components/schemas/")]
            }
            None => schema,
        };
        if let Some(parts) = schema["allOf"].as_array() {
            for part in parts {
                let (more, needed) = flattened(doc, part);
                properties.extend(more);
                required.extend(needed);
            }
        }
        if let Some(own) = schema["properties"].as_object() {
            properties.extend(own.iter().map(|(k, v)| (k.as_str(), v)));
        }
        if let Some(needed) = schema["required"].as_array() {
            required.extend(needed.iter().filter_map(|v| v.as_str()));
        }
        (properties, required)
    }

    fn check<M: Model>(doc: &serde_json::Value) -> Vec<String> {
        let schema = &doc["components"]["schemas"][M::SCHEMA];
        if schema.is_null() {
            return vec![format!("{}: no such schema", M::SCHEMA)];
        }
        let (properties, required) = flattened(doc, schema);
        let mut problems = Vec::new();
        for (field, ty) in M::fields() {
            let name = field.trim_start_matches("r#");
            let Some(property) = properties.get(name).copied() else {
                problems.push(format!("{}.{name}: not in the document", M::SCHEMA));
                continue;
            };
            let (resolved, ref_nullable) = resolve(doc, property);
            let mut types = types_of(resolved);
            types.extend(types_of(property));
            let (expected, optional) = json_type(ty);
            let nullable = ref_nullable || types.iter().any(|t| t == "null");
            let may_be_absent = nullable || !required.contains(&name);
            if !types.is_empty() && !types.iter().any(|t| t == expected) {
                problems.push(format!(
                    "{}.{name}: {ty} reads {expected}, the document says {types:?}",
                    M::SCHEMA
                ));
            }
            if may_be_absent && !optional {
                problems.push(format!(
                    "{}.{name}: may be absent or null, read as {ty}",
                    M::SCHEMA
                ));
            }
        }
        problems
    }

    #[test]
    fn every_model_matches_its_schema_in_the_document() {
        let doc = document();
        let problems: Vec<String> = [
            check::<Cluster>(&doc),
            check::<NodeCounts>(&doc),
            check::<ClusterPage>(&doc),
            check::<StageRecord>(&doc),
            check::<FailureDetail>(&doc),
            check::<Operation>(&doc),
            check::<OperationAccepted>(&doc),
            check::<Node>(&doc),
            check::<NodePage>(&doc),
            check::<NodeEvent>(&doc),
            check::<Timeline>(&doc),
            check::<Token>(&doc),
            check::<CreatedToken>(&doc),
            check::<Connection>(&doc),
            check::<ExecCredentialStatus>(&doc),
            check::<ExecCredential>(&doc),
            check::<User>(&doc),
            check::<Step>(&doc),
            check::<Attempt>(&doc),
            check::<Binding>(&doc),
            check::<Amounts>(&doc),
            check::<PlanRef>(&doc),
            check::<Entitlement>(&doc),
            check::<Plan>(&doc),
            check::<Order>(&doc),
            check::<Checkout>(&doc),
            check::<Membership>(&doc),
            check::<Member>(&doc),
            check::<Invitation>(&doc),
            check::<InvitationMade>(&doc),
            check::<JobRecord>(&doc),
            check::<ApiKey>(&doc),
            check::<DeviceCodeResponse>(&doc),
            check::<DeviceTokenResponse>(&doc),
            check::<OAuthError>(&doc),
        ]
        .concat();
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn the_check_catches_a_field_the_document_lacks_or_types_otherwise() {
        model! { Wrong = "Cluster" { name: i64, nonexistent: String, api_endpoint: String } }
        let problems = check::<Wrong>(&document());
        assert_eq!(problems.len(), 3, "{problems:#?}");
    }
}
