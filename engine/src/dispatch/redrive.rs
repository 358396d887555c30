//! Redrive requests (`consumer redrive`, `highwater_store::ops::redrive`) and stream replays (`consumer
//! replay`, `highwater_store::ops::replay`: the same path for a stream's events at or below the cursor)
//! delivered by the dispatcher that runs the shard they name, through the very sink of the
//! shard's live delivery, under the shard's claim. The cursor is neither read nor moved: a
//! redrive or a replay is a delivery beside the stream, not a position in it.
//!
//! - A SQL sink: the request is marked redriven and the event applied in one transaction opened
//!   like the live one (`TransactionalSink::begin`: the same settings; the apply sets the same
//!   tenant, role, correlation and causation), so a kill before the commit leaves the request
//!   pending and nothing applied: exactly once more.
//! - An external sink: no transaction is open while it works; the mark follows the
//!   acknowledgement, so a kill in between delivers it again with the same idempotency key
//!   (consumer and event id), as live delivery does.
//! - A failure (the sink's error, or an event pruned since the request) makes a redriven dead
//!   letter a dead letter again with the new error and one more attempt; a replay row records
//!   the error, and the request's later rows of the shard are not delivered (stream order).
//! - An external sink's deliveries take tokens from the consumer's `rateLimit` as live ones do,
//!   and wait out a pause the receiver asked for (`429`/`503` with `Retry-After`, up to
//!   `flow::FREE_PAUSE`), whichever delivery was told: a receiver's pause of the redrive pauses
//!   the consumer, costs no attempt and leaves the request pending.
use std::time::Duration;

use highwater_store::pg::PgConnection;

use super::{
    flow::{Allowed, FREE_PAUSE, rate_limited},
    pass::{Claim, ShardCtx},
};
use crate::sink::{Backpressure, DeliveryContext, ExternalSink, Sink, TransactionalSink};
use highwater_store::{
    Result,
    ops::{
        redrive::{self, Due},
        replay,
    },
    shards,
};

/// At most this many requests per run; the rest wait for the next run, right after the pass
/// between them, so that a large redrive never holds live delivery back for long.
const PER_RUN: i64 = 100;

#[derive(Debug, PartialEq, Eq)]
pub enum Redriven {
    /// Another process holds the shard.
    Busy,
    /// `next`: in how long the next pending request is due, if there is one.
    Done { delivered: u32, failed: u32, next: Option<Duration> },
}

/// Delivers the requests due for the shard of `ctx`, with the claim the worker carries or one
/// taken for the run (released at its end).
pub async fn run(ctx: &ShardCtx, claim: &mut Option<Claim>) -> Result<Redriven> {
    let (mut held, carried) = match claim.take() {
        Some(c) => (c, true),
        None => match shards::try_lock(&ctx.pool, &ctx.consumer, &ctx.instance_id).await? {
            Some(lock) => (Claim { lock, next: None, prepared: false }, false),
            None => return Ok(Redriven::Busy),
        },
    };
    // On an error the claim is dropped: its connection closes, which releases the lock.
    let r = locked(ctx, &mut held).await?;
    if carried {
        *claim = Some(held);
    } else {
        held.release().await?;
    }
    Ok(r)
}

async fn locked(ctx: &ShardCtx, claim: &mut Claim) -> Result<Redriven> {
    let conn = claim.lock.conn();
    // Dead letters parked behind one redriven since (errorMode skipStream) follow it.
    redrive::release_blocked(conn, &ctx.consumer, &ctx.instance_id).await?;
    let (due, next) = redrive::due(conn, &ctx.consumer, &ctx.instance_id, PER_RUN).await?;
    let (mut delivered, mut failed) = (0, 0);
    let mut jobs: Vec<Job> = due.into_iter().map(Job::DeadLetter).collect();
    // Stream replays (`consumer replay`) after the dead letters, in the room left in this run.
    let room = PER_RUN - jobs.len() as i64;
    let more = if room > 0 {
        let replays = replay::due(claim.lock.conn(), &ctx.consumer, &ctx.instance_id, room).await?;
        let full = replays.len() as i64 == room;
        jobs.extend(replays.into_iter().map(Job::Replay));
        full
    } else {
        true
    };
    let next = if more { Some(Duration::ZERO) } else { next };
    if jobs.is_empty() {
        return Ok(Redriven::Done { delivered, failed, next });
    }
    // The receiver asked the consumer to pause: these wait too, still pending.
    if matches!(ctx.sink, Sink::External(_))
        && let Some(pause) = highwater_store::flow::paused_for(claim.lock.conn(), &ctx.consumer).await?
    {
        return Ok(Redriven::Done { delivered, failed, next: Some(pause) });
    }
    let ids: Vec<i64> = jobs.iter().map(Job::event_id).collect();
    let want = ctx.spec.event_versions.as_ref().and_then(|v| v.want());
    let events = redrive::events(claim.lock.conn(), &ids, want.as_ref()).await?;
    // A replay row whose delivery failed ends its request on this shard (the later rows are
    // marked failed with it): they are skipped here.
    let mut failed_requests: Vec<i64> = Vec::new();
    // The consumer's `rateLimit` holds for these deliveries too (a partner API's limit does not
    // know why an event comes): out of tokens, the run ends and the rest wait, still pending.
    let mut throttled = None;
    for job in &jobs {
        if let Job::Replay(r) = job
            && failed_requests.contains(&r.request_id)
        {
            continue;
        }
        let outcome = match events.get(&job.event_id()) {
            None => Err(format!(
                "event {} was pruned before its {}: there is nothing to deliver",
                job.event_id(),
                job.what()
            )),
            Some(event) => match &ctx.sink {
                Sink::Transactional(sink) => transactional(ctx, &**sink, claim, job, event).await?,
                Sink::External(sink) => {
                    if let Allowed::None(wait) = rate_limited(ctx, claim.lock.conn(), 1).await? {
                        throttled = Some(wait);
                        break;
                    }
                    match external(ctx, &**sink, claim.lock.conn(), job, event).await? {
                        Delivered::Paused(pause) => {
                            throttled = Some(pause);
                            break;
                        }
                        Delivered::Done(outcome) => outcome,
                    }
                }
            },
        };
        let conn = claim.lock.conn();
        match outcome {
            Ok(true) => {
                delivered += 1;
                tracing::info!(consumer = %ctx.consumer, instance = %ctx.instance_id, event_id = job.event_id(), "{} delivered", job.what());
            }
            // No longer pending (taken back, or done meanwhile): nothing was applied.
            Ok(false) => {}
            Err(error) => {
                failed += 1;
                tracing::warn!(consumer = %ctx.consumer, instance = %ctx.instance_id, event_id = job.event_id(), error = %error, "{} failed", job.what());
                match job {
                    Job::DeadLetter(d) => {
                        redrive::mark_failed(conn, &ctx.consumer, &ctx.instance_id, d, &error).await?;
                    }
                    Job::Replay(r) => {
                        replay::mark_failed(conn, &ctx.instance_id, r, &error).await?;
                        failed_requests.push(r.request_id);
                    }
                }
            }
        }
    }
    // A redriven dead letter may have requested the ones parked behind it: look again at once.
    let next = match throttled {
        Some(wait) => Some(wait),
        None if delivered > 0 => Some(Duration::ZERO),
        None => next,
    };
    Ok(Redriven::Done { delivered, failed, next })
}

