//! Join tokens: create (the plaintext is shown once), list, revoke, and the
//! ledger of join attempts.

use std::collections::BTreeMap;

use axum::{
    Extension,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use shared::{
    app::authority,
    audit::{self, AuditEvent},
    clusters::Cluster,
    domain::{ClusterStatus, JoinTokenStatus},
    error::ApiError,
    extract::{AppJson, AppPath, AppQuery, PageQuery},
    http::{AppState, Caller, OwnedCluster, idempotency::IssuesSecret},
    nodes::{
        jointoken::{self, JoinToken},
        tokens::{self, Attempt, NewToken, Token},
    },
    organizations::Action,
};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

/// What a new token is for.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// Lifetime in seconds: 60 up to the platform's maximum
    /// (`JOIN_TOKEN_MAX_TTL_MS`, 7 days unless the operator sets it; the
    /// documented maximum is that default); the platform default (1 hour)
    /// when absent.
    #[schema(minimum = 60, maximum = 604_800)]
    pub ttl_seconds: Option<i64>,
    /// How many nodes may join with it: 1–100, default 1.
    #[schema(minimum = 1, maximum = 100)]
    pub max_uses: Option<i32>,
    /// Labels put on each node it joins.
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    /// A note for the owner, up to 200 characters.
    #[schema(max_length = 200)]
    pub description: Option<String>,
}

/// A created token: the only response that ever carries its plaintext.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedToken {
    pub token: Token,
    /// `<id>.<secret>`; shown once, stored only as a hash.
    pub plaintext: String,
    /// Where join scripts are served: `GET` with the token as bearer
    /// credential (`Authorization: Bearer <plaintext>`).
    pub join_url: String,
    /// The command to run as root on the machine that should join.
    pub join_command: String,
}

/// Whether the cluster can take tokens now: ready, with an endpoint.
fn ready(cluster: &Cluster) -> Result<(), ApiError> {
    match (cluster.status, &cluster.api_endpoint) {
        (ClusterStatus::Ready, Some(_)) => Ok(()),
        (status, _) => Err(ApiError::Conflict {
            code: "cluster_not_ready",
            detail: format!("join tokens can be made once the cluster is ready; it is {status}"),
        }),
    }
}

async fn cluster_client(
    state: &AppState,
    cluster: &Cluster,
    endpoint: &str,
) -> Result<kube::Client, ApiError> {
    let host = state.host.as_ref().ok_or(ApiError::Unavailable)?;
    host.vcluster_client(cluster, endpoint)
        .await
        .map_err(|err| unreachable_cluster(&err))
}

fn unreachable_cluster(err: &dyn std::fmt::Display) -> ApiError {
    ApiError::Upstream {
        code: "cluster_unreachable",
        detail: format!("the cluster's control plane could not be reached: {err}"),
    }
}

/// The command that joins a machine: the token travels as a header, never
/// in a URL (proxy logs keep URLs).
fn join_command(url: &str, plaintext: &str) -> String {
    format!("curl -sS -H 'Authorization: Bearer {plaintext}' {url} | sudo sh")
}

/// Create a join token
///
/// Makes a join token and returns its plaintext and the join command once;
/// only its hash is stored. The token is the platform's credential, not the
/// cluster's: each join attempt that takes a use of it gets a bootstrap token
/// of its own, valid for minutes. The cluster must be ready.
#[utoipa::path(
    post,
    path = "/api/console/clusters/{cluster_id}/tokens",
    tag = "nodes",
    params(("cluster_id" = Uuid, Path)),
    request_body = CreateToken,
    responses(
        (status = 201, body = CreatedToken),
        (status = 401, description = "Not signed in, or the session or key was ended while the token was made (`unauthenticated`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 403, description = "`max_uses` is more nodes than the plan has left (`plan_limit_exceeded`, with `plan_limit`)", body = shared::billing::entitlements::PlanLimitProblem, content_type = "application/problem+json"),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The cluster is not ready (`cluster_not_ready`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(cluster): OwnedCluster,
    AppJson(body): AppJson<CreateToken>,
) -> Result<Response, ApiError> {
    let cluster_id = cluster.id;
    let config = state.settings.part::<shared::nodes::config::Config>()?;
    let max_ttl = config.join_token_max_ttl.as_secs() as i64;
    let ttl = body
        .ttl_seconds
        .unwrap_or(config.join_token_default_ttl.as_secs() as i64);
    let mut errors = Vec::new();
    if !(60..=max_ttl).contains(&ttl) {
        errors.push(("ttl_seconds", format!("must be between 60 and {max_ttl}")));
    }
    let max_uses = body.max_uses.unwrap_or(1);
    if !(1..=100).contains(&max_uses) {
        errors.push(("max_uses", "must be between 1 and 100".into()));
    }
    if let Err(message) = jointoken::validate_labels(&body.node_labels) {
        errors.push(("node_labels", message));
    }
    if body
        .description
        .as_ref()
        .is_some_and(|d| d.chars().count() > 200)
    {
        errors.push(("description", "must be at most 200 characters".into()));
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(
            errors
                .into_iter()
                .map(|(field, message)| shared::error::FieldError::new(field, message))
                .collect(),
        ));
    }
    ready(&cluster)?;
    let expires_at = chrono::Utc::now() + chrono::Duration::seconds(ttl);
    let labels = serde_json::to_value(&body.node_labels).map_err(anyhow::Error::from)?;
    // Only its hash is kept; nothing is made in the cluster until a join
    // attempt takes a use (it then gets a bootstrap token of its own).
    let token = JoinToken::generate();
    let tx = state.pool.begin().await?;
    // A token cannot promise more nodes than the plan has left.
    let adds = shared::billing::entitlements::Amounts {
        nodes: max_uses.into(),
        ..Default::default()
    };
    let mut tx = shared::http::plan::require(&state, tx, cluster.organization_id, &adds).await?;
    // Made under its maker's authority held again, naming the key it came
    // with: whatever ends either ends the token too.
    let scope = authority::Scope::Organization {
        id: cluster.organization_id,
        action: Action::Operate,
    };
    authority::hold(&mut tx, caller.authority(), scope).await?;
    let token_id = tokens::insert(
        &mut tx,
        &NewToken {
            cluster_id,
            token_hash: &token.hash(),
            display_prefix: token.id(),
            description: body.description.as_deref(),
            max_uses,
            node_labels: &labels,
            created_by: caller.user_id,
            api_key_id: caller.api_key_id,
            expires_at,
        },
    )
    .await?;
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(caller.user_id),
            actor_kind: "user",
            action: "token.create",
            target_kind: "token",
            target_id: token_id.to_string(),
            cluster_id: Some(cluster_id),
            metadata: serde_json::json!({ "display_prefix": token.id(), "max_uses": max_uses, "ttl_seconds": ttl }),
        },
    )
    .await?;
    tx.commit().await?;
    let stored = tokens::get(&state.pool, cluster_id, token_id)
        .await?
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("the token just created is gone")))?;
    let plaintext = token.plaintext();
    let url = format!("{}/join", state.settings.join_base_url);
    Ok((
        StatusCode::CREATED,
        Extension(IssuesSecret),
        AppJson(CreatedToken {
            token: stored,
            join_command: join_command(&url, &plaintext),
            join_url: url,
            plaintext,
        }),
    )
        .into_response())
}

