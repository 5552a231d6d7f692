//! Login with GitHub or Google: authorization code with `state` and PKCE.
//! The state, the PKCE verifier and where to return travel in a short-lived
//! HttpOnly cookie scoped to these routes.

use axum::{
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use base64::Engine;
use serde::{Deserialize, Serialize};
use shared::{
    accounts::{self, LoginEvent, auth},
    audit,
    error::ApiError,
    extract::{AppPath, AppQuery},
    http::{AppState, Origin},
};

use crate::provider::{self as oauth, OAuthError, Provider};
use utoipa::{IntoParams, ToSchema};

const COOKIE: &str = "kb_oauth";
const COOKIE_PATH: &str = "/api/auth/oauth";

#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    state: String,
    verifier: String,
    provider: Provider,
    return_to: String,
}

fn provider(raw: &str) -> Result<Provider, ApiError> {
    Provider::parse(raw).ok_or(ApiError::NotFound {
        what: "OAuth provider",
    })
}

fn not_configured(err: OAuthError) -> ApiError {
    match err {
        OAuthError::NotConfigured(p) => ApiError::NotConfigured {
            code: "oauth_not_configured",
            detail: format!("{p} login is not configured on this platform"),
        },
        OAuthError::Database(e) => e.into(),
        other => ApiError::Internal(anyhow::anyhow!(other.to_string())),
    }
}

/// A path on this site, or `/`. Only visible ASCII passes: browsers drop
/// tabs and newlines from a `Location` and read `\\` as `/`, so `/\t/evil`
/// or `/\\evil` would leave the site as `//evil`.
fn safe_return(raw: Option<&str>) -> String {
    match raw {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && path.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
                && path.len() <= 500 =>
        {
            path.to_string()
        }
        _ => "/".into(),
    }
}

/// The ways in a sign-in page offers.
#[derive(Debug, Serialize, ToSchema)]
pub struct LoginOptions {
    /// Whether "Sign in with GitHub" works here (its client id and secret are set).
    pub github: bool,
    /// Whether "Sign in with Google" works here.
    pub google: bool,
    /// Whether registration, login and password reset ask for a captcha
    /// answer (`captcha_token`).
    pub captcha_required: bool,
    /// The captcha widget's site key, when one is asked for and set.
    pub captcha_site_key: Option<String>,
}

