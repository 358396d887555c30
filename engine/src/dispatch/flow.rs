//! Flow control of external sinks (docs/sinks.md, "Backpressure"; docs/consumers.md,
//! `rateLimit`): what the pass does when the receiver asks it to pause or to stop, and the
//! consumer's rate limit, a token bucket shared by all its dispatchers in the database.
use std::time::Duration;

use highwater_store::{
    Event, Result, flow,
    pg::PgConnection,
    shards::{self, Failure, FailureOutcome, Shard},
};

use super::pass::{Outcome, ShardCtx};
use crate::metrics::{ConsumerLabels, ThrottleLabels};

/// A pause the receiver asks for (`Retry-After`) up to this long costs no attempt: the event is
/// sent again when the pause is over, however often the receiver asks. A longer one counts as a
/// failed attempt (so that `maxAttempts` ends a receiver that never takes the event).
pub const FREE_PAUSE: Duration = Duration::from_secs(600);

/// Past [`FREE_PAUSE`], the next attempt waits as asked but at most this long.
pub const LONGEST_PAUSE: Duration = Duration::from_secs(3600);

/// How much of a batch the consumer's rate limit lets through now.
#[derive(Debug, PartialEq)]
pub enum Allowed {
    All,
    /// The first `n` events (at least one).
    First(usize),
    /// Nothing: the bucket holds its next token after this.
    None(Duration),
}

/// Takes tokens for a batch of `len` events from the consumer's bucket (`spec.rateLimit`), at
/// most `burst` at a time. Without a rate limit, everything, without a round trip.
pub async fn rate_limited(ctx: &ShardCtx, conn: &mut PgConnection, len: usize) -> Result<Allowed> {
    let Some(limit) = &ctx.spec.rate_limit else { return Ok(Allowed::All) };
    let burst = limit.burst();
    let want = (len as i64).min(i64::from(burst));
    let taken = flow::take(conn, &ctx.consumer, want, limit.per_second, f64::from(burst)).await?;
    if taken.granted == 0 {
        ctx.metrics
            .throttled_seconds
            .get_or_create(&ThrottleLabels { consumer: ctx.consumer.clone(), cause: "rateLimit" })
            .inc_by(taken.wait.as_secs_f64());
        return Ok(Allowed::None(taken.wait.max(Duration::from_millis(1))));
    }
    Ok(if taken.granted as usize >= len { Allowed::All } else { Allowed::First(taken.granted as usize) })
}

/// The receiver asked for a pause of `pause` (at most [`FREE_PAUSE`]) at `events[index]`: the
/// events before it are delivered, the shard waits for the pause with the event's attempt count
/// unchanged, and the consumer's other shards wait as well.
pub async fn paused(
    ctx: &ShardCtx,
    conn: &mut PgConnection,
    shard: &Shard,
    events: &[Event],
    index: usize,
    pause: Duration,
    message: &str,
) -> Result<Outcome> {
    let event = events[index].clone();
    // Not an attempt: the count of the event's real failures, if it is the one failing, stays.
    let attempts = if shard.failing_event_id == Some(event.id) { shard.attempts } else { 0 };
    let cursor = if index == 0 { shard.cursor } else { events[index - 1].position() };
    let f = Failure {
        event,
        error: message.to_owned(),
        cursor,
        delivered: index as i64,
        attempts,
        outcome: FailureOutcome::Retry(pause),
    };
    if !shards::record_failure(conn, shard, shard.cursor, &f).await? {
        ctx.acked.forget();
        return Ok(Outcome::Changed);
    }
    super::pass::remember_acked(ctx, &f, events, false);
    flow::pause(conn, &ctx.consumer, pause, message).await?;
    ctx.acknowledged(&events[..index]);
    count_pause(ctx, pause);
    tracing::info!(consumer = %ctx.consumer, instance = %ctx.instance_id, event_id = f.event.id, pause = ?pause, "the receiver asked to pause: no attempt counted");
    Ok(Outcome::Backoff { cursor, retry_in: pause })
}

/// A pause the receiver asked for, in the metrics.
pub fn count_pause(ctx: &ShardCtx, pause: Duration) {
    let consumer = ConsumerLabels { consumer: ctx.consumer.clone() };
    ctx.metrics.receiver_pauses.get_or_create(&consumer).inc();
    ctx.metrics
        .throttled_seconds
        .get_or_create(&ThrottleLabels { consumer: ctx.consumer.clone(), cause: "receiver" })
        .inc_by(pause.as_secs_f64());
}

/// The receiver answered `410 Gone` at `events[index]`: the events before it are delivered and
/// the consumer is disabled, with the answer as every shard's last error.
pub async fn gone(
    ctx: &ShardCtx,
    conn: &mut PgConnection,
    shard: &Shard,
    events: &[Event],
    index: usize,
    message: &str,
) -> Result<Outcome> {
    let to = if index == 0 { shard.cursor } else { events[index - 1].position() };
    if !flow::gone(conn, shard, shard.cursor, to, index as i64, message).await? {
        return Ok(Outcome::Changed);
    }
    ctx.acknowledged(&events[..index]);
    ctx.metrics.receiver_gone.get_or_create(&ConsumerLabels { consumer: ctx.consumer.clone() }).inc();
    tracing::error!(consumer = %ctx.consumer, instance = %ctx.instance_id, event_id = events[index].id, error = %message, "the receiver answered 410 Gone: consumer disabled");
    Ok(Outcome::Halted { cursor: to })
}
