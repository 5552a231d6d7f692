//! Kubeconfigs: each one issued carries a credential of its own (a
//! ServiceAccount token from the cluster's TokenRequest API, with an expiry),
//! listed and revocable by the cluster's owner. The control plane's admin
//! credential never leaves the platform.

use axum::{
    Extension,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use base64::Engine;
use serde::{Deserialize, Serialize};
use shared::{
    app::authority,
    audit::{self, AuditEvent},
    clusters::Cluster,
    error::ApiError,
    extract::{AppJson, AppPath, AppQuery, PageQuery},
    http::{AppState, Caller, Origin, OwnedCluster, idempotency::IssuesSecret},
    kubeconfigs::{self, Credential, Kind, NewCredential, credential},
    organizations::Action,
};
use utoipa::ToSchema;
use uuid::Uuid;

/// What a new kubeconfig is for.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IssueKubeconfig {
    /// Lifetime of its token in seconds: 600 up to the platform's maximum
    /// (24 hours unless the operator sets it; the documented maximum is that
    /// default); the platform default (8 hours) when absent.
    #[schema(minimum = 600, maximum = 86_400)]
    pub expiration_seconds: Option<i64>,
    /// A note for the owner (where it is used), up to 200 characters, no
    /// control characters.
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub description: Option<String>,
}

