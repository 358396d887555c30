//! Flow control of external sinks (issue 49), in `highwater.consumer_flow`: one row per consumer,
//! shared by every dispatcher that delivers for it. A receiver's backpressure pauses the consumer
//! (`429`/`503` with `Retry-After`) or disables it (`410 Gone`); `spec.rateLimit` is a token
//! bucket in the row, so the limit holds for the consumer as a whole, not per dispatcher.
use std::time::Duration;

use sqlx::{PgConnection, Row};

use crate::{
    Position, Result, notify,
    shards::{Shard, Status},
};

/// What [`take`] granted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Taken {
    /// Events that may be delivered now (0 when the bucket holds less than one token).
    pub granted: i64,
    /// With nothing granted: how long until the bucket holds one token again.
    pub wait: Duration,
}

/// Takes up to `want` tokens from the consumer's bucket, refilled first by the time since its
/// last refill at `per_second`, up to `burst` (a new bucket starts full). One statement under
/// the row's lock, so dispatchers taking at once share the bucket and never take a token twice.
pub async fn take(conn: &mut PgConnection, consumer: &str, want: i64, per_second: f64, burst: f64) -> Result<Taken> {
    // The time is clock_timestamp(), not now(): a statement that waited for the row's lock must
    // not refill from a time before the previous holder's refill (`greatest` keeps it monotonic).
    const TAKE: &str = "
        WITH f AS (
            SELECT consumer, greatest(refilled_at, clock_timestamp()) AS at,
                   least($4::float8, tokens + extract(epoch FROM greatest(refilled_at, clock_timestamp()) - refilled_at)::float8 * $3::float8) AS avail
              FROM highwater.consumer_flow WHERE consumer = $1 FOR UPDATE),
        g AS (
            SELECT consumer, at, avail,
                   CASE WHEN avail >= 1 THEN least($2::float8, floor(avail)) ELSE 0 END AS granted,
                   CASE WHEN avail >= 1 THEN 0 ELSE ceil((1 - avail) / $3::float8 * 1000) END AS wait_ms
              FROM f),
        u AS (
            UPDATE highwater.consumer_flow c
               SET tokens = g.avail - g.granted, refilled_at = g.at,
                   throttled_until = CASE WHEN g.granted = 0
                                          THEN g.at + make_interval(secs => g.wait_ms / 1000) ELSE c.throttled_until END,
                   throttled_ms = c.throttled_ms + g.wait_ms::bigint, updated_at = g.at
              FROM g WHERE c.consumer = g.consumer
            RETURNING g.granted, g.wait_ms)
        SELECT granted::bigint AS granted, wait_ms::bigint AS wait_ms FROM u";
    for _ in 0..2 {
        let row = sqlx::query(TAKE)
            .bind(consumer)
            .bind(want as f64)
            .bind(per_second)
            .bind(burst)
            .fetch_optional(&mut *conn)
            .await?;
        if let Some(r) = row {
            let wait_ms: i64 = r.try_get("wait_ms")?;
            return Ok(Taken { granted: r.try_get("granted")?, wait: Duration::from_millis(wait_ms.max(0) as u64) });
        }
        // The consumer's first take: its bucket starts full.
        sqlx::query(
            "INSERT INTO highwater.consumer_flow (consumer, tokens, refilled_at)
             VALUES ($1, $2, clock_timestamp()) ON CONFLICT (consumer) DO NOTHING",
        )
        .bind(consumer)
        .bind(burst)
        .execute(&mut *conn)
        .await?;
    }
    Err(crate::Error::Internal(format!("consumer {consumer}: its flow row vanished while taking tokens")))
}

/// The receiver asked the consumer to pause for `pause` (`Retry-After`): every other delivering
/// shard of the consumer waits too (its next attempt no earlier than the end of the pause), and
/// the row keeps why, for `consumer status`. The shard that was told records its own attempt.
pub async fn pause(conn: &mut PgConnection, consumer: &str, pause: Duration, reason: &str) -> Result<()> {
    let reason: String = reason.chars().take(2000).collect();
    sqlx::query(
        "WITH shards AS (
            UPDATE highwater.consumer_shards
               SET next_attempt_at = greatest(next_attempt_at, now() + make_interval(secs => $2::float8 / 1000))
             WHERE consumer = $1 AND status = ANY ($4)
            RETURNING 1)
         INSERT INTO highwater.consumer_flow AS c (consumer, paused_until, pause_reason, throttled_ms)
         VALUES ($1, now() + make_interval(secs => $2::float8 / 1000), $3, $2)
         ON CONFLICT (consumer) DO UPDATE
            SET paused_until = excluded.paused_until, pause_reason = excluded.pause_reason,
                throttled_ms = c.throttled_ms + excluded.throttled_ms, updated_at = now()",
    )
    .bind(consumer)
    .bind(pause.as_millis() as i64)
    .bind(&reason)
    .bind(&Status::DELIVERING[..])
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// How much is left of the pause the receiver asked of the consumer ([`pause`]); `None` when it
/// is not paused. Redrives and replays read it before delivering: the pause is the consumer's.
pub async fn paused_for(conn: &mut PgConnection, consumer: &str) -> Result<Option<Duration>> {
    let left: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM paused_until - now())::float8 FROM highwater.consumer_flow
          WHERE consumer = $1 AND paused_until > now()",
    )
    .bind(consumer)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(left.map(|s| Duration::from_secs_f64(s.max(0.001))))
}

/// The receiver answered `410 Gone`: the events before the failing one count as delivered (the
/// cursor of `shard` moves from `from` to `to`), and every shard of the consumer is disabled with
/// `reason` as its last error, until an operator enables it. `false` when the shard changed under
/// the pass (nothing was done). Wakes the dispatchers, so that they stop delivering at once.
pub async fn gone(
    conn: &mut PgConnection,
    shard: &Shard,
    from: Position,
    to: Position,
    delivered: i64,
    reason: &str,
) -> Result<bool> {
    let reason: String = reason.chars().take(2000).collect();
    let moved = sqlx::query(
        "UPDATE highwater.consumer_shards
            SET cursor_tx = $3, cursor_id = $4, delivered_count = delivered_count + $7, status = $8,
                last_error = $9, attempts = 0, failing_event_id = NULL, next_attempt_at = NULL,
                heartbeat_at = now(), updated_at = now()
          WHERE consumer = $1 AND instance_id = $2 AND cursor_tx = $5 AND cursor_id = $6 AND status = ANY ($10)",
    )
    .bind(&shard.consumer)
    .bind(&shard.instance_id)
    .bind(to.xid8())
    .bind(to.id)
    .bind(from.xid8())
    .bind(from.id)
    .bind(delivered)
    .bind(Status::Disabled)
    .bind(&reason)
    .bind(&Status::DELIVERING[..])
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if moved == 0 {
        return Ok(false);
    }
    sqlx::query(
        "UPDATE highwater.consumer_shards SET status = $2, last_error = $3, updated_at = now()
          WHERE consumer = $1 AND status = ANY ($4)",
    )
    .bind(&shard.consumer)
    .bind(Status::Disabled)
    .bind(&reason)
    .bind(&Status::DELIVERING[..])
    .execute(&mut *conn)
    .await?;
    notify::control(&mut *conn, &shard.consumer).await?;
    Ok(true)
}
