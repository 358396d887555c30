//! The streams page's links: an event by id (a causation id names the event that caused it) and
//! the events of one correlation id.
use sqlx::PgPool;

use crate::{
    Event, Result,
    events::{EVENT_COLUMNS, EventRow},
};

/// The event with this id (by primary key), or `None` (never appended, or pruned).
pub async fn by_id(pool: &PgPool, id: i64) -> Result<Option<Event>> {
    let sql = format!("SELECT {EVENT_COLUMNS} FROM highwater.events e WHERE e.id = $1");
    let row: Option<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(pool).await?;
    row.map(Event::try_from).transpose()
}

/// The newest `limit` events whose `metadata.correlation_id` is `correlation`, newest first,
/// among the newest `scan` events. No index covers the metadata key: this reads the events table
/// backwards from its newest id (its primary key) and looks at no more than `scan` of them, so
/// the page stays bounded on a large table.
pub async fn by_correlation(pool: &PgPool, correlation: &str, limit: i64, scan: i64) -> Result<Vec<Event>> {
    let sql = format!(
        "SELECT {EVENT_COLUMNS}
           FROM (SELECT * FROM highwater.events ORDER BY id DESC LIMIT $3) e
          WHERE e.metadata ->> 'correlation_id' = $1 ORDER BY e.id DESC LIMIT $2"
    );
    let rows: Vec<EventRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(correlation).bind(limit).bind(scan).fetch_all(pool).await?;
    rows.into_iter().map(Event::try_from).collect()
}
