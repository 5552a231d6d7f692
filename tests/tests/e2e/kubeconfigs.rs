//! Kubeconfigs carry a credential of their own: a ServiceAccount token from
//! the cluster's TokenRequest API that expires, can be revoked one by one, and
//! is revoked when its user is disabled. The admin credential never leaves.

use std::time::Duration;

use axum::http::StatusCode;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api,
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};

use crate::harness::TestApp;

pub(crate) async fn client_of(text: &str) -> kube::Client {
    let kubeconfig = Kubeconfig::from_yaml(text).expect("the kubeconfig parses");
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// The status code the cluster's API answers a namespace list with.
pub(crate) async fn answers(client: &kube::Client) -> u16 {
    match Api::<Namespace>::all(client.clone())
        .list(&Default::default())
        .await
    {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("unexpected error: {other}"),
    }
}

async fn credentials(platform: &TestApp, id: &str) -> Vec<Value> {
    let (status, body) = platform
        .call(
            "GET",
            &format!("/api/console/clusters/{id}/kubeconfigs"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().clone()
}

#[tokio::test]
async fn a_kubeconfig_carries_its_own_expiring_token_not_the_admin_credential() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("creds", "nodeport").await;
    let vcluster = platform.sim().vcluster(&namespace, "creds").unwrap();

    let text = platform
        .issue_kubeconfig(
            &id,
            json!({ "expiration_seconds": 3600, "description": "laptop" }),
        )
        .await;
    let kubeconfig: Value = serde_json::from_str(&text).unwrap();
    let user = &kubeconfig["users"][0]["user"];
    let token = user["token"].as_str().unwrap();
    let admin: Value =
        serde_json::to_value(Kubeconfig::from_yaml(&vcluster.kubeconfig(None)).unwrap()).unwrap();
    assert_ne!(
        token,
        admin["users"][0]["user"]["token"].as_str().unwrap(),
        "the admin token never leaves the platform"
    );
    assert!(user.get("client-certificate-data").is_none());
    assert!(
        kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .is_some()
    );
    assert_eq!(answers(&client_of(&text).await).await, 200);

    let listed = credentials(&platform, &id).await;
    assert_eq!(listed.len(), 1);
    let credential = &listed[0];
    assert_eq!(credential["status"], "active");
    assert_eq!(credential["description"], "laptop");
    let account = credential["service_account_name"].as_str().unwrap();
    let expires: chrono::DateTime<chrono::Utc> =
        credential["expires_at"].as_str().unwrap().parse().unwrap();
    let lifetime = expires - chrono::Utc::now();
    assert!(
        lifetime > chrono::Duration::minutes(58) && lifetime <= chrono::Duration::hours(1),
        "{lifetime}"
    );
    let sa = vcluster
        .get("v1", "ServiceAccount", "kube-system", account)
        .expect("the credential's ServiceAccount exists in the cluster");
    assert_eq!(
        sa["metadata"]["labels"]["kubebyon.io/credential"],
        credential["id"]
    );
    let binding = vcluster
        .get(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            "",
            account,
        )
        .unwrap();
    assert_eq!(binding["roleRef"]["name"], "cluster-admin");
    assert_eq!(binding["subjects"][0]["name"], account);

    // An hour later the token is refused by the cluster itself.
    vcluster.set_faults(kube_sim::Faults {
        clock_ahead: Duration::from_secs(3601),
        ..Default::default()
    });
    assert_eq!(answers(&client_of(&text).await).await, 401);
}

#[tokio::test]
async fn revoking_one_kubeconfig_ends_its_token_and_no_other() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("revoke", "nodeport").await;
    let vcluster = platform.sim().vcluster(&namespace, "revoke").unwrap();
    let first = client_of(&platform.issue_kubeconfig(&id, json!({})).await).await;
    let second = client_of(&platform.issue_kubeconfig(&id, json!({})).await).await;
    let listed = credentials(&platform, &id).await;
    assert_eq!(listed.len(), 2);
    // Newest first: the first one issued is last.
    let first_id = listed[1]["id"].as_str().unwrap().to_string();
    let expires: chrono::DateTime<chrono::Utc> =
        listed[1]["expires_at"].as_str().unwrap().parse().unwrap();
    assert!(
        expires - chrono::Utc::now() > chrono::Duration::hours(7),
        "8 h by default"
    );

    let path = format!("/api/console/clusters/{id}/kubeconfigs/{first_id}");
    let (status, body) = platform.call("DELETE", &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "revoked");
    assert_eq!(body["revoke_reason"], "user");
    assert_eq!(answers(&first).await, 401, "the revoked token is refused");
    assert_eq!(answers(&second).await, 200, "the other one still works");
    assert!(
        vcluster
            .get(
                "v1",
                "ServiceAccount",
                "kube-system",
                listed[1]["service_account_name"].as_str().unwrap()
            )
            .is_none()
    );
    // Again: nothing changes.
    let (status, again) = platform.call("DELETE", &path, None).await;
    assert_eq!(
        (status, &again["revoked_at"]),
        (StatusCode::OK, &body["revoked_at"])
    );

    // A recreated ServiceAccount of the same name does not bring the token back.
    vcluster
        .put(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": listed[1]["service_account_name"], "namespace": "kube-system"}}))
        .unwrap();
    assert_eq!(answers(&first).await, 401);
}

#[tokio::test]
async fn a_revocation_the_cluster_missed_is_finished_by_the_cluster_sync() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("later", "nodeport").await;
    let vcluster = platform.sim().vcluster(&namespace, "later").unwrap();
    let text = platform.issue_kubeconfig(&id, json!({})).await;
    let credential_id = credentials(&platform, &id).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    vcluster.set_faults(kube_sim::Faults {
        api_down: true,
        ..Default::default()
    });
    let (status, body) = platform
        .call(
            "DELETE",
            &format!("/api/console/clusters/{id}/kubeconfigs/{credential_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["status"], "revoking",
        "the API says the truth: not gone yet"
    );
    let report =
        shared::kubeconfigs::credential::remove_stale(&platform.db.pool, platform.host(), None)
            .await
            .unwrap();
    assert_eq!((report.removed, report.pending), (0, 1));

    vcluster.set_faults(kube_sim::Faults::default());
    assert_eq!(
        answers(&client_of(&text).await).await,
        200,
        "still alive before the sync"
    );
    let report =
        shared::kubeconfigs::credential::remove_stale(&platform.db.pool, platform.host(), None)
            .await
            .unwrap();
    assert_eq!((report.removed, report.pending), (1, 0));
    assert_eq!(answers(&client_of(&text).await).await, 401);
    assert_eq!(credentials(&platform, &id).await[0]["status"], "revoked");
}

#[tokio::test]
async fn an_issue_the_cluster_refused_leaves_no_live_credential() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("refused", "nodeport").await;
    let vcluster = platform.sim().vcluster(&namespace, "refused").unwrap();
    vcluster.set_faults(kube_sim::Faults {
        api_down: true,
        ..Default::default()
    });
    let (status, body) = platform
        .call(
            "POST",
            &format!("/api/console/clusters/{id}/kubeconfigs"),
            Some(json!({})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_GATEWAY, Some("cluster_unreachable"))
    );
    let listed = credentials(&platform, &id).await;
    assert_eq!(listed[0]["status"], "revoking");
    assert_eq!(listed[0]["revoke_reason"], "issue_failed");
}

#[tokio::test]
async fn disabling_a_user_revokes_every_kubeconfig_they_hold() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, _) = platform.create_ready("owner", "nodeport").await;
    let text = platform.issue_kubeconfig(&id, json!({})).await;
    let client = client_of(&text).await;
    assert_eq!(answers(&client).await, 200);

    let owner = shared::accounts::users::ensure_development_user(&platform.db.pool)
        .await
        .unwrap();
    let admin: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name, role, email_verified_at)
         VALUES ('second-admin@example.com', 'Second admin', 'admin', now()) RETURNING id",
    )
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    tests::api_key(&platform.db.pool, owner, "automation").await;
    let (status, body) = platform
        .call_as(
            admin,
            "PATCH",
            &format!("/api/console/admin/users/{owner}"),
            Some(json!({ "status": "disabled" })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        answers(&client).await,
        401,
        "the disabled user's kubeconfig stops at once"
    );
    let listed = credentials(&platform, &id).await;
    assert_eq!(listed[0]["status"], "revoked");
    assert_eq!(listed[0]["revoke_reason"], "user_disabled");
    // Their API keys too, so enabling the account again brings none back;
    // the audit event counts what ended.
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_keys WHERE user_id = $1 AND revoked_at IS NULL",
    )
    .bind(owner)
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(live, 0);
    let audited: serde_json::Value =
        sqlx::query_scalar("SELECT metadata FROM audit_events WHERE action = 'admin.user.update'")
            .fetch_one(&platform.db.pool)
            .await
            .unwrap();
    assert_eq!(
        (
            &audited["status"],
            &audited["api_keys_revoked"],
            &audited["kubeconfigs_revoked"]
        ),
        (&json!("disabled"), &json!(1), &json!(1)),
        "{audited}"
    );
}

