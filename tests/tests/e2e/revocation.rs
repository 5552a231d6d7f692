//! Issuing a credential while what it rests on is revoked
//! (docs/decisions/2026-12-07-one-rule-for-issuing-and-revoking.md,
//! `shared::app::authority`): every issuer raced against every revocation
//! that ends its authority, in both orders, through the real routes on real
//! PostgreSQL.
//!
//! The races are made, not hoped for. A gate — a trigger on `audit_events`
//! waiting on an advisory lock the test holds — stops one side inside its
//! transaction as it records its audit event, after everything else it
//! does; the other side is then sent, and the test watches PostgreSQL's own
//! view of who waits for what before it opens the gate.
//!
//! - The issue first: stopped after it checked its authority and recorded
//!   the credential, the revocation must wait for it (not finish
//!   meanwhile), then end that credential too.
//! - The revocation first: stopped after it ended everything, the issue
//!   must wait for it, then be refused.

use std::{sync::Arc, time::Duration};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use shared::{accounts::auth, organizations::Role};
use uuid::Uuid;

use crate::harness::{Client, Reply, TestApp};

const PASSWORD: &str = "correct horse battery staple";
const NEW_PASSWORD: &str = "another horse, another battery";
const RESET_CODE: &str = "314159";
/// The advisory lock the gate's trigger waits on.
const GATE: i64 = 7_310_001;

/// What issues a credential, and with what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Issuer {
    /// `POST …/kubeconfigs` from a session.
    Kubeconfig,
    /// `POST …/kubeconfigs` with the member's API key.
    KubeconfigByKey,
    /// `POST …/exec-credentials` with the member's API key.
    ExecCredential,
    /// `POST …/tokens` from a session.
    JoinToken,
    /// `POST …/tokens` with the member's API key.
    JoinTokenByKey,
    /// `POST /api/console/account/api-keys` from a session.
    ApiKey,
    /// `POST /api/console/organizations/{id}/api-keys` from a session (the
    /// member an admin).
    OrganizationKey,
    /// `POST /api/auth/device/token`: the key of a sign-in the member
    /// approved.
    DeviceKey,
}

/// What ends the authority a credential rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Revoker {
    /// An owner removes the member from the organisation.
    Remove,
    /// An owner makes the member a viewer.
    Demote,
    /// The member changes their password from another session.
    ChangePassword,
    /// The member resets their password with an emailed code.
    ResetPassword,
    /// An administrator disables the member's account.
    Disable,
    /// The member revokes the API key the issue came with.
    RevokeKey,
}

impl Issuer {
    /// The audit event it records last in its transaction.
    fn action(self) -> &'static str {
        match self {
            Self::Kubeconfig | Self::KubeconfigByKey | Self::ExecCredential => "kubeconfig.issue",
            Self::JoinToken | Self::JoinTokenByKey => "token.create",
            Self::ApiKey | Self::DeviceKey => "api_key.create",
            Self::OrganizationKey => "organization.api_key_created",
        }
    }

    fn role(self) -> Role {
        match self {
            Self::OrganizationKey => Role::Admin,
            _ => Role::Member,
        }
    }

    fn by_key(self) -> bool {
        matches!(
            self,
            Self::KubeconfigByKey | Self::ExecCredential | Self::JoinTokenByKey
        )
    }

    /// Whether the credential, issued before the revocation, outlives it
    /// by design: an organisation's key outlives its maker's membership.
    fn outlives(self, revoker: Revoker) -> bool {
        self == Self::OrganizationKey && matches!(revoker, Revoker::Remove | Revoker::Demote)
    }
}

/// Every issuer with every revocation that ends what it rests on.
fn pairs() -> Vec<(Issuer, Revoker)> {
    use Issuer::*;
    use Revoker::*;
    let membership = [Remove, Demote];
    let account = [ChangePassword, ResetPassword, Disable];
    let mut pairs = Vec::new();
    for issuer in [Kubeconfig, JoinToken, OrganizationKey] {
        for revoker in membership.iter().chain(&account) {
            pairs.push((issuer, *revoker));
        }
    }
    for issuer in [KubeconfigByKey, ExecCredential, JoinTokenByKey] {
        for revoker in membership.iter().chain(&account).chain(&[RevokeKey]) {
            pairs.push((issuer, *revoker));
        }
    }
    for issuer in [ApiKey, DeviceKey] {
        for revoker in account {
            pairs.push((issuer, revoker));
        }
    }
    pairs
}

