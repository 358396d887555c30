//! One pass over one shard: claim, read below the fence, deliver, move the cursor.
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use highwater_crds::{ConsumerSpec, ErrorMode};
use highwater_store::pg::{PgConnection, PgPool};

use crate::{
    metrics::{Metrics, ReadAheadLabels, ShardLabels, SinkLabels},
    sink::{Applied, Backpressure, DeliveryContext, ExternalSink, Sink, SinkError, TransactionalSink},
};
use highwater_store::{
    Position, Result,
    read_ahead::{self, Ahead},
    shards::{self, Advance, Batch, Failure, FailureOutcome, Repartition, Shard, ShardLock},
};

/// Everything a shard's passes need; rebuilt when the definition changes.
pub struct ShardCtx {
    pub pool: PgPool,
    pub consumer: String,
    pub instance_id: String,
    /// `(index, count)` when the shard is a partition of a Shared consumer.
    pub partition: Option<(u32, u32)>,
    pub spec: ConsumerSpec,
    pub sink: Sink,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub metrics: Arc<Metrics>,
    /// What the receiver acknowledged beyond the last failed event (`spec.concurrency`).
    pub(super) acked: super::acked::AckedAhead,
}

impl ShardCtx {
    /// What the batch reads return of each event: as the sink needs them, upcast when the
    /// consumer asks for versions (`spec.eventVersions`).
    fn bodies(&self) -> highwater_store::events::Bodies {
        highwater_store::events::Bodies::for_consumer(
            self.sink.needs_bodies(),
            self.spec.event_versions.as_ref().and_then(|v| v.want()),
        )
    }

    pub(super) fn labels(&self) -> ShardLabels {
        ShardLabels::new(&self.consumer, &self.instance_id)
    }

    /// Counts events whose delivery is committed (cursor moved) and observes their latency.
    pub(super) fn acknowledged(&self, events: &[highwater_store::Event]) {
        if events.is_empty() {
            return;
        }
        let l = self.labels();
        self.metrics.processed.get_or_create(&l).inc_by(events.len() as u64);
        let now = chrono::Utc::now();
        let h = self.metrics.delivery_latency.get_or_create(&l);
        // Exemplars (the event's sampled trace) only while tracing is on (issue 48).
        let traced = crate::trace::process::enabled();
        for e in events {
            let exemplar = if traced { crate::trace::exemplar::of(e) } else { None };
            h.observe((now - e.created_at).num_microseconds().unwrap_or(0).max(0) as f64 / 1e6, exemplar, None);
        }
    }

    fn handler_took(&self, started: Instant) {
        self.metrics.handler_duration.get_or_create(&self.labels()).observe(started.elapsed().as_secs_f64());
    }

    /// A batch the group pass applied failed in the sink: counted as the sink's own wrapper
    /// (`sink::measured`) counts a failure of the shard's own pass.
    fn sink_failed(&self) {
        let labels = SinkLabels { consumer: self.consumer.clone(), sink: self.sink.kind().to_owned() };
        self.metrics.sink_errors.get_or_create(&labels).inc();
    }

    fn failed(&self, f: &Failure, events: &[highwater_store::Event]) {
        self.metrics.failed.get_or_create(&self.labels()).inc();
        self.acknowledged(&events[..f.delivered as usize]);
    }

    fn read_ahead(&self, used: bool) {
        let outcome = if used { "used" } else { "discarded" };
        let l = ReadAheadLabels { consumer: self.consumer.clone(), instance_id: self.instance_id.clone(), outcome };
        self.metrics.read_ahead.get_or_create(&l).inc();
    }
}

/// A shard's claim, carried from one pass to the next while a backlog lasts, with the next
/// batch when it was read ahead ([`read_ahead`]).
pub struct Claim {
    pub(super) lock: ShardLock,
    pub(super) next: Option<(Shard, Batch)>,
    /// The sink's `prepare` succeeded on this claim's connection: what it creates lives as long
    /// as the session, so the passes after the first skip its round trip.
    pub(super) prepared: bool,
}

impl Claim {
    pub async fn release(self) -> Result<()> {
        self.lock.release().await
    }
}

