//! `api-labels`: the labels of a cluster (docs/labels.md), key/value pairs
//! with the syntax of Kubernetes labels that its owner sets to find their
//! clusters by, and the clusters a label selector finds.

use axum::{Router, extract::State};
use serde::{Deserialize, Serialize};
use shared::{
    audit::{self, AuditEvent},
    error::ApiError,
    extract::{AppJson, AppQuery},
    http::{AppState, Caller, InOrganization, OwnedCluster},
    labels::{self, Labels, selector, store},
    organizations::Action,
};
use utoipa::{
    IntoParams, OpenApi, ToSchema,
    openapi::schema::{Object, ObjectBuilder, Type},
};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(get_labels, set_labels))
        .routes(routes!(find_labeled_clusters))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(
    tags((name = "labels", description = "Labels of clusters, and the clusters a selector finds"))
)]
struct ApiDoc;

#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterLabels {
    pub cluster_id: Uuid,
    /// The cluster's labels, by key.
    #[schema(value_type = HashMap<String, String>)]
    pub labels: Labels,
}

/// The schema of a set of labels sent: its keys, values and size, as
/// `labels::check` takes them.
fn label_set() -> Object {
    let string = |max, pattern: String| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .max_length(Some(max))
            .pattern(Some(pattern))
    };
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property_names(Some(string(317, format!("^{}$", labels::key_pattern()))))
        .additional_properties(Some(string(63, format!("^{}$", labels::value_pattern()))))
        .max_properties(Some(labels::MAX_LABELS))
        .build()
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetLabels {
    /// The cluster's whole set of labels, at most 64: a key is an optional
    /// lowercase DNS prefix and `/`, then a name of at most 63 letters,
    /// digits, `-`, `_` and `.` starting and ending with a letter or digit
    /// (the `kubebyon.io/` prefix is the platform's); a value is empty or
    /// such a name.
    #[schema(schema_with = label_set)]
    pub labels: Labels,
}

/// A cluster's labels
#[utoipa::path(get, path = "/api/console/clusters/{cluster_id}/labels", tag = "labels",
    params(("cluster_id" = Uuid, Path)),
    responses((status = 200, body = ClusterLabels),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn get_labels(
    State(state): State<AppState>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<ClusterLabels>, ApiError> {
    Ok(AppJson(ClusterLabels {
        cluster_id: cluster.id,
        labels: store::of_cluster(&state.pool, cluster.id).await?,
    }))
}

/// Set a cluster's labels
///
/// Replaces the whole set: a key left out is removed, `{}` removes them
/// all. Every bad key or value is named under `labels.<key>` (422
/// `validation_failed`), and nothing changes. Audited as
/// `cluster.labels_set` with the keys removed and set.
#[utoipa::path(put, path = "/api/console/clusters/{cluster_id}/labels", tag = "labels",
    params(("cluster_id" = Uuid, Path)), request_body = SetLabels,
    responses((status = 200, body = ClusterLabels),
              (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn set_labels(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(cluster): OwnedCluster,
    AppJson(body): AppJson<SetLabels>,
) -> Result<AppJson<ClusterLabels>, ApiError> {
    labels::check(&body.labels)?;
    let mut tx = state.pool.begin().await?;
    // The cluster may have been deleted since the extractor read it; its
    // row lock also makes two writers take turns.
    shared::http::owned::lock(&mut tx, &caller, cluster.id, Action::Operate).await?;
    let (removed, set) = store::replace(&mut tx, cluster.id, &body.labels).await?;
    if !removed.is_empty() || !set.is_empty() {
        audit::record(
            &mut *tx,
            AuditEvent {
                actor_user_id: Some(caller.user_id),
                actor_kind: "user",
                action: "cluster.labels_set",
                target_kind: "cluster",
                target_id: cluster.id.to_string(),
                cluster_id: Some(cluster.id),
                metadata: serde_json::json!({ "removed": removed, "set": set }),
            },
        )
        .await?;
    }
    tx.commit().await?;
    Ok(AppJson(ClusterLabels {
        cluster_id: cluster.id,
        labels: body.labels,
    }))
}

/// The schema of a selector: the grammar `selector::parse` takes.
fn selector_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "A label selector as kubectl's `-l` takes it: `env=prod,tier!=db`, `gpu`, \
             `!legacy`, `zone in (a,b)`, `zone notin (c)`; empty or absent selects every cluster.",
        ))
        .max_length(Some(selector::MAX_LENGTH))
        .pattern(Some(selector::pattern()))
        .build()
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FindQuery {
    /// A label selector ([`selector_schema`] describes it).
    #[param(schema_with = selector_schema)]
    pub selector: Option<String>,
    /// Page size, 1–200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    #[param(max_length = 256)]
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LabeledCluster {
    pub cluster_id: Uuid,
    pub name: String,
    #[schema(value_type = HashMap<String, String>)]
    pub labels: Labels,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LabeledClusterPage {
    /// The clusters the selector finds, by name.
    pub items: Vec<LabeledCluster>,
    /// Pass as `cursor` to read the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The clusters a label selector finds
///
/// The organization's live clusters whose labels the selector selects, with
/// their labels, by name. A selector that does not parse, or names a key or
/// value labels cannot have, is 422 `validation_failed` under `selector`.
#[utoipa::path(get, path = "/api/console/cluster-labels", tag = "labels",
    params(FindQuery, ("KubeBYON-Organization" = Option<Uuid>, Header, nullable = false, description = "The organization to act in (its id); the caller's personal one when absent")),
    responses((status = 200, body = LabeledClusterPage),
              (status = 404, description = "The caller is not a member of the organization (`not_found`)", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 422, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn find_labeled_clusters(
    State(state): State<AppState>,
    organization: InOrganization,
    AppQuery(query): AppQuery<FindQuery>,
) -> Result<AppJson<LabeledClusterPage>, ApiError> {
    let limit = shared::extract::short_page_limit(query.limit)?;
    if query.cursor.as_ref().is_some_and(|c| c.len() > 256) {
        return Err(ApiError::invalid("cursor", "is not one this API returned"));
    }
    let requirements = selector::parse(query.selector.as_deref().unwrap_or_default())
        .map_err(|message| ApiError::invalid("selector", message))?;
    let mut found = store::find(
        &state.pool,
        organization.id,
        &requirements,
        query.cursor.as_deref(),
        limit + 1,
    )
    .await?;
    let next_cursor = shared::extract::cut_page(&mut found, limit, |c| c.name.clone());
    Ok(AppJson(LabeledClusterPage {
        items: found
            .into_iter()
            .map(|c| LabeledCluster {
                cluster_id: c.cluster_id,
                name: c.name,
                labels: c.labels,
            })
            .collect(),
        next_cursor,
    }))
}
