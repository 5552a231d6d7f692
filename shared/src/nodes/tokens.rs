//! Join tokens, the join-attempt ledger and the steps join scripts report.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor, PgPool};
use utoipa::ToSchema;
use uuid::Uuid;

use super::reasons::{JoinDetailCode, JoinReason, JoinReasonCode, Params};
use crate::domain::{JoinOutcome, JoinStepStatus, JoinTokenStatus};

/// How long a join may take: the lifetime of the bootstrap token a join
/// attempt gets when it takes a use, and how long a used token's own Secret
/// (tokens made before attempts had their own) may outlive a join that never
/// reported its end.
pub const JOIN_GRACE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// A join token as its owner sees it; the plaintext is never stored.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Token {
    pub id: Uuid,
    pub cluster_id: Uuid,
    /// The token's public id: the first six characters of the token.
    pub display_prefix: String,
    pub status: JoinTokenStatus,
    pub description: Option<String>,
    pub max_uses: i32,
    pub use_count: i32,
    /// Labels put on the nodes this token joins.
    #[schema(value_type = Object)]
    pub node_labels: serde_json::Value,
    pub used_by_node_id: Option<Uuid>,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

macro_rules! select_token {
    ($tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Token,
            r#"SELECT id, cluster_id, display_prefix,
                      CASE WHEN status = 'active' AND expires_at <= now() THEN 'expired' ELSE status END
                          AS "status!: JoinTokenStatus",
                      description, max_uses, use_count, node_labels, used_by_node_id,
                      expires_at, used_at, revoked_at, created_at
               FROM tokens "# + $tail,
            $($arg),*
        )
    };
}

pub struct NewToken<'a> {
    pub cluster_id: Uuid,
    pub token_hash: &'a [u8],
    pub display_prefix: &'a str,
    pub description: Option<&'a str>,
    pub max_uses: i32,
    pub node_labels: &'a serde_json::Value,
    pub created_by: Uuid,
    /// The API key the token was made with, if it was: revoking the key
    /// revokes the token while it is unused.
    pub api_key_id: Option<Uuid>,
    pub expires_at: DateTime<Utc>,
}

pub async fn insert(tx: &mut PgConnection, new: &NewToken<'_>) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar!(
        "INSERT INTO tokens (cluster_id, token_hash, display_prefix, description, max_uses, node_labels,
                             created_by_user_id, api_key_id, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        new.cluster_id,
        new.token_hash,
        new.display_prefix,
        new.description,
        new.max_uses,
        new.node_labels,
        new.created_by,
        new.api_key_id,
        new.expires_at,
    )
    .fetch_one(tx)
    .await
}

pub async fn get(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    token_id: Uuid,
) -> Result<Option<Token>, sqlx::Error> {
    select_token!("WHERE cluster_id = $1 AND id = $2", cluster_id, token_id)
        .fetch_optional(db)
        .await
}

/// A cluster's tokens, newest first.
pub async fn list(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    limit: i64,
) -> Result<Vec<Token>, sqlx::Error> {
    select_token!(
        "WHERE cluster_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2",
        cluster_id,
        limit
    )
    .fetch_all(db)
    .await
}

/// Revokes an active token. Returns whether it was active.
pub async fn revoke(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    token_id: Uuid,
    by: Uuid,
) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE tokens SET status = 'revoked', revoked_at = now(), revoked_by_user_id = $3
         WHERE cluster_id = $1 AND id = $2 AND status = 'active'",
        cluster_id,
        token_id,
        by
    )
    .execute(tx)
    .await?
    .rows_affected()
        == 1)
}

/// Whose active join tokens end at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MadeBy {
    /// Every token the user made.
    User(Uuid),
    /// The tokens the user made for the organisation's clusters.
    UserIn {
        user_id: Uuid,
        organization_id: Uuid,
    },
    /// The tokens made with the API key.
    Key(Uuid),
}

