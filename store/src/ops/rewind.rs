//! `consumer rewind`: puts cursors at the start, the head, an event or a time.
use std::{fmt, str::FromStr};

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::{
    audit::Audit,
    transitions::{Action, Change, Transition, execute},
};
use crate::{Error, Position, Result, Xid8};

/// Where `rewind --to` puts a cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewindTo {
    /// Before every event: everything is delivered again.
    Earliest,
    /// The newest event below the fence: only what comes next is delivered.
    Latest,
    /// Just before this event, so that it and everything after it is delivered again.
    Event(i64),
    /// Just before the first event (in delivery order) created at or after this time.
    Time(DateTime<Utc>),
}

impl FromStr for RewindTo {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "earliest" => return Ok(RewindTo::Earliest),
            "latest" => return Ok(RewindTo::Latest),
            _ => {}
        }
        if let Ok(id) = s.parse::<i64>() {
            if id < 1 {
                return Err(Error::config(format!("--to {s}: event ids start at 1")));
            }
            return Ok(RewindTo::Event(id));
        }
        DateTime::parse_from_rfc3339(s).map(|t| RewindTo::Time(t.with_timezone(&Utc))).map_err(|_| {
            Error::config(format!(
                "--to {s:?} is not earliest, latest, an event id or an RFC 3339 time (e.g. 2026-01-31T12:00:00Z)"
            ))
        })
    }
}

impl fmt::Display for RewindTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RewindTo::Earliest => f.write_str("earliest"),
            RewindTo::Latest => f.write_str("latest"),
            RewindTo::Event(id) => write!(f, "event {id}"),
            RewindTo::Time(t) => write!(f, "{}", t.to_rfc3339()),
        }
    }
}

/// The newest event below the fence, as `shards::register` computes `latest`.
const HEAD: &str =
    concat!("SELECT tx_id, id FROM highwater.events WHERE tx_id < ", fence!(), " ORDER BY tx_id DESC, id DESC LIMIT 1");

fn position(row: Option<(Xid8, i64)>) -> Option<Position> {
    row.map(Position::from)
}

/// The cursor position for `to`. Always below the fence: a cursor above it could pass a running
/// transaction's position, and that transaction's events would never be delivered.
pub async fn target(conn: &mut PgConnection, to: RewindTo) -> Result<Position> {
    match to {
        RewindTo::Earliest => Ok(Position::ZERO),
        RewindTo::Latest => Ok(position(sqlx::query_as(HEAD).fetch_optional(conn).await?).unwrap_or(Position::ZERO)),
        RewindTo::Event(id) => {
            let row: Option<(Xid8, bool)> =
                sqlx::query_as(concat!("SELECT tx_id, tx_id < ", fence!(), " FROM highwater.events WHERE id = $1"))
                    .bind(id)
                    .fetch_optional(conn)
                    .await?;
            let Some((tx, below)) = row else {
                return Err(Error::refused(format!(
                    "no event with id {id} (never appended, deleted by `highwater events prune`, or its \
                     transaction has not committed)"
                ))
                .with_fix("pick an existing event, or rewind --to TIME"));
            };
            if !below {
                return Err(Error::refused(format!(
                    "event {id} is not below the fence yet: a transaction older than it is still running, and a \
                     cursor placed there could skip that transaction's events"
                ))
                .with_fix(
                    "try again when it has \
                     ended (see \"What holds the fence back\" in docs/delivery.md)",
                ));
            }
            // Just before the event: ids increase within a transaction, so (tx, id - 1) is after
            // every earlier position and before this event.
            Ok(Position::new(tx.0, id - 1))
        }
        RewindTo::Time(t) => {
            // A time to come (a mistyped year) would put the cursor at the head, past every
            // undelivered event: never what was meant. Compared with the database's clock, which
            // stamps `created_at`.
            let (future, now): (bool, DateTime<Utc>) =
                sqlx::query_as("SELECT $1 > now(), now()").bind(t).fetch_one(&mut *conn).await?;
            if future {
                return Err(Error::refused(format!(
                    "--to {} is in the future (the database's time is {}): no event is that new, so the \
                     cursor would jump past every undelivered event",
                    t.to_rfc3339(),
                    now.to_rfc3339()
                ))
                .with_fix(
                    "check the date (the year?); to skip every undelivered event on purpose, rewind --to latest",
                ));
            }
            let first: Option<(Xid8, i64)> = sqlx::query_as(concat!(
                "SELECT tx_id, id FROM highwater.events WHERE created_at >= $1 AND tx_id < ",
                fence!(),
                " ORDER BY tx_id, id LIMIT 1"
            ))
            .bind(t)
            .fetch_optional(&mut *conn)
            .await?;
            match position(first) {
                Some(p) => Ok(Position::new(p.tx, p.id - 1)),
                // Every event below the fence is older: deliver what comes after them.
                None => Ok(position(sqlx::query_as(HEAD).fetch_optional(conn).await?).unwrap_or(Position::ZERO)),
            }
        }
    }
}

/// What a rewind would skip on one shard: undelivered events of the consumer (its types, its
/// partition) between the shard's cursor and the target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    pub instance_id: String,
    pub events: i64,
}

/// Per shard in scope, how many undelivered events `rewind --to` would move the cursor past
/// (shards it moves backwards, or not at all, skip none and are left out). `latest` is counted
/// too: it skips them on purpose. Refuses what [`rewind`] refuses first (an unknown consumer or
/// instance, a missing event, a time to come).
pub async fn rewind_skips(pool: &PgPool, consumer: &str, instance: Option<&str>, to: RewindTo) -> Result<Vec<Skipped>> {
    let mut conn = pool.acquire().await?;
    let scope = super::scope::resolve(&mut conn, consumer, instance).await?;
    let at = target(&mut conn, to).await?;
    skips(&mut conn, &scope, at).await
}

