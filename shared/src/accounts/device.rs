//! Sign-in from a terminal: the OAuth 2.0 Device Authorization Grant
//! (RFC 8628). A device (the `kubebyon` command line) asks for a device code
//! and a short user code; the user, signed in to the console, approves the
//! user code; the device polls with its device code and receives, once, an
//! API key made at that moment for it. Only the codes' SHA-256 is kept.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};
use utoipa::ToSchema;
use uuid::Uuid;

use super::{KeyScope, auth};

/// The one client the platform knows: its command line. A public client
/// (RFC 6749 section 2.1): it holds no secret.
pub const CLIENT_ID: &str = "kubebyon-cli";

/// The grant type a device polls with (RFC 8628 section 3.4).
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// How long a pair of codes is valid.
pub const LIFETIME: Duration = Duration::from_secs(600);

/// Seconds a device waits between polls, to begin with.
pub const INTERVAL_SECONDS: i32 = 5;

/// The user code's letters: consonants without vowels (no words are
/// spelled) and with no two that read alike, as RFC 8628 section 6.1
/// suggests; 8 of them give 20^8 ≈ 2.6 × 10^10 codes (34.6 bits).
pub const USER_CODE_ALPHABET: &[u8; 20] = b"BCDFGHJKLMNPQRSTVWXZ";
pub const USER_CODE_LENGTH: usize = 8;

/// A new user code, each letter uniformly drawn, as `BCDF-GHJK`.
pub fn new_user_code() -> String {
    let mut letters = String::with_capacity(USER_CODE_LENGTH + 1);
    while letters.len() < USER_CODE_LENGTH + 1 {
        let mut byte = [0u8; 1];
        getrandom::fill(&mut byte).expect("the operating system's random source failed");
        // 240 is the largest multiple of 20 below 256: no letter is likelier.
        if byte[0] < 240 {
            if letters.len() == USER_CODE_LENGTH / 2 {
                letters.push('-');
            }
            letters.push(USER_CODE_ALPHABET[usize::from(byte[0] % 20)] as char);
        }
    }
    letters
}

/// A user code as typed: case, hyphens and spaces do not matter (RFC 8628
/// section 6.1); anything else that is not one of the code's letters, a
/// look-alike from another script included, makes it no code.
pub fn normalize_user_code(typed: &str) -> Option<String> {
    let letters: String = typed
        .chars()
        .filter(|c| !matches!(c, '-' | ' '))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    (letters.len() == USER_CODE_LENGTH && letters.bytes().all(|b| USER_CODE_ALPHABET.contains(&b)))
        .then(|| format!("{}-{}", &letters[..4], &letters[4..]))
}

/// A device's name: what it calls itself (its host name), shown to the one
/// who approves it and put in the key's name. ASCII letters, digits, `.`,
/// `-`, `_` and spaces, at most 64 of them and not only spaces (those at
/// either end dropped), so it cannot pass for something else in the console
/// (no look-alikes, no direction marks).
pub fn device_name(raw: &str) -> Result<&str, &'static str> {
    let name = raw.trim_matches(' ');
    if raw.len() <= 64
        && !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b' '))
    {
        Ok(name)
    } else {
        Err("must be 1 to 64 ASCII letters, digits, '.', '-', '_' or spaces")
    }
}

/// The codes handed to a device.
pub struct Started {
    /// `kbd_` and 256 random bits: the device's secret.
    pub device_code: String,
    pub user_code: String,
    pub expires_in: Duration,
    pub interval_seconds: i32,
}

/// Records a new request for `device_name` and answers its codes.
pub async fn start(
    pool: &sqlx::PgPool,
    device_name: &str,
    ip: Option<&str>,
    user_agent: Option<&str>,
) -> Result<Started, sqlx::Error> {
    let device_code = format!("kbd_{}", auth::random_token::<32>());
    // A user code already pending (one in 2.6 × 10^10) is drawn again.
    let mut attempts = 0;
    loop {
        let user_code = new_user_code();
        let inserted = sqlx::query!(
            "INSERT INTO device_authorizations
                 (device_code_hash, user_code_hash, client_id, device_name, ip, user_agent,
                  interval_seconds, expires_at)
             VALUES ($1, $2, $3, $4, $5::text::inet, left($6, 300), $7,
                     now() + make_interval(secs => $8))",
            auth::hash_secret(&device_code),
            auth::hash_secret(&user_code),
            CLIENT_ID,
            device_name,
            ip,
            user_agent,
            INTERVAL_SECONDS,
            LIFETIME.as_secs_f64(),
        )
        .execute(pool)
        .await;
        match inserted {
            Ok(_) => {
                return Ok(Started {
                    device_code,
                    user_code,
                    expires_in: LIFETIME,
                    interval_seconds: INTERVAL_SECONDS,
                });
            }
            Err(err)
                if attempts < 3
                    && crate::error::unique_violation(&err)
                        == Some("idx_device_authorizations_pending_user_code") =>
            {
                attempts += 1;
            }
            Err(err) => return Err(err),
        }
    }
}