/// Revokes the active tokens `made_by` made, `by` the user who ends them;
/// the bootstrap Secrets of joins under way with them go with the node
/// sync ([`stale_secrets`]). Returns how many.
pub async fn revoke_made_by(
    tx: &mut PgConnection,
    made_by: MadeBy,
    by: Uuid,
) -> Result<u64, sqlx::Error> {
    let done = match made_by {
        MadeBy::User(user_id) => {
            sqlx::query!(
                "UPDATE tokens SET status = 'revoked', revoked_at = now(), revoked_by_user_id = $2
                 WHERE created_by_user_id = $1 AND status = 'active'",
                user_id,
                by
            )
            .execute(tx)
            .await?
        }
        MadeBy::UserIn {
            user_id,
            organization_id,
        } => {
            sqlx::query!(
                "UPDATE tokens t SET status = 'revoked', revoked_at = now(), revoked_by_user_id = $3
                 FROM clusters c
                 WHERE c.id = t.cluster_id AND c.organization_id = $2
                   AND t.created_by_user_id = $1 AND t.status = 'active'",
                user_id,
                organization_id,
                by
            )
            .execute(tx)
            .await?
        }
        MadeBy::Key(key_id) => {
            sqlx::query!(
                "UPDATE tokens SET status = 'revoked', revoked_at = now(), revoked_by_user_id = $2
                 WHERE api_key_id = $1 AND status = 'active'",
                key_id,
                by
            )
            .execute(tx)
            .await?
        }
    };
    Ok(done.rows_affected())
}

/// Records a bootstrap Secret gone: a token's own (tokens made before join
/// attempts had their own) or an attempt's.
pub async fn mark_secret_deleted(
    db: impl PgExecutor<'_>,
    secret: &StaleSecret,
) -> Result<(), sqlx::Error> {
    match secret.attempt_id {
        Some(attempt_id) => {
            sqlx::query!(
                "UPDATE join_attempts SET bootstrap_secret_deleted_at = now()
             WHERE id = $1 AND bootstrap_secret_deleted_at IS NULL",
                attempt_id
            )
            .execute(db)
            .await?
        }
        None => {
            sqlx::query!(
                "UPDATE tokens SET bootstrap_secret_deleted_at = now()
             WHERE id = $1 AND bootstrap_secret_deleted_at IS NULL",
                secret.token_id
            )
            .execute(db)
            .await?
        }
    };
    Ok(())
}

/// Records the expiry of every active token past its time. Returns how many.
pub async fn expire_due(db: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE tokens SET status = 'expired' WHERE status = 'active' AND expires_at <= now()"
    )
    .execute(db)
    .await?
    .rows_affected())
}

/// A bootstrap Secret that should no longer exist.
#[derive(Debug, Clone)]
pub struct StaleSecret {
    pub token_id: Uuid,
    /// The join attempt it was made for; `None` for a token's own Secret.
    pub attempt_id: Option<Uuid>,
    pub cluster_id: Uuid,
    pub name: String,
}

/// Bootstrap Secrets that can no longer serve a join: an attempt's once the
/// attempt has ended, its token was revoked, or `join_grace` has passed (a
/// script that never reported back); a token's own (older tokens) once the
/// token is revoked or expired, or used with no join under way.
pub async fn stale_secrets(
    db: impl PgExecutor<'_>,
    join_grace: std::time::Duration,
) -> Result<Vec<StaleSecret>, sqlx::Error> {
    stale_secrets_of(db, None, join_grace).await
}

/// The bootstrap Secrets still in the cluster for one token that can no
/// longer serve a join (after a revocation, say).
pub async fn stale_secrets_of(
    db: impl PgExecutor<'_>,
    token_id: Option<Uuid>,
    join_grace: std::time::Duration,
) -> Result<Vec<StaleSecret>, sqlx::Error> {
    let grace_secs = join_grace.as_secs_f64();
    sqlx::query_as!(
        StaleSecret,
        r#"SELECT t.id AS "token_id!", NULL::uuid AS attempt_id, t.cluster_id AS "cluster_id!",
                  t.bootstrap_secret_name AS "name!"
           FROM tokens t JOIN clusters c ON c.id = t.cluster_id
           WHERE t.status <> 'active' AND t.bootstrap_secret_deleted_at IS NULL
             AND t.bootstrap_secret_name IS NOT NULL AND c.deleted_at IS NULL
             AND ($2::uuid IS NULL OR t.id = $2)
             AND (t.status <> 'used'
                  OR t.used_at < now() - make_interval(secs => $1)
                  OR NOT EXISTS (SELECT 1 FROM join_attempts a
                                 WHERE a.token_id = t.id AND a.outcome = 'joining'))
           UNION ALL
           SELECT a.token_id, a.id, a.cluster_id, a.bootstrap_secret_name
           FROM join_attempts a JOIN tokens t ON t.id = a.token_id JOIN clusters c ON c.id = a.cluster_id
           WHERE a.bootstrap_secret_name IS NOT NULL AND a.bootstrap_secret_deleted_at IS NULL
             AND c.deleted_at IS NULL
             AND ($2::uuid IS NULL OR a.token_id = $2)
             AND (a.outcome <> 'joining' OR t.status = 'revoked'
                  OR a.bootstrap_expires_at <= now()
                  OR a.created_at < now() - make_interval(secs => $1))
           ORDER BY 3"#,
        grace_secs,
        token_id
    )
    .fetch_all(db)
    .await
}

