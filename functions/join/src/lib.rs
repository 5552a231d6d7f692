//! `join`: the public function machines talk to while they join. No account is
//! involved: the join token is the credential.
//!
//! - `GET /join` with `Authorization: Bearer <token>` serves the POSIX shell
//!   script for one join attempt, or a plain 404 (unknown token) / 410 (used,
//!   expired or revoked token). Tokens are looked up by hash only, so an
//!   answer says nothing about any other token.
//! - `POST /join/steps` takes the steps the script reports (same bearer);
//!   reporting `join` as `running` is what takes a use of the token, and the
//!   answer then carries a bootstrap token made for that attempt alone (its
//!   Secret created in the cluster's `kube-system`, expiring with the join
//!   window), which the script presents to the control plane; reporting
//!   `approval` as `running` asks the platform to approve the kubelet's
//!   certificate request for the host name the attempt reported (one node
//!   per attempt, see `shared::nodes::approval`), after which that bootstrap
//!   token is deleted.
//!
//! The token never travels in a URL, so neither our logs nor a proxy's keep it.

use axum::{
    Router,
    extract::{Request, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use shared::{
    app::plan,
    audit::{self, AuditEvent},
    billing::entitlements,
    clusters,
    domain::{JoinOutcome, JoinStepStatus},
    host::{Join, engine},
    http::AppState,
    nodes::{
        approval::{self, Choice},
        jointoken::{self, JoinToken, ScriptParams},
        reasons::{self, JoinDetailCode, JoinReason, Params},
        tokens::{self, NewAttempt, NewStep, Presented, StaleSecret},
    },
};
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

/// How far a joining machine's clock may be from the platform's.
pub const MAX_CLOCK_SKEW_SECS: u64 = 60;
/// Steps one attempt may report.
const MAX_STEPS: i64 = 100;
/// The step a script reports, again and again, while its node waits for
/// the platform's approval.
const APPROVAL_STEP: &str = "approval";

/// The function's routes and its part of the OpenAPI document, from one
/// list: each path is written once, in its handler's `#[utoipa::path]`.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(report))
        .routes(routes!(script))
}

pub fn router() -> Router<AppState> {
    routes().into()
}

#[derive(OpenApi)]
#[openapi(tags((name = "join", description = "Public endpoints joining machines use")))]
struct ApiDoc;

/// A refusal: a plain message that is also a two-line shell script, so that
/// `curl -sSL <url> | sudo sh` prints it and exits 1 instead of running nothing.
fn plain(status: StatusCode, message: &str) -> Response {
    let quoted = message.replace('\'', r"'\''");
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        format!("echo '{quoted}' >&2\nexit 1\n"),
    )
        .into_response()
}

const UNKNOWN: &str = "kubebyon: this join token is not valid";

/// Refused attempts the ledger records for one token in an hour: whoever
/// holds a revoked or used-up token could otherwise fill its owner's
/// ledger (and their page) with rows. Past it a refusal is answered alike
/// and not recorded.
pub const REFUSALS_RECORDED_PER_TOKEN: shared::accounts::auth::Limit =
    shared::accounts::auth::Limit {
        name: "join:refused",
        max: 20,
        window: std::time::Duration::from_secs(3600),
    };

/// Records a refused attempt in the ledger, while its token's refusals of
/// the hour are fewer than [`REFUSALS_RECORDED_PER_TOKEN`], and answers with
/// its reason.
async fn refuse(
    pool: &sqlx::PgPool,
    attempt: NewAttempt<'_>,
    status: StatusCode,
    reason: JoinReason,
) -> Response {
    let attempt = NewAttempt {
        refused: Some(&reason),
        ..attempt
    };
    let key = attempt.token_id.to_string();
    let recorded =
        match shared::accounts::auth::rate_limit(pool, REFUSALS_RECORDED_PER_TOKEN, &key).await {
            Ok(()) => tokens::insert_attempt(pool, &attempt).await.map(|_| ()),
            Err(shared::error::ApiError::TooManyRequests { .. }) => Ok(()),
            Err(err) => return internal(err),
        };
    match recorded {
        Ok(()) => plain(status, &format!("kubebyon: {}", reason.message())),
        Err(err) => internal(err),
    }
}