#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Delivered a batch; `more` when it was full, so another may be waiting.
    Delivered { cursor: Position, more: bool },
    /// Nothing (left) to deliver.
    CaughtUp { cursor: Position },
    /// The last attempt failed; retry when the delay has passed.
    Backoff { cursor: Position, retry_in: Duration },
    /// Dead or disabled: nothing to do until an operator acts.
    Halted { cursor: Position },
    /// At the barrier of a change of the partition count, waiting for the other partitions: the
    /// last of them to arrive makes the switch and notifies every dispatcher.
    AtBarrier { cursor: Position },
    /// Another process holds the shard.
    Busy,
    /// The shard changed under the pass (an operator's change or a deletion); nothing was applied.
    Changed,
    /// The shard row is gone (consumer deleted, `consumer gc`); the next reload registers it
    /// again or stops this worker.
    Missing,
}

/// Delay after the `attempts`-th consecutive failure (before attempt `attempts + 1`), drawn at
/// random from [`retry_delay_bounds`]: never shorter than `initial`, never longer than `max`,
/// jitter included.
pub fn retry_delay(initial: Duration, max: Duration, attempts: i32) -> Duration {
    let (floor, ceiling) = retry_delay_bounds(initial, max, attempts);
    floor + (ceiling - floor).mul_f64(rand::random::<f64>())
}

/// The range `[floor, ceiling]` of the delay after the `attempts`-th consecutive failure:
/// `ceiling = min(initial · 2^(attempts-1), max)` and `floor = max(initial, ceiling / 2)`. Jitter
/// only lowers a delay, by at most half, and never below `initial`: the first retry waits exactly
/// `initial` and, once the doubling reaches `max`, delays are spread over
/// `[max(initial, max/2), max]`. An `initial` above `max` (refused by validation) counts as `max`.
///
/// Not backon's `ExponentialBuilder` (still used for connection retries in `db`): its jitter
/// adds up to 100 % *after* the cap, which is how `max: 2s` gave 3.5 s, and it doubles in `f32`
/// seconds (100 ms → 200.000003 ms), so a cap or a floor computed from it is not exact.
pub fn retry_delay_bounds(initial: Duration, max: Duration, attempts: i32) -> (Duration, Duration) {
    let initial = initial.min(max);
    let doublings = attempts.saturating_sub(1).clamp(0, 31) as u32;
    let ceiling = initial.saturating_mul(1 << doublings).min(max);
    (initial.max(ceiling / 2), ceiling)
}

/// One pass. `claim` carries the shard's claim from one pass to the next while a backlog lasts
/// (a full batch was delivered), so a drain claims once, not once per batch; it is released as
/// soon as the shard is caught up, fails, or halts, so that another dispatcher can take over.
pub async fn run(ctx: &ShardCtx, claim: &mut Option<Claim>) -> Result<Outcome> {
    let Claim { mut lock, mut next, mut prepared } = match claim.take() {
        Some(claim) => claim,
        None => match shards::try_lock(&ctx.pool, &ctx.consumer, &ctx.instance_id).await? {
            Some(lock) => Claim { lock, next: None, prepared: false },
            None => return Ok(Outcome::Busy),
        },
    };
    let outcome = locked(ctx, lock.conn(), &mut next, &mut prepared).await?;
    if matches!(outcome, Outcome::Delivered { more: true, .. }) {
        *claim = Some(Claim { lock, next, prepared });
    } else {
        lock.release().await?;
    }
    Ok(outcome)
}