/// Issue a kubeconfig
///
/// Makes a ServiceAccount of its own inside the cluster, bound to
/// `cluster-admin`, and answers a kubeconfig (the public endpoint, the
/// cluster's CA pinned) carrying a token for it that expires after
/// `expiration_seconds`. The token is not stored: download again for a new
/// one. `Location` names the credential, which can be revoked at once.
#[utoipa::path(
    post,
    path = "/api/console/clusters/{cluster_id}/kubeconfigs",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path)),
    request_body = IssueKubeconfig,
    responses(
        (status = 201, description = "A kubeconfig (JSON, which is also valid YAML)", content_type = "application/yaml", body = Object,
         headers(("Location" = String, description = "The credential: `/api/console/clusters/{cluster_id}/kubeconfigs/{credential_id}`"))),
        (status = 401, description = "Not signed in, or the credential was revoked while its token was issued (the user disabled): no kubeconfig (`unauthenticated`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not available yet (`kubeconfig_unavailable`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 502, description = "The cluster's API could not issue the token (`cluster_unreachable`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "No host cluster is configured", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn issue(
    State(state): State<AppState>,
    caller: Caller,
    origin: Origin,
    OwnedCluster(cluster): OwnedCluster,
    AppJson(body): AppJson<IssueKubeconfig>,
) -> Result<Response, ApiError> {
    let cluster_id = cluster.id;
    let config = state
        .settings
        .part::<shared::kubeconfigs::config::Config>()?;
    let max = config.max_ttl_seconds;
    let seconds = body
        .expiration_seconds
        .unwrap_or(config.default_ttl_seconds);
    let mut errors = Vec::new();
    let lifetimes = credential::MIN_SECONDS..=max;
    if !lifetimes.contains(&seconds) {
        errors.push(shared::error::FieldError::out_of_range(
            "expiration_seconds",
            &lifetimes,
        ));
    }
    if let Some(description) = &body.description
        && (description.chars().count() > 200 || description.chars().any(char::is_control))
    {
        errors.push(shared::error::FieldError::new(
            "description",
            "must be at most 200 characters, without control characters",
        ));
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let (server, ca) = connection_of(&state, &cluster).await?;
    let id = Uuid::new_v4();
    let new = Recorded {
        id,
        server,
        seconds,
        description: body.description.as_deref(),
        kind: Kind::Download,
    };
    record(&state, caller, &origin, &cluster, new).await?;
    let issued = issue_token(&state, caller, &cluster, server, id, seconds).await?;
    kubeconfigs::set_expiry(&state.pool, id, issued.expires_at).await?;
    let kubeconfig = render(&cluster, server, &ca, id, &issued.token);
    Ok((
        StatusCode::CREATED,
        Extension(IssuesSecret),
        [
            (header::CONTENT_TYPE, "application/yaml".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"kubeconfig-{}.yaml\"", cluster.name),
            ),
            (
                header::LOCATION,
                format!("/api/console/clusters/{cluster_id}/kubeconfigs/{id}"),
            ),
        ],
        kubeconfig,
    )
        .into_response())
}

/// List the cluster's kubeconfig credentials
///
/// Newest first, whatever their status; tokens are never shown again.
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/kubeconfigs",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path), PageQuery),
    responses(
        (status = 200, body = Vec<Credential>),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<PageQuery>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<Vec<Credential>>, ApiError> {
    let limit = query.limit()?;
    Ok(AppJson(
        kubeconfigs::list(&state.pool, cluster.id, limit).await?,
    ))
}

/// Read one kubeconfig credential
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/kubeconfigs/{credential_id}",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path), ("credential_id" = Uuid, Path)),
    responses(
        (status = 200, body = Credential),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    OwnedCluster(cluster): OwnedCluster,
    AppPath((_, credential_id)): AppPath<(Uuid, Uuid)>,
) -> Result<AppJson<Credential>, ApiError> {
    kubeconfigs::get(&state.pool, cluster.id, credential_id)
        .await?
        .map(AppJson)
        .ok_or(ApiError::NotFound {
            what: "kubeconfig credential",
        })
}

/// Revoke a kubeconfig credential
///
/// Its ServiceAccount is deleted inside the cluster at once, which ends
/// every token issued for it (`revoked`). When the cluster cannot be reached
/// the credential reads `revoking` until the cluster sync deletes the
/// ServiceAccount. Revoking again changes nothing. A member revokes their
/// own kubeconfigs; the organization's admins and owners anyone's (403
/// `forbidden` otherwise).
#[utoipa::path(
    delete,
    path = "/api/console/clusters/{cluster_id}/kubeconfigs/{credential_id}",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path), ("credential_id" = Uuid, Path)),
    responses(
        (status = 200, body = Credential),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    OwnedCluster(cluster): OwnedCluster,
    AppPath((_, credential_id)): AppPath<(Uuid, Uuid)>,
) -> Result<AppJson<Credential>, ApiError> {
    let cluster_id = cluster.id;
    let not_found = || ApiError::NotFound {
        what: "kubeconfig credential",
    };
    let theirs = kubeconfigs::get(&state.pool, cluster_id, credential_id)
        .await?
        .ok_or_else(not_found)?;
    if theirs.user_id != caller.user_id {
        let mut db = state.pool.acquire().await?;
        shared::http::owned::authorize(&mut db, &caller, cluster_id, Action::ManageMembers).await?;
    }
    let mut tx = state.pool.begin().await?;
    if kubeconfigs::revoke(
        &mut *tx,
        cluster_id,
        credential_id,
        Some(caller.user_id),
        "user",
    )
    .await?
    {
        audit::record(
            &mut *tx,
            event(caller, "kubeconfig.revoke", credential_id, cluster_id, 0),
        )
        .await?;
    }
    tx.commit().await?;
    let credential = kubeconfigs::get(&state.pool, cluster_id, credential_id)
        .await?
        .ok_or_else(not_found)?;
    if credential.status == "revoking"
        && let (Some(host), Some(server)) = (&state.host, cluster.api_endpoint.as_deref())
    {
        let removed = async {
            let client = host
                .vcluster_client(&cluster, server)
                .await
                .map_err(|e| e.to_string())?;
            credential::remove(client, credential_id)
                .await
                .map_err(|e| e.to_string())
        };
        match removed.await {
            Ok(()) => kubeconfigs::mark_removed(&state.pool, credential_id).await?,
            Err(error) => {
                tracing::warn!(%cluster_id, %credential_id, error, "ServiceAccount not deleted yet; the cluster sync will retry");
            }
        }
    }
    kubeconfigs::get(&state.pool, cluster_id, credential_id)
        .await?
        .map(AppJson)
        .ok_or(ApiError::NotFound {
            what: "kubeconfig credential",
        })
}

