//! OAuth 2.0 login with GitHub and Google: authorization code with `state`
//! and PKCE (S256). Client ids and sealed secrets come from the system
//! settings; endpoints from [`shared::config::OAuthEndpoints`].

use base64::Engine;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use shared::{
    config::Settings,
    db::settings::{self, column},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Github,
    Google,
}

impl Provider {
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "github" => Some(Self::Github),
            "google" => Some(Self::Google),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Github => "github",
            Self::Google => "google",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("{0} login is not configured")]
    NotConfigured(&'static str),
    #[error("the provider refused the login: {0}")]
    Refused(String),
    #[error("the provider could not be reached: {0}")]
    Unreachable(String),
    #[error("reading the settings: {0}")]
    Database(#[from] sqlx::Error),
}

/// A provider's client, ready for one login.
pub struct Client {
    pub provider: Provider,
    client_id: String,
    client_secret: SecretString,
    redirect_uri: String,
}

/// Loads the provider's client from the system settings.
pub async fn client(
    pool: &sqlx::PgPool,
    env: &Settings,
    provider: Provider,
) -> Result<Client, OAuthError> {
    let stored = settings::load(pool).await?;
    let (id, sealed, column) = match provider {
        Provider::Github => (
            stored.fields.github_oauth_client_id.clone(),
            stored.github_secret.clone(),
            column::GITHUB_SECRET,
        ),
        Provider::Google => (
            stored.fields.google_oauth_client_id.clone(),
            stored.google_secret.clone(),
            column::GOOGLE_SECRET,
        ),
    };
    let key = env.secret_box();
    let secret = settings::open(key.as_ref(), column, sealed.as_deref())
        .ok()
        .flatten();
    let (Some(client_id), Some(client_secret)) = (id, secret) else {
        return Err(OAuthError::NotConfigured(provider.as_str()));
    };
    let base = stored
        .fields
        .public_base_url
        .clone()
        .unwrap_or_else(|| env.public_base_url.clone());
    Ok(Client {
        provider,
        client_id,
        client_secret,
        redirect_uri: format!(
            "{}/api/auth/oauth/{}/callback",
            base.trim_end_matches('/'),
            provider.as_str()
        ),
    })
}

/// The PKCE S256 challenge of a verifier.
pub fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

fn encode(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// RFC 3986's unreserved characters: all that a value keeps as it is.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a form or query value (or a path segment).
pub fn percent_encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, UNRESERVED).to_string()
}

/// What a provider says about the person logging in.
#[derive(Debug, Clone)]
pub struct Identity {
    pub subject: String,
    pub email: Option<String>,
    pub email_verified: bool,
    pub name: Option<String>,
}

impl Client {
    /// Where to send the browser.
    pub fn authorize_url(&self, env: &Settings, state: &str, verifier: &str) -> String {
        let (base, scope) = match self.provider {
            Provider::Github => (&env.oauth.github_authorize, "read:user user:email"),
            Provider::Google => (&env.oauth.google_authorize, "openid email profile"),
        };
        let query = encode(&[
            ("client_id", &self.client_id),
            ("redirect_uri", &self.redirect_uri),
            ("response_type", "code"),
            ("scope", scope),
            ("state", state),
            ("code_challenge", &challenge(verifier)),
            ("code_challenge_method", "S256"),
        ]);
        format!("{base}?{query}")
    }

    /// Exchanges the code (with the PKCE verifier) and reads the identity.
    pub async fn identity(
        &self,
        env: &Settings,
        code: &str,
        verifier: &str,
    ) -> Result<Identity, OAuthError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(15))
            .user_agent("KubeBYON")
            .build()
            .map_err(|e| OAuthError::Unreachable(e.to_string()))?;
        let token_url = match self.provider {
            Provider::Github => &env.oauth.github_token,
            Provider::Google => &env.oauth.google_token,
        };
        let form = encode(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &self.redirect_uri),
            ("client_id", &self.client_id),
            ("client_secret", self.client_secret.expose_secret()),
            ("code_verifier", verifier),
        ]);
        let response = http
            .post(token_url)
            .header("accept", "application/json")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .map_err(|e| OAuthError::Unreachable(e.without_url().to_string()))?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.map_err(|e| {
            OAuthError::Refused(format!(
                "unreadable token response ({status}): {}",
                e.without_url()
            ))
        })?;
        let Some(access_token) = body["access_token"].as_str() else {
            let error = body["error"].as_str().unwrap_or("no access token");
            let description = body["error_description"].as_str().unwrap_or_default();
            return Err(OAuthError::Refused(
                format!("{error} {description}").trim().to_string(),
            ));
        };
        let get = |url: String| {
            let request = http
                .get(url)
                .bearer_auth(access_token)
                .header("accept", "application/json");
            async move {
                let response = request
                    .send()
                    .await
                    .map_err(|e| OAuthError::Unreachable(e.without_url().to_string()))?;
                if !response.status().is_success() {
                    return Err(OAuthError::Refused(format!(
                        "the profile request answered {}",
                        response.status()
                    )));
                }
                response.json::<serde_json::Value>().await.map_err(|e| {
                    OAuthError::Refused(format!("unreadable profile: {}", e.without_url()))
                })
            }
        };
        match self.provider {
            Provider::Github => {
                let user = get(format!("{}/user", env.oauth.github_api)).await?;
                let emails = get(format!("{}/user/emails", env.oauth.github_api)).await?;
                let list = emails.as_array().cloned().unwrap_or_default();
                let verified = |e: &&serde_json::Value| e["verified"] == true;
                let chosen = list
                    .iter()
                    .filter(verified)
                    .find(|e| e["primary"] == true)
                    .or_else(|| list.iter().find(verified))
                    .or_else(|| list.iter().find(|e| e["primary"] == true));
                let subject = match &user["id"] {
                    serde_json::Value::Number(n) => n.to_string(),
                    serde_json::Value::String(s) => s.clone(),
                    _ => return Err(OAuthError::Refused("the profile has no id".into())),
                };
                Ok(Identity {
                    subject,
                    email: chosen.and_then(|e| e["email"].as_str()).map(str::to_string),
                    email_verified: chosen.is_some_and(|e| e["verified"] == true),
                    name: user["name"]
                        .as_str()
                        .or(user["login"].as_str())
                        .map(str::to_string),
                })
            }
            Provider::Google => {
                let info = get(env.oauth.google_userinfo.clone()).await?;
                Ok(Identity {
                    subject: info["sub"]
                        .as_str()
                        .ok_or_else(|| OAuthError::Refused("the profile has no sub".into()))?
                        .to_string(),
                    email: info["email"].as_str().map(str::to_string),
                    email_verified: info["email_verified"] == true,
                    name: info["name"].as_str().map(str::to_string),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_is_rfc_7636s() {
        // RFC 7636, appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
    }
}