/// A pass under the claim. `next` holds the batch read ahead by the previous pass, if any (taken
/// instead of reading), and receives the one this pass reads ahead.
async fn locked(
    ctx: &ShardCtx,
    conn: &mut PgConnection,
    next: &mut Option<(Shard, Batch)>,
    prepared: &mut bool,
) -> Result<Outcome> {
    let limit = i64::from(ctx.spec.batch_size);
    let read = match next.take() {
        Some(ready) => Some(ready),
        None => read(ctx, conn, false).await?,
    };
    let Some((shard, batch)) = read else {
        return Ok(Outcome::Missing);
    };
    if !shard.status.delivers() {
        return Ok(Outcome::Halted { cursor: shard.cursor });
    }
    if shard.barrier == Some(shard.cursor) {
        return at_barrier(ctx, conn, shard.cursor).await;
    }
    if let Some(ms) = shard.retry_in_ms.filter(|ms| *ms > 0) {
        return Ok(Outcome::Backoff { cursor: shard.cursor, retry_in: Duration::from_millis(ms as u64) });
    }
    if shard.cursor.tx >= batch.next_xid {
        return Err(shards::cursors_ahead([(&*shard.consumer, &*shard.instance_id, shard.cursor.tx)], batch.next_xid));
    }
    let Some(last) = batch.events.last().map(|e| e.position()) else {
        // Nothing for this consumer below the fence: skip past events of other types.
        return match batch.head {
            Some(h) if h > shard.cursor => {
                if shards::advance(conn, &shard, shard.cursor, h, 0).await?.is_none() {
                    Ok(Outcome::Changed)
                } else if shard.barrier == Some(h) {
                    at_barrier(ctx, conn, h).await
                } else {
                    Ok(Outcome::CaughtUp { cursor: h })
                }
            }
            _ => Ok(Outcome::CaughtUp { cursor: shard.cursor }),
        };
    };
    let full = batch.events.len() as i64 == limit;
    // A short batch holds every matching event below the fence, so the cursor may move to the
    // head even if the newest events there are of other types.
    let end = if full { last } else { batch.head.map_or(last, |h| h.max(last)) };
    let mut b = Pass { shard: &shard, events: &batch.events, end, full };
    if ctx.spec.error_mode == ErrorMode::SkipStream {
        let blocked = shards::blocked_streams(conn, &shard).await?;
        let first = (!blocked.is_empty())
            .then(|| {
                b.events
                    .iter()
                    .enumerate()
                    .find_map(|(i, e)| blocked.get(&(e.stream_type.clone(), e.stream_id.clone())).map(|by| (i, *by)))
            })
            .flatten();
        match first {
            None => {}
            // The first event's stream is blocked: parked behind its dead letter, undelivered.
            Some((0, by)) => {
                let event = &b.events[0];
                if !shards::park_blocked(conn, &shard, event, by).await? {
                    return Ok(Outcome::Changed);
                }
                tracing::info!(consumer = %ctx.consumer, instance = %ctx.instance_id, event_id = event.id, blocked_by = by, "event parked: its stream is blocked by a dead letter");
                return Ok(Outcome::Delivered { cursor: event.position(), more: true });
            }
            // The events before it are delivered as a batch; the next pass parks it.
            Some((i, _)) => {
                b = Pass { shard: &shard, events: &batch.events[..i], end: batch.events[i - 1].position(), full: true };
            }
        }
    }
    match &ctx.sink {
        Sink::Transactional(sink) => transactional(ctx, &**sink, conn, b, prepared, next).await,
        Sink::External(sink) => match super::flow::rate_limited(ctx, conn, b.events.len()).await? {
            super::flow::Allowed::All => external(ctx, &**sink, conn, b, next).await,
            super::flow::Allowed::First(n) => {
                // The first `n` events only: the rest waits for the bucket's next tokens.
                let b = Pass { shard: b.shard, events: &b.events[..n], end: b.events[n - 1].position(), full: true };
                external(ctx, &**sink, conn, b, next).await
            }
            super::flow::Allowed::None(wait) => Ok(Outcome::Backoff { cursor: shard.cursor, retry_in: wait }),
        },
    }
}

/// The shard as it is and its next batch after the cursor (`None`: the shard row is gone);
/// nothing is read unless the shard is due, or `waiting` (the side pass: also while it waits for
/// a retry).
pub(super) async fn read(ctx: &ShardCtx, conn: &mut PgConnection, waiting: bool) -> Result<Option<(Shard, Batch)>> {
    let r = shards::ShardRead {
        consumer: &ctx.consumer,
        instance: &ctx.instance_id,
        types: &ctx.spec.event_types,
        limit: i64::from(ctx.spec.batch_size),
        bodies: ctx.bodies(),
        waiting,
    };
    match &ctx.spec.filter {
        // The filter runs in the read: the events it rejects never leave the database.
        Some(filter) => highwater_store::event_filter::load_and_read(conn, &r, filter).await,
        None => shards::load_and_read(conn, &r).await,
    }
}

