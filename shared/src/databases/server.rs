//! What the platform does on an instance, as its admin role: the
//! ownership registry (a schema of the platform's in the admin database,
//! made on first use) and the role and database of each record, each
//! statement safe to run again. Names are checked identifiers
//! (`records`' CHECK constraints: `[a-z][a-z0-9_]*`), and a role's password
//! is sent as its SCRAM-SHA-256 verifier, never as itself (a server that
//! logs its statements logs no password): both are written into the
//! statements PostgreSQL takes no parameters for without escaping anything.

use secrecy::{ExposeSecret, SecretString};
use sqlx::PgConnection;
use uuid::Uuid;

/// The schema of the registry in each instance's admin database.
pub const REGISTRY: &str = "kubebyon_registry";

/// What the registry says made an object: the platform's install, the
/// instance and the database record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub install_id: Uuid,
    pub instance_id: Uuid,
    pub record_id: Uuid,
}

/// The kinds of object the registry keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Role,
    Database,
}

impl Kind {
    /// `role` or `database`, as the registry writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Role => "role",
            Self::Database => "database",
        }
    }
}

/// A name of the checked form, or an error: nothing else is ever written
/// into a statement.
fn identifier(name: &str) -> Result<&str, sqlx::Error> {
    let mut bytes = name.bytes();
    let ok = matches!(bytes.next(), Some(b'a'..=b'z'))
        && name.len() <= 63
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'));
    if ok {
        Ok(name)
    } else {
        Err(sqlx::Error::Protocol(format!(
            "not a checked identifier: {name:?}"
        )))
    }
}

/// The SCRAM-SHA-256 verifier of a generated password (RFC 5802 and
/// 7677, in PostgreSQL's format `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`):
/// what `CREATE ROLE … PASSWORD` stores when given it, so the server never
/// receives the password. Its characters are base64's, `$` and `:`.
fn password_literal(password: &SecretString) -> Result<String, sqlx::Error> {
    let text = password.expose_secret();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(sqlx::Error::Protocol(
            "a generated password is alphanumeric".into(),
        ));
    }
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).expect("the operating system's random source failed");
    Ok(scram_verifier(text, &salt))
}

/// PostgreSQL's iteration count for SCRAM-SHA-256 (`scram_iterations`).
const SCRAM_ITERATIONS: u32 = 4096;

/// The verifier of `password` (ASCII, so SASLprep leaves it as it is) with
/// `salt`.
fn scram_verifier(password: &str, salt: &[u8]) -> String {
    use base64::{Engine, engine::general_purpose::STANDARD};
    use ring::{digest, hmac, pbkdf2};
    let mut salted = [0u8; 32];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        std::num::NonZeroU32::new(SCRAM_ITERATIONS).expect("not zero"),
        salt,
        password.as_bytes(),
        &mut salted,
    );
    let key = hmac::Key::new(hmac::HMAC_SHA256, &salted);
    let client_key = hmac::sign(&key, b"Client Key");
    let stored_key = digest::digest(&digest::SHA256, client_key.as_ref());
    let server_key = hmac::sign(&key, b"Server Key");
    format!(
        "SCRAM-SHA-256${SCRAM_ITERATIONS}:{}${}:{}",
        STANDARD.encode(salt),
        STANDARD.encode(stored_key.as_ref()),
        STANDARD.encode(server_key.as_ref())
    )
}

/// A statement built from checked identifiers and a generated password
/// ([`identifier`], [`password_literal`]): nothing a user typed reaches it
/// unchecked, so it is safe to run though it is not a literal.
fn checked(statement: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(statement)
}

/// A new password: 32 characters of `[A-Za-z0-9]` from the operating
/// system's random source, each byte kept only below 248 (4 × 62) so every
/// character is as likely (about 190 bits).
pub fn generate_password() -> SecretString {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut text = String::with_capacity(32);
    while text.len() < 32 {
        let mut bytes = [0u8; 64];
        getrandom::fill(&mut bytes).expect("the operating system's random source failed");
        text.extend(
            bytes
                .iter()
                .filter(|b| usize::from(**b) < ALPHABET.len() * 4)
                .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
                .take(32 - text.len()),
        );
    }
    SecretString::from(text)
}

