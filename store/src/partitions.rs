//! Partitioned event storage: `highwater.events` is partitioned by range of `tx_id`
//! (migrations/20261201000020_partitioned_events.sql). This module creates partitions ahead of
//! need and drops whole partitions once nothing needs their events.
//!
//! A partition `[lo, hi)` may be dropped when three things hold, all compared as numbers:
//! - the fence `pg_snapshot_xmin` is at or past `hi`: no transaction that could still write an
//!   event with a tx_id below `hi` is running (an append's tx_id is its own transaction id, or its
//!   stream predecessor's when that is larger: never below its own), so the partition is final;
//! - every non-disabled shard's cursor is at or past the partition's newest position, the same
//!   guard as the row prune (`retention::blockers`), read under `LOCK TABLE consumer_shards IN
//!   SHARE MODE` so that no shard can be registered, rewound or enabled between the check and the
//!   drop;
//! - its newest event is older than the retention age.
//!
//! Lock order: readers and appenders lock `highwater.events` and then `consumer_shards` (a SQL
//! sink's batch reads events, then moves its cursor). The drop takes them in the same order:
//! ACCESS EXCLUSIVE on `highwater.events` (waiting at most `EVENTS_LOCK_TIMEOUT`, during which
//! appends queue behind it), then SHARE on `consumer_shards` without waiting; if that is busy it
//! lets everything go and tries again, so it never waits for one lock while holding the other.
use std::{fmt, time::Duration};

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::{Error, Position, Result, Xid8, retention};

/// How long one attempt waits for ACCESS EXCLUSIVE on `highwater.events`: appends and reads that
/// arrive meanwhile wait behind it, so this bounds the pause a drop can cause.
const EVENTS_LOCK_TIMEOUT: &str = "1s";
/// Attempts before giving up on a partition (each lets every lock go before the next).
const ATTEMPTS: u32 = 30;

/// One range partition of `highwater.events`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Partition {
    pub name: String,
    pub lo: Xid8,
    pub hi: Xid8,
}

/// Creates the partitions missing up to `ahead` widths above the next transaction id (the one
/// owner of partition creation is the dispatcher, which calls this periodically; the migration
/// and `highwater events partitions --create` call it too). Returns how many it created.
pub async fn create_ahead(pool: &PgPool) -> Result<i32> {
    Ok(sqlx::query_scalar("SELECT highwater.create_event_partitions()").fetch_one(pool).await?)
}

/// Every range partition, oldest first (the tail, `[top, MAXVALUE)`, is not listed: it is never
/// dropped).
pub async fn list(pool: &PgPool) -> Result<Vec<Partition>> {
    Ok(sqlx::query_as("SELECT name, lo, hi FROM highwater.event_partitions ORDER BY lo").fetch_all(pool).await?)
}

#[derive(Debug, Clone)]
pub struct DropOptions {
    pub older_than_days: u32,
    pub dry_run: bool,
}

/// What a drop did (or would do).
#[derive(Debug, Clone, Default)]
pub struct DropReport {
    pub dry_run: bool,
    /// The partitions dropped (or that would be), with their event counts for a dry run.
    pub dropped: Vec<Partition>,
    /// Why the next partition was kept, when one was.
    pub kept: Option<String>,
}

impl fmt::Display for DropReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.dry_run { "would drop" } else { "dropped" };
        write!(f, "{verb} {} partition(s)", self.dropped.len())?;
        for p in &self.dropped {
            write!(f, "\n  {}: transaction ids {}..{}", p.name, p.lo, p.hi)?;
        }
        if let Some(k) = &self.kept {
            write!(f, "\nkept {k}")?;
        }
        Ok(())
    }
}

/// Why a partition cannot go yet.
enum Verdict {
    Drop,
    /// Too young, or still being written: not an error, the prune stops here.
    Keep(String),
}

/// Drops the oldest partitions, one transaction each, while each is older than the retention age
/// and no shard needs its events. Stops at the first partition that must stay: partitions are
/// dropped oldest first, so what is left is always a contiguous range of transaction ids. A shard
/// that needs a partition's events is a refusal naming it (as `events prune` does).
pub async fn drop_old(pool: &PgPool, o: &DropOptions) -> Result<DropReport> {
    let cutoff: DateTime<Utc> = sqlx::query_scalar("SELECT now() - make_interval(days => $1)")
        .bind(i32::try_from(o.older_than_days).unwrap_or(i32::MAX))
        .fetch_one(pool)
        .await?;
    let mut report = DropReport { dry_run: o.dry_run, ..Default::default() };
    for p in list(pool).await? {
        let verdict = if o.dry_run {
            let mut conn = pool.acquire().await?;
            check(&mut conn, &p, cutoff).await
        } else {
            drop_one(pool, &p, cutoff).await
        };
        let verdict = match verdict {
            Err(Error::Refused(mut r)) if !report.dropped.is_empty() => {
                r.problem.push_str(&format!("\n  (before stopping, {report})"));
                return Err(Error::Refused(r));
            }
            other => other?,
        };
        match verdict {
            Verdict::Drop => report.dropped.push(p),
            Verdict::Keep(why) => {
                report.kept = Some(why);
                break;
            }
        }
    }
    Ok(report)
}

