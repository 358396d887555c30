//! The group pass's statements (issue 46): one claim, one load and one read for the shards of
//! many consumers, where the per-shard pass runs one of each per shard. The engine fans the read
//! out in memory (engine/src/dispatch/group.rs); the SQL sinks' batches and every cursor move
//! of a group then commit in one transaction (`sql_sink::group`), the external sinks' moves in
//! one statement ([`advance_all`]).
use sqlx::{PgConnection, Row};

use crate::{
    Event, Position, Result, Xid8,
    events::{Bodies, event_arrays, events_from_arrays},
    shards::{SHARD_COLUMNS, Shard, Status, lock_key, shard_from_row},
};

/// The claims of a group pass: the same session advisory locks as [`crate::shards::try_lock`]
/// (so a group pass and a shard's own pass, here or in another dispatcher, exclude each other),
/// all held by one session, the group's connection. Release them with [`release`]; a caller
/// that cannot must close that connection (the server then drops them).
#[derive(Debug, Default)]
pub struct Claimed {
    keys: Vec<String>,
    /// Per shard, in the order given to [`claim`]: whether this session holds it now.
    pub claimed: Vec<bool>,
}

/// Claims, without waiting, every shard of `shards` that no other session holds, in one
/// statement.
pub async fn claim(conn: &mut PgConnection, shards: &[(&str, &str)]) -> Result<Claimed> {
    let keys: Vec<String> = shards.iter().map(|(c, i)| lock_key(c, i)).collect();
    let got: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT n, pg_try_advisory_lock(hashtextextended(k, 0)) FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n)",
    )
    .bind(&keys)
    .fetch_all(conn)
    .await?;
    let mut claimed = vec![false; keys.len()];
    for (n, ok) in got {
        if let Some(c) = claimed.get_mut(n as usize - 1) {
            *c = ok;
        }
    }
    let keys = keys.into_iter().zip(&claimed).filter(|(_, ok)| **ok).map(|(k, _)| k).collect();
    Ok(Claimed { keys, claimed })
}

/// Releases every claim of `claimed` in one statement.
pub async fn release(conn: &mut PgConnection, claimed: Claimed) -> Result<()> {
    if claimed.keys.is_empty() {
        return Ok(());
    }
    sqlx::query("SELECT pg_advisory_unlock(hashtextextended(k, 0)) FROM unnest($1::text[]) AS k")
        .bind(&claimed.keys)
        .execute(conn)
        .await?;
    Ok(())
}

/// What [`load`] saw, in one snapshot taken after the claim (so the cursors are the last ones
/// committed).
#[derive(Debug)]
pub struct Loaded {
    /// The claimed shards' rows (a deleted shard has none).
    pub shards: Vec<Shard>,
    /// Every event below it is committed or gone for good: a later read bounded by it sees what
    /// this snapshot would have.
    pub fence: Xid8,
    /// `pg_snapshot_xmax`: no transaction id at or above it is assigned yet.
    pub next_xid: u64,
    /// The newest event below the fence, whatever its type.
    pub head: Option<Position>,
}

/// The rows of the claimed shards, the fence and the head, in one statement.
pub async fn load(conn: &mut PgConnection, shards: &[(&str, &str)]) -> Result<Loaded> {
    let (consumers, instances): (Vec<&str>, Vec<&str>) = shards.iter().copied().unzip();
    let sql = format!(
        "WITH s AS MATERIALIZED (SELECT {fence} AS fence, pg_snapshot_xmax(pg_current_snapshot()) AS next)
         SELECT s.fence, s.next AS next_xid, h.tx_id AS head_tx, h.id AS head_id, sh.*
           FROM s
           LEFT JOIN LATERAL (
                SELECT tx_id, id FROM highwater.events
                 WHERE tx_id < s.fence ORDER BY tx_id DESC, id DESC LIMIT 1) h ON true
           LEFT JOIN (
                SELECT {SHARD_COLUMNS} FROM highwater.consumer_shards
                 WHERE (consumer, instance_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))) sh ON true",
        fence = fence!(),
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&consumers).bind(&instances).fetch_all(conn).await?;
    let first = rows.first().ok_or_else(|| crate::Error::Internal("the group's load returned no row".into()))?;
    let position = |tx: &str, id: &str| -> Result<Option<Position>> {
        Ok(match first.try_get::<Option<Xid8>, _>(tx)? {
            Some(tx) => Some(Position::from((tx, first.try_get(id)?))),
            None => None,
        })
    };
    let loaded = Loaded {
        fence: first.try_get("fence")?,
        next_xid: first.try_get::<Xid8, _>("next_xid")?.0,
        head: position("head_tx", "head_id")?,
        shards: Vec::with_capacity(rows.len()),
    };
    let mut loaded = loaded;
    for row in &rows {
        // The LEFT JOIN's one row of NULLs when no claimed shard has a row.
        if row.try_get::<Option<String>, _>("consumer")?.is_some() {
            loaded.shards.push(shard_from_row(row)?);
        }
    }
    Ok(loaded)
}