async fn skips(conn: &mut PgConnection, scope: &super::scope::Scope, at: Position) -> Result<Vec<Skipped>> {
    // The events the shard would read next (shard_events_after's filter), up to the target.
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT s.instance_id,
                (SELECT count(*) FROM highwater.events e
                  WHERE (e.tx_id, e.id) > (s.cursor_tx, s.cursor_id) AND e.tx_id >= s.cursor_tx
                    AND (e.tx_id, e.id) <= ($3, $4) AND e.tx_id <= $3
                    AND (cardinality(c.event_types) = 0 OR e.event_type = ANY (c.event_types))
                    AND (s.partition_count IS NULL
                         OR highwater.stream_partition(e.stream_type, e.stream_id, s.partition_count)
                            = s.partition_index))
           FROM highwater.consumer_shards s JOIN highwater.consumers c ON c.name = s.consumer
          WHERE s.consumer = $1 AND ($2::text IS NULL OR s.instance_id = $2)
            AND (s.cursor_tx, s.cursor_id) < ($3, $4)
          ORDER BY s.instance_id",
    )
    .bind(&scope.consumer)
    .bind(&scope.instance)
    .bind(at.xid8())
    .bind(at.id)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().filter(|(_, n)| *n > 0).map(|(instance_id, events)| Skipped { instance_id, events }).collect())
}

/// Puts the cursors in scope at `to`, clears any failure, and makes dead or retrying shards
/// idle; disabled shards stay disabled (enable them to deliver). Refuses a time to come, and a
/// target (a time or an event) that moves a cursor forward past undelivered events, naming how
/// many: those events would never be delivered, and a mistyped date or id is the usual cause.
/// [`rewind_skipping`] moves past them once that is confirmed; `latest` is such a move by name.
pub async fn rewind(
    pool: &PgPool,
    consumer: &str,
    instance: Option<&str>,
    to: RewindTo,
    audit: &Audit,
) -> Result<Vec<Transition>> {
    rewind_with(pool, consumer, instance, to, matches!(to, RewindTo::Latest), audit).await
}

/// [`rewind`] that also moves cursors forward past undelivered events (confirmed by the user:
/// `--yes`, or the answer to [`rewind_skips`]' count).
pub async fn rewind_skipping(
    pool: &PgPool,
    consumer: &str,
    instance: Option<&str>,
    to: RewindTo,
    audit: &Audit,
) -> Result<Vec<Transition>> {
    rewind_with(pool, consumer, instance, to, true, audit).await
}

async fn rewind_with(
    pool: &PgPool,
    consumer: &str,
    instance: Option<&str>,
    to: RewindTo,
    skipping: bool,
    audit: &Audit,
) -> Result<Vec<Transition>> {
    let mut conn = pool.acquire().await?;
    // An unknown consumer or instance is the first thing to report, before any target problem.
    let scope = super::scope::resolve(&mut conn, consumer, instance).await?;
    let at = target(&mut conn, to).await?;
    if !skipping {
        // Checked before the move, not within it: a dispatcher that delivers meanwhile only
        // lowers the count.
        let skipped = skips(&mut conn, &scope, at).await?;
        if !skipped.is_empty() {
            return Err(would_skip(&scope, to, &skipped));
        }
    }
    drop(conn);
    let change = Change {
        verb: "rewind",
        // While the partition count changes, no cursor of the old split may pass its barrier
        // (the new split starts there).
        applies: "s.barrier_tx IS NULL OR ($4, $5) <= (s.barrier_tx, s.barrier_id)",
        set: "cursor_tx = $4, cursor_id = $5,
              status = CASE WHEN s.status = $8 THEN $8 ELSE $6 END,
              attempts = 0, last_error = NULL, failing_event_id = NULL, next_attempt_at = NULL",
        join_event: false,
        park: false,
        event_id: None,
        target: Some(at),
        action: Action::Rewound { to: to.to_string() },
    };
    execute(
        pool,
        consumer,
        instance,
        change,
        audit,
        |_| Ok(()),
        |_, _| {
            "changed while rewinding, or its partition count is changing and the target lies beyond the \
             barrier; run the command again after the switch (`highwater consumer status` shows it), or rewind \
             to an earlier position"
                .into()
        },
    )
    .await
}

/// How many events each shard would skip, as one sentence: `shard __shared__: 3 events`.
pub fn describe_skips(skipped: &[Skipped]) -> String {
    let total: i64 = skipped.iter().map(|s| s.events).sum();
    let each: Vec<String> = skipped.iter().map(|s| format!("{} on shard {}", s.events, s.instance_id)).collect();
    format!("{total} undelivered event(s) ({})", each.join(", "))
}

fn would_skip(scope: &super::scope::Scope, to: RewindTo, skipped: &[Skipped]) -> Error {
    let arg = match to {
        RewindTo::Event(id) => id.to_string(),
        other => other.to_string(),
    };
    let flag = scope.instance.as_deref().map(|i| scope.instance_flag(i)).unwrap_or_default();
    Error::refused(format!(
        "rewinding consumer {} to {to} moves its cursor forward past {}: they would never be delivered",
        scope.consumer,
        describe_skips(skipped)
    ))
    .with_fix(format!(
        "check the target (a mistyped date or id?); to skip them on purpose: `highwater consumer rewind {}{flag} \
         --to {arg} --yes`",
        scope.consumer
    ))
}
