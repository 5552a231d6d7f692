//! The object store: every resource as JSON, one resourceVersion counter, and
//! an event log that watches replay from.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::registry::{RESOURCES, ResourceType};

/// An error the API answers with a Kubernetes `Status`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn not_found(resource: &ResourceType, name: &str) -> Self {
        Self {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", qualified(resource)),
        }
    }
    pub fn conflict(message: String) -> Self {
        Self {
            code: 409,
            reason: "Conflict",
            message,
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: 422,
            reason: "Invalid",
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
        }
    }
    pub fn status(&self) -> Value {
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        })
    }
}

fn qualified(resource: &ResourceType) -> String {
    if resource.group.is_empty() {
        resource.plural.to_string()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    pub resource: usize,
    pub namespace: String,
    pub kind: &'static str,
    pub object: Value,
}

type Key = (usize, String, String);

pub struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    log: VecDeque<Event>,
    tx: broadcast::Sender<Event>,
}

const LOG_CAPACITY: usize = 20_000;

pub fn index_of(resource: &'static ResourceType) -> usize {
    RESOURCES
        .iter()
        .position(|r| std::ptr::eq(r, resource))
        .expect("registered resource")
}

fn meta(object: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    object
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&EMPTY)
}

fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

/// A Gateway's `spec.listeners` after a server-side apply of `patch` by
/// `manager`, and what that manager then owns. The list is a map keyed by
/// `name` (`x-kubernetes-list-type: map` in the Gateway API CRD), so, as
/// kube-apiserver's structured merge does, the applied listeners replace
/// those of the same name, the manager's listeners it no longer applies
/// are removed, and other managers' listeners stay. `None` when the patch
/// names no listeners.
fn merge_listeners(object: &Value, patch: &Value, manager: &str) -> Option<(Vec<Value>, Value)> {
    let applied = patch.pointer("/spec/listeners")?.as_array()?.clone();
    let key = |name: &str| format!("k:{{\"name\":\"{name}\"}}");
    let owned_before: Vec<String> = meta(object)
        .get("managedFields")
        .and_then(Value::as_array)
        .and_then(|m| m.iter().find(|m| m["manager"] == manager))
        .and_then(|m| m.pointer("/fieldsV1/f:spec/f:listeners"))
        .and_then(Value::as_object)
        .map(|keys| keys.keys().cloned().collect())
        .unwrap_or_default();
    let name_of = |l: &Value| l["name"].as_str().unwrap_or_default().to_string();
    let applied_names: Vec<String> = applied.iter().map(name_of).collect();
    let mut listeners: Vec<Value> = object
        .pointer("/spec/listeners")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|l| {
            let name = name_of(l);
            !applied_names.contains(&name) && !owned_before.contains(&key(&name))
        })
        .collect();
    listeners.extend(applied);
    let owned: serde_json::Map<String, Value> = applied_names
        .iter()
        .map(|name| (key(name), json!({})))
        .collect();
    Some((listeners, json!({"f:spec": {"f:listeners": owned}})))
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(patch) => {
            if !target.is_object() {
                *target = json!({});
            }
            let target = target.as_object_mut().expect("object");
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A label selector: `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
pub fn labels_match(selector: &str, object: &Value) -> Result<bool, ApiError> {
    let labels = meta(object).get("labels").and_then(Value::as_object);
    let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
    for term in split_terms(selector) {
        let term = term.trim();
        if term.is_empty() {
            continue;
        }
        let ok = if let Some((key, values)) = term.split_once(" notin ") {
            let values = set_values(values)?;
            label(key.trim()).is_none_or(|v| !values.contains(&v))
        } else if let Some((key, values)) = term.split_once(" in ") {
            let values = set_values(values)?;
            label(key.trim()).is_some_and(|v| values.contains(&v))
        } else if let Some((key, value)) = term.split_once("!=") {
            label(key.trim()) != Some(value.trim())
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            label(key.trim()) == Some(value.trim())
        } else if let Some(key) = term.strip_prefix('!') {
            label(key.trim()).is_none()
        } else {
            label(term).is_some()
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

fn split_terms(selector: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    terms
}

fn set_values(raw: &str) -> Result<Vec<&str>, ApiError> {
    let inner = raw
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: {raw:?}")))?;
    Ok(inner.split(',').map(str::trim).collect())
}

/// A field selector on `metadata.name`, `metadata.namespace` or `status.phase`.
pub fn fields_match(selector: &str, object: &Value) -> Result<bool, ApiError> {
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (field, negate, value) = if let Some((f, v)) = term.split_once("!=") {
            (f, true, v)
        } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            (f, false, v)
        } else {
            return Err(ApiError::bad_request(format!(
                "invalid field selector {term:?}"
            )));
        };
        let actual = match field.trim() {
            "metadata.name" => meta(object).get("name").and_then(Value::as_str),
            "metadata.namespace" => meta(object).get("namespace").and_then(Value::as_str),
            "status.phase" => object.pointer("/status/phase").and_then(Value::as_str),
            "spec.nodeName" => object.pointer("/spec/nodeName").and_then(Value::as_str),
            other => {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {other}"
                )));
            }
        };
        if (actual == Some(value.trim())) == negate {
            return Ok(false);
        }
    }
    Ok(true)
}

impl Store {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(4096);
        Self {
            rv: 1,
            objects: BTreeMap::new(),
            log: VecDeque::new(),
            tx,
        }
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }

    /// Events after `rv`, or `None` when the log no longer reaches back that far.
    pub fn events_since(&self, rv: u64) -> Option<Vec<Event>> {
        if let Some(oldest) = self.log.front()
            && oldest.rv > rv + 1
            && self.log.len() == LOG_CAPACITY
        {
            return None;
        }
        Some(self.log.iter().filter(|e| e.rv > rv).cloned().collect())
    }

    fn record(&mut self, resource: usize, namespace: &str, kind: &'static str, object: Value) {
        let event = Event {
            rv: self.rv,
            resource,
            namespace: namespace.to_string(),
            kind,
            object,
        };
        if self.log.len() == LOG_CAPACITY {
            self.log.pop_front();
        }
        self.log.push_back(event.clone());
        let _ = self.tx.send(event);
    }

    pub fn get(
        &self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.objects
            .get(&(index_of(resource), namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource, name))
    }

    pub fn list(
        &self,
        resource: &'static ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Vec<Value>, ApiError> {
        let index = index_of(resource);
        let mut items = Vec::new();
        for ((r, ns, _), object) in &self.objects {
            if *r != index || namespace.is_some_and(|n| n != ns) {
                continue;
            }
            if let Some(selector) = label_selector
                && !labels_match(selector, object)?
            {
                continue;
            }
            if let Some(selector) = field_selector
                && !fields_match(selector, object)?
            {
                continue;
            }
            items.push(object.clone());
        }
        Ok(items)
    }

    fn check_namespace(
        &self,
        resource: &'static ResourceType,
        namespace: &str,
    ) -> Result<(), ApiError> {
        if !resource.namespaced {
            return Ok(());
        }
        let ns = self
            .get(
                crate::registry::find("", "v1", "namespaces").expect("namespaces"),
                "",
                namespace,
            )
            .map_err(|_| ApiError {
                code: 404,
                reason: "NotFound",
                message: format!("namespaces \"{namespace}\" not found"),
            })?;
        if meta(&ns).contains_key("deletionTimestamp") {
            return Err(ApiError {
                code: 403,
                reason: "Forbidden",
                message: format!(
                    "{} is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    resource.plural
                ),
            });
        }
        Ok(())
    }

    pub fn create(
        &mut self,
        resource: &'static ResourceType,
        namespace: &str,
        mut object: Value,
    ) -> Result<Value, ApiError> {
        if !object.is_object() {
            return Err(ApiError::bad_request("the body must be an object"));
        }
        self.check_namespace(resource, namespace)?;
        let name = match meta(&object).get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => match meta(&object).get("generateName").and_then(Value::as_str) {
                Some(prefix) => format!(
                    "{prefix}{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..5]
                ),
                None => {
                    return Err(ApiError::invalid(
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        let key = (index_of(resource), namespace.to_string(), name.clone());
        if self.objects.contains_key(&key) {
            return Err(ApiError {
                code: 409,
                reason: "AlreadyExists",
                message: format!("{} \"{name}\" already exists", qualified(resource)),
            });
        }
        self.rv += 1;
        object["apiVersion"] = json!(resource.api_version());
        object["kind"] = json!(resource.kind);
        let rv = self.rv;
        let m = meta_mut(&mut object);
        m.insert("name".into(), json!(name));
        if resource.namespaced {
            m.insert("namespace".into(), json!(namespace));
        } else {
            m.remove("namespace");
        }
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.insert("creationTimestamp".into(), json!(now()));
        m.insert("generation".into(), json!(1));
        m.remove("deletionTimestamp");
        if resource.kind == "Namespace" && object.pointer("/status/phase").is_none() {
            object["status"] = json!({"phase": "Active"});
        }
        // kube-apiserver allocates a Service's cluster IP as it creates it,
        // from its service CIDR (k3s's 10.43.0.0/16), unless it is headless
        // ("None") or an ExternalName.
        if resource.kind == "Service"
            && object.pointer("/spec/type").and_then(Value::as_str) != Some("ExternalName")
            && object
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            let ip = format!("10.43.{}.{}", (rv >> 8) & 0xff, rv & 0xff);
            if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("clusterIP".into(), json!(ip));
                spec.insert("clusterIPs".into(), json!([ip]));
            }
        }
        self.objects.insert(key, object.clone());
        self.record(index_of(resource), namespace, "ADDED", object.clone());
        Ok(object)
    }

    /// Stores a new version of an existing object (rv, generation, finalizers).
    fn write(
        &mut self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
        mut object: Value,
    ) -> Value {
        let key = (index_of(resource), namespace.to_string(), name.to_string());
        let old = self.objects.get(&key).cloned().unwrap_or(Value::Null);
        self.rv += 1;
        let rv = self.rv;
        let spec_changed = old.get("spec") != object.get("spec");
        let generation = meta(&old)
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let m = meta_mut(&mut object);
        for field in ["uid", "creationTimestamp", "deletionTimestamp"] {
            match meta(&old).get(field) {
                Some(v) => {
                    m.insert(field.into(), v.clone());
                }
                None => {
                    m.remove(field);
                }
            }
        }
        m.insert("name".into(), json!(name));
        if resource.namespaced {
            m.insert("namespace".into(), json!(namespace));
        }
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.insert(
            "generation".into(),
            json!(if spec_changed {
                generation + 1
            } else {
                generation
            }),
        );
        object["apiVersion"] = json!(resource.api_version());
        object["kind"] = json!(resource.kind);
        let finalizers_empty = meta(&object)
            .get("finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if meta(&object).contains_key("deletionTimestamp")
            && finalizers_empty
            && resource.kind != "Namespace"
        {
            self.objects.remove(&key);
            self.record(index_of(resource), namespace, "DELETED", object.clone());
        } else {
            self.objects.insert(key, object.clone());
            self.record(index_of(resource), namespace, "MODIFIED", object.clone());
        }
        object
    }

    pub fn replace(
        &mut self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
        mut object: Value,
        status_only: bool,
    ) -> Result<Value, ApiError> {
        let old = self.get(resource, namespace, name)?;
        if let Some(expected) = meta(&object).get("resourceVersion").and_then(Value::as_str)
            && Some(expected) != meta(&old).get("resourceVersion").and_then(Value::as_str)
        {
            return Err(ApiError::conflict(format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(resource)
            )));
        }
        if let Some(body_name) = meta(&object).get("name").and_then(Value::as_str)
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if status_only {
            let mut updated = old.clone();
            updated["status"] = object.get("status").cloned().unwrap_or(Value::Null);
            object = updated;
        } else if let Some(status) = old.get("status") {
            object["status"] = status.clone();
        }
        Ok(self.write(resource, namespace, name, object))
    }

    pub fn merge_patch(
        &mut self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
        patch: &Value,
        status_only: bool,
    ) -> Result<Value, ApiError> {
        let mut object = self.get(resource, namespace, name)?;
        if status_only {
            if let Some(status) = patch.get("status") {
                merge(&mut object["status"], status);
            }
        } else {
            let mut patch = patch.clone();
            if let Some(p) = patch.as_object_mut() {
                p.remove("status");
            }
            merge(&mut object, &patch);
        }
        Ok(self.write(resource, namespace, name, object))
    }

    /// Server-side apply: creates the object from the patch, or merges the
    /// patch into it (maps merge, lists are replaced), recording the manager.
    pub fn apply(
        &mut self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
        patch: &Value,
        manager: &str,
        status_only: bool,
    ) -> Result<Value, ApiError> {
        if let Some(body_name) = patch.pointer("/metadata/name").and_then(Value::as_str)
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let managed = json!([{"manager": manager, "operation": "Apply", "apiVersion": resource.api_version(),
                              "time": now(), "fieldsType": "FieldsV1", "fieldsV1": {}}]);
        match self.get(resource, namespace, name) {
            Err(_) if !status_only => {
                let mut object = patch.clone();
                let mut managed = managed;
                if resource.kind == "Gateway"
                    && let Some((_, owned)) = merge_listeners(&json!({}), patch, manager)
                {
                    managed[0]["fieldsV1"] = owned;
                }
                meta_mut(&mut object).insert("name".into(), json!(name));
                meta_mut(&mut object).insert("managedFields".into(), managed);
                self.create(resource, namespace, object)
            }
            Err(err) => Err(err),
            Ok(mut object) => {
                let mut patch = patch.clone();
                if let Some(p) = patch.as_object_mut() {
                    p.remove("apiVersion");
                    p.remove("kind");
                    if let Some(m) = p.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove("resourceVersion");
                        m.remove("managedFields");
                    }
                    if status_only {
                        p.retain(|k, _| k == "status");
                    } else {
                        p.remove("status");
                    }
                }
                let listeners = (resource.kind == "Gateway")
                    .then(|| merge_listeners(&object, &patch, manager))
                    .flatten();
                merge(&mut object, &patch);
                let mut managers: Vec<Value> = meta(&object)
                    .get("managedFields")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                managers.retain(|m| m["manager"] != manager);
                let mut managed = managed.clone();
                if let Some((listeners, owned)) = listeners {
                    object["spec"]["listeners"] = Value::Array(listeners);
                    managed[0]["fieldsV1"] = owned;
                }
                managers.extend(managed.as_array().cloned().unwrap_or_default());
                meta_mut(&mut object).insert("managedFields".into(), Value::Array(managers));
                Ok(self.write(resource, namespace, name, object))
            }
        }
    }

    /// Deletes, or marks for deletion while finalizers remain. A namespace
    /// becomes `Terminating`; its contents are removed by the namespace controller.
    pub fn delete(
        &mut self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let mut object = self.get(resource, namespace, name)?;
        let has_finalizers = meta(&object)
            .get("finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if resource.kind == "Namespace" || has_finalizers {
            if meta(&object).contains_key("deletionTimestamp") {
                return Ok(object);
            }
            meta_mut(&mut object).insert("deletionTimestamp".into(), json!(now()));
            if resource.kind == "Namespace" {
                object["status"] = json!({"phase": "Terminating"});
            }
            let key = (index_of(resource), namespace.to_string(), name.to_string());
            self.rv += 1;
            let rv = self.rv;
            meta_mut(&mut object).insert("resourceVersion".into(), json!(rv.to_string()));
            self.objects.insert(key, object.clone());
            self.record(index_of(resource), namespace, "MODIFIED", object.clone());
            return Ok(object);
        }
        Ok(self.remove(resource, namespace, name).unwrap_or(object))
    }

    /// Removes an object outright.
    pub fn remove(
        &mut self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let key = (index_of(resource), namespace.to_string(), name.to_string());
        let mut object = self.objects.remove(&key)?;
        self.rv += 1;
        let rv = self.rv;
        meta_mut(&mut object).insert("resourceVersion".into(), json!(rv.to_string()));
        self.record(index_of(resource), namespace, "DELETED", object.clone());
        Some(object)
    }

    /// Every namespaced object in `namespace`, for the namespace controller.
    pub fn contents_of(&self, namespace: &str) -> Vec<(&'static ResourceType, String)> {
        self.objects
            .keys()
            .filter(|(r, ns, _)| ns == namespace && RESOURCES[*r].namespaced)
            .map(|(r, _, name)| (&RESOURCES[*r], name.clone()))
            .collect()
    }
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

/// A text value of a Secret's `data` (base64 decoded), if it holds one.
pub(crate) fn secret_text(secret: &Value, key: &str) -> Option<String> {
    use base64::Engine;
    let encoded = secret.get("data")?.get(key)?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors_cover_equality_sets_and_existence() {
        let object = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        for (selector, expected) in [
            ("app=web", true),
            ("app==web,tier=front", true),
            ("app!=web", false),
            ("tier in (front,back)", true),
            ("tier notin (front)", false),
            ("app", true),
            ("!app", false),
            ("missing", false),
            ("!missing", true),
        ] {
            assert_eq!(
                labels_match(selector, &object).unwrap(),
                expected,
                "{selector}"
            );
        }
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge(&mut target, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(target, json!({"a": "z", "c": {"d": "e"}}));
    }
}
