//! The `cluster_labels` table: a cluster's labels, and the owner's live
//! clusters a selector finds.

use sqlx::{PgConnection, PgExecutor, types::Json};
use uuid::Uuid;

use super::{
    Labels,
    selector::{Op, Requirement},
};

/// A live cluster and its labels.
#[derive(Debug, Clone)]
pub struct Labeled {
    pub cluster_id: Uuid,
    pub name: String,
    pub labels: Labels,
}

/// A cluster's labels.
pub async fn of_cluster(db: impl PgExecutor<'_>, cluster_id: Uuid) -> Result<Labels, sqlx::Error> {
    let rows = sqlx::query!(
        "SELECT key, value FROM cluster_labels WHERE cluster_id = $1",
        cluster_id
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.key, r.value)).collect())
}

/// Makes `labels` the cluster's whole set. The caller holds the cluster's
/// row lock, so two writers take turns. Returns the keys it removed and the
/// keys it added or changed.
pub async fn replace(
    tx: &mut PgConnection,
    cluster_id: Uuid,
    labels: &Labels,
) -> Result<(Vec<String>, Vec<String>), sqlx::Error> {
    let before = of_cluster(&mut *tx, cluster_id).await?;
    let removed: Vec<String> = before
        .keys()
        .filter(|k| !labels.contains_key(*k))
        .cloned()
        .collect();
    let set: Vec<String> = labels
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .map(|(k, _)| k.clone())
        .collect();
    let (keys, values): (Vec<String>, Vec<String>) =
        labels.iter().map(|(k, v)| (k.clone(), v.clone())).unzip();
    sqlx::query!(
        "DELETE FROM cluster_labels WHERE cluster_id = $1 AND NOT (key = ANY($2::text[]))",
        cluster_id,
        &keys,
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "INSERT INTO cluster_labels (cluster_id, key, value)
         SELECT $1, key, value FROM unnest($2::text[], $3::text[]) AS l(key, value)
         ON CONFLICT (cluster_id, key) DO UPDATE SET value = EXCLUDED.value
         WHERE cluster_labels.value <> EXCLUDED.value",
        cluster_id,
        &keys,
        &values,
    )
    .execute(&mut *tx)
    .await?;
    Ok((removed, set))
}

/// The organisation's live clusters that every requirement selects, by
/// name, after the cluster named `after`, at most `limit` of them.
pub async fn find(
    db: impl PgExecutor<'_>,
    organization_id: Uuid,
    requirements: &[Requirement],
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<Labeled>, sqlx::Error> {
    // One row a value (one, empty, for `exists` and `not_exists`), the
    // requirement's index tying a set's values together.
    let (mut index, mut op, mut key, mut value) = (vec![], vec![], vec![], vec![]);
    for (i, r) in requirements.iter().enumerate() {
        let values = match r.op {
            Op::In | Op::NotIn => r.values.clone(),
            Op::Exists | Op::DoesNotExist => vec![String::new()],
        };
        for v in values {
            index.push(i as i32);
            op.push(r.op.as_str().to_string());
            key.push(r.key.clone());
            value.push(v);
        }
    }
    let rows = sqlx::query!(
        r#"WITH req AS (
               SELECT * FROM unnest($2::int4[], $3::text[], $4::text[], $5::text[]) AS r(idx, op, key, value)
           )
           SELECT c.id, c.name,
                  COALESCE((SELECT jsonb_object_agg(l.key, l.value) FROM cluster_labels l WHERE l.cluster_id = c.id),
                           '{}'::jsonb) AS "labels!: Json<Labels>"
           FROM clusters c
           WHERE c.organization_id = $1 AND c.deleted_at IS NULL
             AND c.name > $6
             AND NOT EXISTS (
                 SELECT 1 FROM (SELECT DISTINCT idx, op, key FROM req) q
                 WHERE (q.op IN ('in', 'exists')) <> EXISTS (
                     SELECT 1 FROM cluster_labels l
                     WHERE l.cluster_id = c.id AND l.key = q.key
                       AND (q.op IN ('exists', 'not_exists')
                            OR l.value IN (SELECT r.value FROM req r WHERE r.idx = q.idx))))
           ORDER BY c.name
           LIMIT $7"#,
        organization_id,
        &index,
        &op,
        &key,
        &value,
        // A first page starts after the empty name, before every name.
        after.unwrap_or_default(),
        limit,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Labeled {
            cluster_id: r.id,
            name: r.name,
            labels: r.labels.0,
        })
        .collect())
}
