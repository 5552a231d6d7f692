//! Credentials: Argon2id password hashes, random session tokens and API keys
//! (only their SHA-256 is stored), 6-digit email codes, the session and CSRF
//! cookies, and fixed-window rate limits kept in PostgreSQL.

use std::time::Duration;

use argon2::{
    Argon2,
    password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString},
};
use base64::Engine;
use sqlx::{PgExecutor, PgPool};

use crate::error::ApiError;

pub const CSRF_HEADER: &str = "x-csrf-token";

/// The session and CSRF cookies' names. `__Host-` prefixed whenever they are
/// Secure: a browser then takes them only over HTTPS, from this host itself
/// (no `Domain`, so no sibling subdomain can set or shadow them), for `/`.
/// The plain names exist only for a platform served over plain HTTP on a
/// developer's machine (`KUBEBYON_INSECURE_COOKIES=true`).
pub fn cookie_names(secure: bool) -> (&'static str, &'static str) {
    if secure {
        ("__Host-kb_session", "__Host-kb_csrf")
    } else {
        ("kb_session", "kb_csrf")
    }
}
/// Wrong guesses after which an email code is dead.
pub const CODE_MAX_ATTEMPTS: i32 = 5;
/// How long an email code is valid.
pub const CODE_LIFETIME: Duration = Duration::from_secs(15 * 60);

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    bytes
}

/// SHA-256 of a presented secret: what the database keeps and looks up by.
pub fn hash_secret(secret: &str) -> Vec<u8> {
    crate::secretbox::hash(secret)
}

/// A new session token (`kbs_` + 256 random bits, base64url).
pub fn new_session_token() -> String {
    format!("kbs_{}", random_token::<32>())
}

/// The CSRF token of a session: derived from its token, so a write must
/// carry this session's value, not any value a cookie-setting attacker
/// planted in both places.
pub fn csrf_token_for(session_token: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(b"kubebyon-csrf\0")
        .chain_update(session_token.as_bytes())
        .finalize();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
}

/// `N` random bytes, base64url without padding.
pub fn random_token<const N: usize>() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<N>())
}

/// A new API key: `kb_<8 hex>_<secret>`, and its display prefix `kb_<8 hex>`.
pub fn new_api_key() -> (String, String) {
    let id: String = random_bytes::<4>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let secret = random_token::<32>();
    let prefix = format!("kb_{id}");
    (format!("{prefix}_{secret}"), prefix)
}

/// A 6-digit code, uniformly drawn.
pub fn new_email_code() -> String {
    loop {
        let n = u32::from_le_bytes(random_bytes::<4>());
        // Reject the top sliver so every code is equally likely.
        if n < u32::MAX - (u32::MAX % 1_000_000) {
            return format!("{:06}", n % 1_000_000);
        }
    }
}

/// Compares without stopping at the first difference (`subtle`; only the
/// lengths are compared in the open).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

/// Checks a new password: 10–200 characters, not the email address, and not
/// guessable: zxcvbn's estimate (dictionaries, keyboard patterns, dates,
/// repeats, the address itself) must reach score 3, about 10^8 guesses.
pub fn check_password_policy(password: &str, email: &str) -> Result<(), String> {
    let length = password.chars().count();
    if !(10..=200).contains(&length) {
        return Err("must be 10 to 200 characters long".into());
    }
    if password.eq_ignore_ascii_case(email) {
        return Err("must not be the email address".into());
    }
    let local = email.split('@').next().unwrap_or_default();
    // The estimate's cost grows with the length; its first 100 characters tell.
    let judged: String = password.chars().take(100).collect();
    let estimate = zxcvbn::zxcvbn(&judged, &[email, local]);
    if (estimate.score() as u8) < 3 {
        let hint = estimate
            .feedback()
            .and_then(|f| f.warning().map(|w| w.to_string()))
            .unwrap_or_else(|| "it is too easy to guess".into());
        return Err(format!(
            "is too easy to guess ({}); a few unrelated words, or a longer phrase, make a strong one",
            hint.trim_end_matches('.').to_lowercase()
        ));
    }
    Ok(())
}

/// Argon2id (19 MiB, 2 passes, 1 lane: OWASP's baseline), on a blocking thread.
pub async fn hash_password(password: String) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::encode_b64(&random_bytes::<16>())
            .map_err(|e| anyhow::anyhow!("salt: {e}"))?;
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| anyhow::anyhow!("hashing a password: {e}"))
    })
    .await
    .map_err(anyhow::Error::from)?
    .map_err(ApiError::Internal)
}

