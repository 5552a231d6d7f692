//! The stages an operation passes through: the words its job records as it
//! goes (`JobContext::stage`, `step`), which the API reports and the console
//! translates. Each is declared once, with [`stages!`](crate::stages), beside
//! the code that records it; a handler names the stages it may record
//! (`JobHandler::stages`), and the OpenAPI document lists them all as the
//! `JobStage` enum ([`document`]).

use utoipa::openapi::{
    OpenApi, RefOr,
    schema::{ObjectBuilder, Schema, Type},
};

/// A stage, as declared with [`stages!`](crate::stages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stage(&'static str);

impl Stage {
    #[doc(hidden)]
    pub const fn declared(words: &'static str) -> Self {
        Self(words)
    }

    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Declares stages, each a constant, and `STAGES`, every one of them:
///
/// ```ignore
/// shared::stages! {
///     CREATING_NAMESPACE = "creating the namespace";
/// }
/// ```
#[macro_export]
macro_rules! stages {
    ($($(#[$meta:meta])* $name:ident = $words:literal;)+) => {
        $($(#[$meta])* pub const $name: $crate::jobs::Stage = $crate::jobs::Stage::declared($words);)+
        /// Every stage declared here.
        pub const STAGES: &[$crate::jobs::Stage] = &[$($name),+];
    };
}

// The backbone's own stages: an operation's first, its last, and what the
// worker and the retries record whatever the job.
crate::stages! {
    /// An operation written with its job.
    QUEUED = "queued";
    /// An operation waiting for the cluster's running one.
    QUEUED_BEHIND = "queued behind the running operation";
    /// A job whose function has no host cluster configured.
    CONNECTING = "connecting to the host cluster";
    WAITING_TO_RETRY = "waiting to retry";
    /// An operation a user or an admin asked to try again.
    QUEUED_FOR_RETRY = "queued for retry";
    DONE = "done";
}

/// Adds the `JobStage` enum to the document, every stage of the backbone and
/// of `handlers`, and makes the `stage` of an operation and of its stages'
/// records of it.
pub fn document(doc: &mut OpenApi, handlers: impl IntoIterator<Item = Stage>) {
    let mut words: Vec<&str> = STAGES
        .iter()
        .copied()
        .chain(handlers)
        .map(Stage::as_str)
        .collect();
    words.sort_unstable();
    words.dedup();
    let components = doc.components.get_or_insert_with(Default::default);
    components.schemas.insert(
        "JobStage".into(),
        RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(words))
                .description(Some(
                    "A stage an operation passes through, in the words its job records.",
                ))
                .build(),
        )),
    );
    for name in ["Operation", "StageRecord"] {
        if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(name)
            && let Some(stage) = object.properties.get_mut("stage")
        {
            *stage = RefOr::Ref(utoipa::openapi::Ref::from_schema_name("JobStage"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::stages! {
        FIRST = "first";
        AGAIN = "done";
    }

    #[test]
    fn the_document_lists_every_stage_once_and_types_the_stage_fields() {
        let mut doc: OpenApi = serde_json::from_value(serde_json::json!({
            "openapi": "3.1.0", "info": { "title": "t", "version": "1" }, "paths": {},
            "components": { "schemas": {
                "Operation": { "type": "object", "properties": { "stage": { "type": "string" } } },
                "Other": { "type": "object", "properties": { "stage": { "type": "string" } } },
            } },
        }))
        .unwrap();
        document(&mut doc, STAGES.iter().copied().chain([FIRST]));
        let json = serde_json::to_value(&doc).unwrap();
        let schemas = &json["components"]["schemas"];
        let words: Vec<&str> = schemas["JobStage"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        let mut wanted: Vec<&str> = super::STAGES.iter().map(|s| s.as_str()).collect();
        wanted.push("first");
        wanted.sort_unstable();
        wanted.dedup();
        assert_eq!(words, wanted);
        assert_eq!(
            schemas["Operation"]["properties"]["stage"]["$ref"],
            "#/components/schemas/JobStage"
        );
        assert_eq!(schemas["Other"]["properties"]["stage"]["type"], "string");
    }
}