/// List a cluster's join tokens
///
/// Newest first. The plaintext is never returned again.
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/tokens",
    tag = "nodes",
    params(("cluster_id" = Uuid, Path), PageQuery),
    responses(
        (status = 200, body = Vec<Token>),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<PageQuery>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<Vec<Token>>, ApiError> {
    let limit = query.limit()?;
    Ok(AppJson(tokens::list(&state.pool, cluster.id, limit).await?))
}

/// Revoke a join token
///
/// An active token becomes `revoked`: no join attempt can take a use of it
/// any more, and the bootstrap Secrets of attempts under way with it are
/// deleted at once (by the node sync when the cluster cannot be reached).
/// Revoking a revoked token changes nothing; a used or expired one is 409.
#[utoipa::path(
    delete,
    path = "/api/console/clusters/{cluster_id}/tokens/{token_id}",
    tag = "nodes",
    params(("cluster_id" = Uuid, Path), ("token_id" = Uuid, Path)),
    responses(
        (status = 200, body = Token),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is used or expired (`token_not_active`)", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(cluster): OwnedCluster,
    AppPath((_, token_id)): AppPath<(Uuid, Uuid)>,
) -> Result<AppJson<Token>, ApiError> {
    let cluster_id = cluster.id;
    let mut tx = state.pool.begin().await?;
    if !tokens::revoke(&mut tx, cluster_id, token_id, caller.user_id).await? {
        drop(tx);
        let token = tokens::get(&state.pool, cluster_id, token_id)
            .await?
            .ok_or(ApiError::NotFound { what: "token" })?;
        return match token.status {
            JoinTokenStatus::Revoked => Ok(AppJson(token)),
            status => Err(ApiError::Conflict {
                code: "token_not_active",
                detail: format!("the token is {status}; only an active token can be revoked"),
            }),
        };
    }
    audit::record(
        &mut *tx,
        AuditEvent {
            actor_user_id: Some(caller.user_id),
            actor_kind: "user",
            action: "token.revoke",
            target_kind: "token",
            target_id: token_id.to_string(),
            cluster_id: Some(cluster_id),
            metadata: serde_json::json!({}),
        },
    )
    .await?;
    tx.commit().await?;
    // The bootstrap Secrets of joins still under way go at once.
    let secrets = tokens::stale_secrets_of(&state.pool, Some(token_id), tokens::JOIN_GRACE).await?;
    if !secrets.is_empty() {
        let client = match cluster.api_endpoint.as_deref() {
            Some(endpoint) => cluster_client(&state, &cluster, endpoint)
                .await
                .map_err(|e| e.to_string()),
            None => Err("the cluster has no endpoint".into()),
        };
        for secret in &secrets {
            let deleted = match &client {
                Ok(client) => jointoken::delete_bootstrap_secret(client.clone(), &secret.name)
                    .await
                    .map_err(|e| e.to_string()),
                Err(error) => Err(error.clone()),
            };
            match deleted {
                Ok(()) => tokens::mark_secret_deleted(&state.pool, secret).await?,
                Err(error) => {
                    tracing::warn!(%cluster_id, %token_id, error, "bootstrap Secret not deleted yet; the node sync will retry");
                }
            }
        }
    }
    tokens::get(&state.pool, cluster_id, token_id)
        .await?
        .map(AppJson)
        .ok_or(ApiError::NotFound { what: "token" })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AttemptsQuery {
    /// Only the attempts with this token.
    pub token_id: Option<Uuid>,
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// Join attempts of a cluster
///
/// The ledger of every use of the cluster's join tokens, newest first: when,
/// from where, which machine, the outcome and its reason, and each step the
/// join script reported.
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/join-attempts",
    tag = "nodes",
    params(("cluster_id" = Uuid, Path), AttemptsQuery),
    responses(
        (status = 200, body = Vec<Attempt>),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn attempts(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<AttemptsQuery>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<Vec<Attempt>>, ApiError> {
    let limit = shared::extract::page_limit(query.limit)?;
    let cluster_id = cluster.id;
    Ok(AppJson(
        tokens::list_attempts(&state.pool, cluster_id, query.token_id, limit).await?,
    ))
}
