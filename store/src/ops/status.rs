//! What operators look at: consumers, shards, lag.
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use highwater_crds::Delivery;

use crate::{Result, Xid8, shards::Status};

/// One shard as `consumer status` shows it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ShardStatus {
    pub consumer: String,
    pub instance_id: String,
    pub delivery: Delivery,
    pub group: String,
    pub status: Status,
    /// Id of the last event the cursor has passed (0 before the first).
    pub cursor_event_id: i64,
    pub cursor_tx: Xid8,
    /// Committed events of the consumer's types after the cursor.
    pub lag_events: i64,
    /// Age of the oldest of them.
    pub lag_seconds: Option<f64>,
    /// Of those, the ones committed at or above the fence: they wait for `held_by_fence` to end.
    pub held_events: i64,
    /// The transaction holding the fence back while `held_events` > 0.
    #[sqlx(skip)]
    pub held_by_fence: Option<super::fence::FenceHolder>,
    /// The consumer's `spec.filter`: its lag counts what the filter selects ([`filtered_lag`]).
    #[serde(skip)]
    pub filter: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub failing_event_id: Option<i64>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub delivered_count: i64,
    /// The shard waits for its bootstrap (`spec.sink.sql.bootstrap`) and is disabled until then.
    pub bootstrap_pending: bool,
    /// The consumer's partition count as declared; during a change, the shards are still the old
    /// split's, each delivering up to `barrier_event_id`.
    pub partitions: i32,
    pub barrier_event_id: Option<i64>,
    /// A rebuild in progress or finished: events replayed of `rebuild_total`.
    #[serde(skip)]
    pub rebuild_done: Option<i64>,
    #[serde(skip)]
    pub rebuild_total: Option<i64>,
    /// Seconds since the rebuild started.
    #[serde(skip)]
    pub rebuild_seconds: Option<f64>,
    /// The cursor passed the head the rebuild started at.
    #[serde(skip)]
    pub rebuild_complete: Option<bool>,
    /// The same, as done / total, rate and ETA.
    #[sqlx(skip)]
    pub rebuild: Option<RebuildProgress>,
    /// The receiver asked the consumer to pause (`429`/`503` with `Retry-After`) until then; only
    /// while that is in the future.
    pub paused_until: Option<DateTime<Utc>>,
    /// The receiver's answer that paused it.
    pub pause_reason: Option<String>,
    /// `spec.rateLimit`: the bucket was empty; the next token comes then (only while in the future).
    pub rate_limited_until: Option<DateTime<Utc>>,
    /// Seconds the consumer's dispatchers waited for tokens or for the receiver, in total.
    pub throttled_seconds: f64,
}

/// How far a rebuild is: `consumer status`, the operator's status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RebuildProgress {
    pub done: i64,
    pub total: i64,
    /// Events per second since the rebuild started.
    pub rate: f64,
    /// Seconds left at that rate; `None` before the first event, 0 once complete.
    pub eta_seconds: Option<f64>,
    pub complete: bool,
}

impl RebuildProgress {
    pub fn new(done: i64, total: i64, seconds: f64, complete: bool) -> Self {
        let done = if complete { total } else { done.clamp(0, total) };
        let rate = if seconds > 0.0 { done as f64 / seconds } else { 0.0 };
        let eta_seconds = if complete {
            Some(0.0)
        } else if rate > 0.0 {
            Some((total - done) as f64 / rate)
        } else {
            None
        };
        RebuildProgress { done, total, rate, eta_seconds, complete }
    }
}

impl std::fmt::Display for RebuildProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.complete {
            return write!(f, "{}/{} events, complete", self.done, self.total);
        }
        let pct = if self.total > 0 { self.done as f64 * 100.0 / self.total as f64 } else { 100.0 };
        write!(f, "{}/{} events ({pct:.0}%), {:.0} events/s", self.done, self.total, self.rate)?;
        match self.eta_seconds {
            Some(eta) => write!(f, ", ETA {:.0}s", eta.ceil()),
            None => f.write_str(", ETA unknown"),
        }
    }
}

/// Which shards to report.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter<'a> {
    pub consumer: Option<&'a str>,
    /// The shards a dispatcher of this group and instance runs: the group's shared shards and
    /// its own per-instance ones.
    pub dispatcher: Option<(&'a str, &'a str)>,
}

pub async fn status(pool: &PgPool, consumer: Option<&str>) -> Result<Vec<ShardStatus>> {
    status_where(pool, Filter { consumer, dispatcher: None }).await
}

