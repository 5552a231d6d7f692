//! `admission`: the validating webhook every cluster's API server calls
//! (`POST /api/admission/{cluster_id}` with the cluster's token, registered
//! by the cluster jobs; docs/admission.md). It answers `AdmissionReview` v1
//! and never mutates:
//!
//! - a Pod (CREATE) is weighed against the cluster's workload CPU and memory
//!   limits with what is in use (the last observation and the pods admitted
//!   since), and reserved when it passes, in one statement;
//! - a workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job,
//!   CronJob; CREATE and UPDATE) by the pods it would run, replicas ×
//!   template, less what it ran before; one another object controls (a
//!   Deployment's ReplicaSet) was weighed with its owner;
//! - a Node (CREATE) against the organization's plan, under the same lock and with
//!   the same count as joins, and recorded as a pending node when it passes.
//!
//! A review for an unknown or deleted cluster, or with a wrong token, is
//! refused with one message that tells none of them apart. A webhook
//! registered before the cluster's API server had a token calls
//! `POST /api/admission/{cluster_id}/{secret}` with a secret in its URL; that
//! route answers until the cluster's next registration retires the secret.
//!
//! `POST /api/admission/{cluster_id}/authorize` is the platform's authorizer
//! inside the cluster (`shared::admission::authorizer`): the API server asks
//! it a `SubjectAccessReview`, with the cluster's bearer token, before RBAC,
//! and it denies what would switch the platform's limits off.

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, State, rejection::BytesRejection},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::Value;
use shared::{
    admission::{
        self,
        demand::{self, Kind, Requests},
        review::{self, Request},
        store::{self, Admitting, Credential, Reservation},
    },
    app::plan,
    billing::entitlements,
    domain::{NodeEventType, NodeName, NodeStatus},
    error::ApiError,
    extract::AppPath,
    http::AppState,
    nodes::{self, NewNodeEvent, NodeSnapshot},
};
use utoipa::OpenApi;
use utoipa_axum::{
    router::{OpenApiRouter, UtoipaMethodRouterExt},
    routes,
};
use uuid::Uuid;

/// The largest review read: an UPDATE carries the object twice, and an
/// object may be 1.5 MiB.
pub const MAX_REVIEW_BYTES: usize = 4 * 1024 * 1024;

/// What every refused credential is told.
pub const NOT_REGISTERED: &str =
    "this admission webhook is not registered for a live cluster on this platform";

/// The largest access review read (a review names one request).
pub const MAX_ACCESS_REVIEW_BYTES: usize = 64 * 1024;

#[allow(deprecated)]
/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(shared::openapi::answering(ApiDoc::openapi(), PROBLEM_CODES))
        .routes(routes!(authorize).layer(DefaultBodyLimit::max(MAX_ACCESS_REVIEW_BYTES)))
        .routes(routes!(review).layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES)))
        .routes(routes!(review_with_url_secret).layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES)))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(
    tags((name = "admission", description = "The validating webhook clusters' API servers call"))
)]
struct ApiDoc;

/// Answer an AdmissionReview
///
/// Called by a cluster's API server, at the URL its webhook configuration
/// holds, with the cluster's token as bearer credential (from the API
/// server's admission configuration, a file the tenant cannot read). The
/// body is an `admission.k8s.io/v1` `AdmissionReview`; the answer is one
/// too, echoing `request.uid`, `allowed` or refused with a `status` (403)
/// that names the limit, what is in use, what the object asks for and the
/// excess. A missing or wrong token, an unknown or a deleted cluster are
/// refused alike, in the review's answer.
#[utoipa::path(post, path = "/api/admission/{cluster_id}", tag = "admission",
    params(("cluster_id" = Uuid, Path, description = "The cluster the webhook is registered for"),
           ("Authorization" = Option<String>, Header, description = "`Bearer <token>`: the cluster's token")),
    request_body(content = document::Review, content_type = "application/json",
        description = "An admission.k8s.io/v1 AdmissionReview"),
    responses((status = 200, description = "An admission.k8s.io/v1 AdmissionReview answer", body = document::Answer),
              (status = 400, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 413, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 415, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn review(
    State(state): State<AppState>,
    AppPath(cluster_id): AppPath<Uuid>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let token = bearer(&headers).unwrap_or_default();
    answer(&state, cluster_id, Credential::Token(token), &headers, body).await
}

/// Answer an AdmissionReview (secret in the URL; deprecated)
///
/// The webhook's URL of a cluster registered before its API server had a
/// token: the secret in the path, readable by the tenant's cluster-admin in
/// the webhook's configuration. Answered as `POST /api/admission/{cluster_id}`
/// until the cluster's next create or update job registers the webhook
/// anew, which retires the secret (`sync-clusters` enqueues that update).
#[utoipa::path(post, path = "/api/admission/{cluster_id}/{secret}", tag = "admission",
    params(("cluster_id" = Uuid, Path, description = "The cluster the webhook is registered for"),
           ("secret" = String, Path, description = "The webhook's secret")),
    request_body(content = document::Review, content_type = "application/json",
        description = "An admission.k8s.io/v1 AdmissionReview"),
    responses((status = 200, description = "An admission.k8s.io/v1 AdmissionReview answer", body = document::Answer),
              (status = 400, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 413, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 415, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, body = shared::error::Problem, content_type = "application/problem+json")))]
