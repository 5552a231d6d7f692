//! Tenant PostgreSQL databases (docs/databases.md): external PostgreSQL
//! servers an administrator registers ([`instances`]), and the databases
//! users ask for on them for their clusters ([`records`]), each walked
//! through its phases by the `database_converge` job against the server
//! ([`server`]), whose ownership registry proves what the platform made.

pub mod instances;
pub mod records;
pub mod server;

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    secretbox::SecretBox,
    settings::{ResealError, Resealed},
};

/// Re-seals the capability's secrets (the instances' admin passwords, the
/// databases' credentials) under `key`'s current key.
pub async fn reseal(tx: &mut PgConnection, key: &SecretBox) -> Result<Resealed, ResealError> {
    Ok(instances::reseal(&mut *tx, key).await? + records::reseal(&mut *tx, key).await?)
}

/// The label of each projected Secret: the id of its database record.
pub const SECRET_LABEL: &str = "kubebyon.dev/database-id";

/// The longest name a user gives a database.
pub const MAX_NAME: usize = 30;

/// Whether `name` is a database name a user may give: a lower-case letter,
/// then up to 29 lower-case letters, digits and `_` (a PostgreSQL
/// identifier that needs no quoting, in ASCII only: a look-alike letter of
/// another script is refused).
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && name.len() <= MAX_NAME
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// The most extensions a database asks for.
pub const MAX_EXTENSIONS: usize = 16;

/// Whether `name` may name an extension: a lower-case letter, then up to 62
/// lower-case letters, digits, `_` and `-` (`uuid-ossp`), in ASCII only.
/// Whether the server has it, and lets the database's owner make it, is
/// the server's to say.
pub fn valid_extension(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && name.len() <= 63
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

/// The name of the database and of its role on the server, derived from the
/// cluster and the name the user gave: `kb_<cluster id prefix>_<name>`. The
/// same request made again derives the same names, so a database kept
/// after a `retain` deletion is found, and refused as not this record's.
pub fn server_name(cluster_id: Uuid, name: &str) -> String {
    format!("kb_{}_{name}", &cluster_id.simple().to_string()[..8])
}

/// The default name of the Secret the credential is projected as.
pub fn secret_name(name: &str) -> String {
    format!("{}-postgres", name.replace('_', "-"))
}

/// What databases brings to the platform: the kind of work that converges a cluster's databases, and the instances' and databases' sealed passwords.
pub const CAPABILITY: crate::capability::Capability = crate::capability::Capability {
    job_kinds: &[<records::DatabaseConvergence as crate::domain::JobPayload>::KIND],
    reseal: Some(|tx, key| Box::pin(reseal(tx, key))),
    cluster_routes: &[
        crate::capability::ClusterRoute::new(
            "POST",
            "/databases",
            crate::organizations::Action::Operate,
        ),
        crate::capability::ClusterRoute::new(
            "PATCH",
            "/databases/{database_id}",
            crate::organizations::Action::Operate,
        ),
        crate::capability::ClusterRoute::new(
            "DELETE",
            "/databases/{database_id}",
            crate::organizations::Action::Operate,
        ),
        crate::capability::ClusterRoute::new(
            "POST",
            "/databases/{database_id}/retry",
            crate::organizations::Action::Operate,
        ),
        crate::capability::ClusterRoute::new(
            "POST",
            "/databases/{database_id}/rotate",
            crate::organizations::Action::Operate,
        ),
    ],
    ..crate::capability::Capability::named("databases")
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_ascii_identifiers() {
        for good in ["a", "orders", "shop_2", &"a".repeat(30)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in [
            "",
            "1db",
            "_db",
            "Orders",
            "shop-db",
            "ѕhop", // Cyrillic dze
            "shop db",
            "shop;drop",
            &"a".repeat(31),
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn extension_names_are_plain_ascii() {
        for good in ["pgcrypto", "uuid-ossp", "pg_trgm", "hstore"] {
            assert!(valid_extension(good), "{good}");
        }
        for bad in [
            "",
            "PgCrypto",
            "-x",
            "pg\"crypto",
            "pg crypto",
            "рgcrypto",
            &"a".repeat(64),
        ] {
            assert!(!valid_extension(bad), "{bad:?}");
        }
    }

    #[test]
    fn server_names_fit_postgresql_s_limit() {
        let id = Uuid::parse_str("1a2b3c4d-0000-0000-0000-000000000000").unwrap();
        assert_eq!(server_name(id, "orders"), "kb_1a2b3c4d_orders");
        assert!(server_name(id, &"a".repeat(30)).len() <= 63);
        assert_eq!(secret_name("shop_db"), "shop-db-postgres");
    }
}
