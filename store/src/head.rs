//! The head of the event log as the dispatcher's wake-ups read it (`dispatch::wakeup`,
//! `dispatch::touched`): the newest event below the fence, and the types of the events a move of
//! the head brought.
use sqlx::{PgPool, Row};

use crate::{Position, Result, Xid8};

/// The head read: fence, snapshot xmax, newest event below the fence, and whether any event
/// waits at or above it. Public for tests that look at its plan.
pub const HEAD_QUERY: &str = concat!(
    "WITH s AS MATERIALIZED (SELECT ",
    fence!(),
    " AS fence, pg_snapshot_xmax(pg_current_snapshot()) AS xmax)
         SELECT h.tx_id AS tx, h.id, s.fence, s.xmax,
                -- Not EXISTS: PostgreSQL drops an EXISTS query's ORDER BY and LIMIT, estimates a
                -- third of the table above an unknown fence and scans every row of the newest
                -- partition when none is pending (48 ms at 120,000 rows). In order, the index
                -- stops at the first row at or above the fence.
                (SELECT tx_id FROM highwater.events WHERE tx_id >= s.fence
                  ORDER BY tx_id LIMIT 1) IS NOT NULL AS pending
           FROM s
           LEFT JOIN LATERAL (SELECT tx_id, id FROM highwater.events WHERE tx_id < s.fence
                               ORDER BY tx_id DESC, id DESC LIMIT 1) h ON true"
);

/// The distinct types of the events in `(from, to]`, reading at most `$5 + 1` of them.
/// `tx_id >= from.tx` and `<= to.tx` are the index conditions; the row comparisons then refine
/// them.
const TYPES_BETWEEN: &str = "SELECT coalesce(array_agg(DISTINCT r.event_type), '{}'), count(*) > $5
       FROM (SELECT e.event_type FROM highwater.events e
              WHERE e.tx_id >= $1 AND (e.tx_id, e.id) > ($1, $2)
                AND e.tx_id <= $3 AND (e.tx_id, e.id) <= ($3, $4)
              LIMIT $5 + 1) r";

/// A head read ([`HEAD_QUERY`]) and the snapshot it was read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The newest event below the fence.
    pub position: Option<Position>,
    /// Committed events wait at or above the fence.
    pub pending_above_fence: bool,
    /// The snapshot's xmin: every transaction below it has ended.
    pub fence: Xid8,
    /// The snapshot's xmax: every transaction that had started by then is below it.
    pub xmax: Xid8,
}

/// Reads the head, in one statement and one snapshot.
pub async fn read(pool: &PgPool) -> Result<Head> {
    let row = sqlx::query(HEAD_QUERY).fetch_one(pool).await?;
    let position = match row.try_get::<Option<Xid8>, _>("tx")? {
        Some(tx) => Some(Position::from((tx, row.try_get("id")?))),
        None => None,
    };
    Ok(Head {
        position,
        pending_above_fence: row.try_get("pending")?,
        fence: row.try_get("fence")?,
        xmax: row.try_get("xmax")?,
    })
}

/// The distinct types of the events in `(from, to]`; `None` when there are more than `max` of
/// them.
pub async fn types_between(pool: &PgPool, from: Position, to: Position, max: i64) -> Result<Option<Vec<String>>> {
    let (types, over): (Vec<String>, bool) = sqlx::query_as(TYPES_BETWEEN)
        .bind(from.xid8())
        .bind(from.id)
        .bind(to.xid8())
        .bind(to.id)
        .bind(max)
        .fetch_one(pool)
        .await?;
    Ok((!over).then_some(types))
}