/// The token a request presents as bearer credential.
fn bearer(headers: &header::HeaderMap) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|v| v.trim().to_string())
}

async fn lookup(state: &AppState, token: &str) -> Result<Option<Presented>, Response> {
    if !jointoken::well_formed(token) {
        return Ok(None);
    }
    tokens::find_presented(&state.pool, &jointoken::hash(token))
        .await
        .map_err(internal)
}

fn internal(err: impl std::fmt::Display) -> Response {
    tracing::error!(error = %err, "join request failed");
    plain(
        StatusCode::INTERNAL_SERVER_ERROR,
        "kubebyon: the platform failed to answer; try again",
    )
}

/// The join script for a token
///
/// A POSIX shell script, to be piped into `sudo sh`, that checks the machine,
/// reports each step and joins the cluster. Each fetch starts a join attempt
/// in the cluster's ledger.
#[utoipa::path(
    get,
    path = "/join",
    tag = "join",
    params(("Authorization" = String, Header, description = "`Bearer <token>`: the join token, `<id>.<secret>`")),
    responses(
        (status = 200, description = "The script", content_type = "text/x-shellscript", body = String),
        (status = 401, description = "No `Authorization: Bearer` token", content_type = "text/plain", body = String),
        (status = 404, description = "An unknown token", content_type = "text/plain", body = String),
        (status = 410, description = "The token is used, expired or revoked", content_type = "text/plain", body = String),
        (status = 503, description = "The cluster is not ready", content_type = "text/plain", body = String),
    )
)]
pub async fn script(State(state): State<AppState>, request: Request) -> Response {
    let Some(token) = bearer(request.headers()) else {
        let mut refused = plain(
            StatusCode::UNAUTHORIZED,
            "kubebyon: the join command sends its token as Authorization: Bearer <token>; copy the command again",
        );
        refused.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return refused;
    };
    let presented = match lookup(&state, &token).await {
        Ok(Some(presented)) => presented,
        Ok(None) => return plain(StatusCode::NOT_FOUND, UNKNOWN),
        Err(response) => return response,
    };
    let headers = request.headers();
    let mut attempt = NewAttempt {
        token_id: presented.token_id,
        cluster_id: presented.cluster_id,
        source_ip: shared::http::client_ip(
            headers,
            request.extensions(),
            state.settings.trusted_proxy_hops,
        ),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok()),
        refused: None,
    };
    if let Some(reason) = presented.refusal.clone() {
        return refuse(&state.pool, attempt, StatusCode::GONE, reason).await;
    }
    let cluster = match clusters::get(&state.pool, presented.cluster_id).await {
        Ok(Some(cluster)) => cluster,
        Ok(None) => return plain(StatusCode::NOT_FOUND, UNKNOWN),
        Err(err) => return internal(err),
    };
    let endpoint = match (presented.cluster_ready, presented.api_endpoint.as_deref()) {
        (true, Some(endpoint)) => endpoint.to_string(),
        _ => {
            let reason = JoinReason::ClusterNotReady {
                status: cluster.status.to_string(),
            };
            return refuse(
                &state.pool,
                attempt,
                StatusCode::SERVICE_UNAVAILABLE,
                reason,
            )
            .await;
        }
    };
    let ca = match state.host.as_ref() {
        Some(host) => match host.certificate_authority(&cluster).await {
            Ok(ca) => ca,
            Err(err) => {
                tracing::warn!(cluster_id = %cluster.id, error = %err, "could not read the cluster's CA");
                return refuse(
                    &state.pool,
                    attempt,
                    StatusCode::SERVICE_UNAVAILABLE,
                    JoinReason::CaUnreadable,
                )
                .await;
            }
        },
        None => None,
    };
    if ca.is_none() {
        return refuse(
            &state.pool,
            attempt,
            StatusCode::SERVICE_UNAVAILABLE,
            JoinReason::CaUnknown,
        )
        .await;
    }
    attempt.refused = None;
    let attempt_id = match tokens::insert_attempt(&state.pool, &attempt).await {
        Ok(id) => id,
        Err(err) => return internal(err),
    };
    let report_url = format!("{}/join/steps", state.settings.join_base_url);
    // What kubeadm writes into kubelet.conf: the advertised address.
    let kubelet_server = match state.host.as_ref() {
        Some(host) => match host.advertised(&cluster).await {
            Ok(advertised) => advertised.map(|a| {
                let port = u16::try_from(a.port).unwrap_or_default();
                format!("https://{}", std::net::SocketAddr::new(a.address, port))
            }),
            Err(err) => {
                tracing::warn!(cluster_id = %cluster.id, error = %err, "could not read the address the cluster advertises");
                None
            }
        },
        None => None,
    };
    let body = jointoken::render_script(&ScriptParams {
        cluster_name: &presented.cluster_name,
        token: &token,
        attempt_id,
        report_url: &report_url,
        endpoint: &endpoint,
        ca_pem: ca.as_deref(),
        max_clock_skew_secs: MAX_CLOCK_SKEW_SECS,
        join: engine::of(cluster.engine).join(),
        kubernetes_version: &cluster.kubernetes_version,
        kubelet_server: kubelet_server.as_deref(),
    });
    (
        [
            (header::CONTENT_TYPE, "text/x-shellscript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// One step a join script reports.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepReport {
    pub attempt_id: Uuid,
    /// Lowercase letters, digits and `_`, up to 32: `os`, `arch`, `root`,
    /// `cgroups`, `swap`, `existing_kubelet`, `ports`, `clock`, `dns`, `api`,
    /// `join`, `done`.
    #[schema(pattern = "^[a-z][a-z0-9_]{0,31}$")]
    pub step: String,
    #[schema(value_type = JoinStepStatus)]
    pub status: String,
    /// What the script found, as a code the console words in its reader's
    /// language; `detail` says the same in English.
    #[schema(value_type = Option<JoinDetailCode>)]
    pub code: Option<String>,
    /// The code's parameters: at most 8, named like `step`, each at most
    /// 300 characters. Only with a code.
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub params: Option<Params>,
    /// What it found, in English: plain text, at most 1000 characters, no
    /// control, direction or zero-width characters.
    #[schema(max_length = 1000)]
    pub detail: Option<String>,
    /// The machine's host name (its node name, lowercased): a DNS subdomain.
    #[schema(
        min_length = 1,
        max_length = 253,
        pattern = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
    )]
    pub hostname: Option<String>,
}