#[deprecated = "the webhook's URL of a cluster registered before its API server had a token"]
pub async fn review_with_url_secret(
    State(state): State<AppState>,
    AppPath((cluster_id, secret)): AppPath<(Uuid, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    answer(
        &state,
        cluster_id,
        Credential::UrlSecret(&secret),
        &headers,
        body,
    )
    .await
}

async fn answer(
    state: &AppState,
    cluster_id: Uuid,
    credential: Credential<'_>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = json_body(headers, body, MAX_REVIEW_BYTES)?;
    let request = review::parse(&body).map_err(|e| ApiError::BadRequest {
        code: "invalid_admission_review",
        detail: e.to_string(),
    })?;
    let refusal = decide(state, cluster_id, credential, &request).await?;
    if let Some(message) = &refusal {
        tracing::info!(%cluster_id, kind = request.kind.kind, operation = request.operation, message, "admission refused");
    }
    Ok(axum::Json(review::answer(&request.uid, refusal.as_deref())).into_response())
}

/// The bearer token of the request, if it has one of a sensible length.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty() && t.len() <= 256)
}

/// A JSON request body within `limit` bytes.
fn json_body(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or_default().trim() == "application/json");
    if !json {
        return Err(ApiError::UnsupportedMediaType(
            "expected content-type application/json".into(),
        ));
    }
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit_bytes: limit }
        } else {
            ApiError::BadRequest {
                code: "invalid_body",
                detail: rejection.body_text(),
            }
        }
    })
}

/// Answer a SubjectAccessReview
///
/// Called by a cluster's API server, whose authorization configuration
/// names this webhook first (before RBAC), with the cluster's authorizer
/// token as bearer credential. The body is an `authorization.k8s.io/v1`
/// `SubjectAccessReview`; the answer is one too: `denied` with the reason for
/// what would switch the platform's limits off (approving certificates,
/// the bootstrap auto-approval, the admission webhook's configuration,
/// Secrets in `kube-system`, tokens of the platform's ServiceAccounts), no
/// opinion for everything else.
#[utoipa::path(post, path = "/api/admission/{cluster_id}/authorize", tag = "admission",
    params(("cluster_id" = Uuid, Path, description = "The cluster the authorizer is configured for"),
           ("Authorization" = String, Header, description = "`Bearer <token>`: the cluster's authorizer token")),
    request_body(content = Object, content_type = "application/json",
        description = "An authorization.k8s.io/v1 SubjectAccessReview"),
    responses((status = 200, description = "The SubjectAccessReview with its `status`: `denied` and a `reason`, or no opinion (`allowed` false)", body = Object),
              (status = 400, description = "Not a SubjectAccessReview (`invalid_access_review`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 401, description = "No token, or not the cluster's", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 413, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 415, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn authorize(
    State(state): State<AppState>,
    AppPath(cluster_id): AppPath<Uuid>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let token = bearer(&headers).ok_or(ApiError::Unauthenticated)?;
    if !store::authorizer_token_valid(&state.pool, cluster_id, token).await? {
        return Err(ApiError::Unauthenticated);
    }
    let body = json_body(&headers, body, MAX_ACCESS_REVIEW_BYTES)?;
    let review: Value = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest {
        code: "invalid_access_review",
        detail: format!("the body is not JSON: {e}"),
    })?;
    let spec = review
        .get("spec")
        .filter(|s| s.is_object() && review["kind"] == "SubjectAccessReview")
        .ok_or_else(|| ApiError::BadRequest {
            code: "invalid_access_review",
            detail: "expected an authorization.k8s.io/v1 SubjectAccessReview with a spec".into(),
        })?;
    let verdict = admission::authorizer::decide(spec);
    if let admission::authorizer::Verdict::Deny(reason) = &verdict {
        tracing::info!(%cluster_id, user = spec["user"].as_str().unwrap_or_default(),
            verb = spec.pointer("/resourceAttributes/verb").and_then(serde_json::Value::as_str).unwrap_or_default(),
            resource = spec.pointer("/resourceAttributes/resource").and_then(serde_json::Value::as_str).unwrap_or_default(),
            reason, "access denied by the platform's authorizer");
    }
    Ok(axum::Json(admission::authorizer::answer(&verdict)).into_response())
}

