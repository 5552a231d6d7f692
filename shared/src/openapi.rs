//! The OpenAPI document, assembled from each HTTP function's own annotated types.

use utoipa::openapi::{InfoBuilder, OpenApi};

/// Merges the functions' documents under one title.
pub fn document(parts: impl IntoIterator<Item = OpenApi>) -> OpenApi {
    let mut parts = parts.into_iter();
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
    doc
}