/// A batch the group pass applied for this shard and saw fail (dispatch/group.rs): its failure
/// is handled here, under the shard's own claim, as [`transactional`] handles a failure of its
/// own batch, without applying the whole batch once more. When the shard is no longer as the
/// group saw it (another process passed meanwhile), this is an ordinary pass.
pub async fn group_failed(ctx: &ShardCtx, seen: &GroupFailure) -> Result<Outcome> {
    let Sink::Transactional(sink) = &ctx.sink else {
        return run(ctx, &mut None).await;
    };
    let Some(mut lock) = shards::try_lock(&ctx.pool, &ctx.consumer, &ctx.instance_id).await? else {
        return Ok(Outcome::Busy);
    };
    let conn = lock.conn();
    let outcome = match shards::load(conn, &ctx.consumer, &ctx.instance_id).await? {
        Some(now)
            if now.cursor == seen.shard.cursor
                && now.status == seen.shard.status
                && now.attempts == seen.shard.attempts
                && now.failing_event_id == seen.shard.failing_event_id =>
        {
            let started = Instant::now();
            let b = Pass { shard: &now, events: &seen.events, end: seen.end, full: seen.full };
            let err = match (sink.prepare(conn).await, sink.statement()) {
                (Err(e), _) => e,
                // A set statement failed as a whole: find the event, or apply the batch if the
                // failure does not recur, as the shard's own pass does.
                (Ok(()), Some(statement)) if seen.whole => {
                    let advance =
                        Advance { shard: &now, from: now.cursor, to: b.end, delivered: b.events.len() as i64 };
                    let who = (&*ctx.consumer, &*ctx.instance_id);
                    match highwater_store::sql_sink::attribute_and_advance(conn, statement, who, b.events, &advance)
                        .await?
                    {
                        highwater_store::sql_sink::Applied::Moved(_) => {
                            ctx.handler_took(started);
                            ctx.acknowledged(b.events);
                            return finish(lock, Ok(b.delivered())).await;
                        }
                        highwater_store::sql_sink::Applied::Refused => return finish(lock, Ok(Outcome::Changed)).await,
                        highwater_store::sql_sink::Applied::Failed(f) => {
                            ctx.sink_failed();
                            SinkError { index: f.index, message: f.message, deferred: f.deferred, backpressure: None }
                        }
                    }
                }
                (Ok(()), _) => {
                    ctx.sink_failed();
                    seen.error.clone()
                }
            };
            ctx.handler_took(started);
            failed_batch(ctx, &**sink, conn, b, err).await
        }
        _ => locked(ctx, conn, &mut None, &mut false).await,
    };
    finish(lock, outcome).await
}

/// Releases the claim, then answers `outcome`.
async fn finish(lock: ShardLock, outcome: Result<Outcome>) -> Result<Outcome> {
    lock.release().await?;
    outcome
}

/// What [`group_failed`] takes over from the group pass.
#[derive(Debug)]
pub struct GroupFailure {
    /// The shard as the group loaded it.
    pub shard: Shard,
    pub events: Vec<highwater_store::Event>,
    pub end: Position,
    pub full: bool,
    pub error: SinkError,
    /// A set statement failed for the batch as a whole: the failing event is still to be found.
    pub whole: bool,
}

/// Tries the switch to the new split; the shard row is gone when it happened.
async fn at_barrier(ctx: &ShardCtx, conn: &mut PgConnection, cursor: Position) -> Result<Outcome> {
    match shards::repartition(conn, &ctx.consumer, false).await? {
        Repartition::Switched => {
            tracing::info!(consumer = %ctx.consumer, barrier = %cursor, partitions = ctx.spec.partitions, "partitions switched at the barrier");
            Ok(Outcome::Changed)
        }
        Repartition::Pending => Ok(Outcome::AtBarrier { cursor }),
        // The change was undone (partitions set back) or made by another dispatcher meanwhile.
        Repartition::None => Ok(Outcome::Changed),
    }
}