/// What the review is about, as far as the webhook weighs it.
enum Subject {
    Node,
    Pod,
    Workload(Kind),
    /// A RoleBinding or ClusterRoleBinding, in any namespace.
    Binding,
    /// Anything else (a delete, a subresource, an exempt namespace): allowed.
    Ignored,
}

fn subject(request: &Request) -> Subject {
    let op = request.operation.as_str();
    if request
        .sub_resource
        .as_deref()
        .is_some_and(|s| !s.is_empty())
        || !matches!(op, "CREATE" | "UPDATE")
    {
        return Subject::Ignored;
    }
    if request.kind.group.is_empty() && request.kind.kind == "Node" {
        return if op == "CREATE" {
            Subject::Node
        } else {
            Subject::Ignored
        };
    }
    if request.kind.group == "rbac.authorization.k8s.io"
        && matches!(
            request.kind.kind.as_str(),
            "RoleBinding" | "ClusterRoleBinding"
        )
    {
        return Subject::Binding;
    }
    if admission::exempt(request.namespace.as_deref()) {
        return Subject::Ignored;
    }
    match Kind::of(&request.kind.group, &request.kind.kind) {
        Some(Kind::Pod) if op == "CREATE" => Subject::Pod,
        Some(Kind::Pod) | None => Subject::Ignored,
        Some(kind) => Subject::Workload(kind),
    }
}

/// `None` to allow, else the refusal's message.
async fn decide(
    state: &AppState,
    cluster_id: Uuid,
    credential: Credential<'_>,
    request: &Request,
) -> Result<Option<String>, ApiError> {
    let object = request.object.as_ref().unwrap_or(&Value::Null);
    let subject = subject(request);
    if let Subject::Pod = subject {
        let asks = demand::pod(object.get("spec").unwrap_or(&Value::Null));
        return pod(state, cluster_id, credential, request, asks).await;
    }
    let Some(cluster) = store::admitting(&state.pool, cluster_id, credential).await? else {
        return Ok(Some(NOT_REGISTERED.into()));
    };
    match subject {
        Subject::Node => node(state, &cluster, request).await,
        Subject::Binding => Ok(binding(request, object)),
        Subject::Workload(_) if demand::controlled(object) => Ok(None),
        Subject::Workload(kind) => {
            let weight = |o: Option<&Value>| {
                o.map_or((0, Requests::default()), |o| {
                    demand::workload(kind, o, cluster.nodes)
                })
            };
            let (pods, each) = weight(Some(object));
            let before = weight(
                request
                    .old_object
                    .as_ref()
                    .filter(|_| request.operation == "UPDATE"),
            );
            let asks = each.times(pods).increase_over(before.1.times(before.0));
            let what = format!(
                "{} ({pods} pod(s) × {}m CPU, {}Mi memory)",
                request.describe(),
                each.cpu_milli_cores,
                each.memory_mib
            );
            refusal(state, &cluster, cluster.in_use, asks, &what).await
        }
        Subject::Pod | Subject::Ignored => Ok(None),
    }
}

