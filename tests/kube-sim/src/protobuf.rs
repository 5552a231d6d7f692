//! Request bodies in Kubernetes' protobuf encoding, turned into the JSON the
//! store keeps. kubectl's typed clients (`kubectl create namespace`,
//! `create deployment`, `create configmap`, `create secret`) send built-in
//! kinds as `application/vnd.kubernetes.protobuf`, and a real API server
//! accepts them. The simulator knows the messages of those kinds, field by
//! field (from `k8s.io/api`'s `generated.proto`); a field it does not know
//! is refused rather than dropped, so a gap shows as an error, never as an
//! object missing what the client sent.

use base64::Engine;
use serde_json::{Map, Value, json};

/// `k8s\0`: the prefix of every protobuf body.
const MAGIC: &[u8] = b"k8s\0";

/// What a field holds. Go's protobuf code writes every non-pointer field,
/// set or not, and its JSON omits them when empty: `String`, `Int` and `Bool`
/// at their zero value are left out, as `omitempty` leaves them out.
#[derive(Clone, Copy)]
enum Kind {
    String,
    Int,
    /// A pointer to an integer (`replicas`): zero is a value of its own.
    IntPtr,
    Bool,
    Message(&'static [Field]),
    /// `map<string, string>`.
    StringMap,
    /// `map<string, bytes>`.
    BytesMap,
    /// `map<string, Quantity>`.
    QuantityMap,
    /// A `metav1.Time`: RFC 3339 in JSON, `null` when zero.
    Time,
    /// An `intstr.IntOrString`.
    IntOrString,
}

struct Field {
    number: u64,
    name: &'static str,
    kind: Kind,
    repeated: bool,
}

const fn one(number: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        number,
        name,
        kind,
        repeated: false,
    }
}

const fn many(number: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        number,
        name,
        kind,
        repeated: true,
    }
}

use Kind::{Bool, Int, IntOrString, IntPtr, Message, QuantityMap, String as Str, StringMap, Time};

const OWNER_REFERENCE: &[Field] = &[
    one(1, "kind", Str),
    one(3, "name", Str),
    one(4, "uid", Str),
    one(5, "apiVersion", Str),
    one(6, "controller", Bool),
    one(7, "blockOwnerDeletion", Bool),
];

const OBJECT_META: &[Field] = &[
    one(1, "name", Str),
    one(2, "generateName", Str),
    one(3, "namespace", Str),
    one(4, "selfLink", Str),
    one(5, "uid", Str),
    one(6, "resourceVersion", Str),
    one(7, "generation", Int),
    one(8, "creationTimestamp", Time),
    one(9, "deletionTimestamp", Time),
    one(10, "deletionGracePeriodSeconds", IntPtr),
    one(11, "labels", StringMap),
    one(12, "annotations", StringMap),
    many(13, "ownerReferences", Message(OWNER_REFERENCE)),
    many(14, "finalizers", Str),
];

const LABEL_SELECTOR_REQUIREMENT: &[Field] = &[
    one(1, "key", Str),
    one(2, "operator", Str),
    many(3, "values", Str),
];

const LABEL_SELECTOR: &[Field] = &[
    one(1, "matchLabels", StringMap),
    many(2, "matchExpressions", Message(LABEL_SELECTOR_REQUIREMENT)),
];

const CONTAINER_PORT: &[Field] = &[
    one(1, "name", Str),
    one(2, "hostPort", Int),
    one(3, "containerPort", Int),
    one(4, "protocol", Str),
    one(5, "hostIP", Str),
];

const ENV_VAR: &[Field] = &[one(1, "name", Str), one(2, "value", Str)];

const RESOURCE_REQUIREMENTS: &[Field] = &[
    one(1, "limits", QuantityMap),
    one(2, "requests", QuantityMap),
];

const CONTAINER: &[Field] = &[
    one(1, "name", Str),
    one(2, "image", Str),
    many(3, "command", Str),
    many(4, "args", Str),
    one(5, "workingDir", Str),
    many(6, "ports", Message(CONTAINER_PORT)),
    many(7, "env", Message(ENV_VAR)),
    one(8, "resources", Message(RESOURCE_REQUIREMENTS)),
    one(13, "terminationMessagePath", Str),
    one(14, "imagePullPolicy", Str),
    one(16, "stdin", Bool),
    one(18, "tty", Bool),
    one(20, "terminationMessagePolicy", Str),
];

const POD_SPEC: &[Field] = &[
    many(2, "containers", Message(CONTAINER)),
    one(3, "restartPolicy", Str),
    one(4, "terminationGracePeriodSeconds", IntPtr),
    one(5, "activeDeadlineSeconds", IntPtr),
    one(6, "dnsPolicy", Str),
    one(7, "nodeSelector", StringMap),
    one(8, "serviceAccountName", Str),
    one(9, "serviceAccount", Str),
    one(10, "nodeName", Str),
    one(19, "schedulerName", Str),
    many(20, "initContainers", Message(CONTAINER)),
];

const POD_TEMPLATE_SPEC: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    one(2, "spec", Message(POD_SPEC)),
];