/// The platform every race runs on: a shared organisation with its owner
/// and a ready cluster, and a platform administrator.
struct Platform {
    app: TestApp,
    organization: Uuid,
    cluster: String,
    owner: Client,
    administrator: Client,
    password_hash: String,
}

/// One member, made for one race.
struct Member {
    id: Uuid,
    email: String,
    /// The session the issue comes from (a thief's, say).
    issuing: Client,
    /// The member's own other session.
    own: Client,
    /// The member's API key, and its id.
    key: (String, Uuid),
    /// A device's code the member approved.
    device_code: Option<String>,
}

impl Platform {
    async fn start() -> Self {
        let app = TestApp::builder("revocation")
            .accounts()
            .host()
            .build()
            .await;
        tests::handlers::default_plan(&app.db.pool, "roomy", 5, 1_000).await;
        let password_hash = auth::hash_password(PASSWORD.into()).await.unwrap();
        let owner_id = user(&app, "owner@acme.example", "user", &password_hash).await;
        let admin_id = user(&app, "root@platform.example", "admin", &password_hash).await;
        let organization: Uuid =
            sqlx::query_scalar("INSERT INTO organizations (name) VALUES ('Acme') RETURNING id")
                .fetch_one(&app.db.pool)
                .await
                .unwrap();
        join(&app, organization, owner_id, Role::Owner).await;
        let owner = session(&app, owner_id)
            .await
            .header("kubebyon-organization", organization.to_string());
        let (status, body) = owner
            .call(
                "POST",
                "/api/console/clusters",
                Some(json!({
                    "name": "races", "workload_cpu_limit_milli_cores": 2000,
                    "workload_memory_limit_mib": 2048, "public_access_mode": "nodeport",
                })),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let cluster = body["cluster"]["id"].as_str().unwrap().to_string();
        app.drive().await;
        let (_, read) = owner
            .call("GET", &format!("/api/console/clusters/{cluster}"), None)
            .await;
        assert_eq!(read["status"], "ready", "{read}");
        let administrator = session(&app, admin_id).await;
        Self {
            app,
            organization,
            cluster,
            owner,
            administrator,
            password_hash,
        }
    }

    /// A new member with `role`, two sessions, an API key, and for a
    /// device's key a sign-in they approved.
    async fn member(&self, n: usize, issuer: Issuer) -> Member {
        let email = format!("member-{n}@acme.example");
        let id = user(&self.app, &email, "user", &self.password_hash).await;
        join(&self.app, self.organization, id, issuer.role()).await;
        let in_organization =
            |client: Client| client.header("kubebyon-organization", self.organization.to_string());
        let issuing = in_organization(session(&self.app, id).await);
        let own = in_organization(session(&self.app, id).await);
        let key = tests::api_key(&self.app.db.pool, id, "automation").await;
        let key_id: Uuid = sqlx::query_scalar("SELECT id FROM api_keys WHERE user_id = $1")
            .bind(id)
            .fetch_one(&self.app.db.pool)
            .await
            .unwrap();
        let device_code = match issuer {
            Issuer::DeviceKey => Some(self.approved_device(&issuing).await),
            _ => None,
        };
        Member {
            id,
            email,
            issuing,
            own,
            key: (key, key_id),
            device_code,
        }
    }

    /// A device's code, approved from `session`.
    async fn approved_device(&self, session: &Client) -> String {
        let started = self
            .app
            .client()
            .send_bytes(
                "POST",
                "/api/auth/device/code",
                "application/x-www-form-urlencoded",
                "client_id=kubebyon-cli&device_name=laptop",
            )
            .await;
        assert_eq!(started.status, StatusCode::OK, "{}", started.body);
        let (status, body) = session
            .call(
                "POST",
                "/api/console/account/device/approve",
                Some(json!({ "user_code": started.body["user_code"], "password": PASSWORD })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        started.body["device_code"].as_str().unwrap().to_string()
    }

    /// The issue's request, as `member` sends it.
    async fn issue(&self, issuer: Issuer, member: &Member) -> Reply {
        let cluster = &self.cluster;
        let by_key = self.app.client().bearer(&member.key.0);
        let client = if issuer.by_key() {
            &by_key
        } else {
            &member.issuing
        };
        let (path, body) = match issuer {
            Issuer::Kubeconfig | Issuer::KubeconfigByKey => (
                format!("/api/console/clusters/{cluster}/kubeconfigs"),
                json!({}),
            ),
            Issuer::ExecCredential => (
                format!("/api/console/clusters/{cluster}/exec-credentials"),
                json!({}),
            ),
            Issuer::JoinToken | Issuer::JoinTokenByKey => {
                (format!("/api/console/clusters/{cluster}/tokens"), json!({}))
            }
            Issuer::ApiKey => (
                "/api/console/account/api-keys".into(),
                json!({ "name": "raced", "scope": "write", "password": PASSWORD }),
            ),
            Issuer::OrganizationKey => (
                format!("/api/console/organizations/{}/api-keys", self.organization),
                json!({ "name": "raced", "role": "member", "password": PASSWORD }),
            ),
            Issuer::DeviceKey => {
                let code = member.device_code.as_deref().unwrap();
                return self
                    .app
                    .client()
                    .send_bytes(
                        "POST",
                        "/api/auth/device/token",
                        "application/x-www-form-urlencoded",
                        format!(
                            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code\
                             &client_id=kubebyon-cli&device_code={code}"
                        ),
                    )
                    .await;
            }
        };
        client.send("POST", &path, Some(body)).await
    }

    /// The revocation's request, and the audit event it records last.
    async fn revoke(&self, revoker: Revoker, member: &Member) -> Reply {
        let members = format!(
            "/api/console/organizations/{}/members/{}",
            self.organization, member.id
        );
        match revoker {
            Revoker::Remove => self.owner.send("DELETE", &members, None).await,
            Revoker::Demote => {
                self.owner
                    .send("PATCH", &members, Some(json!({ "role": "viewer" })))
                    .await
            }
            Revoker::ChangePassword => {
                member
                    .own
                    .send(
                        "POST",
                        "/api/auth/change-password",
                        Some(json!({ "current_password": PASSWORD, "new_password": NEW_PASSWORD })),
                    )
                    .await
            }
            Revoker::ResetPassword => {
                self.app
                    .client()
                    .send(
                        "POST",
                        "/api/auth/password-reset/confirm",
                        Some(json!({
                            "email": member.email, "code": RESET_CODE, "new_password": NEW_PASSWORD,
                        })),
                    )
                    .await
            }
            Revoker::Disable => {
                self.administrator
                    .send(
                        "PATCH",
                        &format!("/api/console/admin/users/{}", member.id),
                        Some(json!({ "status": "disabled" })),
                    )
                    .await
            }
            Revoker::RevokeKey => {
                member
                    .own
                    .send(
                        "DELETE",
                        &format!("/api/console/account/api-keys/{}", member.key.1),
                        None,
                    )
                    .await
            }
        }
    }

    /// Sets up what the revocation needs before it is raced.
    async fn prepare(&self, revoker: Revoker, member: &Member) {
        if revoker == Revoker::ResetPassword {
            sqlx::query(
                "INSERT INTO email_verification_codes (user_id, email, purpose, code_hash, expires_at)
                 VALUES ($1, $2, 'reset_password', $3, now() + interval '10 minutes')",
            )
            .bind(member.id)
            .bind(&member.email)
            .bind(auth::hash_secret(RESET_CODE))
            .execute(&self.app.db.pool)
            .await
            .unwrap();
        }
    }

    /// The audit event a revocation records last.
    fn revoker_action(revoker: Revoker) -> &'static str {
        match revoker {
            Revoker::Remove => "organization.member_removed",
            Revoker::Demote => "organization.member_role_changed",
            Revoker::ChangePassword => "user.password_change",
            Revoker::ResetPassword => "user.password_reset",
            Revoker::Disable => "admin.user.update",
            Revoker::RevokeKey => "api_key.revoke",
        }
    }

    /// The member's credentials of the issuer's kind still live.
    async fn live(&self, issuer: Issuer, member: &Member) -> i64 {
        let query = match issuer {
            Issuer::Kubeconfig | Issuer::KubeconfigByKey | Issuer::ExecCredential => {
                "SELECT count(*) FROM kubeconfig_credentials WHERE user_id = $1 AND revoked_at IS NULL"
            }
            Issuer::JoinToken | Issuer::JoinTokenByKey => {
                "SELECT count(*) FROM tokens WHERE created_by_user_id = $1 AND status = 'active'"
            }
            Issuer::ApiKey | Issuer::DeviceKey => {
                "SELECT count(*) FROM api_keys
                 WHERE user_id = $1 AND revoked_at IS NULL AND organization_id IS NULL AND name <> 'automation'"
            }
            Issuer::OrganizationKey => {
                "SELECT count(*) FROM api_keys
                 WHERE user_id = $1 AND revoked_at IS NULL AND organization_id IS NOT NULL"
            }
        };
        sqlx::query_scalar(query)
            .bind(member.id)
            .fetch_one(&self.app.db.pool)
            .await
            .unwrap()
    }
}

/// A user with a verified address and the password.
async fn user(app: &TestApp, email: &str, role: &str, password_hash: &str) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO users (email, display_name, role, password_hash, email_verified_at)
         VALUES ($1, 'Someone', $2, $3, now()) RETURNING id",
    )
    .bind(email)
    .bind(role)
    .bind(password_hash)
    .fetch_one(&app.db.pool)
    .await
    .unwrap()
}

