//! Retention: `events prune` deletes old events, but never one that a shard still has to deliver.
//!
//! Two invariants make the check sound. Dispatchers register their shards before their first
//! pass, so whatever is being delivered has a shard row. And each batch runs in a transaction
//! that holds `LOCK TABLE consumer_shards IN SHARE MODE` from before its check until its delete
//! commits: a shard registered, rewound or enabled meanwhile either committed before the lock
//! was granted (the check sees it) or waits until the delete has committed (it starts from what
//! is left), never in between.
use std::{collections::BTreeMap, fmt, time::Duration};

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, Row};

use crate::{Error, Position, Result, Xid8, shards::Status};

/// How long a batch waits for the lock (running cursor updates) before giving up.
const LOCK_TIMEOUT: &str = "30s";

#[derive(Debug, Clone)]
pub struct PruneOptions {
    pub older_than_days: u32,
    /// The stream types to prune; `None` for every stream type (`--all-stream-types`). An empty
    /// list is refused: widening to every stream type must be asked for.
    pub stream_types: Option<Vec<String>>,
    pub batch_size: i64,
    pub dry_run: bool,
}

/// The events a prune deletes.
#[derive(Debug, Clone)]
pub struct Criteria {
    /// Events created before this.
    pub cutoff: DateTime<Utc>,
    pub stream_types: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeCount {
    pub stream_type: String,
    pub count: i64,
    pub oldest_id: i64,
    pub newest_id: i64,
}

#[derive(Debug, Clone)]
pub struct PruneReport {
    pub cutoff: DateTime<Utc>,
    pub dry_run: bool,
    pub batches: u32,
    pub per_type: Vec<TypeCount>,
}

impl PruneReport {
    pub fn total(&self) -> i64 {
        self.per_type.iter().map(|t| t.count).sum()
    }

    fn add(&mut self, counts: Vec<TypeCount>) {
        let mut all: BTreeMap<String, TypeCount> =
            self.per_type.drain(..).map(|t| (t.stream_type.clone(), t)).collect();
        for c in counts {
            all.entry(c.stream_type.clone())
                .and_modify(|t| {
                    t.count += c.count;
                    t.oldest_id = t.oldest_id.min(c.oldest_id);
                    t.newest_id = t.newest_id.max(c.newest_id);
                })
                .or_insert(c);
        }
        self.per_type = all.into_values().collect();
    }
}

impl fmt::Display for PruneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cutoff = self.cutoff.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        if self.per_type.is_empty() {
            return write!(f, "nothing to prune: no event of these stream types was created before {cutoff}");
        }
        let verb = if self.dry_run { "would delete" } else { "deleted" };
        write!(f, "{verb} {} events created before {cutoff}", self.total())?;
        if !self.dry_run {
            write!(f, " in {} batches", self.batches)?;
        }
        for t in &self.per_type {
            write!(f, "\n  {}: {} events, ids {}..{}", t.stream_type, t.count, t.oldest_id, t.newest_id)?;
        }
        Ok(())
    }
}

/// A non-disabled shard that has not processed every event a prune would delete.
#[derive(Debug, Clone)]
pub struct Blocker {
    pub consumer: String,
    pub instance_id: String,
    pub cursor: Position,
    pub status: Status,
    pub heartbeat_age: Option<Duration>,
}

