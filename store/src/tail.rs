//! The event log read after a position, for the SSE endpoint's replay (the engine's `sse`): a
//! client that reconnects with `Last-Event-ID` gets the events after it, page by page, below
//! the fence.
use sqlx::PgPool;

use crate::{
    Event, Position, Result, Xid8,
    events::{EVENT_COLUMNS, EventRow},
};

const POSITION_OF: &str = "SELECT tx_id FROM highwater.events WHERE id = $1";

/// A page after `($1, $2)` below the fence: of the types `$3` (all when empty), of tenant `$4`
/// (all when NULL), at most `$5` events, payloads upcast as `$6` asks (as stored when NULL).
fn page_query() -> String {
    let columns = EVENT_COLUMNS.replace(
        "e.payload",
        "CASE WHEN $6::jsonb IS NULL THEN e.payload \
              ELSE highwater.upcast_for(e.event_type, e.schema_version, e.payload, $6::jsonb) END AS payload",
    );
    format!(
        "SELECT {columns} FROM highwater.events e
          WHERE (e.tx_id, e.id) > ($1, $2)
            AND e.tx_id < {fence}
            AND (cardinality($3::text[]) = 0 OR e.event_type = ANY($3))
            AND ($4::text IS NULL OR e.tenant_id = $4)
          ORDER BY e.tx_id, e.id LIMIT $5",
        fence = fence!()
    )
}

/// The position of event `id`; `None` when there is no such event (pruned, or never appended).
pub async fn position_of(pool: &PgPool, id: i64) -> Result<Option<Position>> {
    let tx: Option<Xid8> = sqlx::query_scalar(POSITION_OF).bind(id).fetch_optional(pool).await?;
    Ok(tx.map(|tx| Position::from((tx, id))))
}

/// Which events a [`page`] returns.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Event types; all when empty.
    pub types: Vec<String>,
    /// Only this tenant's events.
    pub tenant: Option<String>,
    /// The consumer's `eventVersions` as `highwater.upcast_for` takes it; payloads as stored
    /// when `None`.
    pub want: Option<serde_json::Value>,
}

/// Up to `limit` events after `after` below the fence, in delivery order. A row that does not
/// decode is left out.
pub async fn page(pool: &PgPool, after: Position, filter: &Filter, limit: i64) -> Result<Vec<Event>> {
    let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(page_query()))
        .bind(after.xid8())
        .bind(after.id)
        .bind(&filter.types)
        .bind(&filter.tenant)
        .bind(limit)
        .bind(filter.want.as_ref().map(sqlx::types::Json))
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().filter_map(|r| Event::try_from(r).ok()).collect())
}
