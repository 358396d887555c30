//! `consumer replay`: one stream's events delivered again to one consumer, through the path of a
//! redrive (docs/consumers.md, "Replay"): the request only records rows in `highwater.replays`
//! (who, why, when, the delivering shard, the order) and notifies the dispatchers; the dispatcher
//! that runs the shard delivers them through the very sink of its live delivery, under the shard's
//! claim, in the stream's `(tx_id, id)` order, and marks each replayed in the transaction of a SQL
//! sink's apply or right after an external sink's acknowledgement (the engine's
//! `dispatch::redrive`). The cursor is never read for delivery nor written.
//!
//! Only events at or below the shard's cursor are taken (never ahead of live delivery), of the
//! types the consumer selects and its `spec.filter` selects, of the shard's partition. An event that is a dead letter of the
//! shard not yet redriven is left out: it was never applied, and `consumer redrive` is its path.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use crate::{Error, Result, notify};

/// A replay of more deliveries than this asks for a confirmation, as a redrive does.
pub use super::redrive::CONFIRM_ABOVE;

#[derive(Debug, Clone, Default)]
pub struct Request {
    pub consumer: String,
    /// `TYPE/ID` as given (checked here).
    pub stream: String,
    /// From this event of the stream on (its `(tx_id, id)` position); refused unless the event is
    /// in the stream.
    pub since: Option<i64>,
    /// Who asks: the OS user for the CLI, `http:ops-token-N` over HTTP.
    pub by: String,
    pub reason: Option<String>,
    /// Select and report only; nothing is changed.
    pub dry_run: bool,
}

/// One delivery a replay makes: an event through a shard.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Selected {
    pub instance_id: String,
    pub event_id: i64,
    pub event_type: String,
    pub stream_version: Option<i64>,
}

/// An event of the stream the replay does not deliver through a shard, and why.
#[derive(Debug, Clone, Serialize)]
pub struct LeftOut {
    pub instance_id: String,
    pub event_id: i64,
    pub why: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub consumer: String,
    pub stream: String,
    /// In delivery order: per shard, the events' `(tx_id, id)` order.
    pub selected: Vec<Selected>,
    pub left_out: Vec<LeftOut>,
    /// The request's id (`replays.request_id`); `None` for a dry run.
    pub request_id: Option<i64>,
    pub requested_at: Option<DateTime<Utc>>,
}

/// What became of a request so far.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Progress {
    pub replayed: u64,
    /// `(event id, error)` of each delivery that failed or was not made after a failure.
    pub failed: Vec<(i64, String)>,
    pub pending: u64,
}

/// `TYPE/ID` split; refused with a fix when it is not that.
pub fn parse_stream(stream: &str) -> Result<(String, String)> {
    match stream.split_once('/').filter(|(t, i)| !t.is_empty() && !i.is_empty()) {
        Some((t, i)) => Ok((t.to_owned(), i.to_owned())),
        None => Err(Error::refused(format!("--stream {stream:?} is not STREAM_TYPE/STREAM_ID"))
            .with_fix("e.g. --stream order/o-17")),
    }
}

#[derive(sqlx::FromRow)]
struct Candidate {
    instance_id: String,
    event_id: i64,
    event_type: String,
    stream_version: Option<i64>,
    /// Of the consumer's types.
    selected_type: bool,
    /// At or below the shard's cursor.
    delivered: bool,
    /// In the shard's partition.
    in_partition: bool,
    /// A dead letter of the shard not yet redriven.
    dead_letter: bool,
}