/// What a presented token resolves to for the join endpoints.
#[derive(Debug, Clone)]
pub struct Presented {
    pub token_id: Uuid,
    pub cluster_id: Uuid,
    pub cluster_name: String,
    pub api_endpoint: Option<String>,
    pub cluster_ready: bool,
    /// Why the token cannot be used now, if it cannot.
    pub refusal: Option<JoinReason>,
}

/// Looks a presented token up by its hash, and records an expiry found on the way.
pub async fn find_presented(
    pool: &PgPool,
    token_hash: &[u8],
) -> Result<Option<Presented>, sqlx::Error> {
    sqlx::query!(
        "UPDATE tokens SET status = 'expired'
         WHERE token_hash = $1 AND status = 'active' AND expires_at <= now()",
        token_hash
    )
    .execute(pool)
    .await?;
    let row = sqlx::query!(
        r#"SELECT t.id, t.cluster_id, t.status AS "status: JoinTokenStatus", c.name AS cluster_name, c.api_endpoint,
                  c.status = 'ready' AS "cluster_ready!", c.deleted_at IS NOT NULL AS "cluster_deleted!"
           FROM tokens t JOIN clusters c ON c.id = t.cluster_id
           WHERE t.token_hash = $1"#,
        token_hash
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Presented {
        token_id: r.id,
        cluster_id: r.cluster_id,
        cluster_name: r.cluster_name,
        api_endpoint: r.api_endpoint,
        cluster_ready: r.cluster_ready,
        refusal: refusal(r.status, r.cluster_deleted),
    }))
}

fn refusal(status: JoinTokenStatus, cluster_deleted: bool) -> Option<JoinReason> {
    if cluster_deleted {
        return Some(JoinReason::ClusterDeleted);
    }
    match status {
        JoinTokenStatus::Active => None,
        JoinTokenStatus::Used => Some(JoinReason::TokenUsedUp),
        JoinTokenStatus::Expired => Some(JoinReason::TokenExpired),
        JoinTokenStatus::Revoked => Some(JoinReason::TokenRevoked),
    }
}

/// A reason as the ledger keeps it: its text, code and parameters.
fn ledger_reason(
    reason: Option<&JoinReason>,
) -> (
    Option<String>,
    Option<&'static str>,
    Option<serde_json::Value>,
) {
    match reason {
        Some(reason) => (
            Some(reason.message()),
            Some(reason.code().as_str()),
            Some(serde_json::json!(reason.params())),
        ),
        None => (None, None, None),
    }
}

pub struct NewAttempt<'a> {
    pub token_id: Uuid,
    pub cluster_id: Uuid,
    pub source_ip: Option<String>,
    pub user_agent: Option<&'a str>,
    /// `Some(reason)` records a refused attempt.
    pub refused: Option<&'a JoinReason>,
}

pub async fn insert_attempt(
    db: impl PgExecutor<'_>,
    new: &NewAttempt<'_>,
) -> Result<Uuid, sqlx::Error> {
    let (reason, code, params) = ledger_reason(new.refused);
    sqlx::query_scalar!(
        r#"INSERT INTO join_attempts (token_id, cluster_id, source_ip, user_agent, outcome, reason, reason_code, reason_params, finished_at)
           VALUES ($1, $2, $3::text::inet, left($4, 300),
                   CASE WHEN $5::text IS NULL THEN 'started' ELSE 'refused' END, $5, $6, $7,
                   CASE WHEN $5::text IS NULL THEN NULL ELSE now() END)
           RETURNING id"#,
        new.token_id,
        new.cluster_id,
        new.source_ip,
        new.user_agent,
        reason,
        code,
        params,
    )
    .fetch_one(db)
    .await
}