/// The platform's answer to a step report.
#[derive(Debug, Serialize, ToSchema)]
pub struct StepReply {
    /// The platform's clock (Unix seconds), for the clock check.
    pub server_epoch: i64,
    /// Why the report was refused, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// With the report that took a use (`join` `running`): the bootstrap
    /// token made for this attempt alone, `<id>.<secret>`, which the control
    /// plane's join endpoint accepts until the join window closes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_token: Option<String>,
}

fn reply(status: StatusCode, message: Option<String>) -> Response {
    (
        status,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(StepReply {
            server_epoch: chrono::Utc::now().timestamp(),
            message,
            bootstrap_token: None,
        }),
    )
        .into_response()
}

/// A host name is the node's name: what the API server would accept as one.
fn valid_hostname(hostname: &str) -> bool {
    shared::domain::NodeName::parse(hostname).is_ok()
}

/// Report a join step
///
/// Called by the join script with its token as bearer credential. Reporting
/// `join` as `running` takes one use of the token (410 when none is left, or
/// the token expired or was revoked in the meantime) and answers the
/// attempt's own bootstrap token (502, the use given back, when the cluster
/// would not take it; 403 when one more node would pass the plan of the
/// cluster's owner; 409 when a node of the attempt's host name exists, and
/// 422 without a host name). `approval` as `running` asks for the node's
/// approval: the platform approves the one certificate request the
/// kubelet filed with the attempt's bootstrap token for the attempt's host
/// name (200, the bootstrap token then deleted), answers 202 while there is
/// none, and 409 when the node cannot be approved (every other request filed
/// with that token is denied). `failed` ends the attempt with the step's
/// detail as its reason; `done` as `ok` ends it as succeeded.
#[utoipa::path(
    post,
    path = "/join/steps",
    tag = "join",
    request_body = StepReport,
    responses(
        (status = 200, body = StepReply),
        (status = 202, description = "`approval`: the kubelet has not filed its certificate request yet, or the cluster could not be asked; report again", body = StepReply),
        (status = 401, description = "No token", body = StepReply),
        (status = 403, description = "One more node would pass the plan of the cluster's owner; the attempt is refused and the script prints the message", body = StepReply),
        (status = 404, description = "Unknown token or attempt", body = StepReply),
        (status = 409, description = "The attempt has ended; or a node of its host name exists already, or another machine is joining under it", body = StepReply),
        (status = 410, description = "The token cannot be used any more", body = StepReply),
        (status = 422, description = "Malformed report", body = StepReply),
        (status = 429, description = "Too many reports for one attempt", body = StepReply),
        (status = 502, description = "The cluster did not take the attempt's bootstrap token; the use was given back", body = StepReply),
    )
)]
pub async fn report(State(state): State<AppState>, request: Request) -> Response {
    let Some(token) = bearer(request.headers()) else {
        return reply(
            StatusCode::UNAUTHORIZED,
            Some("the join token is required as bearer credential".into()),
        );
    };
    let body = match axum::body::to_bytes(request.into_body(), 16 * 1024).await {
        Ok(body) => body,
        Err(_) => {
            return reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                Some("the report is too large".into()),
            );
        }
    };
    let report: StepReport = match serde_json::from_slice(&body) {
        Ok(report) => report,
        Err(err) => {
            return reply(
                StatusCode::UNPROCESSABLE_ENTITY,
                Some(format!("malformed report: {err}")),
            );
        }
    };
    let invalid = if !reasons::valid_name(&report.step) {
        Some("step must be 1–32 lowercase letters, digits or '_', starting with a letter")
    } else if JoinStepStatus::parse(&report.status).is_none() {
        Some("status must be running, ok, warning, failed or skipped")
    } else if report
        .code
        .as_deref()
        .is_some_and(|c| JoinDetailCode::parse(c).is_none())
    {
        Some("code must be one of the JoinDetailCode values of the API document")
    } else if report.params.is_some() && report.code.is_none() {
        Some("params go only with a code")
    } else if let Some(invalid) = report.params.as_ref().and_then(reasons::invalid_params) {
        Some(invalid)
    } else if report
        .detail
        .as_ref()
        .is_some_and(|d| d.chars().count() > 1000)
    {
        Some("detail must be at most 1000 characters")
    } else if report
        .detail
        .as_deref()
        .is_some_and(shared::domain::hides_text)
    {
        // The owner reads it in the console: nothing may reorder or hide
        // what it says.
        Some("detail must be plain text: no control, direction or zero-width characters")
    } else if report
        .hostname
        .as_deref()
        .is_some_and(|h| !valid_hostname(h))
    {
        Some("hostname must be a lowercase DNS subdomain (a node name)")
    } else {
        None
    };
    if let Some(message) = invalid {
        return reply(StatusCode::UNPROCESSABLE_ENTITY, Some(message.into()));
    }
    let presented = match lookup(&state, &token).await {
        Ok(Some(presented)) => presented,
        Ok(None) => return reply(StatusCode::NOT_FOUND, Some(UNKNOWN.into())),
        Err(response) => return response,
    };
    match record_step(&state, &presented, &report).await {
        Ok(Ok(Recorded::Step)) => reply(StatusCode::OK, None),
        Ok(Ok(Recorded::UseTaken(bootstrap))) => {
            hand_out(&state, &presented, &report, bootstrap).await
        }
        Ok(Ok(Recorded::ApprovalAsked(asked))) => {
            approve_node(&state, &presented, &report, asked).await
        }
        Ok(Err((status, message))) => reply(status, Some(message)),
        Err(err) => {
            tracing::error!(error = %err, "recording a join step failed");
            reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some("the platform failed to record the step; try again".into()),
            )
        }
    }
}