/// Drops `p` in its own transaction if [`check`] allows it.
async fn drop_one(pool: &PgPool, p: &Partition, cutoff: DateTime<Utc>) -> Result<Verdict> {
    for attempt in 0..ATTEMPTS {
        let mut tx = pool.begin().await?;
        match drop_in(&mut tx, p, cutoff).await? {
            Outcome::Busy => {
                drop(tx);
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt.min(10)))).await;
            }
            Outcome::Dropped => {
                tx.commit().await?;
                return Ok(Verdict::Drop);
            }
            Outcome::Kept(why) => return Ok(Verdict::Keep(why)),
        }
    }
    Err(Error::refused(format!(
        "could not lock highwater.events and highwater.consumer_shards together in {ATTEMPTS} attempts: long \
         transactions keep using them"
    ))
    .with_fix(
        "try again later; `SELECT pid, state, xact_start, query FROM pg_stat_activity WHERE state <> 'idle'` shows \
         what is running",
    ))
}

/// What [`drop_in`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Dropped in the caller's transaction (not committed yet).
    Dropped,
    /// Must stay for now, and why (too young, or transactions below its bound still running).
    Kept(String),
    /// A lock was busy: nothing done; roll back and try again.
    Busy,
}

/// One partition in the caller's transaction: takes the locks, checks, drops. The caller commits
/// (or rolls back on `Busy`); public so that tests can hold a drop's transaction open.
pub async fn drop_in(tx: &mut Transaction<'_, Postgres>, p: &Partition, cutoff: DateTime<Utc>) -> Result<Outcome> {
    if !lock(tx).await? {
        return Ok(Outcome::Busy);
    }
    if let Verdict::Keep(why) = check(tx, p, cutoff).await? {
        return Ok(Outcome::Kept(why));
    }
    // What `highwater.pruned` records for a DELETE (its trigger does not fire for a DROP): a
    // rebuild that would replay these event types from the log must know they are gone.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO highwater.pruned AS p (event_type, events, newest_id)
         SELECT event_type, count(*), max(id) FROM highwater.{} GROUP BY event_type
         ON CONFLICT (event_type) DO UPDATE
            SET events = p.events + EXCLUDED.events,
                newest_id = greatest(p.newest_id, EXCLUDED.newest_id),
                last_pruned_at = now()",
        quote_ident(&p.name)
    )))
    .execute(&mut **tx)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE highwater.{}", quote_ident(&p.name))))
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM highwater.event_partitions WHERE name = $1").bind(&p.name).execute(&mut **tx).await?;
    Ok(Outcome::Dropped)
}

/// Takes ACCESS EXCLUSIVE on `highwater.events` (waiting at most [`EVENTS_LOCK_TIMEOUT`]), then
/// SHARE on `consumer_shards` without waiting. `false`: one was busy, try again.
async fn lock(tx: &mut Transaction<'_, Postgres>) -> Result<bool> {
    sqlx::query(sqlx::AssertSqlSafe(format!("SET LOCAL lock_timeout = '{EVENTS_LOCK_TIMEOUT}'")))
        .execute(&mut **tx)
        .await?;
    for statement in [
        // ONLY: the parent, not every partition one by one; the DROP locks its partition.
        "LOCK TABLE ONLY highwater.events IN ACCESS EXCLUSIVE MODE",
        "LOCK TABLE highwater.consumer_shards IN SHARE MODE NOWAIT",
    ] {
        match sqlx::query(statement).execute(&mut **tx).await {
            Ok(_) => {}
            Err(e) if e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "55P03") => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// Whether `p` may be dropped now; a refusal if a shard needs its events.
async fn check(conn: &mut PgConnection, p: &Partition, cutoff: DateTime<Utc>) -> Result<Verdict> {
    let fence: Xid8 = sqlx::query_scalar(concat!("SELECT ", fence!())).fetch_one(&mut *conn).await?;
    if fence < p.hi {
        let holder: Option<(i32, Option<String>, Option<f64>)> = sqlx::query_as(
            "SELECT pid, left(query, 80), extract(epoch FROM now() - xact_start)::float8
               FROM pg_stat_activity WHERE backend_xid IS NOT NULL
              ORDER BY age(backend_xid) DESC LIMIT 1",
        )
        .fetch_optional(&mut *conn)
        .await?;
        let by = holder.map_or(String::new(), |(pid, q, age)| {
            format!(
                " (oldest transaction holding it: pid {pid}, open {:.0} s, {})",
                age.unwrap_or(0.0),
                q.unwrap_or_default()
            )
        });
        return Ok(Verdict::Keep(format!(
            "{}: transactions below {} may still write into it, the fence is at {fence}{by}",
            p.name, p.hi
        )));
    }
    let table = quote_ident(&p.name);
    let (newest, last): (Option<DateTime<Utc>>, Option<(Xid8, i64)>) = {
        let newest = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT max(created_at) FROM highwater.{table}")))
            .fetch_one(&mut *conn)
            .await?;
        let last = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT tx_id, id FROM highwater.{table} ORDER BY tx_id DESC, id DESC LIMIT 1"
        )))
        .fetch_optional(&mut *conn)
        .await?;
        (newest, last)
    };
    if newest.is_some_and(|n| n >= cutoff) {
        return Ok(Verdict::Keep(format!("{}: it holds events newer than the retention age", p.name)));
    }
    if let Some(last) = last.map(Position::from) {
        let blockers = retention::blockers(conn, last).await?;
        if !blockers.is_empty() {
            return Err(retention::refusal(&blockers, last));
        }
    }
    Ok(Verdict::Drop)
}

/// Partition names are made by the migration's function (`events_legacy`, `events_<lo>`); quoted
/// all the same.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
