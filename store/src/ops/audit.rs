//! Who asked for an operation and why, and the audit of the changes it made to shards
//! (`highwater.shard_changes`, written in the transaction of the change; redrive and discard
//! record theirs on the dead letters instead).
use sqlx::{PgConnection, PgPool};

use crate::{Position, Result, Xid8, shards::Status};

/// Who asks and why, recorded with every row an operation changes: the OS user for the CLI,
/// `http:ops-token-N` over HTTP, `kubernetes:<field manager>` for an annotation, `console:<user>`.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    pub by: String,
    pub reason: Option<String>,
}

impl Audit {
    pub fn by(by: impl Into<String>) -> Self {
        Audit { by: by.into(), reason: None }
    }
}

/// The insert, as a CTE over `upd` (the shard UPDATE's RETURNING: `consumer`, `instance_id`,
/// `from_status`, `to_status`, `from_tx`, `from_id`, `to_tx`, `to_id`, `failing_event_id`), so
/// a change and its audit commit together. `$9` action, `$10` detail (a skip's is its event),
/// `$11` by, `$12` reason.
pub(super) const AUDIT_CTE: &str = ", audited AS (
         INSERT INTO highwater.shard_changes (consumer, instance_id, action, detail, from_status, to_status,
                                              cursor_before_tx, cursor_before_id, cursor_after_tx, cursor_after_id,
                                              changed_by, reason)
         SELECT consumer, instance_id, $9,
                CASE WHEN $9 = 'skipped' THEN 'event ' || failing_event_id ELSE $10 END,
                from_status, to_status, from_tx, from_id, to_tx, to_id, $11, $12
           FROM upd)";

/// One shard change as [`record`] writes it.
pub(super) struct Change<'a> {
    pub consumer: &'a str,
    pub instance_id: &'a str,
    pub action: &'a str,
    pub detail: Option<String>,
    pub from_status: Status,
    pub to_status: Status,
    pub before: Position,
    pub after: Position,
}

/// Records `c` in the caller's transaction (rebuild and bootstrap, which change one shard).
pub(super) async fn record(conn: &mut PgConnection, c: Change<'_>, audit: &Audit) -> Result<()> {
    sqlx::query(
        "INSERT INTO highwater.shard_changes (consumer, instance_id, action, detail, from_status, to_status,
                                              cursor_before_tx, cursor_before_id, cursor_after_tx, cursor_after_id,
                                              changed_by, reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(c.consumer)
    .bind(c.instance_id)
    .bind(c.action)
    .bind(c.detail)
    .bind(c.from_status)
    .bind(c.to_status)
    .bind(c.before.xid8())
    .bind(c.before.id)
    .bind(c.after.xid8())
    .bind(c.after.id)
    .bind(&audit.by)
    .bind(&audit.reason)
    .execute(conn)
    .await?;
    Ok(())
}

/// One row of `highwater.shard_changes`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardChangeRecord {
    pub id: i64,
    pub changed_at: chrono::DateTime<chrono::Utc>,
    pub consumer: String,
    pub instance_id: String,
    /// `restarted`, `skipped`, `disabled`, `enabled`, `rewound`, `rebuilt`.
    pub action: String,
    /// A skip's event (`event 42`), a rewind's target (`to earliest`), a rebuild's path.
    pub detail: Option<String>,
    pub from_status: Status,
    pub to_status: Status,
    pub cursor_before: Position,
    pub cursor_after: Position,
    pub changed_by: String,
    pub reason: Option<String>,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    changed_at: chrono::DateTime<chrono::Utc>,
    consumer: String,
    instance_id: String,
    action: String,
    detail: Option<String>,
    from_status: Status,
    to_status: Status,
    cursor_before_tx: Xid8,
    cursor_before_id: i64,
    cursor_after_tx: Xid8,
    cursor_after_id: i64,
    changed_by: String,
    reason: Option<String>,
}

/// The newest `limit` changes of `consumer`'s shards, newest first.
pub async fn shard_changes(pool: &PgPool, consumer: &str, limit: i64) -> Result<Vec<ShardChangeRecord>> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, changed_at, consumer, instance_id, action, detail, from_status, to_status,
                cursor_before_tx, cursor_before_id, cursor_after_tx, cursor_after_id, changed_by, reason
           FROM highwater.shard_changes WHERE consumer = $1 ORDER BY id DESC LIMIT $2",
    )
    .bind(consumer)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| ShardChangeRecord {
            id: r.id,
            changed_at: r.changed_at,
            consumer: r.consumer,
            instance_id: r.instance_id,
            action: r.action,
            detail: r.detail,
            from_status: r.from_status,
            to_status: r.to_status,
            cursor_before: Position::from((r.cursor_before_tx, r.cursor_before_id)),
            cursor_after: Position::from((r.cursor_after_tx, r.cursor_after_id)),
            changed_by: r.changed_by,
            reason: r.reason,
        })
        .collect())
}