/// A binding may grant nothing to the identities the platform relies on:
/// a node's kubelet (whose certificate is on a machine the tenant holds
/// root on) bound to more than the Node authorizer gives it, or the
/// bootstrappers to auto-approval, would reach past the platform's
/// authorizer, which trusts neither. The refusal names the subject.
/// The platform's own bindings (its kubeconfigs' ServiceAccounts in
/// `kube-system`), made with the cluster's admin credential, pass.
fn binding(request: &Request, object: &serde_json::Value) -> Option<String> {
    if request.by_masters() {
        return None;
    }
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let subjects = object["subjects"].as_array()?;
    subjects.iter().find_map(|subject| {
        let field = |name: &str| subject[name].as_str().unwrap_or_default();
        let kind = field("kind");
        // A ServiceAccount without a namespace is the binding's own.
        let subject_namespace = match field("namespace") {
            "" => namespace,
            given => given,
        };
        admission::authorizer::privileged_subject(kind, subject_namespace, field("name")).then(
            || {
                format!(
                    "{} grants rights to {kind} {:?}, an identity of the cluster's own that the platform relies on: bind your own users, groups and ServiceAccounts instead",
                    request.describe(),
                    field("name")
                )
            },
        )
    })
}

/// A pod is weighed and reserved in one statement ([`store::reserve`]); a
/// dry run is weighed against what is in use and reserves nothing.
async fn pod(
    state: &AppState,
    cluster_id: Uuid,
    credential: Credential<'_>,
    request: &Request,
    asks: Requests,
) -> Result<Option<String>, ApiError> {
    let what = request.describe();
    if request.is_dry_run() {
        let Some(cluster) = store::admitting(&state.pool, cluster_id, credential).await? else {
            return Ok(Some(NOT_REGISTERED.into()));
        };
        return refusal(state, &cluster, cluster.in_use, asks, &what).await;
    }
    for _ in 0..3 {
        match store::reserve(&state.pool, cluster_id, credential, &request.uid, asks).await? {
            Reservation::Unknown => return Ok(Some(NOT_REGISTERED.into())),
            Reservation::Admitted => return Ok(None),
            Reservation::Refused(cluster) => {
                if let Some(message) = refusal(state, &cluster, cluster.in_use, asks, &what).await?
                {
                    return Ok(Some(message));
                }
                // Refused under the lock, by reservations made after the
                // statement's snapshot: weighed again with them in sight.
            }
        }
    }
    Ok(Some(format!(
        "{what} could not be weighed: the cluster's use changed at every try; try again"
    )))
}

/// The refusal of `asks` on top of `in_use`, if it passes a limit: the
/// numbers, and what would lift it (the plan's upgrade page when the plan
/// leaves too little to raise the cluster's limit).
async fn refusal(
    state: &AppState,
    cluster: &Admitting,
    in_use: Requests,
    asks: Requests,
    what: &str,
) -> Result<Option<String>, ApiError> {
    let Some(excess) = admission::weigh(cluster.limits, in_use, asks) else {
        return Ok(None);
    };
    let mut message = excess.message(&cluster.name, what);
    let mut db = state.pool.acquire().await?;
    let entitlement = entitlements::read(&mut db, cluster.organization_id).await?;
    let left = entitlement.remaining().map(|r| {
        if excess.resource == "cpu" {
            r.cpu_milli_cores
        } else {
            r.memory_mib
        }
    });
    match (left, &entitlement.plan) {
        (Some(left), Some(plan)) if left < excess.excess => message.push_str(&format!(
            "; the {} plan leaves {}{} to raise the cluster's limit by: upgrade at {}",
            plan.name,
            left.max(0),
            excess.unit(),
            entitlements::upgrade_url(&state.settings.public_base_url),
        )),
        _ => message.push_str("; raise the cluster's workload limit or remove workloads"),
    }
    Ok(Some(message))
}