async fn join(app: &TestApp, organization: Uuid, user: Uuid, role: Role) {
    sqlx::query(
        "INSERT INTO organization_members (organization_id, user_id, role) VALUES ($1, $2, $3)",
    )
    .bind(organization)
    .bind(user)
    .bind(role.as_str())
    .execute(&app.db.pool)
    .await
    .unwrap();
}

/// A browser signed in as `user_id`: a session of its own, as a login
/// makes it (its token kept as a hash), with its CSRF token.
async fn session(app: &TestApp, user_id: Uuid) -> Client {
    let token = auth::random_token::<32>();
    shared::accounts::insert_session(
        &app.db.pool,
        &shared::accounts::NewSession {
            user_id,
            token_hash: &auth::hash_secret(&token),
            lifetime: Duration::from_secs(3600),
            ip: None,
            user_agent: Some("kubebyon-tests/1.0"),
        },
    )
    .await
    .unwrap();
    let mut headers = HeaderMap::new();
    for cookie in [
        format!("__Host-kb_session={token}; Path=/"),
        format!("__Host-kb_csrf={}; Path=/", auth::csrf_token_for(&token)),
    ] {
        headers.append(header::SET_COOKIE, HeaderValue::from_str(&cookie).unwrap());
    }
    app.client().signed_in(&Reply {
        status: StatusCode::OK,
        headers,
        body: Value::Null,
    })
}

