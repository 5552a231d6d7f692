//! Signing in from a terminal (the OAuth 2.0 Device Authorization Grant,
//! RFC 8628), signing out, and the contexts: one a platform signed in to.

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use reqwest::Method;

use crate::{
    Session,
    client::{self, segment},
    error::{CliError, Exit},
    model::{ApiKey, DeviceCodeResponse, DeviceTokenResponse, OAuthError, User},
    output,
};

/// The platform's client of the grant.
const CLIENT_ID: &str = "kubebyon-cli";
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:device_code";

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The context to save the key as (the platform's host name by default);
    /// it becomes the current one.
    #[arg(long)]
    name: Option<String>,
    /// What this machine is called in the console's list of keys (its host
    /// name by default).
    #[arg(long)]
    device_name: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ContextCommand {
    /// Every context, the current one marked.
    List,
    /// Make a context the current one.
    Use { name: String },
    /// Forget a context (its key is not revoked: `kubebyon logout` does that).
    Delete { name: String },
}

pub async fn login(mut session: Session, args: LoginArgs) -> Result<(), CliError> {
    let client = client::Client::new(
        if session.context.url.is_empty() {
            return Err(CliError::new(
                Exit::Usage,
                "which platform? give --url https://… (KUBEBYON_URL)",
            ));
        } else {
            &session.context.url
        },
        None,
        None,
        session.verbose,
    )?;
    let device_name = args.device_name.unwrap_or_else(host_name);
    let answer = client
        .post_form(
            "/api/auth/device/code",
            &[("client_id", CLIENT_ID), ("device_name", &device_name)],
        )
        .await?;
    if !answer.status.is_success() {
        return Err(CliError::from_problem(answer.status.as_u16(), &answer.body));
    }
    let codes: DeviceCodeResponse = answer.read()?;
    note!(
        "To sign in, open {} and enter the code {}\n(or open {}). The code expires in {} minutes.",
        codes.verification_uri,
        codes.user_code,
        codes.verification_uri_complete,
        codes.expires_in / 60
    );
    let mut progress = output::Progress::new();
    progress.line("Waiting for the approval…");
    let deadline = Instant::now() + Duration::from_secs(codes.expires_in.max(1) as u64);
    let mut interval = Duration::from_secs(codes.interval.clamp(1, 60) as u64);
    let granted = loop {
        tokio::time::sleep(interval).await;
        if Instant::now() > deadline {
            return Err(CliError::new(
                Exit::TimedOut,
                "the code expired before it was approved; run `kubebyon login` again",
            ));
        }
        let answer = client
            .post_form(
                "/api/auth/device/token",
                &[
                    ("grant_type", GRANT_TYPE),
                    ("device_code", &codes.device_code),
                    ("client_id", CLIENT_ID),
                ],
            )
            .await?;
        if answer.status.is_success() {
            break answer.read::<DeviceTokenResponse>()?;
        }
        if answer.status.as_u16() != 400 {
            return Err(CliError::from_problem(answer.status.as_u16(), &answer.body));
        }
        let error: OAuthError = answer.read()?;
        match error.error.as_str() {
            "authorization_pending" => progress.status(&format!(
                "waiting; the code expires in {}s",
                deadline.saturating_duration_since(Instant::now()).as_secs()
            )),
            "slow_down" => interval += Duration::from_secs(5),
            "access_denied" => {
                return Err(CliError::new(
                    Exit::Auth,
                    "the sign-in was denied in the console",
                ));
            }
            "expired_token" => {
                return Err(CliError::new(
                    Exit::TimedOut,
                    "the code expired before it was approved; run `kubebyon login` again",
                ));
            }
            _ => {
                return Err(CliError::new(
                    Exit::Auth,
                    format!(
                        "the sign-in failed: {} [{}]",
                        error.error_description, error.error
                    ),
                ));
            }
        }
    };
    let name = args
        .name
        .unwrap_or_else(|| default_context_name(client.base()));
    let mut context = session.context.clone();
    context.api_key = Some(granted.access_token);
    session.config.contexts.insert(name.clone(), context);
    session.config.current_context = Some(name.clone());
    session.config.save()?;
    session.context = session.config.contexts[&name].clone();
    let me: User = client::read(&session.signed_in()?.get("/api/auth/me").await?)?;
    note!(
        "Signed in to {} as {} (context {name}, a {} key valid {} days).",
        client.base(),
        me.email,
        granted.scope,
        granted.expires_in / 86_400
    );
    Ok(())
}

/// Revokes the context's key (a key may revoke itself) and forgets it.
pub async fn logout(mut session: Session) -> Result<(), CliError> {
    let Some(name) = session.context_name.clone() else {
        return Err(CliError::new(Exit::Usage, "no context to sign out of"));
    };
    let client = session.signed_in()?;
    let key = session.context.api_key.clone().unwrap_or_default();
    let keys: Vec<ApiKey> = client::read(&client.get("/api/console/account/api-keys").await?)?;
    if let Some(own) = keys
        .iter()
        .find(|k| key.starts_with(&format!("{}_", k.prefix)))
    {
        client
            .call(
                Method::DELETE,
                &format!("/api/console/account/api-keys/{}", segment(&own.id)),
                None,
            )
            .await?;
    }
    if let Some(context) = session.config.contexts.get_mut(&name) {
        context.api_key = None;
    }
    session.config.save()?;
    note!("Signed out of {name}; its key is revoked.");
    Ok(())
}

pub async fn whoami(session: &Session) -> Result<(), CliError> {
    let raw = session.signed_in()?.get("/api/auth/me").await?;
    let me: User = client::read(&raw)?;
    output::print(
        session.output,
        &raw,
        &["EMAIL", "ID", "CONTEXT", "PLATFORM"],
        vec![vec![
            me.email,
            me.id,
            session.context_name.clone().unwrap_or_else(|| "-".into()),
            session.context.url.clone(),
        ]],
    )
}

pub fn context(mut session: Session, command: ContextCommand) -> Result<(), CliError> {
    match command {
        ContextCommand::List => {
            let current = session.config.current_context.clone();
            let raw = serde_json::json!({
                "current_context": current,
                "contexts": session.config.contexts.iter().map(|(name, c)| serde_json::json!({
                    "name": name, "url": c.url, "signed_in": c.api_key.is_some(),
                    "organization": c.organization,
                })).collect::<Vec<_>>(),
            });
            let rows = session
                .config
                .contexts
                .iter()
                .map(|(name, c)| {
                    vec![
                        if current.as_deref() == Some(name) {
                            "*"
                        } else {
                            ""
                        }
                        .into(),
                        name.clone(),
                        c.url.clone(),
                        if c.api_key.is_some() { "yes" } else { "no" }.into(),
                        output::or_dash(&c.organization),
                    ]
                })
                .collect();
            output::print(
                session.output,
                &raw,
                &["CURRENT", "NAME", "PLATFORM", "SIGNED IN", "ORGANIZATION"],
                rows,
            )
        }
        ContextCommand::Use { name } => {
            if !session.config.contexts.contains_key(&name) {
                return Err(CliError::new(
                    Exit::Usage,
                    format!("no context named {name}"),
                ));
            }
            session.config.current_context = Some(name.clone());
            session.config.save()?;
            note!("Now using {name}.");
            Ok(())
        }
        ContextCommand::Delete { name } => {
            if session.config.contexts.remove(&name).is_none() {
                return Err(CliError::new(
                    Exit::Usage,
                    format!("no context named {name}"),
                ));
            }
            if session.config.current_context.as_deref() == Some(name.as_str()) {
                session.config.current_context = None;
            }
            session.config.save()?;
            note!("Forgot {name}.");
            Ok(())
        }
    }
}

/// This machine's host name, as the platform takes a device's name: ASCII
/// letters, digits, `.`, `-` and `_`, at most 64.
fn host_name() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let name: String = raw
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .take(64)
        .collect();
    if name.is_empty() {
        "device".into()
    } else {
        name
    }
}

/// A context named after the platform's host.
fn default_context_name(base: &str) -> String {
    reqwest::Url::parse(base)
        .ok()
        .and_then(|u| {
            u.host_str().map(|h| match u.port() {
                Some(port) => format!("{h}:{port}"),
                None => h.to_string(),
            })
        })
        .unwrap_or_else(|| "default".into())
}