/// A Node registration: one more node for the organization's plan unless the node
/// is counted already (a re-registration, or a join under way from it). It
/// takes the organization's entitlement lock, as joins do, and on a pass records
/// the node as pending so the next registration counts it.
async fn node(
    state: &AppState,
    cluster: &Admitting,
    request: &Request,
) -> Result<Option<String>, ApiError> {
    let name = request
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            request
                .object
                .as_ref()?
                .pointer("/metadata/name")?
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_default();
    // An API server sends only names it validated; anything else did not
    // come from one and is refused before it is counted or recorded.
    if !name.is_empty()
        && let Err(reason) = NodeName::parse(&name)
    {
        return Ok(Some(reason));
    }
    let mut tx = state.pool.begin().await?;
    let Some(locked) = plan::lock_for_cluster(&mut tx, cluster.cluster_id).await? else {
        return Ok(Some(NOT_REGISTERED.into()));
    };
    let counted = nodes::counted(&mut *tx, cluster.cluster_id, &name).await?;
    let asks = entitlements::Request {
        nodes: i64::from(!counted),
        ..Default::default()
    };
    if let Some(limit) = locked
        .refuse(&mut tx, &asks, &state.settings.public_base_url)
        .await?
    {
        tx.commit().await?;
        return Ok(Some(format!(
            "the {} plan allows {} node(s) and {} are in use or joining: {} would be {} over; remove a node or upgrade at {}",
            limit.plan,
            limit.limit,
            limit.usage,
            request.describe(),
            limit.excess,
            limit.upgrade_url
        )));
    }
    // An API server validates a Node's name before it asks: a review without
    // one (not from an API server) is weighed but recorded nowhere.
    if !counted && !request.is_dry_run() && !name.is_empty() {
        let pending = NodeSnapshot::named(name, NodeStatus::Pending);
        let ids = nodes::upsert_all(&mut tx, cluster.cluster_id, &[&pending]).await?;
        let events: Vec<NewNodeEvent> = ids
            .iter()
            .map(|(name, id)| NewNodeEvent {
                cluster_id: cluster.cluster_id,
                node_id: *id,
                node_name: name,
                event_type: NodeEventType::Joined,
                old_status: None,
                new_status: NodeStatus::Pending,
                message: Some("registered with the cluster's API server".into()),
            })
            .collect();
        nodes::insert_events(&mut tx, &events).await?;
    }
    tx.commit().await?;
    Ok(None)
}

/// The documents of the API reference: what a cluster's API server sends and
/// what it is answered (read by [`review::parse`], written by
/// [`review::answer`]).
mod document {
    #![allow(dead_code)] // Described, never built: the review is read as JSON.
    use serde::{Deserialize, Serialize};
    use serde_json::Value;
    use utoipa::ToSchema;

    #[derive(Deserialize, Serialize, ToSchema)]
    pub enum ReviewVersion {
        #[serde(rename = "admission.k8s.io/v1")]
        V1,
    }

    #[derive(Deserialize, Serialize, ToSchema)]
    pub enum ReviewKind {
        AdmissionReview,
    }

    #[derive(Deserialize, Serialize, ToSchema)]
    #[serde(rename_all = "UPPERCASE")]
    pub enum ReviewOperation {
        Create,
        Update,
        Delete,
        Connect,
    }

    /// An `admission.k8s.io/v1` `AdmissionReview` with its request.
    #[derive(Deserialize, ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct Review {
        pub api_version: ReviewVersion,
        pub kind: ReviewKind,
        pub request: ReviewRequest,
    }

    /// What the API server asks about.
    #[derive(Deserialize, ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct ReviewRequest {
        /// Echoed in the answer; 1–128 characters, no control character.
        #[schema(
            min_length = 1,
            max_length = 128,
            pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"
        )]
        pub uid: String,
        pub kind: ObjectKind,
        pub operation: ReviewOperation,
        pub name: Option<String>,
        pub namespace: Option<String>,
        pub sub_resource: Option<String>,
        /// The object as it would be stored.
        pub object: Option<Value>,
        /// The object before an UPDATE.
        pub old_object: Option<Value>,
        /// Weighed, but nothing is reserved or recorded.
        pub dry_run: Option<bool>,
    }

    /// `request.kind`: the object's group, version and kind.
    #[derive(Deserialize, ToSchema)]
    pub struct ObjectKind {
        /// Empty (or left out) for the core group.
        #[serde(default)]
        pub group: String,
        pub version: String,
        pub kind: String,
    }

    /// The answer: an `AdmissionReview` with a response.
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct Answer {
        pub api_version: ReviewVersion,
        pub kind: ReviewKind,
        pub response: AnswerResponse,
    }

    #[derive(Serialize, ToSchema)]
    pub struct AnswerResponse {
        /// The request's uid.
        pub uid: String,
        pub allowed: bool,
        /// With a refusal.
        pub status: Option<Refusal>,
    }

    /// Why the object is refused: the limit, what is in use, what the object
    /// asks for and the excess, in `message`.
    #[derive(Serialize, ToSchema)]
    pub struct Refusal {
        /// `Failure`.
        pub status: String,
        /// 403.
        pub code: u16,
        /// `Forbidden`.
        pub reason: String,
        pub message: String,
    }
}

/// The problem codes of this function's own refusals (the platform's and
/// its capabilities' come with `shared::http::problem_codes`).
const PROBLEM_CODES: &[&str] = &[
    "invalid_access_review",
    "invalid_admission_review",
    "invalid_body",
];