/// Stops every transaction that records the audit event `action`, until
/// [`Gate::open`].
struct Gate {
    holder: sqlx::pool::PoolConnection<sqlx::Postgres>,
}

impl Gate {
    async fn close(pool: &sqlx::PgPool, action: &str) -> Self {
        let mut holder = pool.acquire().await.unwrap();
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(GATE)
            .execute(&mut *holder)
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE OR REPLACE FUNCTION race_gate() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_advisory_xact_lock_shared({GATE}); RETURN NEW; END $$;
             DROP TRIGGER IF EXISTS race_gate ON audit_events;
             CREATE TRIGGER race_gate BEFORE INSERT ON audit_events FOR EACH ROW
                 WHEN (NEW.action = '{action}') EXECUTE FUNCTION race_gate();"
        )))
        .execute(pool)
        .await
        .unwrap();
        Self { holder }
    }

    async fn open(mut self) {
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(GATE)
            .execute(&mut *self.holder)
            .await
            .unwrap();
    }
}

/// What a backend of the test's database is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// At the gate.
    Gate,
    /// For a row another transaction holds.
    Row,
}

async fn waiting(pool: &sqlx::PgPool, what: Waiting) -> bool {
    let events: &[&str] = match what {
        Waiting::Gate => &["advisory"],
        Waiting::Row => &["transactionid", "tuple"],
    };
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                        WHERE datname = current_database() AND wait_event_type = 'Lock'
                          AND wait_event = ANY($1))",
    )
    .bind(events)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Waits until a backend waits for `what`; false when `request` finished
