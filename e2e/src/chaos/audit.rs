//! The auditor: what was committed against what each consumer received, and whether any cursor
//! ever moved backwards.
use std::{
    collections::{BTreeSet, HashMap},
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use highwater::{Position, Xid8};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// What one consumer received compared with the committed events.
#[derive(Clone, Debug, Default)]
pub struct Delivery {
    pub consumer: String,
    /// Committed events this consumer never received.
    pub lost: usize,
    /// Deliveries beyond the first of an event.
    pub duplicates: usize,
    /// Deliveries of an event that is not committed (must be 0).
    pub phantom: usize,
    /// Lines of an external sink that are not whole JSON (a write torn by a kill).
    pub torn: usize,
    /// Deliveries of committed events this consumer must not get (a skipped event).
    pub unexpected: usize,
    /// Where a PerInstance sink's gaps are, per instance.
    pub gaps: Vec<String>,
}

impl Delivery {
    pub(crate) fn compare(consumer: &str, committed: &BTreeSet<i64>, received: &[i64]) -> Delivery {
        let mut seen = BTreeSet::new();
        let mut d = Delivery { consumer: consumer.to_owned(), ..Default::default() };
        for id in received {
            if !committed.contains(id) {
                d.phantom += 1;
            } else if !seen.insert(*id) {
                d.duplicates += 1;
            }
        }
        d.lost = committed.len() - seen.len();
        d
    }
}

/// Every committed event, pruned or not: the events table and what the deletion trigger
/// ([`DELETION_TRIGGER`]) kept of the deleted ones.
#[derive(Clone, Debug, Default)]
pub struct AllEvents {
    pub ids: BTreeSet<i64>,
    pub by_id: HashMap<i64, Ev>,
    /// Ids in delivery order `(tx_id, id)`.
    pub order: Vec<i64>,
}

#[derive(Clone, Debug)]
pub struct Ev {
    pub pos: Position,
    pub created_at: DateTime<Utc>,
    pub poison: bool,
    pub deleted_at: Option<DateTime<Utc>>,
    /// The shards (`consumer/instance:status at tx/id`) whose cursor was before the event when it
    /// was deleted, read in the deleting transaction under prune's SHARE lock.
    pub unpassed: Vec<String>,
}

/// Records each deleted event with the shards that had not passed it, in the deleting
/// transaction (prune holds `LOCK TABLE consumer_shards IN SHARE MODE`, so no cursor moves
/// between the delete and this snapshot).
pub const DELETION_TRIGGER: &str = "
CREATE TABLE chaos_deleted (
    id bigint PRIMARY KEY, tx_id xid8 NOT NULL, created_at timestamptz NOT NULL, poison boolean NOT NULL,
    deleted_at timestamptz NOT NULL, unpassed text[] NOT NULL);
CREATE FUNCTION chaos_record_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_deleted
    SELECT g.id, g.tx_id, g.created_at, coalesce((g.payload->>'poison')::boolean, false), clock_timestamp(),
           coalesce((SELECT array_agg(format('%s/%s:%s at %s/%s',
                                             s.consumer, s.instance_id, s.status, s.cursor_tx, s.cursor_id))
                       FROM highwater.consumer_shards s
                      WHERE (s.cursor_tx, s.cursor_id) < (g.tx_id, g.id)), '{}')
      FROM gone g;
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_record_deleted AFTER DELETE ON highwater.events
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION chaos_record_deleted();";

pub async fn all_events(pool: &PgPool) -> Result<AllEvents> {
    type Row = (i64, Xid8, DateTime<Utc>, bool, Option<DateTime<Utc>>, Option<Vec<String>>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, tx_id, created_at, coalesce((payload->>'poison')::boolean, false), NULL::timestamptz, NULL::text[]
           FROM highwater.events
         UNION ALL
         SELECT id, tx_id, created_at, poison, deleted_at, unpassed FROM chaos_deleted",
    )
    .fetch_all(pool)
    .await?;
    let mut all = AllEvents::default();
    for (id, tx, created_at, poison, deleted_at, unpassed) in rows {
        all.ids.insert(id);
        let ev = Ev {
            pos: Position::from((tx, id)),
            created_at,
            poison,
            deleted_at,
            unpassed: unpassed.unwrap_or_default(),
        };
        all.by_id.insert(id, ev);
    }
    all.order = all.ids.iter().copied().collect();
    all.order.sort_by_key(|id| all.by_id[id].pos);
    Ok(all)
}

pub async fn committed(pool: &PgPool) -> Result<BTreeSet<i64>> {
    Ok(all_events(pool).await?.ids)
}

/// The shared SQL sink's table, one row per application.
pub async fn sql_sink(pool: &PgPool, consumer: &str, table: &str, committed: &BTreeSet<i64>) -> Result<Delivery> {
    let ids: Vec<i64> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT event_id FROM {table}"))).fetch_all(pool).await?;
    Ok(Delivery::compare(consumer, committed, &ids))
}

/// A SQL sink's table against the events it must hold exactly once (`expected`), among every
/// committed event (`all`): a committed event outside `expected` counts as unexpected.
pub async fn sql_sink_expecting(
    pool: &PgPool,
    consumer: &str,
    table: &str,
    expected: &BTreeSet<i64>,
    all: &BTreeSet<i64>,
) -> Result<Delivery> {
    let ids: Vec<i64> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT event_id FROM {table}"))).fetch_all(pool).await?;
    let (inside, outside): (Vec<i64>, Vec<i64>) = ids.into_iter().partition(|id| expected.contains(id));
    let mut d = Delivery::compare(consumer, expected, &inside);
    for id in outside {
        if all.contains(&id) {
            d.unexpected += 1;
        } else {
            d.phantom += 1;
        }
    }
    Ok(d)
}

/// Deleted events that a shard which was not disabled had not passed when they were deleted
/// (whatever it received later): each is a broken retention promise.
pub fn early_deletions(all: &AllEvents) -> Vec<String> {
    let mut out = Vec::new();
    for id in &all.order {
        let e = &all.by_id[id];
        let live: Vec<&String> = e.unpassed.iter().filter(|u| !u.contains(":disabled ")).collect();
        if !live.is_empty() {
            out.push(format!(
                "event {id} at {} deleted while {} had not passed it",
                e.pos,
                live.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    out
}

/// What the rewinds of a consumer did, window by window (a window runs from one rewind to the next).
#[derive(Clone, Debug, Default)]
pub struct RewindAudit {
    pub windows_checked: usize,
    /// Events owed again by rewinds to a time, all delivered again.
    pub redelivered_after_time: usize,
    pub deliveries_after_latest: usize,
    pub problems: Vec<String>,
    /// The last window is not complete yet (its consumer is still catching up).
    pub behind: usize,
}

/// Holds the rewinds of `consumer` (SQL sink `table (seq, event_id)`) to their promises:
/// - in each window, the consumer delivered exactly the events between the cursor the rewind set
///   and the cursor the next rewind found (the newest event for the last window), once each;
/// - after a rewind to a time, every event created at or after it (that existed then, below the
///   fence) was delivered again, which fails if the cursor was put after one of them;
/// - after a rewind to latest, nothing delivered before was delivered again.
pub async fn rewinds(
    pool: &PgPool,
    table: &str,
    all: &AllEvents,
    records: &[crate::chaos::ops::RewindRecord],
) -> Result<RewindAudit> {
    let rows: Vec<(i64, i64)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT seq, event_id FROM {table} ORDER BY seq")))
            .fetch_all(pool)
            .await?;
    let mut a = RewindAudit::default();
    let newest = all.order.last().map(|id| all.by_id[id].pos).unwrap_or(Position::ZERO);
    let mut delivered_before: BTreeSet<i64> = BTreeSet::new();
    // Window i starts at rewind i-1 (window 0 at the consumer's start) and ends at rewind i.
    for i in 0..=records.len() {
        let start = if i == 0 { None } else { Some(&records[i - 1]) };
        if start.is_some_and(|r| r.ambiguous) || records.get(i).is_some_and(|r| r.ambiguous) {
            break;
        }
        let (from, from_seq, done_at) =
            start.map_or((Position::ZERO, 0, None), |r| (r.after, r.seq_mark, Some(r.done_at)));
        let (to, to_seq) = records.get(i).map_or((newest, i64::MAX), |r| (r.before, r.seq_mark));
        let got: Vec<i64> = rows.iter().filter(|(s, _)| *s > from_seq && *s <= to_seq).map(|(_, id)| *id).collect();
        let got_set: BTreeSet<i64> = got.iter().copied().collect();
        let owed = |e: &Ev| e.deleted_at.zip(done_at).is_none_or(|(d, r)| d >= r);
        let expected: BTreeSet<i64> = all
            .order
            .iter()
            .copied()
            .filter(|id| {
                let e = &all.by_id[id];
                e.pos > from && e.pos <= to && owed(e)
            })
            .collect();
        let missing = expected.difference(&got_set).count();
        let extra = got_set.difference(&expected).count();
        let dups = got.len() - got_set.len();
        a.windows_checked += 1;
        let what = start.map_or("from the start".to_owned(), |r| match r.to_time {
            Some(t) => format!("after the rewind to {} (cursor {} -> {})", t.to_rfc3339(), r.before, r.after),
            None => format!("after the rewind to latest (cursor {} -> {})", r.before, r.after),
        });
        if i == records.len() {
            a.behind = missing;
        }
        if missing + extra + dups > 0 {
            a.problems
                .push(format!("window {i} {what}: {missing} missing, {extra} outside ({from}, {to}], {dups} twice"));
        }
        if let Some(r) = start {
            match r.to_time {
                Some(t) => {
                    let again: Vec<i64> = all
                        .order
                        .iter()
                        .copied()
                        .filter(|id| {
                            let e = &all.by_id[id];
                            e.created_at >= t && e.pos <= r.head && owed(e)
                        })
                        .collect();
                    let not_again: Vec<&i64> = again.iter().filter(|id| !got_set.contains(id)).collect();
                    a.redelivered_after_time += again.len() - not_again.len();
                    if let Some(first) = not_again.first() {
                        let e = &all.by_id[first];
                        a.problems.push(format!(
                            "rewind to {}: {} events created at or after it were not delivered again (the first: event {first} at {}, created {}; the rewind put the cursor at {})",
                            t.to_rfc3339(), not_again.len(), e.pos, e.created_at.to_rfc3339(), r.after
                        ));
                    }
                }
                None => {
                    a.deliveries_after_latest += got.len();
                    let again = got_set.intersection(&delivered_before).count();
                    if again > 0 {
                        a.problems.push(format!(
                            "rewind to latest (cursor {} -> {}): {again} events delivered again",
                            r.before, r.after
                        ));
                    }
                }
            }
        }
        delivered_before.extend(got_set);
    }
    Ok(a)
}

/// Each skipped event is in the dead letters (once, for the skipped consumer) and nowhere else:
/// no other consumer's dead letters, and the skipped consumer never applied it.
pub async fn skips(pool: &PgPool, consumer: &str, table: &str, skipped: &[i64]) -> Result<Vec<String>> {
    let letters: Vec<(String, i64)> =
        sqlx::query_as("SELECT consumer, event_id FROM highwater.dead_letters").fetch_all(pool).await?;
    let applied: BTreeSet<i64> =
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!("SELECT event_id FROM {table}")))
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
    let mut problems = Vec::new();
    for id in skipped {
        let mine = letters.iter().filter(|(c, e)| c == consumer && e == id).count();
        if mine != 1 {
            problems.push(format!("skipped event {id} is {mine} times in {consumer}'s dead letters"));
        }
        if applied.contains(id) {
            problems.push(format!("skipped event {id} was applied by {consumer}'s sink"));
        }
    }
    for (c, e) in &letters {
        if c != consumer || !skipped.contains(e) {
            problems.push(format!("dead letter {c}/{e} that no skip of the run put there"));
        }
    }
    Ok(problems)
}

/// A log sink's file: one JSON line per delivery.
pub fn log_sink(consumer: &str, file: &Path, committed: &BTreeSet<i64>) -> Result<Delivery> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut ids = Vec::new();
    let mut torn = 0;
    for line in text.lines() {
        match serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| v["event"]["id"].as_i64()) {
            Some(id) => ids.push(id),
            None => torn += 1,
        }
    }
    Ok(Delivery { torn, ..Delivery::compare(consumer, committed, &ids) })
}

/// A PerInstance SQL sink's table `(instance_id, event_id)`. Each process starts from the head
/// when it registers and a killed one stops for good, so each instance must hold, exactly once,
/// every committed event between the first and the last it received (no gap), and the instances
/// still running at the end every event up to the last committed one.
pub async fn per_instance(pool: &PgPool, consumer: &str, table: &str, running: &[String]) -> Result<Delivery> {
    let all = all_events(pool).await?;
    let order: Vec<(u64, i64)> = all.order.iter().map(|id| (all.by_id[id].pos.tx, *id)).collect();
    let rank: HashMap<i64, usize> = order.iter().enumerate().map(|(i, (_, id))| (*id, i)).collect();
    let rows: Vec<(String, i64)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT instance_id, event_id FROM {table}")))
            .fetch_all(pool)
            .await?;
    let mut by_instance: HashMap<String, Vec<i64>> = HashMap::new();
    for (instance, id) in rows {
        by_instance.entry(instance).or_default().push(id);
    }
    let mut d = Delivery { consumer: consumer.to_owned(), ..Default::default() };
    for (instance, ids) in by_instance {
        let mut seen = BTreeSet::new();
        for id in &ids {
            match rank.get(id) {
                None => d.phantom += 1,
                Some(r) if !seen.insert(*r) => d.duplicates += 1,
                Some(_) => {}
            }
        }
        let (Some(first), Some(last)) = (seen.first().copied(), seen.last().copied()) else { continue };
        let last = if running.contains(&instance) { order.len() - 1 } else { last };
        let missing = (first..=last).filter(|r| !seen.contains(r)).count();
        if missing > 0 {
            let first_missing = (first..=last).find(|r| !seen.contains(r)).map(|r| order[r]);
            d.gaps.push(format!(
                "{instance}: {missing} missing between {:?} and {:?}, the first {first_missing:?}",
                order[first], order[last]
            ));
        }
        d.lost += missing;
    }
    Ok(d)
}

/// Samples every cursor row while the chaos runs and records each move backwards, except the
/// moves of the rewinds the run made: the rewind operation holds [`CursorWatch::gate`] while it
/// rewinds and tells the watch the new cursor ([`CursorWatch::rewound`]) before the next sample.
#[derive(Clone, Default)]
pub struct CursorWatch {
    inner: Arc<Mutex<WatchState>>,
    gate: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct WatchState {
    last: HashMap<(String, String), (u64, i64)>,
    samples: u64,
    regressions: Vec<String>,
    rewinds: u64,
}

impl CursorWatch {
    pub fn spawn(&self, pool: PgPool, every: Duration, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                // The database restarting makes a sample fail: skip it.
                let _ = me.sample(&pool).await;
                tokio::time::sleep(every).await;
            }
        })
    }

    /// Held by a sample from its query to its comparison, and by a rewind until the watch knows.
    pub fn gate(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.gate.clone()
    }

    /// A rewind the run made put this cursor at `to` (call with the gate held).
    pub fn rewound(&self, consumer: &str, instance: &str, to: Position) {
        let mut s = self.inner.lock().expect("cursor watch lock");
        s.rewinds += 1;
        s.last.insert((consumer.to_owned(), instance.to_owned()), (to.tx, to.id));
    }

    pub fn rewinds(&self) -> u64 {
        self.inner.lock().expect("cursor watch lock").rewinds
    }

    pub async fn sample(&self, pool: &PgPool) -> Result<()> {
        let _held = self.gate.lock().await;
        let rows: Vec<(String, String, Xid8, i64)> =
            sqlx::query_as("SELECT consumer, instance_id, cursor_tx, cursor_id FROM highwater.consumer_shards")
                .fetch_all(pool)
                .await?;
        let mut s = self.inner.lock().expect("cursor watch lock");
        s.samples += 1;
        for (consumer, instance, tx, id) in rows {
            let now = (tx.0, id);
            if let Some(before) = s.last.insert((consumer.clone(), instance.clone()), now)
                && now < before
            {
                s.regressions.push(format!("{consumer}/{instance}: {before:?} -> {now:?}"));
            }
        }
        Ok(())
    }

    pub fn samples(&self) -> u64 {
        self.inner.lock().expect("cursor watch lock").samples
    }

    pub fn regressions(&self) -> Vec<String> {
        self.inner.lock().expect("cursor watch lock").regressions.clone()
    }
}
