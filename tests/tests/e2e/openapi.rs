//! `docs/openapi.json` is the document the code generates.

#[test]
fn the_committed_openapi_document_is_current() {
    let path = format!("{}/../docs/openapi.json", env!("CARGO_MANIFEST_DIR"));
    let committed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("docs/openapi.json exists"))
            .expect("valid JSON");
    let generated = serde_json::to_value(local::openapi()).unwrap();
    assert!(
        committed == generated,
        "docs/openapi.json is stale; regenerate it with: cargo run -q -p local -- openapi > docs/openapi.json"
    );
}

/// What the extractors answer before an API handler runs is documented on
/// every operation that reads a body, a path or a query: a client generated
/// from the document knows each status it can meet.
#[test]
fn every_operation_documents_how_its_input_can_be_refused() {
    let doc = serde_json::to_value(local::openapi()).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/api/") {
            continue;
        }
        for (method, operation) in item.as_object().unwrap() {
            let responses = &operation["responses"];
            let documents = |status: &str, code: &str| {
                responses[status]["description"]
                    .as_str()
                    .is_some_and(|d| d.contains(&format!("`{code}`")))
                    && responses[status]["content"]["application/problem+json"].is_object()
            };
            let places: Vec<&str> = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["in"].as_str())
                .collect();
            let mut expected = Vec::new();
            let form = operation["requestBody"]["content"]
                .as_object()
                .is_some_and(|c| c.keys().all(|k| k == "application/x-www-form-urlencoded"));
            if form {
                // The device grant's forms: read by their handlers, which
                // document their own 400.
                expected.extend([
                    ("413", "payload_too_large"),
                    ("415", "unsupported_media_type"),
                ]);
                assert!(
                    responses["400"].is_object(),
                    "{method} {path} documents no 400"
                );
            } else if operation.get("requestBody").is_some() {
                expected.extend([
                    ("400", "malformed_json"),
                    ("413", "payload_too_large"),
                    ("415", "unsupported_media_type"),
                    ("422", "validation_failed"),
                ]);
            }
            if places.contains(&"path") {
                expected.push(("400", "invalid_path"));
            }
            if places.contains(&"query") {
                expected.extend([("400", "invalid_query"), ("422", "validation_failed")]);
            }
            for (status, code) in expected {
                assert!(
                    documents(status, code),
                    "{method} {path} does not document {status} {code}: {responses}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 50, "only {checked} answers checked");
}

/// OpenAPI wants every `operationId` unique: generated clients name their
/// methods after them.
#[test]
fn every_operation_id_is_unique() {
    let document = serde_json::to_value(local::openapi()).unwrap();
    let mut ids = std::collections::HashMap::<String, Vec<String>>::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            ids.entry(id.to_string())
                .or_default()
                .push(format!("{method} {path}"));
        }
    }
    let repeated: Vec<_> = ids.iter().filter(|(_, ops)| ops.len() > 1).collect();
    assert!(repeated.is_empty(), "{repeated:?}");
    assert!(ids.contains_key("get_admin_orders") && ids.contains_key("webhook"));
}

/// Every problem code the code writes (`code: "…"` in `shared` and the
/// functions, their tests aside, and the OAuth callback's refusals) is in
/// the document's `ProblemCode`, which a problem's `code` is: a client that
/// words each code (the console's catalogs) knows every one, and a code
/// the document lacks fails here before a client meets it.
#[test]
fn every_problem_code_the_code_writes_is_documented() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let generated = serde_json::to_value(local::openapi()).unwrap();
    let documented: Vec<&str> = generated["components"]["schemas"]["ProblemCode"]["enum"]
        .as_array()
        .expect("ProblemCode is an enum")
        .iter()
        .map(|code| code.as_str().unwrap())
        .collect();
    assert_eq!(
        generated["components"]["schemas"]["Problem"]["properties"]["code"]["$ref"],
        "#/components/schemas/ProblemCode"
    );
    let written = regex::Regex::new(r#"code: "([a-z_]+)"|failed\(\s*"([a-z_]+)""#).unwrap();
    let mut sources = vec![root.join("shared/src")];
    for entry in std::fs::read_dir(root.join("functions")).unwrap() {
        sources.push(entry.unwrap().path().join("src"));
    }
    let mut found = std::collections::BTreeSet::new();
    while let Some(dir) = sources.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                // What follows a file's test module is its tests'.
                let code = text.split("#[cfg(test)]").next().unwrap();
                for found_code in written.captures_iter(code) {
                    let code = found_code.get(1).or(found_code.get(2)).unwrap().as_str();
                    found.insert((code.to_string(), path.display().to_string()));
                }
            }
        }
    }
    assert!(
        found.len() > 70,
        "only {} codes found: is the pattern still right?",
        found.len()
    );
    let missing: Vec<_> = found
        .iter()
        .filter(|(code, _)| !documented.contains(&code.as_str()))
        .collect();
    assert!(missing.is_empty(), "codes the document lacks: {missing:?}");
}
