//! `kubebyon admin`: the back office from a terminal, for administrators:
//! users (list, disable, enable) and the cluster job queue (list, retry,
//! cancel).

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use crate::{
    Session,
    client::{self, Client, segment},
    error::{CliError, Exit},
    model::{JobRecord, User},
    output::{self, Format},
};

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Users: list, disable, enable.
    #[command(subcommand)]
    Users(UsersCommand),
    /// The cluster job queue: list, retry, cancel.
    #[command(subcommand)]
    Jobs(JobsCommand),
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Users, newest first.
    #[command(visible_alias = "ls")]
    List {
        /// Part of the email or the display name.
        #[arg(long)]
        search: Option<String>,
    },
    /// Disable a user: their sessions, API keys and kubeconfigs end at once.
    Disable { email: String },
    /// Let a disabled user sign in again.
    Enable { email: String },
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Jobs, newest first.
    #[command(visible_alias = "ls")]
    List {
        /// pending, running, succeeded, failed or cancelled.
        #[arg(long)]
        status: Option<String>,
    },
    /// Run a failed or cancelled job again.
    Retry { job: String },
    /// Cancel a job that has not finished.
    Cancel { job: String },
}

fn user_rows(users: &[User]) -> Vec<Vec<String>> {
    users
        .iter()
        .map(|u| {
            vec![
                u.email.clone(),
                u.display_name.clone(),
                u.role.clone(),
                u.status.clone(),
                output::age(&u.created_at),
            ]
        })
        .collect()
}

const USER_HEADER: [&str; 5] = ["EMAIL", "NAME", "ROLE", "STATUS", "AGE"];

pub async fn run(session: &Session, command: AdminCommand) -> Result<(), CliError> {
    let client = session.signed_in()?;
    match command {
        AdminCommand::Users(UsersCommand::List { search }) => {
            let path = match search {
                Some(q) => format!("/api/console/admin/users?limit=500&q={}", segment(&q)),
                None => "/api/console/admin/users?limit=500".into(),
            };
            let raw = client.get(&path).await?;
            let users: Vec<User> = client::read(&raw)?;
            output::print(session.output, &raw, &USER_HEADER, user_rows(&users))
        }
        AdminCommand::Users(UsersCommand::Disable { email }) => {
            set_status(session, &client, &email, "disabled").await
        }
        AdminCommand::Users(UsersCommand::Enable { email }) => {
            set_status(session, &client, &email, "active").await
        }
        AdminCommand::Jobs(JobsCommand::List { status }) => {
            let path = match status {
                Some(s) => format!(
                    "/api/console/admin/cluster-jobs?limit=500&status={}",
                    segment(&s)
                ),
                None => "/api/console/admin/cluster-jobs?limit=500".into(),
            };
            let raw = client.get(&path).await?;
            let jobs: Vec<JobRecord> = client::read(&raw)?;
            output::print(
                session.output,
                &raw,
                &[
                    "ID",
                    "CLUSTER",
                    "TYPE",
                    "STATUS",
                    "ATTEMPTS",
                    "AGE",
                    "LAST ERROR",
                ],
                jobs.iter()
                    .map(|j| {
                        vec![
                            j.id.clone(),
                            j.cluster_id.clone(),
                            j.r#type.clone(),
                            j.status.clone(),
                            format!("{}/{}", j.attempt_count, j.max_attempts),
                            output::age(&j.created_at),
                            output::or_dash(&j.last_error),
                        ]
                    })
                    .collect(),
            )
        }
        AdminCommand::Jobs(JobsCommand::Retry { job }) => {
            job_action(session, &client, &job, "retry").await
        }
        AdminCommand::Jobs(JobsCommand::Cancel { job }) => {
            job_action(session, &client, &job, "cancel").await
        }
    }
}

/// Sets the status of the user with this email.
async fn set_status(
    session: &Session,
    client: &Client,
    email: &str,
    status: &str,
) -> Result<(), CliError> {
    let users: Vec<User> = client::read(
        &client
            .get(&format!(
                "/api/console/admin/users?limit=500&q={}",
                segment(email)
            ))
            .await?,
    )?;
    let user = users
        .into_iter()
        .find(|u| u.email.eq_ignore_ascii_case(email))
        .ok_or_else(|| {
            CliError::new(
                Exit::NotFound,
                format!("no user {}", crate::error::one_line(email)),
            )
        })?;
    let answer = client
        .call(
            Method::PATCH,
            &format!("/api/console/admin/users/{}", segment(&user.id)),
            Some(&json!({ "status": status })),
        )
        .await?;
    let changed: User = answer.read()?;
    output::print(
        session.output,
        &answer.body,
        &USER_HEADER,
        user_rows(&[changed]),
    )
}

/// Retries or cancels a job.
async fn job_action(
    session: &Session,
    client: &Client,
    job: &str,
    action: &str,
) -> Result<(), CliError> {
    let answer = client
        .call(
            Method::POST,
            &format!("/api/console/admin/cluster-jobs/{}/{action}", segment(job)),
            None,
        )
        .await?;
    let record: JobRecord = answer.read()?;
    note!("Job {} is {}.", record.id, record.status);
    if session.output != Format::Table {
        output::print(session.output, &answer.body, &[], vec![])?;
    }
    Ok(())
}