/// A credential about to be recorded.
#[derive(Clone, Copy)]
struct Recorded<'a> {
    id: Uuid,
    /// The cluster's API address it is for.
    server: &'a str,
    /// Its (first) token's lifetime.
    seconds: i64,
    description: Option<&'a str>,
    kind: Kind,
}

/// Records a new credential with its audit event before its ServiceAccount
/// is made: a failure half way leaves a revoked row whose ServiceAccount the
/// cluster sync deletes, never an untracked one. Recorded under the
/// caller's authority held again ([`authority::hold`]: 401 for a session
/// or key ended meanwhile, 403 for a role changed or a member removed),
/// with the API key it came with, so that whatever ends that
/// authority, at the same moment or later, ends this credential too.
async fn record(
    state: &AppState,
    caller: Caller,
    origin: &Origin,
    cluster: &Cluster,
    new: Recorded<'_>,
) -> Result<(), ApiError> {
    let Recorded {
        id,
        server,
        seconds,
        description,
        kind,
    } = new;
    let name = credential::service_account_name(id);
    let mut tx = state.pool.begin().await?;
    let scope = authority::Scope::Organization {
        id: cluster.organization_id,
        action: Action::IssueCredential,
    };
    authority::hold(&mut tx, caller.authority(), scope).await?;
    kubeconfigs::insert(
        &mut *tx,
        &NewCredential {
            id,
            cluster_id: cluster.id,
            user_id: caller.user_id,
            service_account_name: &name,
            description,
            expires_at: chrono::Utc::now() + chrono::Duration::seconds(seconds),
            ip: origin.ip.as_deref(),
            user_agent: origin.user_agent.as_deref(),
            api_endpoint: server,
            kind,
            api_key_id: caller.api_key_id,
        },
    )
    .await?;
    let mut event = event(caller, "kubeconfig.issue", id, cluster.id, seconds);
    if kind == Kind::Exec {
        event.metadata["kind"] = "exec".into();
    }
    if let Some(key) = caller.api_key_id {
        event.metadata["api_key_id"] = key.to_string().into();
    }
    audit::record(&mut *tx, event).await?;
    tx.commit().await?;
    Ok(())
}

/// Asks the cluster for a token of the credential `id` valid `seconds`,
/// making its ServiceAccount and binding when they are not there. A
/// failure revokes the credential (`issue_failed`) and answers 502.
///
/// A credential revoked while its token was issued (its key, its user) may
/// have had its ServiceAccount deleted before this issue made it again: the
/// record is read back after the issue, and a revoked one's ServiceAccount
/// is deleted again, left to the cluster sync if that fails, and 401
/// answered instead of the token.
async fn issue_token(
    state: &AppState,
    caller: Caller,
    cluster: &Cluster,
    server: &str,
    id: Uuid,
    seconds: i64,
) -> Result<credential::Issued, ApiError> {
    let host = state.host.as_ref().ok_or(ApiError::Unavailable)?;
    let client = host.vcluster_client(cluster, server).await;
    let issued = match &client {
        Ok(client) => credential::issue(client.clone(), id, caller.user_id, seconds)
            .await
            .map_err(|e| e.to_string()),
        Err(error) => Err(error.to_string()),
    };
    let issued = match issued {
        Ok(issued) => issued,
        Err(error) => {
            kubeconfigs::revoke(&state.pool, cluster.id, id, None, "issue_failed").await?;
            return Err(ApiError::Upstream {
                code: "cluster_unreachable",
                detail: format!("the cluster could not issue a token: {error}"),
            });
        }
    };
    let live = kubeconfigs::get(&state.pool, cluster.id, id)
        .await?
        .is_some_and(|c| c.revoked_at.is_none());
    if !live {
        kubeconfigs::removal_pending(&state.pool, id).await?;
        if let Ok(client) = client
            && credential::remove(client, id).await.is_ok()
        {
            kubeconfigs::mark_removed(&state.pool, id).await?;
        }
        return Err(ApiError::Unauthenticated);
    }
    Ok(issued)
}