/// first (it waited for nothing).
async fn until_waiting(
    pool: &sqlx::PgPool,
    what: Waiting,
    request: &tokio::task::JoinHandle<Reply>,
) -> bool {
    for _ in 0..500 {
        if waiting(pool, what).await {
            return true;
        }
        if request.is_finished() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("nothing came to wait for {what:?} within 10 s");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    IssueFirst,
    RevocationFirst,
}

/// One race; what went wrong, if anything.
async fn race(
    platform: &Arc<Platform>,
    n: usize,
    (issuer, revoker): (Issuer, Revoker),
    order: Order,
) -> Option<String> {
    let member = Arc::new(platform.member(n, issuer).await);
    platform.prepare(revoker, &member).await;
    let pool = &platform.app.db.pool;
    let send = |side: Order| {
        let (platform, member) = (platform.clone(), member.clone());
        tokio::spawn(async move {
            match side {
                Order::IssueFirst => platform.issue(issuer, &member).await,
                Order::RevocationFirst => platform.revoke(revoker, &member).await,
            }
        })
    };
    let (action, then) = match order {
        Order::IssueFirst => (issuer.action(), Order::RevocationFirst),
        Order::RevocationFirst => (Platform::revoker_action(revoker), Order::IssueFirst),
    };
    let gate = Gate::close(pool, action).await;
    let first = send(order);
    if !until_waiting(pool, Waiting::Gate, &first).await {
        let reply = first.await.unwrap();
        panic!(
            "{issuer:?} × {revoker:?}, {order:?}: the first request answered {} {} before its audit event",
            reply.status, reply.body
        );
    }
    let second = send(then);
    let waited = until_waiting(pool, Waiting::Row, &second).await;
    gate.open().await;
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    let (issued, revoked) = match order {
        Order::IssueFirst => (first, second),
        Order::RevocationFirst => (second, first),
    };
    let mut wrong = Vec::new();
    if !revoked.status.is_success() {
        wrong.push(format!(
            "the revocation failed: {} {}",
            revoked.status, revoked.body
        ));
    }
    if !waited {
        wrong.push("the second request did not wait for the first".into());
    }
    if order == Order::RevocationFirst && issued.status.is_success() {
        wrong.push(format!(
            "the issue after the revocation succeeded: {}",
            issued.status
        ));
    }
    let live = platform.live(issuer, &member).await;
    let expected = i64::from(order == Order::IssueFirst && issuer.outlives(revoker));
    if live != expected {
        wrong.push(format!(
            "{live} credential(s) live after the revocation, {expected} expected (the issue answered {})",
            issued.status
        ));
    }
    (!wrong.is_empty())
        .then(|| format!("{issuer:?} × {revoker:?}, {order:?}: {}", wrong.join("; ")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_credential_issued_at_the_moment_of_a_revocation_survives_it() {
    let platform = Arc::new(Platform::start().await);
    let mut failures = Vec::new();
    let mut n = 0;
    for pair in pairs() {
        for order in [Order::IssueFirst, Order::RevocationFirst] {
            n += 1;
            if let Some(failure) = race(&platform, n, pair, order).await {
                failures.push(failure);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} races lost:\n{}",
        failures.len(),
        n,
        failures.join("\n")
    );
}
