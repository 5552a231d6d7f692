//! The OpenAPI document, assembled from each HTTP function's own annotated types.

use utoipa::openapi::{InfoBuilder, OpenApi};

/// Where a function's part of the document names the problem codes its
/// operations answer ([`answering`]).
const CODES_EXTENSION: &str = "x-problem-codes";

/// `part` (a function's part of the document) naming the problem `codes`
/// of its own refusals; those of the platform and the shared modules are
/// given to [`document`].
pub fn answering(mut part: OpenApi, codes: &[&str]) -> OpenApi {
    let mut extensions = part.extensions.take().unwrap_or_default();
    extensions.insert(CODES_EXTENSION.into(), serde_json::json!(codes));
    part.extensions = Some(extensions);
    part
}

/// Merges the functions' documents under one title; `shared_codes` are the
/// problem codes the shared modules answer with, which any function may.
pub fn document(
    parts: impl IntoIterator<Item = OpenApi>,
    shared_codes: impl IntoIterator<Item = &'static str>,
) -> OpenApi {
    let mut codes: std::collections::BTreeSet<String> =
        shared_codes.into_iter().map(String::from).collect();
    let mut parts = parts.into_iter().map(|mut part| {
        if let Some(extensions) = part.extensions.as_mut()
            && let Some(named) = extensions.remove(CODES_EXTENSION)
        {
            codes.extend(
                serde_json::from_value::<Vec<String>>(named).expect("codes are a list of text"),
            );
        }
        part
    });
    let mut doc = parts
        .next()
        .unwrap_or_else(|| OpenApi::new(InfoBuilder::new().build(), utoipa::openapi::Paths::new()));
    for part in parts {
        doc.merge(part);
    }
    doc.info = InfoBuilder::new()
        .title("KubeBYON API")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "Bring-your-own-node Kubernetes platform. Errors are application/problem+json with a stable `code`.",
        ))
        .build();
    merge_flattened_objects(&mut doc);
    document_idempotency_key(&mut doc);
    document_database_unavailable(&mut doc);
    document_rejected_input(&mut doc);
    unique_operation_ids(&mut doc);
    document_problem_codes(&mut doc, codes);
    doc
}

/// The problem codes the API answers, as the `ProblemCode` enum, which a
/// problem's `code` is: a client (the console's catalogs, the command
/// line) can know each, and an answer with another breaks the document.
fn document_problem_codes(doc: &mut OpenApi, codes: std::collections::BTreeSet<String>) {
    use utoipa::openapi::{
        Ref, RefOr, Type,
        schema::{ObjectBuilder, Schema},
    };
    let components = doc.components.get_or_insert_with(Default::default);
    components.schemas.insert(
        "ProblemCode".into(),
        RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(
                    "A problem's stable code: each names one reason the API refuses or fails a request.",
                ))
                .enum_values(Some(codes))
                .build(),
        )),
    );
    if let Some(RefOr::T(Schema::Object(problem))) = components.schemas.get_mut("Problem") {
        problem.properties.insert(
            "code".into(),
            RefOr::Ref(Ref::from_schema_name("ProblemCode")),
        );
    }
}

/// Operation ids are the handlers' names, which repeat across functions
/// (`list`, `create`): OpenAPI wants each unique (generated clients name
/// methods after them). A repeated one becomes the method and the path,
/// `get_admin_orders`, `post_clusters_by_cluster_id_tokens`.
fn unique_operation_ids(doc: &mut OpenApi) {
    use std::collections::HashMap;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for item in doc.paths.paths.values() {
        for op in [&item.get, &item.put, &item.post, &item.delete, &item.patch]
            .into_iter()
            .flatten()
        {
            if let Some(id) = &op.operation_id {
                *seen.entry(id.clone()).or_default() += 1;
            }
        }
    }
    for (path, item) in doc.paths.paths.iter_mut() {
        let name: Vec<String> = path
            .trim_start_matches("/api/console/")
            .trim_start_matches("/api/")
            .trim_start_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .map(
                |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    Some(param) => format!("by_{param}"),
                    None => s.replace(['-', '.'], "_"),
                },
            )
            .collect();
        for (method, op) in [
            ("get", &mut item.get),
            ("put", &mut item.put),
            ("post", &mut item.post),
            ("delete", &mut item.delete),
            ("patch", &mut item.patch),
        ] {
            let Some(op) = op.as_mut() else { continue };
            if op
                .operation_id
                .as_ref()
                .is_some_and(|id| seen.get(id).copied().unwrap_or(0) > 1)
            {
                op.operation_id = Some(format!("{method}_{}", name.join("_")));
            }
        }
    }
}