/// An attempt's state, locked for a step report.
#[derive(Debug, Clone)]
pub struct OpenAttempt {
    pub outcome: JoinOutcome,
    pub steps: i64,
    /// The host name the attempt reported first: the only node it may join.
    pub hostname: Option<String>,
    /// The attempt's own bootstrap Secret, once it took a use.
    pub bootstrap_secret_name: Option<String>,
    /// The kubelet's certificate request the platform approved for it.
    pub node_request_name: Option<String>,
    /// Whether the last step reported is this one (same step and status).
    pub repeats_last_step: bool,
}

pub async fn lock_attempt(
    tx: &mut PgConnection,
    attempt_id: Uuid,
    token_id: Uuid,
    step: &str,
    status: JoinStepStatus,
) -> Result<Option<OpenAttempt>, sqlx::Error> {
    sqlx::query_as!(
        OpenAttempt,
        r#"SELECT outcome AS "outcome: JoinOutcome",
                  (SELECT count(*) FROM join_attempt_steps s WHERE s.attempt_id = a.id) AS "steps!",
                  hostname, bootstrap_secret_name, node_request_name,
                  COALESCE((SELECT s.step = $3 AND s.status = $4 FROM join_attempt_steps s
                            WHERE s.attempt_id = a.id ORDER BY s.id DESC LIMIT 1), false) AS "repeats_last_step!"
           FROM join_attempts a WHERE id = $1 AND token_id = $2 FOR UPDATE"#,
        attempt_id,
        token_id,
        step,
        status.as_str()
    )
    .fetch_optional(tx)
    .await
}

/// Whether the cluster has a live node of that name, as last observed.
pub async fn node_name_taken(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    name: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM nodes WHERE cluster_id = $1 AND name = $2 AND deleted_at IS NULL) AS "taken!""#,
        cluster_id,
        name
    )
    .fetch_one(db)
    .await
}

/// Marks the attempt's requests as being looked at now; `false` when they
/// were looked at less than a second ago (the answer is then "not yet",
/// without asking the cluster).
pub async fn start_node_check(
    tx: &mut PgConnection,
    attempt_id: Uuid,
) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE join_attempts SET node_checked_at = now()
         WHERE id = $1 AND (node_checked_at IS NULL OR node_checked_at < now() - interval '1 second')",
        attempt_id
    )
    .execute(tx)
    .await?
    .rows_affected()
        == 1)
}

/// Records the certificate request approved for an attempt, once: `Err`
/// with why when another attempt of the cluster had a request for
/// the same host name approved within the join window and no node linked
/// yet (two machines racing for one name); else whether this call recorded
/// it (`false` when an earlier one had).
pub async fn record_node_approval(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    attempt_id: Uuid,
    hostname: &str,
    request: &str,
    join_grace: std::time::Duration,
) -> Result<Result<bool, JoinReason>, sqlx::Error> {
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1::uuid::text || '/' || $2, 7))",
        cluster_id,
        hostname
    )
    .execute(&mut *tx)
    .await?;
    let rival = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM join_attempts
                          WHERE cluster_id = $1 AND hostname = $2 AND id <> $3 AND node_id IS NULL
                            AND node_approved_at > now() - make_interval(secs => $4)) AS "rival!""#,
        cluster_id,
        hostname,
        attempt_id,
        join_grace.as_secs_f64()
    )
    .fetch_one(&mut *tx)
    .await?;
    if rival {
        return Ok(Err(JoinReason::HostnameRacing {
            hostname: hostname.to_string(),
        }));
    }
    let recorded = sqlx::query!(
        "UPDATE join_attempts SET node_request_name = $2, node_approved_at = now()
         WHERE id = $1 AND node_approved_at IS NULL",
        attempt_id,
        request
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    Ok(Ok(recorded == 1))
}

/// One step as a script reported it.
pub struct NewStep<'a> {
    pub step: &'a str,
    pub status: JoinStepStatus,
    pub code: Option<JoinDetailCode>,
    pub params: Option<&'a Params>,
    pub detail: Option<&'a str>,
    pub hostname: Option<&'a str>,
}