const ROLLING_UPDATE_DEPLOYMENT: &[Field] = &[
    one(1, "maxUnavailable", IntOrString),
    one(2, "maxSurge", IntOrString),
];

const DEPLOYMENT_STRATEGY: &[Field] = &[
    one(1, "type", Str),
    one(2, "rollingUpdate", Message(ROLLING_UPDATE_DEPLOYMENT)),
];

const DEPLOYMENT_SPEC: &[Field] = &[
    one(1, "replicas", IntPtr),
    one(2, "selector", Message(LABEL_SELECTOR)),
    one(3, "template", Message(POD_TEMPLATE_SPEC)),
    one(4, "strategy", Message(DEPLOYMENT_STRATEGY)),
    one(5, "minReadySeconds", Int),
    one(6, "revisionHistoryLimit", IntPtr),
    one(7, "paused", Bool),
    one(9, "progressDeadlineSeconds", IntPtr),
];

/// Status is the server's to write: whatever a client sends is read and dropped.
const STATUS: &[Field] = &[];

const NAMESPACE: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    one(2, "spec", Message(&[many(1, "finalizers", Str)])),
    one(3, "status", Message(STATUS)),
];

const CONFIG_MAP: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    one(2, "data", StringMap),
    one(3, "binaryData", Kind::BytesMap),
    one(4, "immutable", Bool),
];

const SECRET: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    one(2, "data", Kind::BytesMap),
    one(3, "type", Str),
    one(4, "stringData", StringMap),
    one(5, "immutable", Bool),
];

const DEPLOYMENT: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    one(2, "spec", Message(DEPLOYMENT_SPEC)),
    one(3, "status", Message(STATUS)),
];

fn schema(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    Some(match (api_version, kind) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("apps/v1", "Deployment") => DEPLOYMENT,
        _ => return None,
    })
}

/// One field as it sits on the wire.
enum Wire<'a> {
    Varint(u64),
    /// A fixed32 or fixed64: no field the simulator reads has one.
    Fixed,
    Bytes(&'a [u8]),
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.rest.split_first().ok_or("truncated varint")?;
            self.rest = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than ten bytes".into())
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        if len > self.rest.len() {
            return Err("truncated field".into());
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, String> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
                Wire::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        Ok(Some((key >> 3, wire)))
    }
}

fn fields(bytes: &[u8]) -> impl Iterator<Item = Result<(u64, Wire<'_>), String>> {
    let mut reader = Reader { rest: bytes };
    std::iter::from_fn(move || reader.next().transpose())
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".into())
}

fn bytes_of<'a>(wire: &Wire<'a>, what: &str) -> Result<&'a [u8], String> {
    match wire {
        Wire::Bytes(bytes) => Ok(bytes),
        _ => Err(format!("{what}: expected a length-delimited field")),
    }
}

/// A map entry: key 1, value 2.
fn entry(bytes: &[u8]) -> Result<(String, &[u8]), String> {
    let (mut key, mut value) = (String::new(), &[][..]);
    for field in fields(bytes) {
        match field? {
            (1, wire) => key = text(bytes_of(&wire, "map key")?)?,
            (2, wire) => value = bytes_of(&wire, "map value")?,
            (other, _) => return Err(format!("map entry field {other}")),
        }
    }
    Ok((key, value))
}

