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