#[tokio::test]
async fn kubeconfig_requests_are_checked_and_owned() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, _) = platform.create_ready("checks", "nodeport").await;
    let path = format!("/api/console/clusters/{id}/kubeconfigs");
    for body in [
        json!({ "expiration_seconds": 599 }),
        json!({ "expiration_seconds": 86_401 }),
        json!({ "expiration_seconds": i64::MAX }),
        json!({ "expiration_seconds": -1 }),
        json!({ "description": "x".repeat(201) }),
        json!({ "description": "line\nbreak" }),
    ] {
        let (status, problem) = platform.call("POST", &path, Some(body.clone())).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("validation_failed")),
            "{body}"
        );
    }
    let (status, _) = platform
        .call("POST", &path, Some(json!({ "token": "mine" })))
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "unknown fields are refused"
    );
    assert!(
        credentials(&platform, &id).await.is_empty(),
        "nothing half-written"
    );

    // Another user sees no such cluster, and cannot revoke what is not theirs.
    platform.issue_kubeconfig(&id, json!({})).await;
    let credential_id = credentials(&platform, &id).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let other: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name, role, email_verified_at)
         VALUES ('other@example.com', 'Other', 'user', now()) RETURNING id",
    )
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    let (status, _) = platform
        .call_as(other, "POST", &path, Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = platform
        .call_as(other, "DELETE", &format!("{path}/{credential_id}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(credentials(&platform, &id).await[0]["status"], "active");
}

/// kubectl's renewed credentials: a key's first call makes its
/// ServiceAccount and later ones reuse it; a credential revoked while its
/// token is being issued (the key revoked in that moment) answers 401 and
/// leaves no ServiceAccount, though the issue made it again after the
/// revocation deleted it.
#[tokio::test]
async fn a_credential_revoked_while_its_token_is_issued_leaves_no_service_account() {
    let platform = TestApp::builder("worker-b").host().build().await;
    let (id, namespace) = platform.create_ready("renew", "nodeport").await;
    let vcluster = platform.sim().vcluster(&namespace, "renew").unwrap();
    let path = format!("/api/console/clusters/{id}/exec-credentials");
    let key = tests::development_api_key(&platform.db.pool, "kubectl").await;
    let with_key = platform
        .client_with(shared::http::Identity::Accounts)
        .bearer(&key);

    // From a session (here, the development identity): refused.
    let (status, body) = platform.call("POST", &path, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("api_key_required"))
    );
    let (status, first) = with_key.call("POST", &path, None).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["kind"], "ExecCredential");
    let (status, second) = with_key.call("POST", &path, None).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_ne!(first["status"]["token"], second["status"]["token"]);
    let accounts: Vec<(String, String)> = sqlx::query_as(
        "SELECT service_account_name, kind FROM kubeconfig_credentials WHERE cluster_id = $1::uuid",
    )
    .bind(&id)
    .fetch_all(&platform.db.pool)
    .await
    .unwrap();
    assert_eq!(
        accounts.len(),
        1,
        "renewals reuse the credential: {accounts:?}"
    );
    assert_eq!(accounts[0].1, "exec");
    assert!(
        vcluster
            .get("v1", "ServiceAccount", "kube-system", &accounts[0].0)
            .is_some()
    );

    // Another key; its credential is revoked the moment it is recorded.
    sqlx::raw_sql(
        "CREATE FUNCTION revoke_as_recorded() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             UPDATE kubeconfig_credentials SET revoked_at = now(), revoke_reason = 'api_key_revoked'
             WHERE id = NEW.id;
             RETURN NULL;
         END $$;
         CREATE TRIGGER revoke_as_recorded AFTER INSERT ON kubeconfig_credentials
             FOR EACH ROW EXECUTE FUNCTION revoke_as_recorded();",
    )
    .execute(&platform.db.pool)
    .await
    .unwrap();
    let other = tests::development_api_key(&platform.db.pool, "kubectl-2").await;
    let (status, body) = platform
        .client_with(shared::http::Identity::Accounts)
        .bearer(&other)
        .call("POST", &path, None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no token: {body}");
    let (name, removed): (String, bool) = sqlx::query_as(
        "SELECT service_account_name, removed_at IS NOT NULL FROM kubeconfig_credentials
         WHERE cluster_id = $1::uuid AND revoked_at IS NOT NULL",
    )
    .bind(&id)
    .fetch_one(&platform.db.pool)
    .await
    .unwrap();
    assert!(
        vcluster
            .get("v1", "ServiceAccount", "kube-system", &name)
            .is_none(),
        "the ServiceAccount the issue made is deleted again"
    );
    assert!(removed);
}