/// The lag of shard `s` of consumer `c`: the events after its cursor of its types, in its
/// partition, up to its barrier (`lag`, the oldest one's time, and `held`: those above the fence).
macro_rules! lag_lateral {
    () => {
        concat!(
            "SELECT count(*) AS lag, min(e.created_at) AS oldest,
                    count(*) FILTER (WHERE e.tx_id >= ",
            fence!(),
            ") AS held
               FROM highwater.events e
              WHERE e.tx_id >= s.cursor_tx AND (e.tx_id, e.id) > (s.cursor_tx, s.cursor_id)
                AND (cardinality(c.event_types) = 0 OR e.event_type = ANY (c.event_types))
                AND (s.partition_count IS NULL
                     OR highwater.stream_partition(e.stream_type, e.stream_id, s.partition_count) = s.partition_index)
                AND (s.barrier_tx IS NULL OR (e.tx_id, e.id) <= (s.barrier_tx, s.barrier_id))"
        )
    };
}

/// The lag of the rows whose consumer has a `spec.filter`, which the status query leaves at 0:
/// what those shards will deliver, so only the events the filter selects (issue 49), one query
/// per such consumer with its filter in the read, as a pass reads. No query without a filter.
async fn filtered_lag(conn: &mut PgConnection, rows: &mut [ShardStatus]) -> Result<()> {
    let mut filters: Vec<(String, String)> =
        rows.iter().filter_map(|r| Some((r.consumer.clone(), r.filter.clone()?))).collect();
    // The rows come ordered by consumer.
    filters.dedup();
    for (consumer, filter) in filters {
        // The filter was checked at apply (one expression, nothing volatile, the event only).
        let sql = format!(
            "SELECT s.instance_id, l.lag, l.held, extract(epoch FROM now() - l.oldest)::float8
               FROM highwater.consumer_shards s
               JOIN highwater.consumers c ON c.name = s.consumer
               CROSS JOIN LATERAL ({lag} AND (\n{filter}\n)) l
              WHERE s.consumer = $1",
            lag = lag_lateral!(),
        );
        let lags: Vec<(String, i64, i64, Option<f64>)> =
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(&consumer).fetch_all(&mut *conn).await?;
        for (instance, lag, held, seconds) in lags {
            if let Some(r) = rows.iter_mut().find(|r| r.consumer == consumer && r.instance_id == instance) {
                (r.lag_events, r.held_events, r.lag_seconds) = (lag, held, seconds);
            }
        }
    }
    Ok(())
}

pub async fn status_where(pool: &PgPool, f: Filter<'_>) -> Result<Vec<ShardStatus>> {
    let (group, instance) = f.dispatcher.unzip();
    // With many shards the plan's estimated cost (one lateral count per shard) passes
    // `jit_above_cost`, and compiling it takes PostgreSQL 15 about ten times longer than running
    // it (1,000 shards: 600 ms against 60 ms; docs/benchmarks.md, "The console at scale").
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL jit = off").execute(&mut *tx).await?;
    // `tx_id >= cursor_tx` is the index condition; the row comparison then refines it.
    let mut rows: Vec<ShardStatus> = sqlx::query_as(concat!(
        "SELECT s.consumer, s.instance_id, c.delivery, c.consumer_group AS \"group\", s.status,
                s.cursor_id AS cursor_event_id, s.cursor_tx,
                l.lag AS lag_events, l.held AS held_events,
                extract(epoch FROM now() - l.oldest)::float8 AS lag_seconds,
                c.spec->>'filter' AS filter, s.attempts, s.last_error, s.failing_event_id, s.next_attempt_at, s.heartbeat_at,
                s.delivered_count, s.bootstrap_pending, c.partitions, s.barrier_id AS barrier_event_id,
                s.delivered_count - s.rebuild_base AS rebuild_done, s.rebuild_total,
                extract(epoch FROM clock_timestamp() - s.rebuild_started_at)::float8 AS rebuild_seconds,
                CASE WHEN s.rebuild_started_at IS NOT NULL
                     THEN s.rebuild_target_tx IS NULL
                          OR (s.cursor_tx, s.cursor_id) >= (s.rebuild_target_tx, s.rebuild_target_id) END
                     AS rebuild_complete,
                CASE WHEN fl.paused_until > now() THEN fl.paused_until END AS paused_until,
                CASE WHEN fl.paused_until > now() THEN fl.pause_reason END AS pause_reason,
                CASE WHEN fl.throttled_until > now() THEN fl.throttled_until END AS rate_limited_until,
                coalesce(fl.throttled_ms, 0)::float8 / 1000 AS throttled_seconds
           FROM highwater.consumer_shards s
           JOIN highwater.consumers c ON c.name = s.consumer
           LEFT JOIN highwater.consumer_flow fl ON fl.consumer = s.consumer
           LEFT JOIN LATERAL (",
        lag_lateral!(),
        "
                   AND NOT c.spec ? 'filter') l ON true
          WHERE ($1::text IS NULL OR s.consumer = $1)
            AND ($2::text IS NULL OR (c.consumer_group = $2
                 AND (s.instance_id = $3 OR highwater.is_shared_shard(s.instance_id))))
          ORDER BY s.consumer, s.instance_id"
    ))
    .bind(f.consumer)
    .bind(group)
    .bind(instance)
    .fetch_all(&mut *tx)
    .await?;
    filtered_lag(&mut tx, &mut rows).await?;
    tx.commit().await?;
    // One look at pg_stat_activity, and only while events wait above the fence.
    if rows.iter().any(|r| r.held_events > 0) {
        let holder = super::fence::holder(pool).await?;
        for r in rows.iter_mut().filter(|r| r.held_events > 0) {
            r.held_by_fence.clone_from(&holder);
        }
    }
    for r in &mut rows {
        if let (Some(done), Some(total), Some(secs)) = (r.rebuild_done, r.rebuild_total, r.rebuild_seconds) {
            r.rebuild = Some(RebuildProgress::new(done, total, secs, r.rebuild_complete.unwrap_or(false)));
        }
    }
    Ok(rows)
}
