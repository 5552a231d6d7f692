//! The user journey both deployment rehearsals take through the platform's
//! public routes: registering by the emailed code, a cluster built and ready,
//! a join token and a hostname on it, the cluster deleted; and what the job
//! rows say afterwards.

use axum::http::StatusCode;
use serde_json::json;
use sqlx::PgPool;
use tests::{eventually, smtp::SmtpSink};

use crate::harness::Client;

/// The platform as a user reaches it: a client of its public base URL, and
/// the mail sink its SMTP settings point at.
pub(crate) struct Journey<'a> {
    pub(crate) anonymous: Client,
    pub(crate) mail: &'a SmtpSink,
    pub(crate) pool: &'a PgPool,
}

impl Journey<'_> {
    /// Registers `email` and confirms it by the emailed code: a signed-in browser.
    pub(crate) async fn sign_up(&self, email: &str) -> Client {
        self.anonymous
            .sign_up(self.mail, email, "correct horse battery staple")
            .await
    }

    /// Asks for a cluster and waits until its jobs made it ready; its id.
    pub(crate) async fn ready_cluster(&self, user: &Client, name: &str) -> String {
        let (status, body) = user
            .call(
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
        let cluster = eventually(60, "the cluster to be ready", || {
            let path = format!("/api/console/clusters/{id}");
            async move {
                let cluster = user.try_send("GET", &path, None).await?.body;
                (cluster["status"] != "provisioning").then_some(cluster)
            }
        })
        .await;
        assert_eq!(cluster["status"], "ready", "{cluster}");
        id
    }

    /// A join token (api-nodes) and a hostname (api-ingress), under the
    /// cluster's path that api-clusters serves.
    pub(crate) async fn token_and_hostname(&self, user: &Client, id: &str) {
        let (status, token) = user
            .call(
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
        let (status, binding) = user
            .call(
                "POST",
                &format!("/api/console/clusters/{id}/hostnames"),
                Some(json!({ "hostname": "shop.customer.test" })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{binding}");
    }

    /// Deletes the cluster and waits until its delete job is done.
    pub(crate) async fn delete(&self, user: &Client, id: &str) {
        let (status, body) = user
            .call("DELETE", &format!("/api/console/clusters/{id}"), None)
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