/// A struct that `#[serde(flatten)]`s a closed one (`deny_unknown_fields`)
/// comes out of utoipa as `allOf` the two, in which the closed part forbids
/// the other's properties: no value validates. serde reads and writes the
/// pair as one object with the properties of both, so that object is what
/// the document says, closed when a part is.
fn merge_flattened_objects(doc: &mut OpenApi) {
    use utoipa::openapi::{
        RefOr,
        schema::{AdditionalProperties, Object, Schema},
    };
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    let named = components.schemas.clone();
    let object = |item: &RefOr<Schema>| -> Option<Object> {
        let schema = match item {
            RefOr::Ref(reference) => named.get(
                reference
                    .ref_location
                    .strip_prefix("#/components/schemas/")?,
            )?,
            schema => schema,
        };
        match schema {
            RefOr::T(Schema::Object(object)) => Some(object.clone()),
            _ => None,
        }
    };
    let closed = |object: &Object| {
        matches!(
            object.additional_properties.as_deref(),
            Some(AdditionalProperties::FreeForm(false))
        )
    };
    for schema in components.schemas.values_mut() {
        let RefOr::T(Schema::AllOf(all_of)) = schema else {
            continue;
        };
        let Some(parts) = all_of.items.iter().map(object).collect::<Option<Vec<_>>>() else {
            continue;
        };
        if !parts.iter().any(closed) {
            continue;
        }
        if let Some(merged) = closed_object(parts, all_of.description.clone()) {
            *schema = RefOr::T(Schema::Object(merged));
        }
    }
}

/// The objects `parts` as one: the first with the properties and required
/// fields of the others, closed (no other property allowed).
fn closed_object(
    parts: impl IntoIterator<Item = utoipa::openapi::schema::Object>,
    description: Option<String>,
) -> Option<utoipa::openapi::schema::Object> {
    let mut parts = parts.into_iter();
    let mut merged = parts.next()?;
    for part in parts {
        merged.properties.extend(part.properties);
        merged.required.extend(part.required);
    }
    merged.additional_properties = Some(Box::new(
        utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
    ));
    merged.description = description;
    Some(merged)
}

/// One closed object with the properties of every part: the schema of a
/// struct that `#[serde(flatten)]`s them all and refuses unknown fields,
/// which utoipa would write as an open `allOf`. Each part is an inline
/// object (a derived `PartialSchema::schema()`).
pub fn closed_union(
    description: &str,
    parts: impl IntoIterator<Item = utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>>,
) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::{
        RefOr,
        schema::{Object, Schema},
    };
    let objects = parts.into_iter().map(|part| match part {
        RefOr::T(Schema::Object(object)) => object,
        other => panic!(
            "closed_union joins inline objects, not {}",
            serde_json::to_string(&other).unwrap_or_default()
        ),
    });
    let merged = closed_object(objects, Some(description.into())).unwrap_or_else(Object::new);
    RefOr::T(Schema::Object(merged))
}

/// The answers `extract` gives before an `/api/` handler runs: a body that
/// is not JSON of the operation's shape (`AppJson`), a path or query
/// parameter that does not parse (`AppPath`, `AppQuery`); and the 422 of the
/// rules handlers check on what was read.
fn document_rejected_input(doc: &mut OpenApi) {
    use utoipa::openapi::path::ParameterIn;
    // The join script's routes read their own input and answer it in their
    // own shape; the API's read theirs through `extract`.
    for operation in api_operations(doc) {
        let takes = |place: ParameterIn| {
            operation
                .parameters
                .iter()
                .flatten()
                .any(|p| p.parameter_in == place)
        };
        let (path, query) = (takes(ParameterIn::Path), takes(ParameterIn::Query));
        // A form (the device grant's, as RFC 8628 has it) is read by its
        // handler, which documents its own 400 and 422.
        let form = operation.request_body.as_ref().is_some_and(|body| {
            body.content
                .keys()
                .all(|kind| kind == "application/x-www-form-urlencoded")
        });
        if operation.request_body.is_some() {
            add_answer(
                operation,
                "413",
                "payload_too_large",
                "The body is larger than the platform reads",
            );
        }
        if form {
            add_answer(
                operation,
                "415",
                "unsupported_media_type",
                "The body is not sent as `application/x-www-form-urlencoded`",
            );
        } else if operation.request_body.is_some() {
            add_answer(operation, "400", "malformed_json", "The body is not JSON");
            add_answer(
                operation,
                "400",
                "invalid_body",
                "The body is not of the documented shape",
            );
            add_answer(
                operation,
                "415",
                "unsupported_media_type",
                "The body is not sent as `application/json`",
            );
        }
        if path {
            add_answer(
                operation,
                "400",
                "invalid_path",
                "A path parameter does not parse",
            );
        }
        if query {
            add_answer(
                operation,
                "400",
                "invalid_query",
                "A query parameter does not parse",
            );
        }
        if query || (operation.request_body.is_some() && !form) {
            add_answer(
                operation,
                "422",
                "validation_failed",
                "A field breaks a rule; `errors` names each",
            );
        }
    }
}