/// A batch read under the shard's claim, ready to deliver.
#[derive(Clone, Copy)]
struct Pass<'a> {
    shard: &'a Shard,
    events: &'a [highwater_store::Event],
    /// Where the cursor goes when every event is delivered.
    end: Position,
    full: bool,
}

impl Pass<'_> {
    fn delivered(&self) -> Outcome {
        Outcome::Delivered { cursor: self.end, more: self.full }
    }
}

/// A SQL sink: the batch and the cursor update commit together, so each event applies once.
/// After a full batch the next one is read meanwhile on another connection of the pool (the
/// claim's runs the batch), and `next` receives it if the cursor update leaves it standing.
async fn transactional(
    ctx: &ShardCtx,
    sink: &dyn TransactionalSink,
    conn: &mut PgConnection,
    b: Pass<'_>,
    prepared: &mut bool,
    next: &mut Option<(Shard, Batch)>,
) -> Result<Outcome> {
    let started = Instant::now();
    let ready = if *prepared { Ok(()) } else { sink.prepare(conn).await };
    *prepared = ready.is_ok();
    let err = match ready {
        Err(err) => err,
        Ok(()) => {
            let advance = Advance { shard: b.shard, from: b.shard.cursor, to: b.end, delivered: b.events.len() as i64 };
            let who = (&*ctx.consumer, &*ctx.instance_id);
            let apply = sink.deliver_and_advance(conn, who, b.events, &advance);
            let (applied, ahead) = match b.full.then(|| read_beside(ctx, b)).flatten() {
                // The read first, so that its statement is on the wire before the batch's.
                Some(read) => {
                    let (ahead, applied) = tokio::join!(biased; read, apply);
                    (applied, Some(ahead))
                }
                None => (apply.await, None),
            };
            let applied = applied?;
            if let Some(ahead) = ahead {
                *next = match &applied {
                    Applied::Moved(advanced) => ahead.and_then(|a| a.after(b.shard.cursor, advanced.clone())),
                    _ => None,
                };
                ctx.read_ahead(next.is_some());
            }
            match applied {
                Applied::Moved(_) => {
                    ctx.handler_took(started);
                    ctx.acknowledged(b.events);
                    return Ok(b.delivered());
                }
                Applied::Refused => return Ok(Outcome::Changed),
                Applied::Failed(err) => err,
            }
        }
    };
    ctx.handler_took(started);
    failed_batch(ctx, sink, conn, b, err).await
}

/// A batch that failed (`err`): the events before the failing one applied again, then the
/// failure recorded in the same transaction.
async fn failed_batch(
    ctx: &ShardCtx,
    sink: &dyn TransactionalSink,
    conn: &mut PgConnection,
    b: Pass<'_>,
    err: SinkError,
) -> Result<Outcome> {
    // Re-apply the events before the failing one, then record the failure in the same
    // transaction, so the progress and the failure land together. A sink that is not
    // deterministic may fail elsewhere the second time: the failure is then recorded where it
    // happened this time, or on the first event with nothing applied if that prefix fails too.
    let who = (&*ctx.consumer, &*ctx.instance_id);
    let mut tx = sink.begin(conn, who).await?;
    let (index, message) = match prefix(sink, &mut tx, b.events, err.index).await {
        // The batch ran into its time limit after `index` events: not that event's fault.
        // Commit what was applied; the next pass starts at it with the full limit again.
        Ok(()) if err.deferred => {
            let to = b.events[err.index - 1].position();
            if shards::advance(&mut tx, b.shard, b.shard.cursor, to, err.index as i64).await?.is_some() {
                tx.commit().await?;
                ctx.acknowledged(&b.events[..err.index]);
                return Ok(Outcome::Delivered { cursor: to, more: true });
            }
            tx.rollback().await?;
            return Ok(Outcome::Changed);
        }
        Ok(()) => (err.index, err.message),
        Err(again) => {
            tx.rollback().await?;
            tx = sink.begin(conn, who).await?;
            if prefix(sink, &mut tx, b.events, again.index).await.is_ok() {
                (again.index, again.message)
            } else {
                tx.rollback().await?;
                tx = sink.begin(conn, who).await?;
                (0, again.message)
            }
        }
    };
    let failure = failure(ctx, b.shard, b.events, index, message);
    if !shards::record_failure(&mut tx, b.shard, b.shard.cursor, &failure).await? {
        tx.rollback().await?;
        return Ok(Outcome::Changed);
    }
    tx.commit().await?;
    ctx.failed(&failure, b.events);
    Ok(after_failure(&failure))
}

