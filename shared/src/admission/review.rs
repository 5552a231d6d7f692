//! `AdmissionReview` v1 (`admission.k8s.io/v1`): the request a cluster's API
//! server sends and the answer it expects. The answer echoes `request.uid`,
//! says `allowed`, carries a `status` when it refuses, and never a patch.

use serde::Deserialize;
use serde_json::{Value, json};

pub const API_VERSION: &str = "admission.k8s.io/v1";
pub const KIND: &str = "AdmissionReview";

/// The operations a review may be about.
pub const OPERATIONS: [&str; 4] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];

/// The longest `request.uid` taken (the API server's are UUIDs).
pub const MAX_UID: usize = 128;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    api_version: Option<String>,
    kind: Option<String>,
    /// Read once the document is known to be a v1 review.
    request: Option<Value>,
}

/// `request.kind`: what the object is.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: String,
    #[serde(default)]
    pub object: Option<Value>,
    #[serde(default)]
    pub old_object: Option<Value>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Who made the request, as the API server authenticated them.
    #[serde(default)]
    pub user_info: Option<UserInfo>,
}

/// `request.userInfo`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

impl Request {
    /// Whether the request came with the cluster's admin credential (the
    /// platform's, in `system:masters`, which no authorizer is asked about
    /// and the tenant cannot become).
    pub fn by_masters(&self) -> bool {
        self.user_info
            .as_ref()
            .is_some_and(|user| user.groups.iter().any(|g| g == "system:masters"))
    }

    /// `Deployment "web"` or `Node "worker-1"`: how a message names the object.
    pub fn describe(&self) -> String {
        let name = self
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .or_else(|| {
                let meta = self.object.as_ref()?.get("metadata")?;
                meta.get("name")
                    .or_else(|| meta.get("generateName"))?
                    .as_str()
                    .map(str::to_string)
            })
            .unwrap_or_default();
        format!("{} {name:?}", self.kind.kind)
    }

    pub fn is_dry_run(&self) -> bool {
        self.dry_run.unwrap_or(false)
    }
}

/// Why a body is not a review this endpoint answers.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReviewError {
    #[error("the body is not an AdmissionReview: {0}")]
    NotAReview(String),
    #[error("only {API_VERSION} AdmissionReviews are answered, not {0:?}")]
    WrongVersion(String),
}

/// Reads a review: JSON, `kind: AdmissionReview`, `apiVersion:
/// admission.k8s.io/v1`, a request with a uid of 1–128 characters and an
/// operation.
pub fn parse(body: &[u8]) -> Result<Request, ReviewError> {
    let document: Document =
        serde_json::from_slice(body).map_err(|e| ReviewError::NotAReview(e.to_string()))?;
    if document.kind.as_deref() != Some(KIND) {
        return Err(ReviewError::NotAReview(format!(
            "kind must be {KIND}, got {:?}",
            document.kind.unwrap_or_default()
        )));
    }
    match document.api_version.as_deref() {
        Some(API_VERSION) => {}
        other => return Err(ReviewError::WrongVersion(other.unwrap_or_default().into())),
    }
    let request: Request = serde_json::from_value(
        document
            .request
            .ok_or_else(|| ReviewError::NotAReview("it has no request".into()))?,
    )
    .map_err(|e| ReviewError::NotAReview(format!("request: {e}")))?;
    if !OPERATIONS.contains(&request.operation.as_str()) {
        return Err(ReviewError::NotAReview(format!(
            "request.operation must be one of {OPERATIONS:?}"
        )));
    }
    let length = request.uid.chars().count();
    if length == 0 || length > MAX_UID || request.uid.chars().any(char::is_control) {
        return Err(ReviewError::NotAReview(format!(
            "request.uid must be 1–{MAX_UID} characters, none a control character"
        )));
    }
    Ok(request)
}

/// The answer to the review `uid`: allowed, or refused with `message` (403).
pub fn answer(uid: &str, refusal: Option<&str>) -> Value {
    let response = match refusal {
        None => json!({ "uid": uid, "allowed": true }),
        Some(message) => json!({
            "uid": uid,
            "allowed": false,
            "status": { "status": "Failure", "code": 403, "reason": "Forbidden", "message": message },
        }),
    };
    json!({ "apiVersion": API_VERSION, "kind": KIND, "response": response })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(body: Value) -> Result<Request, ReviewError> {
        parse(body.to_string().as_bytes())
    }

    #[test]
    fn only_a_v1_review_with_a_request_is_read() {
        let ok = review(json!({"apiVersion": API_VERSION, "kind": KIND, "request": {
            "uid": "u-1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "operation": "CREATE", "name": "web", "namespace": "shop"}}))
        .unwrap();
        assert_eq!(ok.uid, "u-1");
        assert_eq!(ok.describe(), "Deployment \"web\"");
        // 128 characters of two bytes each: counted in characters.
        let wide = "é".repeat(MAX_UID);
        let ok = review(json!({"apiVersion": API_VERSION, "kind": KIND, "request": {
            "uid": wide, "kind": {"version": "v1", "kind": "Pod"}, "operation": "CREATE"}}));
        assert_eq!(ok.map(|r| r.uid), Ok(wide));
        assert_eq!(
            review(json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": KIND, "request": {}})),
            Err(ReviewError::WrongVersion("admission.k8s.io/v1beta1".into()))
        );
        for bad in [
            json!({"kind": "Pod", "apiVersion": "v1"}),
            json!({"apiVersion": API_VERSION, "kind": KIND}),
            json!({"apiVersion": API_VERSION, "kind": KIND, "request": {"uid": "",
                "kind": {"version": "v1", "kind": "Pod"}, "operation": "CREATE"}}),
            json!({"apiVersion": API_VERSION, "kind": KIND, "request": {"uid": "x".repeat(129),
                "kind": {"version": "v1", "kind": "Pod"}, "operation": "CREATE"}}),
            json!({"apiVersion": API_VERSION, "kind": KIND, "request": {"uid": "a\u{0}b",
                "kind": {"version": "v1", "kind": "Pod"}, "operation": "CREATE"}}),
            json!({"apiVersion": API_VERSION, "kind": KIND, "request": {"uid": "u",
                "kind": {"version": "v1", "kind": "Pod"}, "operation": "create"}}),
            json!([1, 2]),
        ] {
            assert!(
                matches!(review(bad.clone()), Err(ReviewError::NotAReview(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_answer_echoes_the_uid_and_a_refusal_carries_a_403_status() {
        let allowed = answer("u-2", None);
        assert_eq!(allowed["response"], json!({"uid": "u-2", "allowed": true}));
        let refused = answer("u-3", Some("too big"));
        assert_eq!(refused["apiVersion"], API_VERSION);
        assert_eq!(refused["response"]["allowed"], false);
        assert_eq!(refused["response"]["status"]["code"], 403);
        assert_eq!(refused["response"]["status"]["message"], "too big");
        assert!(refused["response"].get("patch").is_none());
    }
}
