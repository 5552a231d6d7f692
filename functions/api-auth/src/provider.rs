//! OAuth 2.0 login with GitHub and Google: authorization code with `state`
//! and PKCE (S256). Client ids and sealed secrets come from the system
//! settings; endpoints from [`shared::accounts::config::OAuthEndpoints`].

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use shared::{
    accounts::config::OAuthEndpoints,
    accounts::settings::{self, column},
    config::Settings,
    settings::open,
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

fn bad_url(err: oauth2::url::ParseError) -> OAuthError {
    OAuthError::BadEndpoint(err.to_string())
}

#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("{0} login is not configured")]
    NotConfigured(&'static str),
    #[error("the provider refused the login: {0}")]
    Refused(String),
    #[error("the provider could not be reached: {0}")]
    Unreachable(String),
    /// The platform's own configuration of the provider's endpoints.
    #[error("an OAuth endpoint is not a URL: {0}")]
    BadEndpoint(String),
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
    let public_base_url = shared::settings::load(pool).await?.fields.public_base_url;
    client_from(&stored, public_base_url, env, provider)
}

/// The provider's client from settings already loaded (accounts' part, and
/// the platform's public URL, else the environment's, for the redirect):
/// not configured unless its client id is set and its sealed secret opens.
pub fn client_from(
    stored: &settings::Stored,
    public_base_url: Option<String>,
    env: &Settings,
    provider: Provider,
) -> Result<Client, OAuthError> {
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
    let secret = open(key.as_ref(), column, sealed.as_deref()).ok().flatten();
    let (Some(client_id), Some(client_secret)) = (id, secret) else {
        return Err(OAuthError::NotConfigured(provider.as_str()));
    };
    let base = public_base_url.unwrap_or_else(|| env.public_base_url.clone());
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

/// What a provider says about the person logging in.
#[derive(Debug, Clone)]
pub struct Identity {
    pub subject: String,
    pub email: Option<String>,
    pub email_verified: bool,
    pub name: Option<String>,
}

impl Client {
    /// The `oauth2` client of this provider's login: its id and where it
    /// sends the browser back.
    fn oauth2(&self) -> Result<oauth2::basic::BasicClient, OAuthError> {
        Ok(
            oauth2::basic::BasicClient::new(oauth2::ClientId::new(self.client_id.clone()))
                .set_redirect_uri(
                    oauth2::RedirectUrl::new(self.redirect_uri.clone()).map_err(bad_url)?,
                ),
        )
    }

    /// Where to send the browser: the authorization-code flow with `state`
    /// and a PKCE S256 challenge (the `oauth2` crate).
    pub fn authorize_url(
        &self,
        endpoints: &OAuthEndpoints,
        state: &str,
        verifier: &str,
    ) -> Result<String, OAuthError> {
        let (base, scopes): (&str, &[&str]) = match self.provider {
            Provider::Github => (&endpoints.github_authorize, &["read:user", "user:email"]),
            Provider::Google => (&endpoints.google_authorize, &["openid", "email", "profile"]),
        };
        let client = self
            .oauth2()?
            .set_auth_uri(oauth2::AuthUrl::new(base.to_string()).map_err(bad_url)?);
        let state = state.to_string();
        let (url, _) = client
            .authorize_url(|| oauth2::CsrfToken::new(state))
            .add_scopes(scopes.iter().map(|s| oauth2::Scope::new(s.to_string())))
            .set_pkce_challenge(oauth2::PkceCodeChallenge::from_code_verifier_sha256(
                &oauth2::PkceCodeVerifier::new(verifier.to_string()),
            ))
            .url();
        Ok(url.to_string())
    }

    /// Exchanges the code (with the PKCE verifier) and reads the identity.
    pub async fn identity(
        &self,
        endpoints: &OAuthEndpoints,
        code: &str,
        verifier: &str,
    ) -> Result<Identity, OAuthError> {
        // No redirect is followed: the token request carries the secret.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(15))
            .user_agent("KubeBYON")
            .build()
            .map_err(|e| OAuthError::Unreachable(e.to_string()))?;
        let token_url = match self.provider {
            Provider::Github => &endpoints.github_token,
            Provider::Google => &endpoints.google_token,
        };
        // The client's secret goes in the form body (`client_secret_post`),
        // which both providers take.
        let client = self
            .oauth2()?
            .set_client_secret(oauth2::ClientSecret::new(
                self.client_secret.expose_secret().to_string(),
            ))
            .set_auth_type(oauth2::AuthType::RequestBody)
            .set_token_uri(oauth2::TokenUrl::new(token_url.clone()).map_err(bad_url)?);
        let token = client
            .exchange_code(oauth2::AuthorizationCode::new(code.to_string()))
            .set_pkce_verifier(oauth2::PkceCodeVerifier::new(verifier.to_string()))
            .request_async(&http)
            .await
            .map_err(|err| match err {
                oauth2::RequestTokenError::ServerResponse(refusal) => OAuthError::Refused(
                    format!(
                        "{} {}",
                        refusal.error(),
                        refusal.error_description().map_or("", String::as_str)
                    )
                    .trim()
                    .to_string(),
                ),
                oauth2::RequestTokenError::Request(e) => OAuthError::Unreachable(e.to_string()),
                other => OAuthError::Refused(format!("unreadable token response: {other}")),
            })?;
        let access_token = oauth2::TokenResponse::access_token(&token)
            .secret()
            .as_str();
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
                let user = get(format!("{}/user", endpoints.github_api)).await?;
                let emails = get(format!("{}/user/emails", endpoints.github_api)).await?;
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
                let info = get(endpoints.google_userinfo.clone()).await?;
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
    fn the_authorization_url_carries_state_and_an_rfc_7636_challenge() {
        let env = Settings::from_source(&std::collections::HashMap::new()).unwrap();
        let client = Client {
            provider: Provider::Github,
            client_id: "kb-client".into(),
            client_secret: SecretString::from("s3cret".to_string()),
            redirect_uri: "https://kubebyon.example.com/api/auth/oauth/github/callback".into(),
        };
        // The verifier and challenge of RFC 7636, appendix B.
        let url = client
            .authorize_url(
                &env.part::<shared::accounts::config::Config>()
                    .unwrap()
                    .oauth,
                "state-123",
                "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
            )
            .unwrap();
        let url = reqwest::Url::parse(&url).unwrap();
        let query: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
        assert_eq!(
            query["code_challenge"],
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert_eq!(query["code_challenge_method"], "S256");
        assert_eq!(query["state"], "state-123");
        assert_eq!(query["response_type"], "code");
        assert_eq!(query["client_id"], "kb-client");
        assert_eq!(query["scope"], "read:user user:email");
        assert_eq!(
            query["redirect_uri"],
            "https://kubebyon.example.com/api/auth/oauth/github/callback"
        );
        assert!(
            !url.as_str().contains("s3cret"),
            "the secret stays out of the browser"
        );
    }
}