fn value(kind: Kind, wire: &Wire<'_>, path: &str) -> Result<Value, String> {
    Ok(match kind {
        Kind::String => json!(text(bytes_of(wire, path)?)?),
        Kind::Int | Kind::IntPtr => match wire {
            // int32 and int64 alike: two's complement in ten bytes when negative.
            Wire::Varint(v) => json!(*v as i64),
            _ => return Err(format!("{path}: expected a varint")),
        },
        Kind::Bool => match wire {
            Wire::Varint(v) => json!(*v != 0),
            _ => return Err(format!("{path}: expected a varint")),
        },
        Kind::Message(schema) => message(schema, bytes_of(wire, path)?, path)?,
        Kind::StringMap | Kind::BytesMap | Kind::QuantityMap => {
            unreachable!("maps are read entry by entry")
        }
        Kind::Time => {
            let mut seconds = 0i64;
            for field in fields(bytes_of(wire, path)?) {
                if let (1, Wire::Varint(v)) = field? {
                    seconds = v as i64;
                }
            }
            match chrono::DateTime::from_timestamp(seconds, 0) {
                Some(time) if seconds != 0 => {
                    json!(time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                }
                _ => Value::Null,
            }
        }
        Kind::IntOrString => {
            // type 1 (0 int, 1 string), intVal 2, strVal 3.
            let (mut kind, mut int, mut string) = (0, 0i64, String::new());
            for field in fields(bytes_of(wire, path)?) {
                match field? {
                    (1, Wire::Varint(v)) => kind = v,
                    (2, Wire::Varint(v)) => int = v as i64,
                    (3, wire) => string = text(bytes_of(&wire, path)?)?,
                    (other, _) => return Err(format!("{path}: IntOrString field {other}")),
                }
            }
            if kind == 1 { json!(string) } else { json!(int) }
        }
    })
}

fn message(schema: &[Field], bytes: &[u8], path: &str) -> Result<Value, String> {
    let mut object = Map::new();
    let dropped = schema.is_empty();
    for field in fields(bytes) {
        let (number, wire) = field?;
        if dropped {
            continue;
        }
        let Some(field) = schema.iter().find(|f| f.number == number) else {
            // A field left at its zero value says nothing; one with a value
            // the simulator would drop is refused.
            if matches!(wire, Wire::Varint(0)) || matches!(wire, Wire::Bytes(b) if b.is_empty()) {
                continue;
            }
            return Err(format!(
                "field {number} of {path} is not known to the simulator"
            ));
        };
        let path = format!("{path}.{}", field.name);
        match field.kind {
            Kind::StringMap | Kind::BytesMap | Kind::QuantityMap => {
                let (key, raw) = entry(bytes_of(&wire, &path)?)?;
                let value = match field.kind {
                    Kind::StringMap => json!(text(raw)?),
                    Kind::BytesMap => json!(base64::engine::general_purpose::STANDARD.encode(raw)),
                    // A Quantity is a message whose field 1 is its string form.
                    _ => {
                        let mut quantity = String::new();
                        for field in fields(raw) {
                            if let (1, wire) = field? {
                                quantity = text(bytes_of(&wire, &path)?)?;
                            }
                        }
                        json!(quantity)
                    }
                };
                object
                    .entry(field.name)
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .expect("a map")
                    .insert(key, value);
            }
            kind if field.repeated => {
                let item = value(kind, &wire, &path)?;
                object
                    .entry(field.name)
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                    .expect("a list")
                    .push(item);
            }
            kind => {
                let item = value(kind, &wire, &path)?;
                let zero = match kind {
                    Kind::String => item == json!(""),
                    Kind::Int => item == json!(0),
                    Kind::Bool => item == json!(false),
                    _ => item.is_null(),
                };
                if !zero {
                    object.insert(field.name.to_string(), item);
                }
            }
        }
    }
    Ok(Value::Object(object))
}

/// The JSON object a protobuf body encodes.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or("the body does not start with the protobuf prefix")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for field in fields(envelope) {
        match field? {
            (1, wire) => {
                for field in fields(bytes_of(&wire, "typeMeta")?) {
                    match field? {
                        (1, wire) => api_version = text(bytes_of(&wire, "apiVersion")?)?,
                        (2, wire) => kind = text(bytes_of(&wire, "kind")?)?,
                        _ => {}
                    }
                }
            }
            (2, wire) => raw = bytes_of(&wire, "raw")?,
            // contentEncoding, contentType: empty for plain protobuf.
            _ => {}
        }
    }
    let schema = schema(&api_version, &kind)
        .ok_or_else(|| format!("the simulator reads {api_version}/{kind} as JSON only"))?;
    let mut object = message(schema, raw, &kind)?;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn len_field(number: u64, bytes: &[u8], out: &mut Vec<u8>) {
        varint(number << 3 | 2, out);
        varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut type_meta = Vec::new();
        len_field(1, api_version.as_bytes(), &mut type_meta);
        len_field(2, kind.as_bytes(), &mut type_meta);
        let mut body = MAGIC.to_vec();
        len_field(1, &type_meta, &mut body);
        len_field(2, raw, &mut body);
        body
    }

    #[test]
    fn a_namespace_with_labels_decodes_to_its_json() {
        let mut label = Vec::new();
        len_field(1, b"team", &mut label);
        len_field(2, b"a", &mut label);
        let mut meta = Vec::new();
        len_field(1, b"demo", &mut meta);
        len_field(11, &label, &mut meta);
        len_field(8, &[], &mut meta); // a zero creationTimestamp
        let mut raw = Vec::new();
        len_field(1, &meta, &mut raw);
        len_field(2, &[], &mut raw);
        let object = decode(&envelope("v1", "Namespace", &raw)).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "demo", "labels": {"team": "a"}}, "spec": {}})
        );
    }

    #[test]
    fn unknown_fields_kinds_and_truncation_are_refused() {
        let mut meta = Vec::new();
        len_field(99, b"x", &mut meta);
        let mut raw = Vec::new();
        len_field(1, &meta, &mut raw);
        let err = decode(&envelope("v1", "Namespace", &raw)).unwrap_err();
        assert!(err.contains("field 99"), "{err}");
        assert!(decode(&envelope("v1", "Pod", &[])).is_err());
        // The same unknown field at its zero value is what Go writes for every
        // field it has: nothing to refuse.
        let mut meta = Vec::new();
        len_field(99, b"", &mut meta);
        varint(98 << 3, &mut meta);
        varint(0, &mut meta);
        let mut raw = Vec::new();
        len_field(1, &meta, &mut raw);
        assert!(decode(&envelope("v1", "Namespace", &raw)).is_ok());
        let mut truncated = envelope("v1", "Namespace", &raw);
        truncated.pop();
        assert!(decode(&truncated).is_err());
        assert!(decode(b"{}").is_err());
    }
}