pub async fn insert_step(
    tx: &mut PgConnection,
    attempt_id: Uuid,
    new: &NewStep<'_>,
) -> Result<(), sqlx::Error> {
    // Parameters go only with a code: alone they would say nothing.
    let params = new
        .code
        .and(new.params)
        .map(|params| serde_json::json!(params));
    sqlx::query!(
        "INSERT INTO join_attempt_steps (attempt_id, step, status, code, params, detail)
         VALUES ($1, $2, $3, $4, $5, $6)",
        attempt_id,
        new.step,
        new.status.as_str(),
        new.code.map(JoinDetailCode::as_str),
        params,
        new.detail
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE join_attempts SET hostname = COALESCE(hostname, $2) WHERE id = $1",
        attempt_id,
        new.hostname
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Takes one use of an active, unexpired token for an attempt: the moment a
/// join really starts. The attempt records the bootstrap Secret made for it.
/// `Err(why)` when the token cannot be used.
pub async fn take_use(
    tx: &mut PgConnection,
    token_id: Uuid,
    attempt_id: Uuid,
    bootstrap_secret_name: &str,
    bootstrap_expires_at: DateTime<Utc>,
) -> Result<Result<(), JoinReason>, sqlx::Error> {
    let taken = sqlx::query!(
        "UPDATE tokens
         SET use_count = use_count + 1, used_at = now(),
             status = CASE WHEN use_count + 1 >= max_uses THEN 'used' ELSE status END
         WHERE id = $1 AND status = 'active' AND expires_at > now() AND use_count < max_uses",
        token_id
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if taken == 0 {
        let row = sqlx::query!(
            r#"SELECT CASE WHEN status = 'active' AND expires_at <= now() THEN 'expired' ELSE status END
                          AS "status!: JoinTokenStatus"
               FROM tokens WHERE id = $1"#,
            token_id
        )
        .fetch_one(&mut *tx)
        .await?;
        return Ok(Err(
            refusal(row.status, false).unwrap_or(JoinReason::TokenUnusable)
        ));
    }
    sqlx::query!(
        "UPDATE join_attempts
         SET outcome = 'joining', counted_use = true, bootstrap_secret_name = $2, bootstrap_expires_at = $3
         WHERE id = $1",
        attempt_id,
        bootstrap_secret_name,
        bootstrap_expires_at
    )
    .execute(&mut *tx)
    .await?;
    Ok(Ok(()))
}

/// Gives back the use an attempt took, when the attempt could not go on
/// through no fault of the machine (the cluster did not take its bootstrap
/// token), and ends the attempt as failed with `reason`.
pub async fn give_back_use(
    tx: &mut PgConnection,
    token_id: Uuid,
    attempt_id: Uuid,
    reason: &JoinReason,
) -> Result<(), sqlx::Error> {
    let given = sqlx::query!(
        "UPDATE join_attempts SET counted_use = false
         WHERE id = $1 AND token_id = $2 AND counted_use",
        attempt_id,
        token_id
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if given == 1 {
        sqlx::query!(
            "UPDATE tokens
             SET use_count = use_count - 1,
                 status = CASE WHEN status = 'used' THEN 'active' ELSE status END,
                 used_at = CASE WHEN use_count - 1 = 0 THEN NULL ELSE used_at END
             WHERE id = $1 AND use_count > 0",
            token_id
        )
        .execute(&mut *tx)
        .await?;
    }
    finish_attempt(tx, attempt_id, JoinOutcome::Failed, Some(reason)).await
}

/// Ends an attempt: `succeeded`, `failed` or `refused`, with the reason.
pub async fn finish_attempt(
    tx: &mut PgConnection,
    attempt_id: Uuid,
    outcome: JoinOutcome,
    reason: Option<&JoinReason>,
) -> Result<(), sqlx::Error> {
    let (reason, code, params) = ledger_reason(reason);
    sqlx::query!(
        "UPDATE join_attempts SET outcome = $2, reason = $3, reason_code = $4, reason_params = $5, finished_at = now()
         WHERE id = $1 AND finished_at IS NULL",
        attempt_id,
        outcome.as_str(),
        reason,
        code,
        params
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Of the given node names, those a join attempt that took a token use reported
/// as its host name and that no node was linked to yet.
pub async fn joining_hostnames(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    names: &[String],
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT hostname AS "hostname!" FROM join_attempts
           WHERE cluster_id = $1 AND counted_use AND node_id IS NULL AND hostname = ANY($2)"#,
        cluster_id,
        names
    )
    .fetch_all(tx)
    .await
}

/// A node seen for the first time is the one the latest join attempt from a
/// machine of that host name brought in: link both, and the token.
/// Returns the labels the token asks for, to put on the node.
pub async fn link_joined_node(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    node_id: Uuid,
    node_name: &str,
) -> Result<Option<serde_json::Value>, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH attempt AS (
               UPDATE join_attempts SET node_id = $2,
                      outcome = CASE WHEN outcome = 'joining' THEN 'succeeded' ELSE outcome END,
                      finished_at = COALESCE(finished_at, now())
               WHERE id = (SELECT id FROM join_attempts
                           WHERE cluster_id = $1 AND hostname = $3 AND counted_use AND node_id IS NULL
                           ORDER BY created_at DESC LIMIT 1)
               RETURNING token_id)
           UPDATE tokens t SET used_by_node_id = COALESCE(t.used_by_node_id, $2)
           FROM attempt WHERE t.id = attempt.token_id
           RETURNING t.node_labels"#,
        cluster_id,
        node_id,
        node_name
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|r| r.node_labels))
}

/// One join attempt with the steps its script reported.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Attempt {
    pub id: Uuid,
    pub token_id: Uuid,
    pub token_prefix: String,
    pub source_ip: Option<String>,
    pub user_agent: Option<String>,
    pub hostname: Option<String>,
    pub outcome: JoinOutcome,
    /// Why the attempt was refused or failed, in English.
    pub reason: Option<String>,
    /// The same as a code, with `reason_params`, for a reader's own words;
    /// none on attempts that ended before codes were kept.
    pub reason_code: Option<JoinReasonCode>,
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub reason_params: Option<Params>,
    /// Whether the attempt took a use of its token.
    pub counted_use: bool,
    /// The bootstrap token Secret (in the cluster's `kube-system`) made for
    /// this attempt when it took a use; its token is never shown again.
    pub bootstrap_secret_name: Option<String>,
    pub bootstrap_expires_at: Option<DateTime<Utc>>,
    /// Whether that Secret is known to be gone (the attempt ended, its token
    /// was revoked, or the join window closed).
    pub bootstrap_secret_deleted: bool,
    pub node_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub steps: Vec<Step>,
}

/// One step a join script reported.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct Step {
    pub step: String,
    pub status: JoinStepStatus,
    /// What the script found, as a code with `params`, for a reader's own
    /// words; none where the script sent only its text.
    pub code: Option<JoinDetailCode>,
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub params: Option<Params>,
    /// The same in English, as the script printed it.
    pub detail: Option<String>,
    pub reported_at: DateTime<Utc>,
}