/// How one signs in here
///
/// Which OAuth providers are configured and whether a captcha is asked for,
/// so a sign-in page offers only what works. Public.
#[utoipa::path(get, path = "/api/auth/providers", tag = "auth",
    responses((status = 200, body = LoginOptions),
              (status = 503, body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn options(
    State(state): State<AppState>,
) -> Result<shared::extract::AppJson<LoginOptions>, ApiError> {
    // One read of the settings answers every question.
    let stored = shared::accounts::settings::load(&state.pool).await?;
    // Only whether each is configured: the redirect's base is not read.
    let configured =
        |provider| oauth::client_from(&stored, None, &state.settings, provider).is_ok();
    let (github, google) = (configured(Provider::Github), configured(Provider::Google));
    let captcha_required = stored.fields.captcha_enabled;
    Ok(shared::extract::AppJson(LoginOptions {
        github,
        google,
        captcha_required,
        captcha_site_key: stored.fields.captcha_site_key.filter(|_| captcha_required),
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StartQuery {
    /// A path on this site to return to after the login (default `/`).
    pub return_to: Option<String>,
}

/// Start an OAuth login
///
/// Redirects to the provider (`github` or `google`) with a fresh `state` and
/// PKCE challenge.
#[utoipa::path(get, path = "/api/auth/oauth/{provider}/start", tag = "auth",
    params(("provider" = String, Path, description = "`github` or `google`"), StartQuery),
    responses((status = 303, description = "To the provider"), (status = 404, body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "Not configured (`oauth_not_configured`)", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn start(
    State(state): State<AppState>,
    AppPath(raw): AppPath<String>,
    AppQuery(query): AppQuery<StartQuery>,
) -> Result<Response, ApiError> {
    let provider = provider(&raw)?;
    let client = oauth::client(&state.pool, &state.settings, provider)
        .await
        .map_err(not_configured)?;
    let pending = Pending {
        state: auth::random_token::<24>(),
        verifier: auth::random_token::<48>(),
        provider,
        return_to: safe_return(query.return_to.as_deref()),
    };
    let location = client
        .authorize_url(
            &state.settings.part::<accounts::config::Config>()?.oauth,
            &pending.state,
            &pending.verifier,
        )
        .map_err(not_configured)?;
    let value = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&pending).map_err(anyhow::Error::from)?);
    let secure = if state.settings.insecure_cookies {
        ""
    } else {
        "; Secure"
    };
    let cookie = format!(
        "{COOKIE}={value}; Path={COOKIE_PATH}; HttpOnly; SameSite=Lax; Max-Age=600{secure}"
    );
    Ok((
        StatusCode::SEE_OTHER,
        [
            (
                header::LOCATION,
                HeaderValue::from_str(&location).map_err(anyhow::Error::from)?,
            ),
            (
                header::SET_COOKIE,
                HeaderValue::from_str(&cookie).map_err(anyhow::Error::from)?,
            ),
        ],
    )
        .into_response())
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    pub code: Option<String>,
    pub state: Option<String>,
    /// Set by the provider when the user declined.
    pub error: Option<String>,
}

fn failed(code: &'static str, detail: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        code,
        detail: detail.into(),
    }
}

/// OAuth callback
///
/// Checks `state` against the login's cookie, exchanges the code with the
/// PKCE verifier, and logs in: the account linked to this identity; else the
/// account with the provider's verified email address, which gets linked (an
/// account whose address was never confirmed loses the password it was
/// registered with); else a new account. An address the provider has not verified links to
/// nothing (400 `oauth_email_unverified`).
#[utoipa::path(get, path = "/api/auth/oauth/{provider}/callback", tag = "auth",
    params(("provider" = String, Path), CallbackQuery),
    responses((status = 303, description = "Logged in: to the page the login started from, with the session cookies"),
              (status = 400, description = "`oauth_state_mismatch`, `oauth_refused` or `oauth_email_unverified`", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 401, description = "The linked account is disabled", body = shared::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "No such provider, or it is not configured", body = shared::error::Problem, content_type = "application/problem+json")))]
pub async fn callback(
    State(state): State<AppState>,
    origin: Origin,
    headers: HeaderMap,
    AppPath(raw): AppPath<String>,
    AppQuery(query): AppQuery<CallbackQuery>,
) -> Result<Response, ApiError> {
    let provider = provider(&raw)?;
    let pending: Option<Pending> = auth::cookie(&headers, COOKIE)
        .and_then(|v| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(v)
                .ok()
        })
        .and_then(|v| serde_json::from_slice(&v).ok());
    let given = query.state.as_deref().unwrap_or_default();
    let Some(pending) = pending.filter(|p| {
        p.provider == provider && auth::constant_time_eq(p.state.as_bytes(), given.as_bytes())
    }) else {
        return Err(failed(
            "oauth_state_mismatch",
            "this login did not start here, or took too long; start it again",
        ));
    };
    if let Some(error) = query.error {
        return Err(failed(
            "oauth_refused",
            format!("the provider ended the login: {error}"),
        ));
    }
    let code = query
        .code
        .ok_or_else(|| failed("oauth_refused", "the provider sent no code"))?;
    let client = oauth::client(&state.pool, &state.settings, provider)
        .await
        .map_err(not_configured)?;
    let identity = client
        .identity(
            &state.settings.part::<accounts::config::Config>()?.oauth,
            &code,
            &pending.verifier,
        )
        .await
        .map_err(|err| match err {
            OAuthError::Refused(reason) => failed(
                "oauth_refused",
                format!("the provider refused the login: {reason}"),
            ),
            OAuthError::Unreachable(reason) => ApiError::Upstream {
                code: "oauth_unreachable",
                detail: format!("{} could not be reached: {reason}", provider.as_str()),
            },
            other => not_configured(other),
        })?;
    let method = provider.as_str();
    let record_failure = |reason: &'static str, user_id| {
        let pool = state.pool.clone();
        let (email, origin) = (identity.email.clone(), origin.clone());
        async move {
            accounts::record_login(
                &pool,
                &LoginEvent {
                    user_id,
                    email: email.as_deref(),
                    method,
                    failure_reason: Some(reason),
                    ip: origin.ip.clone(),
                    user_agent: origin.user_agent.as_deref(),
                },
            )
            .await
        }
    };
    let user_id = match accounts::identity_user(&state.pool, method, &identity.subject).await? {
        Some((user_id, true)) => user_id,
        Some((user_id, false)) => {
            record_failure("account disabled", Some(user_id)).await?;
            return Err(ApiError::Unauthorized {
                code: "invalid_credentials",
                detail: "this account cannot log in".into(),
            });
        }
        None => {
            // The provider's address in its canonical form; one that has none
            // cannot be matched to an account.
            let email = identity
                .email
                .as_deref()
                .and_then(|e| shared::domain::EmailAddress::parse(e).ok());
            let (Some(email), true) = (email, identity.email_verified) else {
                record_failure("email not verified by the provider", None).await?;
                return Err(failed(
                    "oauth_email_unverified",
                    format!(
                        "{method} did not confirm an email address for this account; verify it there, or register with a password"
                    ),
                ));
            };
            let mut tx = state.pool.begin().await?;
            let existing = accounts::credentials(&mut *tx, email.as_str()).await?;
            let (user_id, action) = match existing {
                Some(account) if account.status != shared::domain::UserStatus::Active => {
                    drop(tx);
                    record_failure("account disabled", Some(account.user_id)).await?;
                    return Err(ApiError::Unauthorized {
                        code: "invalid_credentials",
                        detail: "this account cannot log in".into(),
                    });
                }
                Some(account) if !account.email_verified => {
                    // Whoever registered this address never proved it: the
                    // provider just did. Their password and sessions go.
                    accounts::claim_unverified(&mut tx, account.user_id).await?;
                    (account.user_id, "user.oauth_claim")
                }
                Some(account) => (account.user_id, "user.oauth_link"),
                None => {
                    let name = identity
                        .name
                        .clone()
                        .filter(|n| !n.trim().is_empty())
                        .unwrap_or_else(|| email.to_string());
                    let name: String = name.chars().take(200).collect();
                    (
                        accounts::create_oauth_user(&mut tx, email.as_str(), &name).await?,
                        "user.register",
                    )
                }
            };
            accounts::link_identity(
                &mut tx,
                user_id,
                method,
                &identity.subject,
                Some(email.as_str()),
            )
            .await?;
            audit::record(
                &mut *tx,
                crate::register::user_event(
                    user_id,
                    action,
                    serde_json::json!({ "provider": method }),
                ),
            )
            .await?;
            tx.commit().await?;
            user_id
        }
    };
    let email = identity.email.clone().unwrap_or_default();
    let mut response =
        crate::session::start_session(&state, user_id, &origin, method, &email).await?;
    *response.status_mut() = StatusCode::SEE_OTHER;
    response.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&pending.return_to).map_err(anyhow::Error::from)?,
    );
    let secure = if state.settings.insecure_cookies {
        ""
    } else {
        "; Secure"
    };
    response.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_str(&format!(
            "{COOKIE}=; Path={COOKIE_PATH}; HttpOnly; SameSite=Lax; Max-Age=0{secure}"
        ))
        .map_err(anyhow::Error::from)?,
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn only_local_paths_are_returned_to() {
        assert_eq!(safe_return(Some("/clusters/1")), "/clusters/1");
        for bad in [
            "https://evil.example",
            "//evil.example",
            "/\\evil",
            "clusters",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r\n/evil.example",
            "/ /evil.example",
            "/\u{3000}/evil.example",
            "/\u{ff0f}evil.example",
        ] {
            assert_eq!(safe_return(Some(bad)), "/", "{bad}");
        }
        assert_eq!(safe_return(None), "/");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Wherever a login asks to return to, it stays on this site.
        #[test]
        fn a_return_path_never_leaves_the_site(
            raw in proptest::collection::vec(
                prop_oneof![
                    3 => proptest::sample::select(vec!['/', '\\', '\t', '\n', '\r', ' ', '.', ':', '@', '%', '?', '#']),
                    3 => proptest::char::range('\0', '\u{7f}'),
                    1 => any::<char>(),
                ],
                0..40,
            ).prop_map(|c| c.into_iter().collect::<String>())
        ) {
            let back = safe_return(Some(&raw));
            prop_assert!(back.starts_with('/') && !back.starts_with("//"), "{raw:?} -> {back:?}");
            prop_assert!(back.bytes().all(|b| b.is_ascii_graphic() && b != b'\\'), "{raw:?} -> {back:?}");
            prop_assert!(back.len() <= 500);
        }
    }
}