/// Every console POST takes `Idempotency-Key` (`http::idempotency`): the
/// header, and the answers it can bring, on each of them.
fn document_idempotency_key(doc: &mut OpenApi) {
    use utoipa::openapi::{
        Required,
        path::{ParameterBuilder, ParameterIn},
        schema::{ObjectBuilder, Type},
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        let Some(operation) = item
            .post
            .as_mut()
            .filter(|_| path.starts_with("/api/console/"))
        else {
            continue;
        };
        operation.parameters.get_or_insert_with(Vec::new).push(
            ParameterBuilder::new()
                .name("Idempotency-Key")
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "Makes a retry safe: the first answer to this key is replayed for 24 hours \
                     to the same request (method, path, body), with the key echoed. Kept \
                     answers are sealed at rest; without a sealing key, an answer that \
                     issued a secret is not kept (a retry gets 409 `idempotency_answer_not_kept`).",
                ))
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .max_length(Some(255))
                        // Printable ASCII, not only spaces.
                        .pattern(Some("^[ -~]*[!-~][ -~]*$")),
                ))
                .build(),
        );
        add_answer(
            operation,
            "400",
            "invalid_idempotency_key",
            "The Idempotency-Key is not 1–255 printable ASCII characters, or only spaces",
        );
        add_answer(
            operation,
            "409",
            "idempotency_request_in_flight",
            "A request with this Idempotency-Key is still being processed",
        );
        add_answer(
            operation,
            "409",
            "idempotency_answer_not_kept",
            "The first answer to this Idempotency-Key issued a secret that was not kept \
             (no `KUBEBYON_SETTINGS_KEY` to seal it); the request is not run again",
        );
        add_answer(
            operation,
            "422",
            "idempotency_key_reused",
            "This Idempotency-Key was sent with another request",
        );
    }
}

/// Every `/api/` operation reads the database: while it cannot be reached
/// the answer is 503 `database_unavailable` with `Retry-After`.
fn document_database_unavailable(doc: &mut OpenApi) {
    for operation in api_operations(doc) {
        add_answer(
            operation,
            "503",
            "database_unavailable",
            "The database cannot be reached; nothing was done, try again after `Retry-After`",
        );
    }
}

/// Every operation under `/api/`.
fn api_operations(
    doc: &mut OpenApi,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    doc.paths
        .paths
        .iter_mut()
        .filter(|(path, _)| path.starts_with("/api/"))
        .flat_map(|(_, item)| {
            [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
        })
}

/// Documents one more problem+json answer of `operation`: a new response, or
/// a reason added to the one already there for that status.
fn add_answer(
    operation: &mut utoipa::openapi::path::Operation,
    status: &str,
    code: &str,
    why: &str,
) {
    use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
    let responses = &mut operation.responses.responses;
    match responses.get_mut(status) {
        Some(RefOr::T(response)) => {
            response.description = format!("{}; {why} (`{code}`)", response.description);
        }
        Some(RefOr::Ref(_)) => {}
        None => {
            responses.insert(
                status.to_string(),
                RefOr::T(
                    ResponseBuilder::new()
                        .description(format!("{why} (`{code}`)"))
                        .content(
                            "application/problem+json",
                            ContentBuilder::new()
                                .schema(Some(Ref::from_schema_name("Problem")))
                                .build(),
                        )
                        .build(),
                ),
            );
        }
    }
}

/// The schema of an email address field: the ASCII forms
/// [`crate::domain::EmailAddress::parse`] takes (it also takes
/// internationalised domains, which no pattern here describes).
pub fn email_address() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::{Type, schema::ObjectBuilder};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .max_length(Some(crate::domain::EmailAddress::MAX_LEN))
        .pattern(Some(concat!(
            // Atoms with single dots between, at most 64 characters.
            r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,32}(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,15}){0,2}",
            // Labels of letters and digits, single hyphens between.
            r"@([A-Za-z0-9]{1,20}(-[A-Za-z0-9]{1,20}){0,2}\.){1,3}[A-Za-z0-9]{1,20}(-[A-Za-z0-9]{1,20}){0,2}$",
        )))
        .examples(["name@example.com"])
        .build()
}
