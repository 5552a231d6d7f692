//! Outbound webhooks as the Standard Webhooks specification has them:
//! `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64>`,
//! the HMAC-SHA256 of `id.timestamp.body` under the secret that follows
//! `whsec_` (base64), so receivers verify with the published libraries.

use std::time::Duration;

use base64::{Engine, engine::general_purpose::STANDARD};
use ring::hmac;
use secrecy::{ExposeSecret, SecretString};

/// How long a receiver has to answer.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Signs with the key of a `whsec_<base64>` secret.
pub struct Signer(hmac::Key);

impl Signer {
    /// `None` when the secret is not `whsec_` and 16–128 bytes of base64.
    pub fn from_secret(secret: &SecretString) -> Option<Self> {
        let encoded = secret.expose_secret().strip_prefix("whsec_")?;
        let bytes = STANDARD.decode(encoded).ok()?;
        (16..=128)
            .contains(&bytes.len())
            .then(|| Self(hmac::Key::new(hmac::HMAC_SHA256, &bytes)))
    }

    /// `v1,<base64 HMAC-SHA256 of id.timestamp.body>`.
    pub fn signature(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut signed = format!("{id}.{timestamp}.").into_bytes();
        signed.extend_from_slice(body);
        format!(
            "v1,{}",
            STANDARD.encode(hmac::sign(&self.0, &signed).as_ref())
        )
    }
}

/// Posts one signed event; `Err` with what went wrong, for the delivery's
/// last error. Any 2xx answer is a delivery; redirects are not followed.
pub async fn send(
    client: &reqwest::Client,
    url: &str,
    signer: &Signer,
    id: &str,
    body: Vec<u8>,
) -> Result<(), String> {
    let timestamp = chrono::Utc::now().timestamp();
    let response = client
        .post(url)
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signer.signature(id, timestamp, &body))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .timeout(TIMEOUT)
        .body(body)
        .send()
        .await
        .map_err(|err| format!("the receiver could not be reached: {}", err.without_url()))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let text = response.text().await.unwrap_or_default();
    let excerpt: String = text.chars().take(200).collect();
    Err(format!(
        "the receiver answered HTTP {}: {excerpt}",
        status.as_u16()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_matches_the_specification_example() {
        // The example of the Standard Webhooks specification.
        let secret = SecretString::from("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let signer = Signer::from_secret(&secret).unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signer.signature("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn only_whsec_base64_secrets_make_keys() {
        let signer = |s: &str| Signer::from_secret(&SecretString::from(s.to_string()));
        assert!(signer("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_none());
        assert!(signer("whsec_not base64!").is_none());
        assert!(signer("whsec_AAAA").is_none());
    }
}
