//! Outgoing mail over SMTP (lettre). `SMTP_URL` says where and how:
//! `smtps://user:pass@host:465` (TLS), `smtp://user:pass@host:587?tls=required`
//! (STARTTLS), or `smtp://host:1025` (plain, for a local sink).

use lettre::{
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor, message::header::ContentType,
};
use secrecy::ExposeSecret;

use crate::config::Settings;

#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("no SMTP server is configured (SMTP_URL)")]
    NotConfigured,
    #[error("SMTP_URL is not usable: {0}")]
    BadUrl(String),
    #[error("the message could not be built: {0}")]
    Message(String),
    #[error("the SMTP server did not take the message: {0}")]
    Send(String),
}

/// Sends one plain-text message.
pub async fn send(
    settings: &Settings,
    to: &str,
    subject: &str,
    body: String,
) -> Result<(), MailError> {
    let url = settings.smtp_url.as_ref().ok_or(MailError::NotConfigured)?;
    let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url.expose_secret())
        .map_err(|e| MailError::BadUrl(e.to_string()))?
        .timeout(Some(std::time::Duration::from_secs(15)))
        .build();
    let message = Message::builder()
        .from(
            settings
                .mail_from
                .parse()
                .map_err(|e| MailError::Message(format!("MAIL_FROM: {e}")))?,
        )
        .to(to
            .parse()
            .map_err(|e| MailError::Message(format!("recipient: {e}")))?)
        .subject(subject)
        .header(ContentType::TEXT_PLAIN)
        .body(body)
        .map_err(|e| MailError::Message(e.to_string()))?;
    transport
        .send(message)
        .await
        .map(|_| ())
        .map_err(|e| MailError::Send(e.to_string()))
}