/// Checks a password against a stored hash, on a blocking thread. A missing
/// hash (an account without a password) is checked against a dummy, so both
/// take the same time.
pub async fn verify_password(password: String, stored: Option<String>) -> bool {
    tokio::task::spawn_blocking(move || {
        let dummy = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$1GJbRbRUnWkRh9ZOhTCj9Kcu8dQnH3E16ZC2jYvq3nE";
        let has_hash = stored.is_some();
        let stored = stored.unwrap_or_else(|| dummy.to_string());
        let Ok(parsed) = PasswordHash::new(&stored) else {
            return false;
        };
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
            && has_hash
    })
    .await
    .unwrap_or(false)
}

/// The `Set-Cookie` values of a new session: the HttpOnly session cookie and
/// the CSRF cookie the console echoes in `X-CSRF-Token`.
pub fn session_cookies(token: &str, secure: bool, lifetime: Duration) -> [String; 2] {
    let (session, csrf_name) = cookie_names(secure);
    let csrf = csrf_token_for(token);
    let secure = if secure { "; Secure" } else { "" };
    let max_age = lifetime.as_secs();
    [
        format!("{session}={token}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}"),
        format!("{csrf_name}={csrf}; Path=/; SameSite=Lax; Max-Age={max_age}{secure}"),
    ]
}

/// The `Set-Cookie` values that end a session in the browser.
pub fn cleared_cookies(secure: bool) -> [String; 2] {
    let (session, csrf) = cookie_names(secure);
    let secure = if secure { "; Secure" } else { "" };
    [
        format!("{session}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{secure}"),
        format!("{csrf}=; Path=/; SameSite=Lax; Max-Age=0{secure}"),
    ]
}

/// The value of one cookie of a request.
pub fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

/// A fixed-window limit on attempts of one kind.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub name: &'static str,
    pub max: i32,
    pub window: Duration,
}

pub const LOGIN_PER_IP: Limit = Limit {
    name: "login:ip",
    max: 30,
    window: Duration::from_secs(300),
};
/// Failed logins for one account from one address: the guesser's own bucket,
/// which never locks the owner out elsewhere.
pub const LOGIN_FAILURES_PER_ACCOUNT_AND_IP: Limit = Limit {
    name: "login-failures:account-ip",
    max: 10,
    window: Duration::from_secs(900),
};
/// Failed logins for one account from anywhere: a slower, wider net for
/// guessing spread over many addresses.
pub const LOGIN_FAILURES_PER_ACCOUNT: Limit = Limit {
    name: "login-failures:account",
    max: 50,
    window: Duration::from_secs(900),
};
/// Password checks of a signed-in account (changing the password).
pub const PASSWORD_CHECKS_PER_ACCOUNT: Limit = Limit {
    name: "password-checks:account",
    max: 10,
    window: Duration::from_secs(900),
};
pub const CODES_PER_IP: Limit = Limit {
    name: "codes:ip",
    max: 20,
    window: Duration::from_secs(3600),
};
/// Codes asked for one account (and purpose) from one source: the asker's
/// own bucket, so a stranger who fills it blocks only themselves.
pub const CODES_PER_ACCOUNT_AND_SOURCE: Limit = Limit {
    name: "codes:account-source",
    max: 3,
    window: Duration::from_secs(3600),
};
/// Codes asked for one account (and purpose) from anywhere: a cap on the
/// mail one address can be sent, wide enough that blocking its owner takes
/// many sources (each limited by [`CODES_PER_ACCOUNT_AND_SOURCE`]).
pub const CODES_PER_ACCOUNT: Limit = Limit {
    name: "codes:account",
    max: 30,
    window: Duration::from_secs(3600),
};
/// Wrong codes presented for one account and purpose from anywhere, however
/// many codes were sent: more codes mailed (the per-account cap above) buy
/// no more guesses at a 6-digit code.
pub const CODE_GUESSES_PER_ACCOUNT: Limit = Limit {
    name: "code-guesses:account",
    max: 25,
    window: Duration::from_secs(3600),
};
/// Wrong codes for one account and purpose from one source: the guesser's
/// own bucket, so one source alone cannot use up the account's.
pub const CODE_GUESSES_PER_ACCOUNT_AND_SOURCE: Limit = Limit {
    name: "code-guesses:account-source",
    max: 10,
    window: Duration::from_secs(3600),
};
pub const VERIFY_PER_IP: Limit = Limit {
    name: "verify:ip",
    max: 30,
    window: Duration::from_secs(900),
};
/// Device sign-ins asked for from one source.
pub const DEVICE_CODES_PER_IP: Limit = Limit {
    name: "device-codes:ip",
    max: 20,
    window: Duration::from_secs(3600),
};
/// Device polls from one source: a sign-in polls at most 120 times (every
/// 5 s for 10 minutes); this lets a few run at once behind one address.
pub const DEVICE_POLLS_PER_IP: Limit = Limit {
    name: "device-polls:ip",
    max: 600,
    window: Duration::from_secs(3600),
};
/// User codes typed that match no pending request, by one account and from
/// one source: the bound on guessing someone else's code
/// (docs/security.md).
pub const DEVICE_CODE_GUESSES_PER_ACCOUNT: Limit = Limit {
    name: "device-code-guesses:account",
    max: 10,
    window: Duration::from_secs(3600),
};
pub const DEVICE_CODE_GUESSES_PER_IP: Limit = Limit {
    name: "device-code-guesses:ip",
    max: 30,
    window: Duration::from_secs(3600),
};

