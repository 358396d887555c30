//! The side pass (issue 49): while one key's event waits for its retry, the other keys of the
//! shard go on. With `spec.concurrency` above 1, a failed attempt leaves the cursor just before
//! the failing event (the watermark) until its retry; meanwhile each head move brings a side pass
//! that reads the window — the batch after the cursor, `batchSize` events, as the retry will —
//! and sends the events that are neither acknowledged already (dispatch/acked.rs) nor of a key
//! that waits (the failing event's, or one that failed in a side pass). The cursor does not move
//! and no attempt is recorded: the retry moves the cursor past everything acknowledged, and a
//! key that failed here is retried with it. Nothing runs past the window: with it full of held
//! and acknowledged events, the other keys wait for the retry too.
//!
//! Not for `errorMode: skipStream` (its blocked streams are parked by the pass, in order) nor at
//! a change of the partition count's barrier. A `429`/`503` with `Retry-After` pauses the consumer
//! as in the pass; any backpressure ends the side passes until the retry.
use highwater_crds::ErrorMode;
use highwater_store::{Result, pg::PgConnection, shards};

use super::{
    acked::held_key,
    concurrent::{self, On},
    flow::{self, Allowed, FREE_PAUSE},
    pass::ShardCtx,
};
use crate::sink::{Backpressure, ExternalSink, Sink};

/// Whether the shard's consumer can have side passes at all.
pub fn applies(ctx: &ShardCtx) -> bool {
    matches!(ctx.sink, Sink::External(_)) && ctx.spec.concurrency > 1 && ctx.spec.error_mode != ErrorMode::SkipStream
}

/// One side pass under the shard's claim, if no other process holds it.
pub async fn run(ctx: &ShardCtx) -> Result<()> {
    let Sink::External(sink) = &ctx.sink else { return Ok(()) };
    if !applies(ctx) || !ctx.acked.goes_on() {
        return Ok(());
    }
    let Some(mut lock) = shards::try_lock(&ctx.pool, &ctx.consumer, &ctx.instance_id).await? else {
        return Ok(());
    };
    let r = locked(ctx, &**sink, lock.conn()).await;
    lock.release().await?;
    r
}

async fn locked(ctx: &ShardCtx, sink: &dyn ExternalSink, conn: &mut PgConnection) -> Result<()> {
    let Some((shard, batch)) = super::pass::read(ctx, conn, true).await? else { return Ok(()) };
    let waiting = shard.retry_in_ms.is_some_and(|ms| ms > 0);
    if !shard.status.delivers() || shard.barrier.is_some() || !waiting {
        return Ok(());
    }
    // The receiver asked the consumer to pause (told through another shard): nothing goes.
    if highwater_store::flow::paused_for(conn, &ctx.consumer).await?.is_some() {
        return Ok(());
    }
    let key = &ctx.spec.ordering_key;
    let Some(mut skip) = ctx.acked.side_plan(&shard, &batch.events, held_key(key)) else { return Ok(()) };
    let todo: Vec<&highwater_store::Event> = batch.events.iter().filter(|e| !skip.contains(&e.id)).collect();
    if todo.is_empty() {
        // A full window of held and acknowledged events stays so until the retry: no more reads.
        let full = batch.events.len() >= ctx.spec.batch_size as usize;
        ctx.acked.side_done(full);
        return Ok(());
    }
    match flow::rate_limited(ctx, conn, todo.len()).await? {
        Allowed::All => {}
        // A prefix in batch order keeps each key's order.
        Allowed::First(n) => skip.extend(todo[n..].iter().map(|e| e.id)),
        Allowed::None(_) => {
            ctx.acked.side_done(false);
            return Ok(());
        }
    }
    let on = On { consumer: &ctx.consumer, instance_id: &ctx.instance_id, attempt: 1 };
    let n = ctx.spec.concurrency as usize;
    let res = concurrent::deliver(sink, on, &batch.events, key, n, &skip, &ctx.acked).await;
    let stop = match res {
        Ok(()) => false,
        Err(e) => {
            let event = &batch.events[e.index.min(batch.events.len() - 1)];
            ctx.metrics.failed.get_or_create(&ctx.labels()).inc();
            tracing::warn!(
                consumer = %ctx.consumer, instance = %ctx.instance_id, event_id = event.id, error = %e.message,
                "delivery failed while another key waits for its retry: this key waits for that retry too"
            );
            match e.backpressure {
                Some(Backpressure::Pause(pause)) if pause <= FREE_PAUSE => {
                    highwater_store::flow::pause(conn, &ctx.consumer, pause, &e.message).await?;
                    flow::count_pause(ctx, pause);
                    true
                }
                Some(_) => true,
                None => false,
            }
        }
    };
    ctx.acked.side_done(stop);
    Ok(())
}