/// Makes the registry where it is missing.
pub async fn ensure_registry(connection: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(
        "CREATE SCHEMA IF NOT EXISTS kubebyon_registry;
         CREATE TABLE IF NOT EXISTS kubebyon_registry.objects (
             kind        text NOT NULL CHECK (kind IN ('role', 'database')),
             name        text NOT NULL,
             install_id  uuid NOT NULL,
             instance_id uuid NOT NULL,
             record_id   uuid NOT NULL,
             created_at  timestamptz NOT NULL DEFAULT now(),
             PRIMARY KEY (kind, name)
         );",
    )
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// Who the registry says made `kind` `name`, if anyone.
pub async fn registered(
    connection: &mut PgConnection,
    kind: Kind,
    name: &str,
) -> Result<Option<Owner>, sqlx::Error> {
    let row: Option<(Uuid, Uuid, Uuid)> = sqlx::query_as(
        "SELECT install_id, instance_id, record_id FROM kubebyon_registry.objects
         WHERE kind = $1 AND name = $2",
    )
    .bind(kind.as_str())
    .bind(name)
    .fetch_optional(&mut *connection)
    .await?;
    Ok(row.map(|(install_id, instance_id, record_id)| Owner {
        install_id,
        instance_id,
        record_id,
    }))
}

/// Records that `owner` makes `kind` `name`, before it is made; answers
/// who the registry names afterwards (another owner when one was there
/// first).
pub async fn register(
    connection: &mut PgConnection,
    kind: Kind,
    name: &str,
    owner: Owner,
) -> Result<Owner, sqlx::Error> {
    sqlx::query(
        "INSERT INTO kubebyon_registry.objects (kind, name, install_id, instance_id, record_id)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (kind, name) DO NOTHING",
    )
    .bind(kind.as_str())
    .bind(name)
    .bind(owner.install_id)
    .bind(owner.instance_id)
    .bind(owner.record_id)
    .execute(&mut *connection)
    .await?;
    Ok(registered(connection, kind, name).await?.unwrap_or(owner))
}

/// Removes `owner`'s registry row of `kind` `name` (another's stays).
pub async fn unregister(
    connection: &mut PgConnection,
    kind: Kind,
    name: &str,
    owner: Owner,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM kubebyon_registry.objects
         WHERE kind = $1 AND name = $2 AND install_id = $3 AND instance_id = $4 AND record_id = $5",
    )
    .bind(kind.as_str())
    .bind(name)
    .bind(owner.install_id)
    .bind(owner.instance_id)
    .bind(owner.record_id)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

pub async fn role_exists(connection: &mut PgConnection, name: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)")
        .bind(name)
        .fetch_one(connection)
        .await
}

pub async fn database_exists(
    connection: &mut PgConnection,
    name: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(connection)
        .await
}

