//! The user journey both deployment rehearsals take through the platform's
//! public routes: registering by the emailed code, a cluster built and ready,
//! a join token and a hostname on it, the cluster deleted; and what the job
//! rows say afterwards.

use axum::http::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use tests::{eventually, smtp::SmtpSink};

/// A browser: its session cookie and CSRF token once signed in.
#[derive(Default)]
pub(crate) struct Browser {
    cookies: Vec<String>,
    csrf: Option<String>,
}

impl Browser {
    pub(crate) async fn call(
        &mut self,
        http: &reqwest::Client,
        base: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = http.request(method.parse().unwrap(), format!("{base}{path}"));
        if !self.cookies.is_empty() {
            request = request.header("cookie", self.cookies.join("; "));
        }
        if let Some(csrf) = &self.csrf {
            request = request.header("x-csrf-token", csrf);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        for cookie in response.headers().get_all("set-cookie") {
            let pair = cookie
                .to_str()
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .to_string();
            let name = pair.split('=').next().unwrap().to_string();
            if name == "__Host-kb_csrf" {
                self.csrf = Some(pair[name.len() + 1..].to_string());
            }
            self.cookies.retain(|c| !c.starts_with(&format!("{name}=")));
            self.cookies.push(pair);
        }
        let bytes = response.bytes().await.unwrap();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        (StatusCode::from_u16(status.as_u16()).unwrap(), body)
    }
}

/// The platform as a user reaches it: its public base URL, and the mail
/// sink its SMTP settings point at.
pub(crate) struct Journey<'a> {
    pub(crate) http: &'a reqwest::Client,
    pub(crate) base: &'a str,
    pub(crate) mail: &'a SmtpSink,
    pub(crate) pool: &'a PgPool,
}

impl Journey<'_> {
    async fn call(
        &self,
        user: &mut Browser,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        user.call(self.http, self.base, method, path, body).await
    }

    /// Registers `email` and confirms it by the emailed code: a signed-in browser.
    pub(crate) async fn sign_up(&self, email: &str) -> Browser {
        let mut user = Browser::default();
        let password = "correct horse battery staple";
        let (status, body) = self
            .call(
                &mut user,
                "POST",
                "/api/auth/register",
                Some(json!({ "email": email, "password": password, "display_name": "Alice" })),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let code = self.mail.code_for(email).await;
        let (status, body) = self
            .call(
                &mut user,
                "POST",
                "/api/auth/verify-email",
                Some(json!({ "email": email, "code": code, "password": password })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        user
    }

    /// Asks for a cluster and waits until its jobs made it ready; its id.
    pub(crate) async fn ready_cluster(&self, user: &mut Browser, name: &str) -> String {
        let (status, body) = self
            .call(
                user,
                "POST",
                "/api/console/clusters",
                Some(json!({
                    "name": name,
                    "workload_cpu_limit_milli_cores": 2000,
                    "workload_memory_limit_mib": 4096,
                })),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let id = body["cluster"]["id"].as_str().unwrap().to_string();
        let cookie = user.cookies.join("; ");
        let cluster = eventually(60, "the cluster to be ready", || {
            let request = self
                .http
                .get(format!("{}/api/console/clusters/{id}", self.base))
                .header("cookie", cookie.clone());
            async move {
                let cluster: Value = request.send().await.ok()?.json().await.ok()?;
                (cluster["status"] != "provisioning").then_some(cluster)
            }
        })
        .await;
        assert_eq!(cluster["status"], "ready", "{cluster}");
        id
    }

    /// A join token (api-nodes) and a hostname (api-ingress), under the
    /// cluster's path that api-clusters serves.
    pub(crate) async fn token_and_hostname(&self, user: &mut Browser, id: &str) {
        let (status, token) = self
            .call(
                user,
                "POST",
                &format!("/api/console/clusters/{id}/tokens"),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{token}");
        assert!(
            token.to_string().contains("/join"),
            "the token comes with its join command: {token}"
        );
        let (status, binding) = self
            .call(
                user,
                "POST",
                &format!("/api/console/clusters/{id}/hostnames"),
                Some(json!({ "hostname": "shop.customer.test" })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{binding}");
    }

    /// Deletes the cluster and waits until its delete job is done.
    pub(crate) async fn delete(&self, user: &mut Browser, id: &str) {
        let (status, body) = self
            .call(user, "DELETE", &format!("/api/console/clusters/{id}"), None)
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let id: uuid::Uuid = id.parse().unwrap();
        eventually(60, "the cluster to be deleted", || async move {
            let status: String = sqlx::query_scalar("SELECT status FROM clusters WHERE id = $1")
                .bind(id)
                .fetch_one(self.pool)
                .await
                .ok()?;
            (status == "deleted").then_some(())
        })
        .await;
    }

    /// Every job: a create and a delete among them, each succeeded at its
    /// first attempt. Their ids.
    pub(crate) async fn jobs_ran_once(&self) -> Vec<uuid::Uuid> {
        let jobs: Vec<(uuid::Uuid, String, String, i32)> = sqlx::query_as(
            "SELECT id, type, status, attempt_count FROM cluster_jobs ORDER BY created_at",
        )
        .fetch_all(self.pool)
        .await
        .unwrap();
        assert!(
            jobs.iter().any(|j| j.1 == "cluster_create")
                && jobs.iter().any(|j| j.1 == "cluster_delete"),
            "{jobs:?}"
        );
        for job in &jobs {
            assert_eq!((job.2.as_str(), job.3), ("succeeded", 1), "{jobs:?}");
        }
        jobs.into_iter().map(|job| job.0).collect()
    }
}