/// Deletes the events of `o` in batches, each in its own transaction under the SHARE lock, and
/// refuses (deleting nothing more) as soon as a non-disabled shard has not processed them all.
pub async fn prune(pool: &PgPool, o: &PruneOptions) -> Result<PruneReport> {
    if o.stream_types.as_ref().is_some_and(Vec::is_empty) {
        return Err(Error::refused(
            "name the stream types to prune: --stream-type TYPE (repeatable), or --all-stream-types for every \
             stream type; prune never deletes from every stream by default",
        ));
    }
    if o.batch_size < 1 {
        return Err(Error::config(format!("--batch-size {} must be at least 1", o.batch_size)));
    }
    let cutoff: DateTime<Utc> = sqlx::query_scalar("SELECT now() - make_interval(days => $1)")
        .bind(i32::try_from(o.older_than_days).unwrap_or(i32::MAX))
        .fetch_one(pool)
        .await?;
    let c = Criteria { cutoff, stream_types: o.stream_types.clone() };
    let mut report = PruneReport { cutoff, dry_run: o.dry_run, batches: 0, per_type: Vec::new() };
    if o.dry_run {
        return dry_run(pool, &c, report).await;
    }
    // The newest candidate when the prune starts: every batch checks the shards against it too,
    // so a shard that appears mid-way stops the prune before anything it needs is deleted.
    let mut bound: Option<Position> = None;
    loop {
        let mut tx = pool.begin().await?;
        match prune_batch(&mut tx, &c, o.batch_size, bound).await {
            Ok(b) => {
                tx.commit().await?;
                bound = bound.max(b.bound);
                let n: i64 = b.deleted.iter().map(|t| t.count).sum();
                if n > 0 {
                    report.batches += 1;
                    report.add(b.deleted);
                }
                if n < o.batch_size {
                    return Ok(report);
                }
            }
            Err(Error::Refused(mut r)) if report.batches > 0 => {
                r.problem.push_str(&format!("\n  (before stopping, {report})"));
                return Err(Error::Refused(r));
            }
            Err(e) => return Err(e),
        }
    }
}

/// What one batch did.
#[derive(Debug, Clone)]
pub struct Batch {
    pub deleted: Vec<TypeCount>,
    /// The newest candidate position this batch checked the shards against.
    pub bound: Option<Position>,
}

/// One batch in the caller's transaction: takes the SHARE lock on `consumer_shards`, checks the
/// shards against the batch (and `bound`, or every candidate when `bound` is `None`), deletes.
/// The caller commits; public so that tests can hold a prune's transaction open.
pub async fn prune_batch(conn: &mut PgConnection, c: &Criteria, limit: i64, bound: Option<Position>) -> Result<Batch> {
    sqlx::query(sqlx::AssertSqlSafe(format!("SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))).execute(&mut *conn).await?;
    sqlx::query("LOCK TABLE highwater.consumer_shards IN SHARE MODE").execute(&mut *conn).await.map_err(|e| {
        if e.as_database_error().and_then(|d| d.code()).is_some_and(|code| code == "55P03") {
            Error::refused(format!(
                "could not lock highwater.consumer_shards within {LOCK_TIMEOUT}: a long transaction holds a write \
                 on it (a SQL sink's batch, or an open session)"
            ))
            .with_fix(
                "try again; `SELECT pid, state, xact_start, \
                 query FROM pg_stat_activity WHERE backend_xid IS NOT NULL` shows what is running",
            )
        } else {
            e.into()
        }
    })?;
    // Read after the lock is granted: under READ COMMITTED each statement sees what committed
    // before it, so every shard change that finished before the lock is visible from here on.
    let bound = match bound {
        Some(b) => Some(b),
        None => newest_candidate(conn, c).await?,
    };
    let ids: Vec<(Xid8, i64)> = sqlx::query_as(
        "SELECT tx_id, id FROM highwater.events
          WHERE created_at < $1 AND ($2::text[] IS NULL OR stream_type = ANY ($2))
          ORDER BY tx_id, id LIMIT $3",
    )
    .bind(c.cutoff)
    .bind(&c.stream_types)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    let Some(&last) = ids.last() else {
        return Ok(Batch { deleted: Vec::new(), bound });
    };
    let last = Position::from(last);
    let check = bound.map_or(last, |b| b.max(last));
    let blockers = blockers(conn, check).await?;
    if !blockers.is_empty() {
        return Err(refusal(&blockers, check));
    }
    let ids: Vec<i64> = ids.into_iter().map(|(_, id)| id).collect();
    let rows = sqlx::query(
        "WITH d AS (DELETE FROM highwater.events WHERE id = ANY ($1) RETURNING stream_type, id)
         SELECT stream_type, count(*) AS n, min(id) AS oldest, max(id) AS newest FROM d
          GROUP BY stream_type ORDER BY stream_type",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    Ok(Batch { deleted: type_counts(&rows)?, bound: Some(check) })
}

async fn newest_candidate(conn: &mut PgConnection, c: &Criteria) -> Result<Option<Position>> {
    let row: Option<(Xid8, i64)> = sqlx::query_as(
        "SELECT tx_id, id FROM highwater.events
          WHERE created_at < $1 AND ($2::text[] IS NULL OR stream_type = ANY ($2))
          ORDER BY tx_id DESC, id DESC LIMIT 1",
    )
    .bind(c.cutoff)
    .bind(&c.stream_types)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Position::from))
}

/// Non-disabled shards whose cursor is before `upto`: they have not processed every event up to
/// it. Disabled shards do not count: disabling is how an operator accepts the loss.
pub async fn blockers(conn: &mut PgConnection, upto: Position) -> Result<Vec<Blocker>> {
    let rows = sqlx::query(
        "SELECT consumer, instance_id, cursor_tx, cursor_id, status,
                extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age
           FROM highwater.consumer_shards
          WHERE status <> $3 AND (cursor_tx, cursor_id) < ($1, $2)
          ORDER BY consumer, instance_id",
    )
    .bind(upto.xid8())
    .bind(upto.id)
    .bind(Status::Disabled)
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Blocker {
                consumer: r.try_get("consumer")?,
                instance_id: r.try_get("instance_id")?,
                cursor: Position::from((r.try_get("cursor_tx")?, r.try_get("cursor_id")?)),
                status: r.try_get("status")?,
                heartbeat_age: r
                    .try_get::<Option<f64>, _>("heartbeat_age")?
                    .map(|s| Duration::from_secs(s.max(0.0) as u64)),
            })
        })
        .collect()
}