/// Removes requests that expired more than a day ago, whatever became of
/// them (`sweep`). Returns how many.
pub async fn prune_expired(db: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM device_authorizations WHERE expires_at < now() - interval '1 day'"
    )
    .execute(db)
    .await?
    .rows_affected())
}

/// A pending request as the console shows it to the one deciding.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeviceRequest {
    /// `kubebyon-cli`.
    pub client_id: String,
    /// What the device calls itself.
    pub device_name: String,
    /// The address it asked from.
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    /// `pending`, `approved` or `denied`.
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Whether the device asked from the address (an IPv6 one's /64) this
    /// request comes from. When not, someone may have sent the code to be
    /// approved by another than its asker: the console says so.
    pub from_your_address: bool,
}

impl DeviceRequest {
    /// Sets [`DeviceRequest::from_your_address`] for a reader at `ip`.
    pub fn read_from(mut self, ip: Option<&str>) -> Self {
        self.from_your_address = match (self.ip.as_deref(), ip) {
            (Some(asked), Some(reading)) => auth::source_key(asked) == auth::source_key(reading),
            _ => false,
        };
        self
    }
}

/// The pending, unexpired request with this user code (normalised).
pub async fn pending(
    db: impl PgExecutor<'_>,
    user_code: &str,
) -> Result<Option<DeviceRequest>, sqlx::Error> {
    sqlx::query_as!(
        DeviceRequest,
        r#"SELECT client_id, device_name, host(ip) AS ip, user_agent, status, created_at, expires_at,
                  false AS "from_your_address!"
           FROM device_authorizations
           WHERE user_code_hash = $1 AND status = 'pending' AND expires_at > now()"#,
        auth::hash_secret(user_code)
    )
    .fetch_optional(db)
    .await
}

/// What the user decided.
#[derive(Debug, Clone, Copy)]
pub enum Decision {
    /// The device gets a key of this scope, valid this many days.
    Approve {
        scope: KeyScope,
        days: i32,
    },
    Deny,
}

/// Decides the pending, unexpired request with this user code, once. `None`
/// when there is none (unknown, expired or decided already).
pub async fn decide(
    db: impl PgExecutor<'_>,
    user_code: &str,
    user_id: Uuid,
    decision: Decision,
) -> Result<Option<(Uuid, DeviceRequest)>, sqlx::Error> {
    let (status, scope, days) = match decision {
        Decision::Approve { scope, days } => ("approved", Some(scope.as_str()), Some(days)),
        Decision::Deny => ("denied", None, None),
    };
    let row = sqlx::query!(
        r#"UPDATE device_authorizations
           SET status = $2, user_id = $3, scope = $4, key_lifetime_days = $5, decided_at = now()
           WHERE user_code_hash = $1 AND status = 'pending' AND expires_at > now()
           RETURNING id, client_id, device_name, host(ip) AS ip, user_agent, status, created_at,
                     expires_at"#,
        auth::hash_secret(user_code),
        status,
        user_id,
        scope,
        days
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| {
        (
            r.id,
            DeviceRequest {
                client_id: r.client_id,
                device_name: r.device_name,
                ip: r.ip,
                user_agent: r.user_agent,
                status: r.status,
                created_at: r.created_at,
                expires_at: r.expires_at,
                from_your_address: false,
            },
        )
    }))
}

/// What a device's poll finds (RFC 8628 section 3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll {
    /// No such device code, or one already exchanged: `invalid_grant`.
    Unknown,
    /// `expired_token`.
    Expired,
    /// `authorization_pending`.
    Pending,
    /// Polled sooner than its interval, which is now 5 s longer: `slow_down`.
    SlowDown,
    /// Denied, or the approval ended with its approver's credentials:
    /// `access_denied`.
    Denied,
    /// Approved: the key to make, in the same transaction as [`consumed`].
    Approved(Approved),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approved {
    pub id: Uuid,
    pub user_id: Uuid,
    pub device_name: String,
    pub scope: KeyScope,
    pub lifetime: chrono::TimeDelta,
}