/// The key a client address is limited under: an IPv4 address as it is; an
/// IPv6 one by its /64, the block one subscriber or host usually holds, so a
/// client cannot step around a limit by moving inside its own block.
pub fn source_key(ip: &str) -> String {
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let network = u128::from(v6) & !((1u128 << 64) - 1);
                format!("{}/64", std::net::Ipv6Addr::from(network))
            }
        },
        Ok(std::net::IpAddr::V4(v4)) => v4.to_string(),
        Err(_) => ip.to_string(),
    }
}

/// The bucket of `key` under `limit`. Keys are short (an address, an account
/// id, a canonical email); anything longer is hashed, so no input can make a
/// bucket name the table refuses.
fn bucket(limit: Limit, key: &str) -> String {
    let key = key.to_lowercase();
    if key.len() <= 200 {
        format!("{}:{key}", limit.name)
    } else {
        format!("{}:#{}", limit.name, hex(&hash_secret(&key)))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn too_many(retry_after: i64) -> ApiError {
    ApiError::TooManyRequests {
        retry_after_secs: retry_after.max(1) as u64,
    }
}

/// Counts one attempt against `limit` for `key` (an address, an account); 429
/// with the seconds left in the window once the limit is passed.
pub async fn rate_limit(pool: &PgPool, limit: Limit, key: &str) -> Result<(), ApiError> {
    let hits = count(pool, limit, key).await?;
    if hits.0 > limit.max {
        return Err(too_many(hits.1));
    }
    Ok(())
}

/// Counts one failure against `limit` for `key`, without answering for it:
/// the next [`check_limit`] does.
pub async fn count_failure(pool: &PgPool, limit: Limit, key: &str) -> Result<(), ApiError> {
    count(pool, limit, key).await.map(|_| ())
}

/// 429 when `key` has passed `limit` in the current window; counts nothing.
pub async fn check_limit(pool: &PgPool, limit: Limit, key: &str) -> Result<(), ApiError> {
    let window = limit.window.as_secs() as f64;
    let row = sqlx::query!(
        r#"SELECT hits,
                  ceil(extract(epoch FROM (window_start + make_interval(secs => $2::float8) - now())))::bigint AS "retry_after!"
           FROM rate_limit_hits
           WHERE bucket = $1
             AND window_start = to_timestamp(floor(extract(epoch FROM now())::float8 / $2::float8) * $2::float8)"#,
        bucket(limit, key),
        window
    )
    .fetch_optional(pool)
    .await?;
    match row {
        Some(row) if row.hits >= limit.max => Err(too_many(row.retry_after)),
        _ => Ok(()),
    }
}

/// Adds one hit to `key`'s window: the hits so far and the seconds left.
async fn count(pool: &PgPool, limit: Limit, key: &str) -> Result<(i32, i64), ApiError> {
    let window = limit.window.as_secs() as f64;
    let row = sqlx::query!(
        r#"INSERT INTO rate_limit_hits (bucket, window_start, hits)
           VALUES ($1, to_timestamp(floor(extract(epoch FROM now())::float8 / $2::float8) * $2::float8), 1)
           ON CONFLICT (bucket, window_start) DO UPDATE SET hits = rate_limit_hits.hits + 1
           RETURNING hits,
                     ceil(extract(epoch FROM (window_start + make_interval(secs => $2::float8) - now())))::bigint AS "retry_after!""#,
        bucket(limit, key),
        window
    )
    .fetch_one(pool)
    .await?;
    Ok((row.hits, row.retry_after))
}

/// Takes back one count of `limit` for `key` in the current window: a
/// guess counted before it was judged ([`rate_limit`]) that turned out
/// right. Counting first and taking back after is what keeps guesses sent
/// at once from all passing a check made before any of them was counted.
pub async fn uncount(pool: &PgPool, limit: Limit, key: &str) -> Result<(), ApiError> {
    sqlx::query!(
        "UPDATE rate_limit_hits SET hits = greatest(hits - 1, 0)
         WHERE bucket = $1
           AND window_start = to_timestamp(floor(extract(epoch FROM now())::float8 / $2::float8) * $2::float8)",
        bucket(limit, key),
        limit.window.as_secs() as f64
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Drops counters of windows long gone. Returns how many.
pub async fn prune_rate_limits(db: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    Ok(
        sqlx::query!("DELETE FROM rate_limit_hits WHERE window_start < now() - interval '1 day'")
            .execute(db)
            .await?
            .rows_affected(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_and_only_those_compare_equal() {
        assert!(constant_time_eq(b"csrf-token", b"csrf-token"));
        assert!(!constant_time_eq(b"csrf-token", b"csrf-tokem"));
        assert!(!constant_time_eq(b"csrf-token", b"csrf-token-longer"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn ipv6_sources_are_limited_by_their_64_and_ipv4_by_address() {
        assert_eq!(source_key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(
            source_key("2001:db8:1:2:ffff:ffff:ffff:ffff"),
            source_key("2001:db8:1:2::9")
        );
        assert_ne!(source_key("2001:db8:1:3::1"), source_key("2001:db8:1:2::1"));
        assert_eq!(source_key("203.0.113.7"), "203.0.113.7");
        assert_eq!(source_key("::ffff:203.0.113.7"), "203.0.113.7");
        assert_ne!(source_key("203.0.113.7"), source_key("203.0.113.8"));
    }

    #[test]
    fn secrets_have_their_shapes() {
        let (key, prefix) = new_api_key();
        assert!(key.starts_with(&format!("{prefix}_")), "{key}");
        assert_eq!(prefix.len(), 11);
        assert!(new_session_token().starts_with("kbs_"));
        let code = new_email_code();
        assert_eq!(code.len(), 6);
        assert!(code.bytes().all(|b| b.is_ascii_digit()));
        assert_ne!(new_session_token(), new_session_token());
    }

    #[test]
    fn passwords_follow_the_policy() {
        assert!(check_password_policy("short", "a@b.c").is_err());
        assert!(check_password_policy("alice@example.com", "alice@example.com").is_err());
        assert!(check_password_policy("correct horse battery", "a@b.c").is_ok());
        for weak in [
            "password123",
            "qwertyuiop",
            "aaaaaaaaaaaa",
            "Password2024!",
            "letmein12345",
            "1234567890",
        ] {
            let err = check_password_policy(weak, "alice@example.com")
                .expect_err(&format!("{weak} passed"));
            assert!(err.contains("too easy to guess"), "{weak}: {err}");
        }
    }

    #[tokio::test]
    async fn passwords_verify_only_against_their_hash() {
        let hash = hash_password("correct horse battery".into()).await.unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse battery".into(), Some(hash.clone())).await);
        assert!(!verify_password("wrong horse battery".into(), Some(hash)).await);
        assert!(!verify_password("anything at all".into(), None).await);
    }

    #[test]
    fn cookies_are_read_from_every_header() {
        let mut headers = axum::http::HeaderMap::new();
        headers.append("cookie", "a=1; __Host-kb_session=kbs_x".parse().unwrap());
        headers.append("cookie", "__Host-kb_csrf=y".parse().unwrap());
        let (session, csrf) = cookie_names(true);
        assert_eq!(cookie(&headers, session), Some("kbs_x"));
        assert_eq!(cookie(&headers, csrf), Some("y"));
        assert_eq!(cookie(&headers, "missing"), None);
        let secure = session_cookies("t", true, Duration::from_secs(60));
        assert!(secure[0].starts_with("__Host-kb_session=t; Path=/; HttpOnly; SameSite=Lax"));
        assert!(secure[0].ends_with("; Secure") && !secure[0].contains("Domain"));
        assert!(secure[1].starts_with(&format!("__Host-kb_csrf={}", csrf_token_for("t"))));
        assert!(!session_cookies("t", false, Duration::from_secs(60))[0].contains("Secure"));
        assert_ne!(csrf_token_for("t"), csrf_token_for("u"));
    }
}