/// Up to `limit` events after `from` and below `fence` (from [`load`]), in `(tx_id, id)` order,
/// of the types `types` (empty: every type). Below the fence nothing changes any more, so this
/// statement's later snapshot reads what the load's would have.
pub async fn read(
    conn: &mut PgConnection,
    from: Position,
    fence: Xid8,
    types: &[String],
    limit: i64,
    bodies: bool,
) -> Result<Vec<Event>> {
    let sql = format!(
        "SELECT {arrays} FROM (
             SELECT * FROM highwater.events e
              WHERE (e.tx_id, e.id) > ($1, $2)
                -- The plain bounds let PostgreSQL skip the partitions outside the range.
                AND e.tx_id >= $1 AND e.tx_id < $3
                AND (cardinality($4::text[]) = 0 OR e.event_type = ANY($4))
              ORDER BY e.tx_id, e.id
              LIMIT $5) e",
        arrays = event_arrays(&Bodies::from(bodies)),
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(from.xid8())
        .bind(from.id)
        .bind(fence)
        .bind(types)
        .bind(limit)
        .fetch_one(conn)
        .await?;
    let mut events = events_from_arrays(&row)?;
    if !events.is_sorted_by_key(Event::position) {
        events.sort_by_key(Event::position);
    }
    Ok(events)
}

/// One shard's cursor move in a group's [`advance_all`]: from `from` (its cursor as loaded) to
/// `to`, `delivered` events.
#[derive(Clone, Debug)]
pub struct Move<'a> {
    pub consumer: &'a str,
    pub instance_id: &'a str,
    pub from: Position,
    pub to: Position,
    pub delivered: i64,
}

/// The cursor moves of a group in one statement, each under the conditions of
/// [`crate::shards::advance`] (cursor still at `from`, still delivering, not past a barrier).
/// Returns the rows as the update left them: a refused move has none.
pub async fn advance_all(conn: &mut PgConnection, moves: &[Move<'_>]) -> Result<Vec<Shard>> {
    if moves.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "UPDATE highwater.consumer_shards
            SET cursor_tx = u.to_tx, cursor_id = u.to_id, status = $8, attempts = 0,
                last_error = NULL, failing_event_id = NULL, next_attempt_at = NULL,
                delivered_count = delivered_count + u.delivered, heartbeat_at = now(), updated_at = now()
           FROM unnest($1::text[], $2::text[], $3::xid8[], $4::bigint[], $5::xid8[], $6::bigint[], $7::bigint[])
                AS u(u_consumer, u_instance, from_tx, from_id, to_tx, to_id, delivered)
          WHERE consumer = u.u_consumer AND instance_id = u.u_instance
            AND cursor_tx = u.from_tx AND cursor_id = u.from_id
            AND status = ANY ($9)
            AND (barrier_tx IS NULL OR (u.to_tx, u.to_id) <= (barrier_tx, barrier_id))
         RETURNING {SHARD_COLUMNS}"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(moves.iter().map(|m| m.consumer).collect::<Vec<_>>())
        .bind(moves.iter().map(|m| m.instance_id).collect::<Vec<_>>())
        .bind(moves.iter().map(|m| m.from.xid8()).collect::<Vec<_>>())
        .bind(moves.iter().map(|m| m.from.id).collect::<Vec<_>>())
        .bind(moves.iter().map(|m| m.to.xid8()).collect::<Vec<_>>())
        .bind(moves.iter().map(|m| m.to.id).collect::<Vec<_>>())
        .bind(moves.iter().map(|m| m.delivered).collect::<Vec<_>>())
        .bind(Status::Idle)
        .bind(&Status::DELIVERING[..])
        .fetch_all(conn)
        .await?;
    rows.iter().map(shard_from_row).collect()
}