/// The read of the batch after `b` on another connection of the pool, to run beside the batch's
/// own query: an idle one, or a new one while the pool has room (connecting overlaps the batch
/// too); `None` when the pool is full, so that a pass never waits for another shard's
/// connection, or when the shard waits at a barrier. A failed read costs only the overlap.
fn read_beside<'a>(ctx: &'a ShardCtx, b: Pass<'a>) -> Option<impl Future<Output = Option<Ahead>> + 'a> {
    // A shard at a barrier cannot use a read beside it; it must not hold a connection for one.
    if b.shard.barrier.is_some() {
        return None;
    }
    let pool = &ctx.pool;
    let idle = pool.try_acquire();
    if idle.is_none() && pool.size() >= pool.options().get_max_connections() {
        return None;
    }
    Some(async move {
        let mut conn = match idle {
            Some(conn) => conn,
            None => tokio::time::timeout(CONNECT_BESIDE, pool.acquire()).await.ok()?.ok()?,
        };
        let (types, limit) = (&ctx.spec.event_types, i64::from(ctx.spec.batch_size));
        read_ahead::read(&mut conn, b.shard, b.end, types, limit, ctx.bodies()).await.unwrap_or_else(|e| {
            tracing::debug!(consumer = %ctx.consumer, instance = %ctx.instance_id, error = %e, "read ahead failed");
            None
        })
    })
}

/// The longest a pass waits for a new connection to read beside its batch (when another task took
/// the pool's room first, `acquire` would wait for a connection to come back).
const CONNECT_BESIDE: Duration = Duration::from_millis(250);

/// Applies the events before `index` in `tx`.
async fn prefix(
    sink: &dyn TransactionalSink,
    tx: &mut PgConnection,
    events: &[highwater_store::Event],
    index: usize,
) -> Result<(), SinkError> {
    if index == 0 {
        return Ok(());
    }
    sink.deliver(tx, &events[..index]).await
}

/// A webhook, log or SSE sink: no transaction is open while it works (at least once). After a
/// full batch more may wait: the next one is read meanwhile on the claim's connection, which the
/// sink does not use, and `next` receives it if the cursor update leaves it standing.
async fn external(
    ctx: &ShardCtx,
    sink: &dyn ExternalSink,
    conn: &mut PgConnection,
    b: Pass<'_>,
    next: &mut Option<(Shard, Batch)>,
) -> Result<Outcome> {
    let delivery = deliver_external(ctx, sink, b.shard, b.events);
    // The read ahead knows no filter: a filtered consumer reads each batch at its pass.
    let (res, ahead) = if b.full && b.shard.barrier.is_none() && ctx.spec.filter.is_none() {
        let types = &ctx.spec.event_types;
        let limit = i64::from(ctx.spec.batch_size);
        let read = read_ahead::read(conn, b.shard, b.end, types, limit, ctx.bodies());
        // The read first: its first poll puts the statement on the wire, so PostgreSQL works
        // while the sink does (a log or no-op sink may finish without ever yielding).
        let (ahead, res) = tokio::join!(biased; read, delivery);
        // A failed read costs only the overlap: the next pass reads again (and meets the same
        // error, if it lasts, under the usual handling).
        let ahead = ahead.unwrap_or_else(|e| {
            tracing::debug!(consumer = %ctx.consumer, instance = %ctx.instance_id, error = %e, "read ahead failed");
            None
        });
        (res, Some(ahead))
    } else {
        (delivery.await, None)
    };
    match res {
        Ok(()) => match shards::advance(conn, b.shard, b.shard.cursor, b.end, b.events.len() as i64).await? {
            Some(advanced) => {
                ctx.acknowledged(b.events);
                if let Some(ahead) = ahead {
                    *next = ahead.and_then(|a: Ahead| a.after(b.shard.cursor, advanced));
                    ctx.read_ahead(next.is_some());
                }
                Ok(b.delivered())
            }
            None => {
                if ahead.is_some() {
                    ctx.read_ahead(false);
                }
                Ok(Outcome::Changed)
            }
        },
        Err(err) => {
            if ahead.is_some() {
                ctx.read_ahead(false);
            }
            external_failed(ctx, conn, b.shard, b.events, err).await
        }
    }
}

