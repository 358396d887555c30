//! The dead-letters page: every consumer's or one's, filtered by type, error text and state,
//! one page at a time in primary-key order `(consumer, instance_id, event_id)`, so that the next
//! page starts where the last ended on the key's index (no OFFSET, no count over the table).
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

use crate::Result;

/// The largest page the console asks for (a page renders every payload).
pub const MAX_PAGE: i64 = 200;

/// Where a dead letter stands; `dead` is the one an operator acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum State {
    #[default]
    Dead,
    /// A redrive was requested and is not delivered yet.
    Pending,
    Redriven,
    Discarded,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Dead => "dead",
            State::Pending => "pending",
            State::Redriven => "redriven",
            State::Discarded => "discarded",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [State::Dead, State::Pending, State::Redriven, State::Discarded].into_iter().find(|x| x.as_str() == s)
    }
}

/// Which dead letters a page shows. Filters combine (AND); `None` does not filter.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub consumer: Option<String>,
    pub event_type: Option<String>,
    /// A substring of the error (exact, case-sensitive: as `consumer redrive --error-contains`).
    pub error_contains: Option<String>,
    /// `None`: every state.
    pub state: Option<State>,
}

/// A dead letter's key: where a page ends and the next begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Key {
    pub consumer: String,
    pub instance_id: String,
    pub event_id: i64,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Row {
    pub consumer: String,
    pub instance_id: String,
    pub event_id: i64,
    /// `None` once retention has pruned the event (and then no stream or payload either).
    pub event_type: Option<String>,
    pub stream_type: Option<String>,
    pub stream_id: Option<String>,
    pub payload: Option<serde_json::Value>,
    pub attempts: i32,
    pub error: String,
    pub created_at: DateTime<Utc>,
    /// `dead`, `pending`, `redriven` or `discarded`.
    pub state: String,
    pub redrive_by: Option<String>,
    pub redrive_reason: Option<String>,
    pub redrive_requested_at: Option<DateTime<Utc>>,
    pub redriven_at: Option<DateTime<Utc>>,
    pub discarded_by: Option<String>,
    pub discard_reason: Option<String>,
    pub discarded_at: Option<DateTime<Utc>>,
}

impl Row {
    pub fn key(&self) -> Key {
        Key { consumer: self.consumer.clone(), instance_id: self.instance_id.clone(), event_id: self.event_id }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub rows: Vec<Row>,
    /// The key to ask the next page after; `None` on the last page.
    pub next: Option<Key>,
    /// The page stopped at [`SCAN`] dead letters before finding `limit` matches: `next` continues
    /// the search from where it stopped (a rare filter over a large table).
    pub stopped_early: bool,
}

/// A page looks at most this many dead letters (in key order, after `after`, of the filter's
/// consumer) for the rows that match its other filters: an error text or a type that matches
/// nothing then costs tens of milliseconds, not a scan of the whole table (docs/benchmarks.md,
/// "The console at scale").
pub const SCAN: i64 = 50_000;

/// The dead letters matching `filter` after `after` (from the first when `None`), at most
/// `limit` (1..=[`MAX_PAGE`]).
pub async fn page(pool: &PgPool, filter: &Filter, after: Option<&Key>, limit: i64) -> Result<Page> {
    let limit = limit.clamp(1, MAX_PAGE);
    let mut rows: Vec<Row> = sqlx::query_as(
        "SELECT d.consumer, d.instance_id, d.event_id, e.event_type, e.stream_type, e.stream_id, e.payload,
                d.attempts, d.error, d.created_at,
                CASE WHEN d.discarded_at IS NOT NULL THEN 'discarded'
                     WHEN d.redrive_at IS NOT NULL THEN 'pending'
                     WHEN d.redriven_at IS NOT NULL THEN 'redriven' ELSE 'dead' END AS state,
                d.redrive_by, d.redrive_reason, d.redrive_requested_at, d.redriven_at,
                d.discarded_by, d.discard_reason, d.discarded_at
           FROM (SELECT * FROM highwater.dead_letters d
                  WHERE ($1::text IS NULL OR d.consumer = $1)
                    AND ($5::text IS NULL OR (d.consumer, d.instance_id, d.event_id) > ($5, $6, $7))
                  ORDER BY d.consumer, d.instance_id, d.event_id
                  LIMIT $9) d
           LEFT JOIN highwater.events e ON e.id = d.event_id
          WHERE ($2::text IS NULL OR e.event_type = $2)
            AND ($3::text IS NULL OR strpos(d.error, $3) > 0)
            AND ($4::text IS NULL OR $4 = CASE WHEN d.discarded_at IS NOT NULL THEN 'discarded'
                                                WHEN d.redrive_at IS NOT NULL THEN 'pending'
                                                WHEN d.redriven_at IS NOT NULL THEN 'redriven' ELSE 'dead' END)
          ORDER BY d.consumer, d.instance_id, d.event_id
          LIMIT $8",
    )
    .bind(&filter.consumer)
    .bind(&filter.event_type)
    .bind(&filter.error_contains)
    .bind(filter.state.map(State::as_str))
    .bind(after.map(|k| &k.consumer))
    .bind(after.map(|k| &k.instance_id))
    .bind(after.map(|k| k.event_id))
    .bind(limit + 1)
    .bind(SCAN)
    .fetch_all(pool)
    .await?;
    if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        return Ok(Page { next: rows.last().map(Row::key), rows, stopped_early: false });
    }
    // Fewer matches than asked: the end of the table, or of this page's scan.
    let last_scanned: Option<(String, String, i64)> = sqlx::query_as(
        "SELECT consumer, instance_id, event_id FROM highwater.dead_letters d
          WHERE ($1::text IS NULL OR d.consumer = $1)
            AND ($2::text IS NULL OR (d.consumer, d.instance_id, d.event_id) > ($2, $3, $4))
          ORDER BY d.consumer, d.instance_id, d.event_id
          OFFSET $5 - 1 LIMIT 1",
    )
    .bind(&filter.consumer)
    .bind(after.map(|k| &k.consumer))
    .bind(after.map(|k| &k.instance_id))
    .bind(after.map(|k| k.event_id))
    .bind(SCAN)
    .fetch_optional(pool)
    .await?;
    let next = last_scanned.map(|(consumer, instance_id, event_id)| Key { consumer, instance_id, event_id });
    Ok(Page { rows, stopped_early: next.is_some(), next })
}

/// The keys of every dead letter matching `filter`, at most `max`: what "discard the whole
/// filter" discards, one operation per dead letter.
pub async fn keys(pool: &PgPool, filter: &Filter, max: i64) -> Result<Vec<Key>> {
    let mut keys = Vec::new();
    let mut after: Option<Key> = None;
    while (keys.len() as i64) < max {
        let p = page(pool, filter, after.as_ref(), (max - keys.len() as i64).min(MAX_PAGE)).await?;
        keys.extend(p.rows.iter().map(Row::key));
        match p.next {
            Some(k) => after = Some(k),
            None => break,
        }
    }
    Ok(keys)
}