/// The refusal naming the shards that have not processed every event up to `upto`.
pub fn refusal(blockers: &[Blocker], upto: Position) -> Error {
    let mut msg = format!(
        "refusing to prune: {} shard(s) have not processed every event it would delete (up to position {upto}, \
         event {}):",
        blockers.len(),
        upto.id
    );
    for b in blockers {
        let age = b.heartbeat_age.map_or("never".into(), |a| format!("{} ago", humantime::format_duration(a)));
        msg.push_str(&format!(
            "\n  {}/{}: cursor {} (event {}), status {}, heartbeat {age}",
            b.consumer, b.instance_id, b.cursor, b.cursor.id, b.status
        ));
    }
    Error::refused(msg).with_fix(
        "let them catch up; or `highwater consumer skip NAME` (a shard stuck on a poison event), \
         `highwater consumer disable NAME [--instance ID]` (accept that it never gets these events), \
         `highwater consumer gc --stale-after DURATION` (shards of instances that are gone)",
    )
}

fn type_counts(rows: &[sqlx::postgres::PgRow]) -> Result<Vec<TypeCount>> {
    rows.iter()
        .map(|r| {
            Ok(TypeCount {
                stream_type: r.try_get("stream_type")?,
                count: r.try_get("n")?,
                oldest_id: r.try_get("oldest")?,
                newest_id: r.try_get("newest")?,
            })
        })
        .collect()
}

/// What a prune would delete, refused as the prune would be; takes no lock.
async fn dry_run(pool: &PgPool, c: &Criteria, mut report: PruneReport) -> Result<PruneReport> {
    let mut conn = pool.acquire().await?;
    if let Some(upto) = newest_candidate(&mut conn, c).await? {
        let blockers = blockers(&mut conn, upto).await?;
        if !blockers.is_empty() {
            return Err(refusal(&blockers, upto));
        }
    }
    let rows = sqlx::query(
        "SELECT stream_type, count(*) AS n, min(id) AS oldest, max(id) AS newest FROM highwater.events
          WHERE created_at < $1 AND ($2::text[] IS NULL OR stream_type = ANY ($2))
          GROUP BY stream_type ORDER BY stream_type",
    )
    .bind(c.cutoff)
    .bind(&c.stream_types)
    .fetch_all(&mut *conn)
    .await?;
    report.per_type = type_counts(&rows)?;
    Ok(report)
}