/// `events` through an external sink, `spec.concurrency` at a time (ordered by key), timed.
pub(super) async fn deliver_external(
    ctx: &ShardCtx,
    sink: &dyn ExternalSink,
    shard: &Shard,
    events: &[highwater_store::Event],
) -> Result<(), SinkError> {
    let started = Instant::now();
    let attempt = crate::trace::process::attempt(shard, events);
    let res = if ctx.spec.concurrency > 1 {
        let (key, n) = (&ctx.spec.ordering_key, ctx.spec.concurrency as usize);
        let known = ctx.acked.for_attempt(shard);
        let on = super::concurrent::On { consumer: &ctx.consumer, instance_id: &ctx.instance_id, attempt };
        super::concurrent::deliver(sink, on, events, key, n, &known, &ctx.acked).await
    } else {
        let mut d = DeliveryContext::new(&ctx.consumer, &ctx.instance_id, attempt);
        sink.deliver(&mut d, events).await
    };
    ctx.handler_took(started);
    res
}

/// An external delivery of `events` (the shard as loaded) failed with `err`: the events before it
/// are delivered; the receiver's `410`/pause, or a failed attempt with its backoff, dead shard or
/// dead letter, as `spec` says. Its own pass and the group pass (dispatch/group.rs) both end here.
pub(super) async fn external_failed(
    ctx: &ShardCtx,
    conn: &mut PgConnection,
    shard: &Shard,
    events: &[highwater_store::Event],
    err: SinkError,
) -> Result<Outcome> {
    let index = err.index.min(events.len() - 1);
    match err.backpressure {
        Some(Backpressure::Gone) => {
            ctx.acked.forget();
            return super::flow::gone(ctx, conn, shard, events, index, &err.message).await;
        }
        Some(Backpressure::Pause(pause)) if pause <= super::flow::FREE_PAUSE => {
            return super::flow::paused(ctx, conn, shard, events, index, pause, &err.message).await;
        }
        _ => {}
    }
    let mut failure = failure(ctx, shard, events, index, err.message);
    // Past the bound the attempt counts; the next one still waits as long as asked (up to a
    // cap), so that a long pause is not hammered by a short backoff.
    if let (Some(Backpressure::Pause(pause)), FailureOutcome::Retry(delay)) = (err.backpressure, failure.outcome) {
        failure.outcome = FailureOutcome::Retry(delay.max(pause.min(super::flow::LONGEST_PAUSE)));
    }
    if shards::record_failure(conn, shard, shard.cursor, &failure).await? {
        // After a pause asked for, nothing goes before its end: no side pass.
        remember_acked(ctx, &failure, events, err.backpressure.is_none());
        ctx.failed(&failure, events);
        Ok(after_failure(&failure))
    } else {
        ctx.acked.forget();
        Ok(Outcome::Changed)
    }
}

/// A recorded failure that will be retried keeps what the receiver acknowledged after it;
/// `side`: the other keys may go on until the retry (dispatch/side.rs).
pub(super) fn remember_acked(ctx: &ShardCtx, f: &Failure, events: &[highwater_store::Event], side: bool) {
    // One request at a time: nothing is acknowledged beyond a failure.
    if ctx.spec.concurrency <= 1 {
        return;
    }
    match f.outcome {
        FailureOutcome::Retry(_) => ctx.acked.retry((f.cursor, f.event.id, f.attempts), events, side),
        FailureOutcome::Dead | FailureOutcome::Park => ctx.acked.forget(),
    }
}