/// Selects the events, and unless `dry_run` records the request and notifies the dispatchers,
/// in one transaction. Refuses (nothing changed) an unknown consumer, a malformed stream, a stream
/// without events, a `since` that is not an event of the stream, and a replay that takes nothing.
pub async fn replay(pool: &PgPool, r: &Request) -> Result<Plan> {
    let (stream_type, stream_id) = parse_stream(&r.stream)?;
    let mut tx = pool.begin().await?;
    let filter: Option<Option<String>> =
        sqlx::query_scalar("SELECT spec->>'filter' FROM highwater.consumers WHERE name = $1 FOR SHARE")
            .bind(&r.consumer)
            .fetch_optional(&mut *tx)
            .await?;
    let Some(filter) = filter else {
        return Err(Error::no_consumer(&r.consumer));
    };
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.events WHERE stream_type = $1 AND stream_id = $2")
        .bind(&stream_type)
        .bind(&stream_id)
        .fetch_one(&mut *tx)
        .await?;
    if n == 0 {
        return Err(Error::refused(format!("stream {} has no events (never appended, or pruned)", r.stream))
            .with_fix("`highwater events read --stream TYPE/ID` shows a stream's events; check the type and id"));
    }
    if let Some(since) = r.since {
        let found: Option<(String, String)> =
            sqlx::query_as("SELECT stream_type, stream_id FROM highwater.events WHERE id = $1")
                .bind(since)
                .fetch_optional(&mut *tx)
                .await?;
        if found != Some((stream_type.clone(), stream_id.clone())) {
            let what = match found {
                Some((t, i)) => format!("event {since} is of stream {t}/{i}, not {}", r.stream),
                None => format!("event {since} does not exist (never appended, or pruned)"),
            };
            return Err(Error::refused(format!("--since {since}: {what}")).with_fix(format!(
                "name an event of the stream (`highwater events read --stream {}` lists them), or leave --since out",
                r.stream
            )));
        }
    }
    // Every shard of the consumer × every event of the stream from `since` on, in stream order
    // per shard; the shard rows are locked so that a rewind cannot move a cursor meanwhile.
    let candidates: Vec<Candidate> = sqlx::query_as(
        "WITH sh AS (SELECT * FROM highwater.consumer_shards WHERE consumer = $1 ORDER BY instance_id FOR SHARE),
              since AS (SELECT tx_id, id FROM highwater.events WHERE id = $4)
         SELECT sh.instance_id, e.id AS event_id, e.event_type, e.stream_version,
                (cardinality(c.event_types) = 0 OR e.event_type = ANY(c.event_types)) AS selected_type,
                (e.tx_id, e.id) <= (sh.cursor_tx, sh.cursor_id) AS delivered,
                (sh.partition_count IS NULL
                 OR highwater.stream_partition(e.stream_type, e.stream_id, sh.partition_count) = sh.partition_index)
                    AS in_partition,
                EXISTS (SELECT 1 FROM highwater.dead_letters d
                         WHERE d.consumer = $1 AND d.instance_id = sh.instance_id AND d.event_id = e.id
                           AND d.redriven_at IS NULL) AS dead_letter
           FROM sh
           JOIN highwater.consumers c ON c.name = sh.consumer
           CROSS JOIN highwater.events e
          WHERE e.stream_type = $2 AND e.stream_id = $3
            AND ($4::bigint IS NULL OR (e.tx_id, e.id) >= (SELECT tx_id, id FROM since))
          ORDER BY sh.instance_id, e.tx_id, e.id",
    )
    .bind(&r.consumer)
    .bind(&stream_type)
    .bind(&stream_id)
    .bind(r.since)
    .fetch_all(&mut *tx)
    .await?;
    let unselected = unselected_by(&mut tx, filter.as_deref(), &stream_type, &stream_id).await?;
    let mut plan = Plan {
        consumer: r.consumer.clone(),
        stream: r.stream.clone(),
        selected: Vec::new(),
        left_out: Vec::new(),
        request_id: None,
        requested_at: None,
    };
    for c in candidates {
        // Another partition's stream: not this shard's, not worth a line.
        if !c.in_partition {
            continue;
        }
        let why = if !c.selected_type {
            Some(format!("type {} is not one the consumer selects", c.event_type))
        } else if unselected.contains(&c.event_id) {
            Some("the consumer's filter does not select it".to_owned())
        } else if !c.delivered {
            Some("beyond the shard's cursor: live delivery has not reached it yet".to_owned())
        } else if c.dead_letter {
            Some("a dead letter of the shard, never applied: `highwater consumer redrive` delivers it".to_owned())
        } else {
            None
        };
        match why {
            Some(why) => plan.left_out.push(LeftOut { instance_id: c.instance_id, event_id: c.event_id, why }),
            None => plan.selected.push(Selected {
                instance_id: c.instance_id,
                event_id: c.event_id,
                event_type: c.event_type,
                stream_version: c.stream_version,
            }),
        }
    }
    if plan.selected.is_empty() {
        let why = match plan.left_out.first() {
            Some(l) => format!(
                "none of the {} events of stream {} can be replayed to consumer {} (event {}: {})",
                plan.left_out.len(),
                r.stream,
                r.consumer,
                l.event_id,
                l.why
            ),
            None => format!("consumer {} has no shard that delivers stream {}", r.consumer, r.stream),
        };
        return Err(Error::refused(why).with_fix(format!(
            "`highwater consumer status {}` shows its cursors; replay once live delivery has passed the events",
            r.consumer
        )));
    }
    if r.dry_run {
        tx.rollback().await?;
        return Ok(plan);
    }
    let (instances, ids): (Vec<&str>, Vec<i64>) =
        plan.selected.iter().map(|s| (s.instance_id.as_str(), s.event_id)).unzip();
    let seq: Vec<i32> = (0..ids.len() as i32).collect();
    let (id, at): (i64, DateTime<Utc>) = sqlx::query_as(
        "WITH r AS (SELECT nextval('highwater.replay_requests') AS id),
              ins AS (
                INSERT INTO highwater.replays
                       (request_id, consumer, instance_id, event_id, seq, stream_type, stream_id, requested_by,
                        reason, due_at)
                SELECT r.id, $1, u.instance_id, u.event_id, u.seq, $2, $3, $4, $5, now()
                  FROM r, unnest($6::text[], $7::bigint[], $8::int[]) AS u(instance_id, event_id, seq))
         SELECT id, now() FROM r",
    )
    .bind(&r.consumer)
    .bind(&stream_type)
    .bind(&stream_id)
    .bind(&r.by)
    .bind(&r.reason)
    .bind(&instances)
    .bind(&ids)
    .bind(&seq)
    .fetch_one(&mut *tx)
    .await?;
    notify::control(&mut *tx, &r.consumer).await?;
    tx.commit().await?;
    plan.request_id = Some(id);
    plan.requested_at = Some(at);
    Ok(plan)
}

