//! Users. Accounts arrive with the accounts capability; until then only the
//! development identity used by `local` is created here.

use sqlx::PgExecutor;
use uuid::Uuid;

pub const DEVELOPMENT_EMAIL: &str = "dev@kubebyon.local";

/// The development user, created on first use. Never used outside development mode.
pub async fn ensure_development_user(db: impl PgExecutor<'_>) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO users (email, display_name, role, email_verified_at)
           VALUES ($1::text, 'Development user', 'admin', now())
           ON CONFLICT (email) DO UPDATE SET email = EXCLUDED.email
           RETURNING id"#,
        DEVELOPMENT_EMAIL,
    )
    .fetch_one(db)
    .await
}

/// The role of an active user, or `None` when there is no such active user.
pub async fn active_role(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT role FROM users WHERE id = $1 AND status = 'active'",
        user_id
    )
    .fetch_optional(db)
    .await
}