pub(super) fn failure(
    ctx: &ShardCtx,
    shard: &Shard,
    events: &[highwater_store::Event],
    index: usize,
    error: String,
) -> Failure {
    let event = events[index].clone();
    let attempts = if shard.failing_event_id == Some(event.id) { shard.attempts + 1 } else { 1 };
    let outcome = if attempts >= ctx.spec.max_attempts as i32 {
        match ctx.spec.error_mode {
            ErrorMode::Halt => FailureOutcome::Dead,
            ErrorMode::Skip | ErrorMode::SkipStream => FailureOutcome::Park,
        }
    } else {
        FailureOutcome::Retry(retry_delay(ctx.backoff_initial, ctx.backoff_max, attempts))
    };
    let cursor = if index == 0 { shard.cursor } else { events[index - 1].position() };
    tracing::warn!(
        consumer = %ctx.consumer, instance = %ctx.instance_id, event_id = event.id, attempts,
        outcome = ?outcome, error = %error, "delivery failed"
    );
    Failure { event, error, cursor, delivered: index as i64, attempts, outcome }
}

pub(super) fn after_failure(f: &Failure) -> Outcome {
    match f.outcome {
        FailureOutcome::Retry(d) => Outcome::Backoff { cursor: f.cursor, retry_in: d },
        FailureOutcome::Dead => Outcome::Halted { cursor: f.cursor },
        FailureOutcome::Park => Outcome::Delivered { cursor: f.event.position(), more: true },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_grows_and_is_capped() {
        let i = Duration::from_millis(100);
        let m = Duration::from_secs(1);
        assert_eq!(retry_delay(i, m, 1), i, "the first retry waits exactly initial");
        assert_eq!(retry_delay_bounds(i, m, 2), (i, 2 * i));
        assert_eq!(retry_delay_bounds(i, m, 4), (4 * i, 8 * i));
        assert_eq!(retry_delay_bounds(i, m, 5), (m / 2, m), "capped at max, jitter below it");
        assert_eq!(retry_delay_bounds(i, m, 50), (m / 2, m));
        assert_eq!(retry_delay_bounds(i, m, 0), (i, i));
        // initial close to max: the floor stays at initial.
        assert_eq!(retry_delay_bounds(Duration::from_millis(1500), 2 * m, 9), (Duration::from_millis(1500), 2 * m));
    }

    /// Issue 12: `backoff.max: 2s` gave a 3.5 s delay (backon's jitter added up to 100 % after the
    /// cap). Over many draws no delay exceeds `max` or falls below its documented floor
    /// `max(initial, min(initial · 2^(n-1), max) / 2)`, and the jitter really spreads them.
    #[test]
    fn retry_delays_never_exceed_max_nor_fall_below_the_floor() {
        let ms = Duration::from_millis;
        for (initial, max) in [
            (ms(500), ms(2000)),
            (ms(500), ms(300_000)),
            (ms(300), ms(10_000)),
            (ms(1), ms(3)),
            (ms(2000), ms(2000)),
            (ms(1500), ms(2000)),
            (ms(100), ms(1000)),
        ] {
            for attempts in 0..=40 {
                let n = attempts.max(1) as u32;
                let doubled = initial.saturating_mul(2u32.saturating_pow(n - 1).min(1 << 30));
                let ceiling = doubled.min(max);
                let floor = initial.max(ceiling / 2);
                let (mut lo, mut hi) = (Duration::MAX, Duration::ZERO);
                for _ in 0..2000 {
                    let d = retry_delay(initial, max, attempts);
                    assert!(d <= max, "{d:?} > max {max:?} (initial {initial:?}, attempt {attempts})");
                    assert!(d >= initial, "{d:?} < initial {initial:?} (attempt {attempts})");
                    assert!(
                        d >= floor && d <= ceiling,
                        "{d:?} outside [{floor:?}, {ceiling:?}] (initial {initial:?}, max {max:?}, attempt {attempts})"
                    );
                    lo = lo.min(d);
                    hi = hi.max(d);
                }
                if ceiling - floor >= ms(2) {
                    assert!(hi - lo >= (ceiling - floor) / 2, "jitter spreads the delays: [{lo:?}, {hi:?}]");
                }
            }
        }
    }
}