/// The events of the stream that the consumer's `spec.filter` leaves out (none without a filter):
/// a replay delivers what live delivery would have, and live delivery reads with the filter.
async fn unselected_by(
    conn: &mut PgConnection,
    filter: Option<&str>,
    stream_type: &str,
    stream_id: &str,
) -> Result<std::collections::HashSet<i64>> {
    let Some(filter) = filter else { return Ok(Default::default()) };
    // The filter was checked at apply (one expression, nothing volatile, the event only); an
    // event it judges NULL is not selected, as in the read.
    let sql = format!(
        "SELECT id FROM highwater.events
          WHERE stream_type = $1 AND stream_id = $2 AND (\n{filter}\n) IS NOT TRUE"
    );
    let ids: Vec<i64> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(stream_type).bind(stream_id).fetch_all(&mut *conn).await?;
    Ok(ids.into_iter().collect())
}

/// Where the rows of a request stand.
pub async fn progress(pool: &PgPool, plan: &Plan) -> Result<Progress> {
    let Some(id) = plan.request_id else { return Ok(Progress::default()) };
    let rows: Vec<(i64, Option<String>, bool, bool)> = sqlx::query_as(
        "SELECT event_id, error, due_at IS NOT NULL, replayed_at IS NOT NULL
           FROM highwater.replays WHERE request_id = $1 ORDER BY instance_id, seq",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    let mut p = Progress::default();
    for (event_id, error, pending, replayed) in rows {
        match (pending, replayed) {
            (true, _) => p.pending += 1,
            (false, true) => p.replayed += 1,
            (false, false) => p.failed.push((event_id, error.unwrap_or_default())),
        }
    }
    Ok(p)
}

// ---- The dispatcher's side (the engine's dispatch::redrive). ----

/// A replay row due for delivery through a shard.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Due {
    pub request_id: i64,
    pub event_id: i64,
}

/// The pending rows of the shard `(consumer, via)` (at most `limit`), by request, then stream
/// order. Nothing while the shard does not deliver (dead or disabled): they wait for it.
pub async fn due(conn: &mut PgConnection, consumer: &str, via: &str, limit: i64) -> Result<Vec<Due>> {
    Ok(sqlx::query_as(
        "SELECT r.request_id, r.event_id FROM highwater.replays r
          WHERE r.consumer = $1 AND r.instance_id = $2 AND r.due_at IS NOT NULL AND r.due_at <= now()
            AND EXISTS (SELECT 1 FROM highwater.consumer_shards s
                         WHERE s.consumer = $1 AND s.instance_id = $2 AND s.status = ANY ($4))
          ORDER BY r.request_id, r.seq
          LIMIT $3",
    )
    .bind(consumer)
    .bind(via)
    .bind(limit)
    .bind(&crate::shards::Status::DELIVERING[..])
    .fetch_all(conn)
    .await?)
}

/// Marks a pending row replayed; false when it is no longer pending (nothing must be applied).
/// In a SQL sink's transaction it runs before the apply: its row lock makes a second delivery of
/// the same row wait and then find it done.
pub async fn mark_replayed(conn: &mut PgConnection, via: &str, d: &Due) -> Result<bool> {
    let r = sqlx::query(
        "UPDATE highwater.replays SET due_at = NULL, replayed_at = now()
          WHERE request_id = $1 AND instance_id = $2 AND event_id = $3 AND due_at IS NOT NULL",
    )
    .bind(d.request_id)
    .bind(via)
    .bind(d.event_id)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// A failed delivery: the row and the request's later rows of the shard are no longer pending,
/// with the error (the later ones are not delivered, so that the stream's order holds).
pub async fn mark_failed(conn: &mut PgConnection, via: &str, d: &Due, error: &str) -> Result<()> {
    let error: String = error.chars().take(2000).collect();
    sqlx::query(
        "WITH f AS (SELECT seq FROM highwater.replays WHERE request_id = $1 AND instance_id = $2 AND event_id = $3)
         UPDATE highwater.replays r
            SET due_at = NULL,
                error = CASE WHEN r.event_id = $3 THEN $4
                             ELSE 'not replayed: event ' || $3 || ' before it in the stream failed' END
           FROM f
          WHERE r.request_id = $1 AND r.instance_id = $2 AND r.seq >= f.seq AND r.due_at IS NOT NULL",
    )
    .bind(d.request_id)
    .bind(via)
    .bind(d.event_id)
    .bind(error)
    .execute(conn)
    .await?;
    Ok(())
}

/// The shards of `consumers` with replay rows pending.
pub async fn shards_with_requests(pool: &PgPool, consumers: &[&str]) -> Result<Vec<(String, String)>> {
    Ok(sqlx::query_as(
        "SELECT DISTINCT consumer, instance_id FROM highwater.replays
          WHERE due_at IS NOT NULL AND consumer = ANY($1)",
    )
    .bind(consumers)
    .fetch_all(pool)
    .await?)
}
