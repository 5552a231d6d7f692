//! Outgoing mail over SMTP (lettre). The server is the one in the system
//! settings (`smtp_host`, port, TLS mode, username, sealed password, sender)
//! when set there, else `SMTP_URL` from the environment:
//! `smtps://user:pass@host:465` (TLS), `smtp://user:pass@host:587?tls=required`
//! (STARTTLS), or `smtp://host:1025` (plain, for a local sink).

use lettre::{
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
    message::{Mailbox, header::ContentType},
    transport::smtp::authentication::Credentials,
};
use secrecy::ExposeSecret;
use sqlx::PgPool;

use crate::{
    config::Settings,
    settings::{self, column},
};

#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("no SMTP server is configured (system settings or SMTP_URL)")]
    NotConfigured,
    #[error("the SMTP settings are not usable: {0}")]
    BadSettings(String),
    #[error("the message could not be built: {0}")]
    Message(String),
    #[error("the SMTP server did not take the message: {0}")]
    Send(String),
    #[error("reading the settings: {0}")]
    Database(#[from] sqlx::Error),
}

type Transport = AsyncSmtpTransport<Tokio1Executor>;

async fn transport(pool: &PgPool, env: &Settings) -> Result<(Transport, String), MailError> {
    let stored = settings::load(pool).await?;
    let from = stored
        .fields
        .smtp_from
        .clone()
        .unwrap_or_else(|| env.mail_from.clone());
    let bad = |e: lettre::transport::smtp::Error| MailError::BadSettings(e.to_string());
    if let Some(host) = stored.fields.smtp_host.as_deref() {
        let mut builder = match stored.fields.smtp_tls.as_str() {
            "tls" => Transport::relay(host).map_err(bad)?,
            "starttls" => Transport::starttls_relay(host).map_err(bad)?,
            _ => Transport::builder_dangerous(host),
        };
        if let Some(port) = stored.fields.smtp_port {
            builder = builder.port(port as u16);
        }
        if let Some(username) = stored.fields.smtp_username.clone() {
            let key = env.secret_box();
            let password = settings::open(
                key.as_ref(),
                column::SMTP_PASSWORD,
                stored.smtp_password.as_deref(),
            )
            .map_err(|e| MailError::BadSettings(format!("the SMTP password: {e}")))?
            .map(|p| p.expose_secret().to_string())
            .unwrap_or_default();
            builder = builder.credentials(Credentials::new(username, password));
        }
        return Ok((
            builder
                .timeout(Some(std::time::Duration::from_secs(15)))
                .build(),
            from,
        ));
    }
    let url = env.smtp_url.as_ref().ok_or(MailError::NotConfigured)?;
    let transport = Transport::from_url(url.expose_secret())
        .map_err(|e| MailError::BadSettings(format!("SMTP_URL: {e}")))?
        .timeout(Some(std::time::Duration::from_secs(15)))
        .build();
    Ok((transport, from))
}

/// Whether mail can be sent at all (a server is configured and its settings
/// build a transport); no connection is made.
pub async fn ready(pool: &PgPool, env: &Settings) -> Result<(), MailError> {
    transport(pool, env).await.map(|_| ())
}

/// A connection setup to the configured server, for sending several messages.
pub struct Mailer {
    transport: Transport,
    from: Mailbox,
}

impl Mailer {
    pub async fn from_settings(pool: &PgPool, env: &Settings) -> Result<Self, MailError> {
        let (transport, from) = transport(pool, env).await?;
        let from = from
            .parse::<Mailbox>()
            .map_err(|e| MailError::Message(format!("sender: {e}")))?;
        Ok(Self { transport, from })
    }

    /// Sends one plain-text message. With `message_id` (`<local@domain>`),
    /// a receiver can tell a resent message from a new one.
    pub async fn send(
        &self,
        to: &str,
        subject: &str,
        body: String,
        message_id: Option<String>,
    ) -> Result<(), MailError> {
        let message = Message::builder()
            .from(self.from.clone())
            .to(to
                .parse()
                .map_err(|e| MailError::Message(format!("recipient: {e}")))?)
            .subject(subject)
            .message_id(message_id)
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| MailError::Message(e.to_string()))?;
        self.transport
            .send(message)
            .await
            .map(|_| ())
            .map_err(|e| MailError::Send(e.to_string()))
    }
}

/// Sends one plain-text message without holding up the answer: after the
/// request where the process outlives it; under Lambda, which freezes the
/// process once it answers, within the request. A failure is logged as
/// "could not send `what`".
pub async fn deliver(
    pool: PgPool,
    env: std::sync::Arc<Settings>,
    to: String,
    subject: String,
    body: String,
    what: &'static str,
) {
    let delivery = async move {
        if let Err(err) = send(&pool, &env, &to, &subject, body).await {
            tracing::error!(error = %err, "could not send {what}");
        }
    };
    if crate::runtime::under_lambda() {
        delivery.await;
    } else {
        tokio::spawn(delivery);
    }
}

/// Sends one plain-text message.
pub async fn send(
    pool: &PgPool,
    env: &Settings,
    to: &str,
    subject: &str,
    body: String,
) -> Result<(), MailError> {
    Mailer::from_settings(pool, env)
        .await?
        .send(to, subject, body, None)
        .await
}