/// A cluster's join attempts, newest first, optionally of one token.
pub async fn list_attempts(
    db: impl PgExecutor<'_>,
    cluster_id: Uuid,
    token_id: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Attempt>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT a.id, a.token_id, t.display_prefix, host(a.source_ip) AS source_ip, a.user_agent,
                  a.hostname, a.outcome AS "outcome: JoinOutcome", a.reason,
                  a.reason_code AS "reason_code: JoinReasonCode", a.reason_params, a.counted_use, a.node_id, a.created_at, a.finished_at,
                  a.bootstrap_secret_name, a.bootstrap_expires_at,
                  a.bootstrap_secret_deleted_at IS NOT NULL AS "bootstrap_secret_deleted!",
                  COALESCE((SELECT jsonb_agg(jsonb_build_object('step', s.step, 'status', s.status, 'code', s.code, 'params', s.params,
                                                                'detail', s.detail, 'reported_at', s.reported_at)
                                             ORDER BY s.id)
                            FROM join_attempt_steps s WHERE s.attempt_id = a.id), '[]'::jsonb) AS "steps!"
           FROM join_attempts a JOIN tokens t ON t.id = a.token_id
           WHERE a.cluster_id = $1 AND ($2::uuid IS NULL OR a.token_id = $2)
           ORDER BY a.created_at DESC, a.id DESC LIMIT $3"#,
        cluster_id,
        token_id,
        limit
    )
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(Attempt {
                id: r.id,
                token_id: r.token_id,
                token_prefix: r.display_prefix,
                source_ip: r.source_ip,
                user_agent: r.user_agent,
                hostname: r.hostname,
                outcome: r.outcome,
                reason: r.reason,
                reason_code: r.reason_code,
                reason_params: r
                    .reason_params
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                counted_use: r.counted_use,
                bootstrap_secret_name: r.bootstrap_secret_name,
                bootstrap_expires_at: r.bootstrap_expires_at,
                bootstrap_secret_deleted: r.bootstrap_secret_deleted,
                node_id: r.node_id,
                created_at: r.created_at,
                finished_at: r.finished_at,
                steps: serde_json::from_value(r.steps)
                    .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
            })
        })
        .collect()
}