/// The cluster's API address and its CA (PEM), while a kubeconfig is
/// available (409 `kubeconfig_unavailable` otherwise).
async fn connection_of<'c>(
    state: &AppState,
    cluster: &'c Cluster,
) -> Result<(&'c str, String), ApiError> {
    let server = available_endpoint(cluster)?;
    let host = state.host.as_ref().ok_or(ApiError::Unavailable)?;
    let ca = host
        .certificate_authority(cluster)
        .await
        .map_err(|err| ApiError::Internal(anyhow::anyhow!("reading the cluster's CA: {err}")))?
        .ok_or_else(|| unavailable(cluster))?;
    Ok((server, ca))
}

/// How to reach a cluster's API: what a kubeconfig names.
#[derive(Debug, Serialize, ToSchema)]
pub struct Connection {
    /// The cluster's API address.
    pub server: String,
    /// Its certificate authority, PEM in base64, as a kubeconfig's
    /// `certificate-authority-data` holds it.
    pub certificate_authority_data: String,
}

/// How to reach the cluster's API
///
/// The address and the CA a kubeconfig names, without any credential: what
/// `kubebyon kubeconfig` writes a kubeconfig from, whose user is the
/// `exec` plugin `kubebyon credential`.
#[utoipa::path(
    get,
    path = "/api/console/clusters/{cluster_id}/connection",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path)),
    responses(
        (status = 200, body = Connection),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not available yet (`kubeconfig_unavailable`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "No host cluster is configured", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn connection(
    State(state): State<AppState>,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<AppJson<Connection>, ApiError> {
    let (server, ca) = connection_of(&state, &cluster).await?;
    Ok(AppJson(Connection {
        server: server.to_string(),
        certificate_authority_data: base64::engine::general_purpose::STANDARD.encode(ca),
    }))
}

/// A token for kubectl, as an `exec` credential plugin answers it
/// (`client.authentication.k8s.io/v1`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecCredential {
    /// `client.authentication.k8s.io/v1`.
    pub api_version: &'static str,
    /// `ExecCredential`.
    pub kind: &'static str,
    pub status: ExecCredentialStatus,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecCredentialStatus {
    pub token: String,
    /// RFC 3339; kubectl asks again after it.
    pub expiration_timestamp: String,
}

/// Renew kubectl's token
///
/// For the `exec` credential plugin `kubebyon credential`: a token valid
/// minutes (`KUBEBYON_KUBECONFIG_EXEC_TTL_SECONDS`, 10 by default) for a
/// ServiceAccount bound to the API key that asks, made on the first call and
/// renewed after. Only an API key may ask (403 `api_key_required` from a
/// session);
/// revoking the key (or its user) revokes the credential, so kubectl stops
/// at its next renewal, and at once where the cluster answers.
#[utoipa::path(
    post,
    path = "/api/console/clusters/{cluster_id}/exec-credentials",
    tag = "clusters",
    params(("cluster_id" = Uuid, Path)),
    responses(
        (status = 201, body = ExecCredential,
         headers(("Location" = String, description = "The credential: `/api/console/clusters/{cluster_id}/kubeconfigs/{credential_id}`"))),
        (status = 401, description = "The key is not live, or it was revoked while the token was issued: no token (`unauthenticated`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an API key (`api_key_required`), or the caller's role may not hold a kubeconfig (`forbidden`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not available yet (`kubeconfig_unavailable`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 502, description = "The cluster's API could not issue the token (`cluster_unreachable`)", body = shared::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "No host cluster is configured", body = shared::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn exec_credential(
    State(state): State<AppState>,
    caller: Caller,
    origin: Origin,
    OwnedCluster(cluster): OwnedCluster,
) -> Result<Response, ApiError> {
    let api_key_id = caller.api_key_id.ok_or_else(|| {
        ApiError::Extended(Box::new(shared::error::ExtendedProblem {
            status: StatusCode::FORBIDDEN,
            code: "api_key_required",
            title: "An API key is required",
            detail:
                "kubectl's renewed tokens are bound to an API key: sign in with `kubebyon login`"
                    .into(),
            extensions: Default::default(),
        }))
    })?;
    let seconds = state
        .settings
        .part::<shared::kubeconfigs::config::Config>()?
        .exec_ttl_seconds;
    let server = available_endpoint(&cluster)?;
    let id = match kubeconfigs::live_exec(&state.pool, cluster.id, api_key_id, server).await? {
        Some(id) => id,
        None => {
            let new = Recorded {
                id: Uuid::new_v4(),
                server,
                seconds,
                description: Some("kubectl, renewed by kubebyon credential"),
                kind: Kind::Exec,
            };
            record(&state, caller, &origin, &cluster, new).await?;
            new.id
        }
    };
    let issued = issue_token(&state, caller, &cluster, server, id, seconds).await?;
    kubeconfigs::renewed(&state.pool, id, issued.expires_at).await?;
    use secrecy::ExposeSecret;
    Ok((
        StatusCode::CREATED,
        Extension(IssuesSecret),
        [(
            header::LOCATION,
            format!("/api/console/clusters/{}/kubeconfigs/{id}", cluster.id),
        )],
        AppJson(ExecCredential {
            api_version: "client.authentication.k8s.io/v1",
            kind: "ExecCredential",
            status: ExecCredentialStatus {
                token: issued.token.expose_secret().to_string(),
                expiration_timestamp: issued
                    .expires_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            },
        }),
    )
        .into_response())
}

fn available_endpoint(cluster: &Cluster) -> Result<&str, ApiError> {
    match (
        cluster.kubeconfig_available,
        cluster.api_endpoint.as_deref(),
    ) {
        (true, Some(server)) => Ok(server),
        _ => Err(unavailable(cluster)),
    }
}

fn unavailable(cluster: &Cluster) -> ApiError {
    ApiError::Conflict {
        code: "kubeconfig_unavailable",
        detail: format!(
            "a kubeconfig is not available while the cluster is {}; try again when it is ready",
            cluster.status
        ),
    }
}

fn event(
    caller: Caller,
    action: &'static str,
    credential_id: Uuid,
    cluster_id: Uuid,
    seconds: i64,
) -> AuditEvent<'static> {
    AuditEvent {
        actor_user_id: Some(caller.user_id),
        actor_kind: "user",
        action,
        target_kind: "kubeconfig_credential",
        target_id: credential_id.to_string(),
        cluster_id: Some(cluster_id),
        metadata: if seconds > 0 {
            serde_json::json!({ "expiration_seconds": seconds })
        } else {
            serde_json::json!({})
        },
    }
}

/// The kubeconfig handed out: one cluster (the public endpoint, the CA
/// pinned), one user with the token, one context. JSON, which every
/// kubeconfig reader takes as YAML.
fn render(
    cluster: &Cluster,
    server: &str,
    ca_pem: &str,
    credential_id: Uuid,
    token: &secrecy::SecretString,
) -> String {
    use secrecy::ExposeSecret;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let user = format!(
        "{}-{}",
        cluster.name,
        &credential_id.simple().to_string()[..8]
    );
    serde_json::to_string_pretty(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": cluster.name, "cluster": {
            "server": server,
            "certificate-authority-data": ca,
        }}],
        "users": [{ "name": user, "user": { "token": token.expose_secret() } }],
        "contexts": [{ "name": cluster.name, "context": { "cluster": cluster.name, "user": user } }],
        "current-context": cluster.name,
    }))
    .expect("a JSON value serializes")
}
