//! Optional captcha on register, login and code requests: when the system
//! settings enable it, the request's `captcha_token` is checked with the
//! provider's verify endpoint (Turnstile and hCaptcha share the protocol: a
//! form POST of `secret`, `response` and `remoteip`, answered `{"success": …}`).

use secrecy::ExposeSecret;
use sqlx::PgPool;

use shared::{
    accounts::settings::{self, column},
    config::Settings,
    error::ApiError,
    settings::open,
};

pub async fn check(
    pool: &PgPool,
    env: &Settings,
    token: Option<&str>,
    ip: Option<&str>,
) -> Result<(), ApiError> {
    let stored = settings::load(pool).await?;
    if !stored.fields.captcha_enabled {
        return Ok(());
    }
    let key = env.secret_box();
    let secret = open(
        key.as_ref(),
        column::CAPTCHA_SECRET,
        stored.captcha_secret.as_deref(),
    )
    .ok()
    .flatten();
    let (Some(url), Some(secret)) = (stored.fields.captcha_verify_url.as_deref(), secret) else {
        return Err(ApiError::NotConfigured {
            code: "captcha_not_configured",
            detail: "the captcha is enabled but its verify URL or secret is missing".into(),
        });
    };
    let Some(token) = token.filter(|t| !t.is_empty() && t.len() <= 4096) else {
        return Err(ApiError::BadRequest {
            code: "captcha_failed",
            detail: "solve the captcha first (captcha_token)".into(),
        });
    };
    let mut form = vec![
        ("secret", secret.expose_secret().to_string()),
        ("response", token.to_string()),
    ];
    if let Some(ip) = ip {
        form.push(("remoteip", ip.to_string()));
    }
    let unreachable = |e: reqwest::Error| ApiError::Upstream {
        code: "captcha_unreachable",
        detail: format!(
            "the captcha provider could not be reached: {}",
            e.without_url()
        ),
    };
    // A redirect would carry the secret elsewhere: none is followed; nor is
    // a name that resolves to a private address now.
    let client = shared::outbound::PublicOnly::reqwest(env.allow_private_outbound)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(unreachable)?;
    let answer: serde_json::Value = client
        .post(url)
        .timeout(std::time::Duration::from_secs(10))
        .form(&form)
        .send()
        .await
        .map_err(unreachable)?
        .json()
        .await
        .map_err(unreachable)?;
    if answer["success"] == true {
        Ok(())
    } else {
        Err(ApiError::BadRequest {
            code: "captcha_failed",
            detail: "the captcha was not solved; try again".into(),
        })
    }
}
