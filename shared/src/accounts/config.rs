//! The accounts' own settings, from the environment ([`crate::config::Part`]).

use std::time::Duration;

use crate::config::{ConfigError, Millis, Part, Source, parse_or};

/// Sessions, code answers, the first administrator and the OAuth providers.
#[derive(Debug, Clone)]
pub struct Config {
    /// `KUBEBYON_SESSION_LIFETIME_SECONDS` (default 12 h, ASVS L2): a
    /// session ends this long after sign-in, however much it is used.
    pub session_lifetime: Duration,
    /// `KUBEBYON_SESSION_IDLE_SECONDS` (default 30 min, ASVS L2): a session
    /// unused this long ends.
    pub session_idle: Duration,
    /// `KUBEBYON_CODE_ANSWER_MS` (default 2000): under Lambda, where a code's
    /// mail is sent inside the request, how long every code request takes
    /// at least, so a real address answers no later than an unknown one.
    pub code_answer_floor: Duration,
    /// `KUBEBYON_ADMIN_EMAIL`: the account with this address is an admin once
    /// its address is verified.
    pub admin_email: Option<String>,
    /// The OAuth providers' endpoints (configurable, so tests can use loopback servers).
    pub oauth: OAuthEndpoints,
}

impl Part for Config {
    fn read(source: &dyn Source) -> Result<Self, ConfigError> {
        let (session_lifetime, session_idle) = session_times(source)?;
        Ok(Self {
            session_lifetime,
            session_idle,
            code_answer_floor: Millis::new("KUBEBYON_CODE_ANSWER_MS", 2000).read(source)?,
            admin_email: source
                .get("KUBEBYON_ADMIN_EMAIL")
                .map(|raw| {
                    crate::domain::EmailAddress::parse(&raw)
                        .map(|email| email.to_string())
                        .map_err(|reason| ConfigError::Invalid {
                            name: "KUBEBYON_ADMIN_EMAIL",
                            reason,
                        })
                })
                .transpose()?,
            oauth: OAuthEndpoints::from_source(source),
        })
    }
}

/// A session's absolute lifetime and idle timeout: 5 minutes to 90 days
/// each, the idle timeout not longer than the lifetime.
fn session_times(source: &dyn Source) -> Result<(Duration, Duration), ConfigError> {
    let bounded = |name: &'static str, default: u64| -> Result<Duration, ConfigError> {
        let value: u64 = parse_or(source, name, default)?;
        if !(300..=90 * 86_400).contains(&value) {
            return Err(ConfigError::Invalid {
                name,
                reason: "must be between 300 and 7776000 seconds".into(),
            });
        }
        Ok(Duration::from_secs(value))
    };
    let lifetime = bounded("KUBEBYON_SESSION_LIFETIME_SECONDS", 12 * 3600)?;
    let idle = bounded("KUBEBYON_SESSION_IDLE_SECONDS", 30 * 60)?;
    if idle > lifetime {
        return Err(ConfigError::Invalid {
            name: "KUBEBYON_SESSION_IDLE_SECONDS",
            reason: "must not exceed KUBEBYON_SESSION_LIFETIME_SECONDS".into(),
        });
    }
    Ok((lifetime, idle))
}

/// Where the OAuth providers are.
#[derive(Debug, Clone)]
pub struct OAuthEndpoints {
    pub github_authorize: String,
    pub github_token: String,
    /// GitHub's REST API (`/user`, `/user/emails`).
    pub github_api: String,
    pub google_authorize: String,
    pub google_token: String,
    pub google_userinfo: String,
}

impl OAuthEndpoints {
    fn from_source(source: &dyn Source) -> Self {
        let get = |name: &str, default: &str| {
            source
                .get(name)
                .unwrap_or_else(|| default.to_string())
                .trim_end_matches('/')
                .to_string()
        };
        Self {
            github_authorize: get(
                "KUBEBYON_GITHUB_AUTHORIZE_URL",
                "https://github.com/login/oauth/authorize",
            ),
            github_token: get(
                "KUBEBYON_GITHUB_TOKEN_URL",
                "https://github.com/login/oauth/access_token",
            ),
            github_api: get("KUBEBYON_GITHUB_API_URL", "https://api.github.com"),
            google_authorize: get(
                "KUBEBYON_GOOGLE_AUTHORIZE_URL",
                "https://accounts.google.com/o/oauth2/v2/auth",
            ),
            google_token: get(
                "KUBEBYON_GOOGLE_TOKEN_URL",
                "https://oauth2.googleapis.com/token",
            ),
            google_userinfo: get(
                "KUBEBYON_GOOGLE_USERINFO_URL",
                "https://openidconnect.googleapis.com/v1/userinfo",
            ),
        }
    }
}