type Refusal = (StatusCode, String);

/// What a recorded step asks of the platform besides recording it.
enum Recorded {
    Step,
    /// The step took a use: the attempt's new bootstrap token, not made in
    /// the cluster yet.
    UseTaken((JoinToken, chrono::DateTime<chrono::Utc>)),
    /// The script asks for its node's approval.
    ApprovalAsked(ApprovalAsked),
}

struct ApprovalAsked {
    hostname: String,
    bootstrap_secret_name: String,
    chosen_before: Option<String>,
}

/// A client for the cluster's own API, as the platform's admin.
async fn cluster_client(state: &AppState, cluster_id: Uuid) -> Result<kube::Client, String> {
    Ok(cluster_and_client(state, cluster_id).await?.1)
}

/// The cluster, and a client for its own API as the platform's admin.
async fn cluster_and_client(
    state: &AppState,
    cluster_id: Uuid,
) -> Result<(clusters::Cluster, kube::Client), String> {
    let host = state.host.as_ref().ok_or("no host cluster is configured")?;
    let cluster = clusters::get(&state.pool, cluster_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the cluster is gone")?;
    let endpoint = cluster
        .api_endpoint
        .as_deref()
        .ok_or("the cluster has no endpoint")?;
    let client = host
        .vcluster_client(&cluster, endpoint)
        .await
        .map_err(|e| e.to_string())?;
    Ok((cluster, client))
}

/// Approves the kubelet's certificate request for the attempt's node, if
/// it has filed one: 200 once approved (the attempt's bootstrap token is then
/// deleted), 202 while there is none, 409 when the node cannot be approved.
async fn approve_node(
    state: &AppState,
    presented: &Presented,
    report: &StepReport,
    asked: ApprovalAsked,
) -> Response {
    let unavailable = |error: String| {
        tracing::warn!(cluster_id = %presented.cluster_id, attempt_id = %report.attempt_id, error, "could not look at an attempt's certificate requests");
        reply(
            StatusCode::ACCEPTED,
            Some("the platform could not reach the cluster's control plane; asking again".into()),
        )
    };
    let client = match cluster_client(state, presented.cluster_id).await {
        Ok(client) => client,
        Err(error) => return unavailable(error),
    };
    let token_id = asked
        .bootstrap_secret_name
        .strip_prefix("bootstrap-token-")
        .unwrap_or_default();
    let choice = match approval::choose(
        client.clone(),
        token_id,
        &asked.hostname,
        asked.chosen_before.as_deref(),
    )
    .await
    {
        Ok(choice) => choice,
        Err(err) => return unavailable(err.to_string()),
    };
    let (request, approved) = match choice {
        Choice::Waiting => {
            return reply(
                StatusCode::ACCEPTED,
                Some("the kubelet has not asked for its certificate yet".into()),
            );
        }
        Choice::Refused { reason } => return end_attempt(state, report, reason).await,
        Choice::Approve { request, approved } => (request, approved),
    };
    let recorded = async {
        let mut tx = state.pool.begin().await?;
        let recorded = tokens::record_node_approval(
            &mut tx,
            presented.cluster_id,
            report.attempt_id,
            &asked.hostname,
            &request,
            tokens::JOIN_GRACE,
        )
        .await?;
        if recorded == Ok(true) {
            // A node joins the cluster: the machine acts with the token.
            audit::record(
                &mut *tx,
                AuditEvent {
                    actor_user_id: None,
                    actor_kind: "node",
                    action: "node.approved",
                    target_kind: "node",
                    target_id: asked.hostname.clone(),
                    cluster_id: Some(presented.cluster_id),
                    metadata: serde_json::json!({
                        "token_id": presented.token_id,
                        "attempt_id": report.attempt_id,
                        "certificate_request": request,
                    }),
                },
            )
            .await?;
        }
        tx.commit().await?;
        Ok::<_, sqlx::Error>(recorded)
    };
    match recorded.await {
        Ok(Ok(_)) => {}
        Ok(Err(reason)) => {
            if let Err(err) = approval::deny(client, &request, &reason.message()).await {
                tracing::warn!(error = %err, "could not deny a certificate request");
            }
            return end_attempt(state, report, reason).await;
        }
        Err(err) => return internal(err),
    }
    if !approved
        && let Err(err) = approval::approve(client.clone(), &request, &asked.hostname).await
    {
        return unavailable(err.to_string());
    }
    // The node has its certificate: the attempt's bootstrap token has done
    // its work and goes at once, so nothing else can be filed with it.
    match jointoken::delete_bootstrap_secret(client, &asked.bootstrap_secret_name).await {
        Ok(()) => {
            let secret = StaleSecret {
                token_id: presented.token_id,
                attempt_id: Some(report.attempt_id),
                cluster_id: presented.cluster_id,
                name: asked.bootstrap_secret_name,
            };
            if let Err(err) = tokens::mark_secret_deleted(&state.pool, &secret).await {
                return internal(err);
            }
        }
        // The sweep deletes it when the attempt ends or its window closes.
        Err(err) => {
            tracing::warn!(cluster_id = %presented.cluster_id, error = %err, "could not delete an approved attempt's bootstrap token")
        }
    }
    reply(StatusCode::OK, None)
}

/// Ends an attempt whose node cannot be approved, and answers 409 with why.
async fn end_attempt(state: &AppState, report: &StepReport, reason: JoinReason) -> Response {
    let ended = async {
        let mut conn = state.pool.acquire().await?;
        tokens::finish_attempt(
            &mut conn,
            report.attempt_id,
            JoinOutcome::Failed,
            Some(&reason),
        )
        .await
    };
    match ended.await {
        Ok(()) => reply(StatusCode::CONFLICT, Some(reason.message())),
        Err(err) => internal(err),
    }
}

/// Makes the attempt's bootstrap token inside the cluster and answers it to
/// the script. When the cluster does not take it, the use goes back to the
/// token and the attempt fails with the reason.
async fn hand_out(
    state: &AppState,
    presented: &Presented,
    report: &StepReport,
    bootstrap: (JoinToken, chrono::DateTime<chrono::Utc>),
) -> Response {
    let (token, expires_at) = bootstrap;
    let created = async {
        let (cluster, client) = cluster_and_client(state, presented.cluster_id).await?;
        // Only the platform approves a joining kubelet's certificate.
        let join = engine::of(cluster.engine).join();
        match join {
            // A binding that lets the cluster approve it by itself goes first.
            Join::VclusterEndpoint => approval::remove_auto_approval(client.clone())
                .await
                .map(|_| ()),
            // The token's group of the platform's own may do what `kubeadm
            // join` does, and nothing approves its requests by itself.
            Join::Kubeadm => {
                approval::grant_join_rights(client.clone(), join.bootstrap_group()).await
            }
        }
        .map_err(|e| e.to_string())?;
        let secret = token.bootstrap_secret(expires_at, join);
        match jointoken::create_bootstrap_secret(client, &secret).await {
            Ok(true) => Ok(()),
            Ok(false) => Err("a bootstrap token of that id exists already".to_string()),
            Err(err) => Err(err.to_string()),
        }
    };
    if let Err(error) = created.await {
        tracing::warn!(cluster_id = %presented.cluster_id, attempt_id = %report.attempt_id, error, "could not make an attempt's bootstrap token");
        let reason = JoinReason::BootstrapNotTaken;
        let given_back = async {
            let mut tx = state.pool.begin().await?;
            tokens::give_back_use(&mut tx, presented.token_id, report.attempt_id, &reason).await?;
            tx.commit().await
        };
        if let Err(err) = given_back.await {
            return internal(err);
        }
        return reply(StatusCode::BAD_GATEWAY, Some(reason.message()));
    }
    (
        StatusCode::OK,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(StepReply {
            server_epoch: chrono::Utc::now().timestamp(),
            message: None,
            bootstrap_token: Some(token.plaintext()),
        }),
    )
        .into_response()
}

/// Why one more node would pass the plan of the cluster's owner, if it
/// would: under their entitlement lock, so two joins at the last free slot
/// are decided one after the other (a join under way counts as a node).
async fn over_node_limit(
    state: &AppState,
    tx: &mut sqlx::PgConnection,
    cluster_id: Uuid,
) -> Result<Option<JoinReason>, sqlx::Error> {
    let Some(locked) = plan::lock_for_cluster(tx, cluster_id).await? else {
        return Ok(Some(JoinReason::ClusterGone));
    };
    let one_node = entitlements::Amounts {
        nodes: 1,
        ..Default::default()
    };
    let refused = locked
        .refuse(tx, &one_node, &state.settings.public_base_url)
        .await?;
    Ok(refused.map(|limit| JoinReason::PlanNodeLimit {
        plan: limit.plan,
        limit: limit.limit,
        usage: limit.usage,
        upgrade_url: limit.upgrade_url,
    }))
}

/// Ends the attempt as refused before it takes a use, and answers why.
async fn refuse_use(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    report: &StepReport,
    status: StatusCode,
    reason: JoinReason,
) -> Result<Result<Recorded, Refusal>, sqlx::Error> {
    tokens::finish_attempt(
        &mut tx,
        report.attempt_id,
        JoinOutcome::Refused,
        Some(&reason),
    )
    .await?;
    tx.commit().await?;
    Ok(Err((status, reason.message())))
}

/// Records one step, and says what else it asks for.
async fn record_step(
    state: &AppState,
    presented: &Presented,
    report: &StepReport,
) -> Result<Result<Recorded, Refusal>, sqlx::Error> {
    let status = JoinStepStatus::parse(&report.status).expect("validated above");
    let mut tx = state.pool.begin().await?;
    let Some(attempt) = tokens::lock_attempt(
        &mut tx,
        report.attempt_id,
        presented.token_id,
        &report.step,
        status,
    )
    .await?
    else {
        return Ok(Err((
            StatusCode::NOT_FOUND,
            "no such join attempt for this token".into(),
        )));
    };
    // The node sync ends an attempt as succeeded when it sees the node, which
    // can be before the script reports how its join ended: those last reports
    // (`join` and `done` ok) are still recorded, so the attempt's checklist
    // ends as the machine saw it. Anything else after the end is refused.
    let closing = attempt.outcome == JoinOutcome::Succeeded
        && status == JoinStepStatus::Ok
        && matches!(report.step.as_str(), "join" | "done");
    if !closing
        && matches!(
            attempt.outcome,
            JoinOutcome::Refused | JoinOutcome::Succeeded | JoinOutcome::Failed
        )
    {
        return Ok(Err((
            StatusCode::CONFLICT,
            format!(
                "this join attempt has ended ({}); fetch the script again",
                attempt.outcome
            ),
        )));
    }
    if attempt.steps >= MAX_STEPS {
        return Ok(Err((
            StatusCode::TOO_MANY_REQUESTS,
            "too many steps for one attempt".into(),
        )));
    }
    // The script asks again and again while it waits for its node's
    // approval: the ledger keeps the first of a run of the same report.
    if !(attempt.repeats_last_step && report.step == APPROVAL_STEP) {
        let step = NewStep {
            step: &report.step,
            status,
            code: report.code.as_deref().and_then(JoinDetailCode::parse),
            params: report.params.as_ref(),
            detail: report.detail.as_deref(),
            hostname: report.hostname.as_deref(),
        };
        tokens::insert_step(&mut tx, report.attempt_id, &step).await?;
    }
    // The first host name an attempt reports is the only node it may join.
    let hostname = attempt.hostname.clone().or(report.hostname.clone());
    let mut outcome = Ok(Recorded::Step);
    match (report.step.as_str(), report.status.as_str()) {
        ("join", "running") => {
            // One use per attempt: a replay would take another use and make
            // another live bootstrap token.
            if attempt.bootstrap_secret_name.is_some() {
                return Ok(Err((
                    StatusCode::CONFLICT,
                    "this join attempt has taken its use of the token already; fetch the script again for another".into(),
                )));
            }
            let Some(hostname) = hostname else {
                let reason = JoinReason::HostnameRequired;
                return refuse_use(tx, report, StatusCode::UNPROCESSABLE_ENTITY, reason).await;
            };
            if tokens::node_name_taken(&mut *tx, presented.cluster_id, &hostname).await? {
                let reason = JoinReason::NodeExists { hostname };
                return refuse_use(tx, report, StatusCode::CONFLICT, reason).await;
            }
            if let Some(reason) = over_node_limit(state, &mut tx, presented.cluster_id).await? {
                return refuse_use(tx, report, StatusCode::FORBIDDEN, reason).await;
            }
            let bootstrap = JoinToken::generate();
            let expires_at = chrono::Utc::now()
                + chrono::Duration::from_std(tokens::JOIN_GRACE).expect("a short window");
            match tokens::take_use(
                &mut tx,
                presented.token_id,
                report.attempt_id,
                &jointoken::bootstrap_secret_name(bootstrap.id()),
                expires_at,
            )
            .await?
            {
                Ok(()) => outcome = Ok(Recorded::UseTaken((bootstrap, expires_at))),
                Err(reason) => return refuse_use(tx, report, StatusCode::GONE, reason).await,
            }
        }
        (APPROVAL_STEP, "running") => {
            let (Some(hostname), Some(bootstrap_secret_name), JoinOutcome::Joining) = (
                hostname,
                attempt.bootstrap_secret_name.clone(),
                attempt.outcome,
            ) else {
                return Ok(Err((
                    StatusCode::CONFLICT,
                    "this join attempt has not taken a use of its token".into(),
                )));
            };
            let chosen_before = attempt.node_request_name.clone();
            if chosen_before.is_none()
                && !tokens::start_node_check(&mut tx, report.attempt_id).await?
            {
                tx.commit().await?;
                return Ok(Err((
                    StatusCode::ACCEPTED,
                    "the kubelet has not asked for its certificate yet".into(),
                )));
            }
            outcome = Ok(Recorded::ApprovalAsked(ApprovalAsked {
                hostname,
                bootstrap_secret_name,
                chosen_before,
            }));
        }
        (step, "failed") => {
            let reason = JoinReason::StepFailed {
                step: step.to_string(),
                detail: report.detail.clone(),
            };
            tokens::finish_attempt(
                &mut tx,
                report.attempt_id,
                JoinOutcome::Failed,
                Some(&reason),
            )
            .await?;
        }
        ("done", "ok") => {
            tokens::finish_attempt(&mut tx, report.attempt_id, JoinOutcome::Succeeded, None)
                .await?;
        }
        _ => {}
    }
    tx.commit().await?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_hostnames_are_checked() {
        assert!(reasons::valid_name("existing_kubelet"));
        assert!(!reasons::valid_name("Join"));
        assert!(!reasons::valid_name("9lives"));
        assert!(!reasons::valid_name(""));
        assert!(valid_hostname("worker-1.example"));
        assert!(!valid_hostname("Worker_1"));
        assert!(!valid_hostname("-worker"));
        assert!(!valid_hostname("a..b"));
    }
}