/// One delivery beside the stream: a dead letter's redrive or a stream replay's row.
enum Job {
    DeadLetter(Due),
    Replay(replay::Due),
}

impl Job {
    fn event_id(&self) -> i64 {
        match self {
            Job::DeadLetter(d) => d.event_id,
            Job::Replay(r) => r.event_id,
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Job::DeadLetter(_) => "redrive",
            Job::Replay(_) => "replay",
        }
    }

    /// Marks it done; false when it is no longer pending.
    async fn mark_done(&self, ctx: &ShardCtx, conn: &mut PgConnection) -> Result<bool> {
        match self {
            Job::DeadLetter(d) => redrive::mark_redriven(conn, &ctx.consumer, &ctx.instance_id, d).await,
            Job::Replay(r) => replay::mark_replayed(conn, &ctx.instance_id, r).await,
        }
    }
}

/// `Ok(true)`: applied and marked in one transaction; `Ok(false)`: no longer pending, nothing
/// applied; `Err`: the sink's error, nothing applied.
async fn transactional(
    ctx: &ShardCtx,
    sink: &dyn TransactionalSink,
    claim: &mut Claim,
    job: &Job,
    event: &highwater_store::Event,
) -> Result<std::result::Result<bool, String>> {
    let conn = claim.lock.conn();
    if !claim.prepared {
        if let Err(e) = sink.prepare(conn).await {
            return Ok(Err(e.message));
        }
        claim.prepared = true;
    }
    let mut tx = sink.begin(conn, (&ctx.consumer, &ctx.instance_id)).await?;
    // The mark first: its row lock keeps a second delivery of this request out until this
    // transaction ends, and that one then finds it done.
    if !job.mark_done(ctx, &mut tx).await? {
        tx.rollback().await?;
        return Ok(Ok(false));
    }
    match sink.deliver(&mut tx, std::slice::from_ref(event)).await {
        Ok(()) => {
            tx.commit().await?;
            Ok(Ok(true))
        }
        Err(e) => {
            tx.rollback().await?;
            Ok(Err(e.message))
        }
    }
}

/// What became of an external delivery.
enum Delivered {
    /// As for a transactional one.
    Done(std::result::Result<bool, String>),
    /// The receiver asked for a pause (recorded as the consumer's): the request stays pending.
    Paused(Duration),
}

/// The sink works with no transaction open; the mark follows its acknowledgement.
async fn external(
    ctx: &ShardCtx,
    sink: &dyn ExternalSink,
    conn: &mut PgConnection,
    job: &Job,
    event: &highwater_store::Event,
) -> Result<Delivered> {
    let mut dc = DeliveryContext::new(&ctx.consumer, &ctx.instance_id, 1);
    match sink.deliver(&mut dc, std::slice::from_ref(event)).await {
        Ok(()) => Ok(Delivered::Done(Ok(job.mark_done(ctx, conn).await?))),
        Err(e) => match e.backpressure {
            Some(Backpressure::Pause(pause)) if pause <= FREE_PAUSE => {
                highwater_store::flow::pause(conn, &ctx.consumer, pause, &e.message).await?;
                super::flow::count_pause(ctx, pause);
                tracing::info!(consumer = %ctx.consumer, instance = %ctx.instance_id, event_id = event.id, pause = ?pause, "the receiver asked to pause during a {}: no attempt counted", job.what());
                Ok(Delivered::Paused(pause))
            }
            _ => Ok(Delivered::Done(Err(e.message))),
        },
    }
}