/// Reads the request of a device code for update, counting the poll.
pub async fn poll(tx: &mut PgConnection, device_code: &str) -> Result<Poll, sqlx::Error> {
    let Some(row) = sqlx::query!(
        r#"SELECT id, status, user_id, device_name, scope, key_lifetime_days,
                  expires_at <= now() AS "expired!",
                  last_polled_at IS NOT NULL
                      AND last_polled_at + make_interval(secs => interval_seconds) > now() AS "early!"
           FROM device_authorizations WHERE device_code_hash = $1 FOR UPDATE"#,
        auth::hash_secret(device_code)
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(Poll::Unknown);
    };
    if row.status == "consumed" {
        return Ok(Poll::Unknown);
    }
    if row.expired {
        return Ok(Poll::Expired);
    }
    sqlx::query!(
        "UPDATE device_authorizations
         SET last_polled_at = now(),
             interval_seconds = CASE WHEN $2 THEN least(interval_seconds + 5, 60) ELSE interval_seconds END
         WHERE id = $1",
        row.id,
        row.early && row.status == "pending"
    )
    .execute(&mut *tx)
    .await?;
    Ok(match (row.status.as_str(), row.user_id, row.scope) {
        ("pending", _, _) if row.early => Poll::SlowDown,
        ("pending", _, _) => Poll::Pending,
        ("approved", Some(user_id), Some(scope)) => Poll::Approved(Approved {
            id: row.id,
            user_id,
            device_name: row.device_name,
            scope: if scope == "read" {
                KeyScope::Read
            } else {
                KeyScope::Write
            },
            lifetime: chrono::TimeDelta::days(row.key_lifetime_days.unwrap_or(90).into()),
        }),
        _ => Poll::Denied,
    })
}

/// Marks an approved request exchanged for `api_key_id`: its device code
/// answers `invalid_grant` from then on.
pub async fn consumed(
    tx: &mut PgConnection,
    id: Uuid,
    api_key_id: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE device_authorizations SET status = 'consumed', api_key_id = $2
         WHERE id = $1 AND status = 'approved'",
        id,
        api_key_id
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Ends the user's approved requests that no device has exchanged yet:
/// their credentials ended (a password changed or reset, the account
/// disabled), so an approval given before — by a stolen session, say —
/// yields no key. Their devices' polls answer `access_denied`. How many.
pub async fn revoke_approved(tx: &mut PgConnection, user_id: Uuid) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE device_authorizations SET status = 'revoked'
         WHERE user_id = $1 AND status = 'approved'",
        user_id
    )
    .execute(tx)
    .await?
    .rows_affected())
}

/// Who approved the request of a device code, if anyone has: read before
/// [`poll`], so the exchange can hold its approver's authority first
/// (`app::authority`: a user's row before the rows of their credentials).
pub async fn approver(
    db: impl PgExecutor<'_>,
    device_code: &str,
) -> Result<Option<Uuid>, sqlx::Error> {
    Ok(sqlx::query_scalar!(
        "SELECT user_id FROM device_authorizations WHERE device_code_hash = $1",
        auth::hash_secret(device_code)
    )
    .fetch_optional(db)
    .await?
    .flatten())
}

/// The name of the key a device receives.
pub fn key_name(device_name: &str) -> String {
    format!("{device_name} (signed in from a terminal)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_codes_are_drawn_from_the_alphabet_and_read_back() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2_000 {
            let code = new_user_code();
            assert_eq!(code.len(), 9);
            assert_eq!(normalize_user_code(&code).as_deref(), Some(code.as_str()));
            assert_eq!(
                normalize_user_code(&code.to_lowercase().replace('-', " ")).as_deref(),
                Some(code.as_str())
            );
            seen.insert(code);
        }
        assert!(seen.len() > 1_990, "codes repeat: {}", seen.len());
    }

    #[test]
    fn typed_codes_outside_the_alphabet_are_no_codes() {
        for typed in [
            "",
            "BCDF-GHJ",
            "BCDF-GHJKL",
            "ABCD-FGHJ",        // a vowel
            "BCDF-GHJ1",        // a digit
            "ВСDF-GHJK",        // Cyrillic В and С
            "ＢCDF-GHJK",       // a full-width letter
            "BCDF\u{200b}GHJK", // a zero-width space
        ] {
            assert_eq!(normalize_user_code(typed), None, "{typed:?}");
        }
    }

    #[test]
    fn device_names_are_plain_ascii() {
        assert_eq!(device_name("  build-01.example  "), Ok("build-01.example"));
        for bad in ["", " ", "laptop\u{202e}", "lаptop", &"x".repeat(65), "a\nb"] {
            assert!(device_name(bad).is_err(), "{bad:?}");
        }
    }
}