/// Makes the login role with `password`, or sets the password of the one
/// there (a run again after the role was made), and lets the admin role
/// act as it (to make a database it owns).
pub async fn ensure_role(
    connection: &mut PgConnection,
    name: &str,
    password: &SecretString,
) -> Result<(), sqlx::Error> {
    let name = identifier(name)?;
    let password = password_literal(password)?;
    // A new role gets no attribute but LOGIN (CREATE ROLE's defaults are
    // NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION); one there gets
    // its password set again, nothing else (a role that is not a superuser
    // may not name superuser attributes in ALTER ROLE).
    let statement = if role_exists(connection, name).await? {
        format!("ALTER ROLE \"{name}\" LOGIN PASSWORD '{password}'")
    } else {
        format!(
            "CREATE ROLE \"{name}\" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD '{password}'"
        )
    };
    sqlx::raw_sql(checked(statement))
        .execute(&mut *connection)
        .await?;
    sqlx::raw_sql(checked(format!("GRANT \"{name}\" TO CURRENT_USER")))
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// Makes the database, owned by `owner`, that no other role may connect
/// to (PUBLIC's CONNECT revoked), unless it is there.
pub async fn ensure_database(
    connection: &mut PgConnection,
    name: &str,
    owner: &str,
) -> Result<(), sqlx::Error> {
    let name = identifier(name)?;
    let owner = identifier(owner)?;
    if !database_exists(connection, name).await? {
        sqlx::raw_sql(checked(format!(
            "CREATE DATABASE \"{name}\" OWNER \"{owner}\""
        )))
        .execute(&mut *connection)
        .await?;
    }
    sqlx::raw_sql(checked(format!(
        "REVOKE ALL ON DATABASE \"{name}\" FROM PUBLIC; GRANT ALL ON DATABASE \"{name}\" TO \"{owner}\""
    )))
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// Why an extension was not made.
#[derive(Debug, thiserror::Error)]
pub enum ExtensionError {
    #[error("the extension {0} is not available on the server")]
    Unavailable(String),
    #[error("the extension {name} could not be made: {source}")]
    Refused { name: String, source: sqlx::Error },
    #[error("the extension {0} is not in the catalog after it was made")]
    NotInCatalog(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Makes each of `names` in the database `connection` is on, unless it is
/// there, and reads them back from the catalog. Run as the database's
/// owner: PostgreSQL then lets it make the extensions marked `trusted`
/// (PostgreSQL 13 and later), and refuses the others, which only a
/// superuser may make; the platform never makes one with more right than
/// the tenant's own credential has.
pub async fn ensure_extensions(
    connection: &mut PgConnection,
    names: &[String],
) -> Result<(), ExtensionError> {
    for name in names {
        if !crate::databases::valid_extension(name) {
            return Err(
                sqlx::Error::Protocol(format!("not a checked extension name: {name:?}")).into(),
            );
        }
        let available: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = $1)",
        )
        .bind(name)
        .fetch_one(&mut *connection)
        .await?;
        if !available {
            return Err(ExtensionError::Unavailable(name.clone()));
        }
        sqlx::raw_sql(checked(format!(
            "CREATE EXTENSION IF NOT EXISTS \"{name}\""
        )))
        .execute(&mut *connection)
        .await
        .map_err(|source| ExtensionError::Refused {
            name: name.clone(),
            source,
        })?;
    }
    let made: Vec<String> =
        sqlx::query_scalar("SELECT extname::text FROM pg_extension WHERE extname = ANY ($1)")
            .bind(names)
            .fetch_all(&mut *connection)
            .await?;
    match names.iter().find(|name| !made.contains(name)) {
        Some(missing) => Err(ExtensionError::NotInCatalog(missing.clone())),
        None => Ok(()),
    }
}

/// Whether `kind` `name` may be dropped for `owner`: it is not on the
/// server, or the registry names `owner` for it. Anything else is never
/// dropped.
pub async fn proven(
    connection: &mut PgConnection,
    kind: Kind,
    name: &str,
    owner: Owner,
) -> Result<bool, sqlx::Error> {
    let exists = match kind {
        Kind::Database => database_exists(connection, name).await?,
        Kind::Role => role_exists(connection, name).await?,
    };
    Ok(!exists || registered(connection, kind, name).await? == Some(owner))
}

/// Drops `owner`'s database and role, each with its registry row, each
/// step safe to run again; [`proven`] first for both.
pub async fn drop_registered(
    connection: &mut PgConnection,
    database: &str,
    role: &str,
    owner: Owner,
) -> Result<(), sqlx::Error> {
    drop_database(connection, database).await?;
    unregister(connection, Kind::Database, database, owner).await?;
    drop_role(connection, role).await?;
    unregister(connection, Kind::Role, role, owner).await
}

/// Ends every session on the database and drops it, if it is there.
pub async fn drop_database(connection: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
    let name = identifier(name)?;
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(name)
    .execute(&mut *connection)
    .await?;
    sqlx::raw_sql(checked(format!("DROP DATABASE IF EXISTS \"{name}\"")))
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// Drops the role, if it is there.
pub async fn drop_role(connection: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
    let name = identifier(name)?;
    sqlx::raw_sql(checked(format!("DROP ROLE IF EXISTS \"{name}\"")))
        .execute(&mut *connection)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verifier Python's `hashlib.pbkdf2_hmac` and `hmac` compute for
    /// the same password and salt, as PostgreSQL would store it.
    #[test]
    fn the_verifier_is_scram_sha_256_as_postgresql_stores_it() {
        let salt: Vec<u8> = (0..16).collect();
        assert_eq!(
            scram_verifier("pencil", &salt),
            "SCRAM-SHA-256$4096:AAECAwQFBgcICQoLDA0ODw==$zHCdol2044/ZyWzPLi7oxApCkamKw9Z+E4U/QApd/5Y=:dd5peBOitVnLNFu7VmwP+HiDaaw4OUCv396eVCWhYiE="
        );
    }

    #[test]
    fn only_checked_identifiers_and_generated_passwords_reach_a_statement() {
        assert!(identifier("kb_1a2b3c4d_orders").is_ok());
        for bad in ["", "Orders", "a\"; DROP ROLE x; --", "ѕ", &"a".repeat(64)] {
            assert!(identifier(bad).is_err(), "{bad:?}");
        }
        let password = generate_password();
        assert_eq!(password.expose_secret().len(), 32);
        let verifier = password_literal(&password).unwrap();
        assert!(!verifier.contains(password.expose_secret()));
        assert!(
            verifier
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=$:-".contains(&b)),
            "{verifier}"
        );
        assert_ne!(
            password_literal(&password).unwrap(),
            verifier,
            "a salt of its own each time"
        );
        assert!(password_literal(&SecretString::from("x' OR '1")).is_err());
        assert_ne!(
            generate_password().expose_secret(),
            password.expose_secret()
        );
    }
}
