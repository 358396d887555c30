//! One task per shard: waits for a reason to run a pass, runs passes until caught up.
use std::{sync::Arc, time::Duration};

use tokio::{sync::watch, time::Instant};
use tokio_util::sync::CancellationToken;

use super::{
    group::{Group, Reply},
    membership::Members,
    pass::{self, Outcome, ShardCtx},
    redrive::{self, Redriven},
    side,
    touched::Touched,
    wakeup::Head,
};
use crate::metrics::{ConsumerLabels, ShardLabels};
use highwater_store::{Position, shards};

/// Signals besides the head: `nudge` (a control notification: look now) and `refresh` (the
/// periodic reload: look again if halted).
pub struct Wakeups {
    pub nudge: watch::Receiver<u64>,
    pub refresh: watch::Receiver<u64>,
    /// The shards with redrive requests pending, from the dispatcher's reloads.
    pub redrive: watch::Receiver<Arc<super::Redrives>>,
    /// The group's live dispatchers: a partition's worker delivers only while it is this
    /// dispatcher's share.
    pub members: watch::Receiver<Arc<Members>>,
    /// The types of the head's recent moves: a consumer with none of them may stay put.
    pub touched: Arc<Touched>,
}

/// How a worker paces its passes.
#[derive(Clone, Copy, Debug)]
pub struct Pacing {
    /// After an error nobody caused, and for a claim held by another process.
    pub poll: Duration,
    /// How long the cursor may stay behind a head whose new events are all of other types;
    /// zero: it follows the head at once.
    pub lazy: Duration,
}

/// Keeps `highwater_consumer_partitions_owned` in step with this worker's share, to its end.
struct Owned<'a> {
    ctx: &'a ShardCtx,
    on: bool,
}

impl Owned<'_> {
    fn set(&mut self, on: bool) {
        if self.ctx.partition.is_none() || on == self.on {
            return;
        }
        let g =
            self.ctx.metrics.partitions_owned.get_or_create(&ConsumerLabels { consumer: self.ctx.consumer.clone() });
        if on {
            g.inc()
        } else {
            g.dec()
        };
        self.on = on;
    }
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        self.set(false);
    }
}

pub async fn run(
    ctx: Arc<ShardCtx>,
    mut head_rx: watch::Receiver<Head>,
    wakeups: Wakeups,
    stop: CancellationToken,
    Pacing { poll, lazy }: Pacing,
    group: Option<Group>,
) {
    // Through the group pass when it can serve this shard; `None`: every pass of its own.
    let group = group.filter(|_| Group::serves(&ctx));
    // What this worker last saw of its cursor; `None` forces a pass.
    let mut known: Option<Position> = None;
    let mut retry_at: Option<Instant> = None;
    let mut halted = false;
    let mut force = true;
    // The shard's claim, kept between the passes of a backlog.
    let mut claim: Option<pass::Claim> = None;
    let mut error_delay = Duration::from_millis(200);
    // Whether the shard row may still show a failed pass's error. True at the start: an error
    // noted before this worker ran (by a dispatcher since restarted, or a sink that could not be
    // built then) must not outlive the first pass that works.
    let mut noted = true;
    let Wakeups {
        nudge: mut nudge_rx,
        refresh: mut refresh_rx,
        redrive: mut redrive_rx,
        members: mut members_rx,
        touched,
    } = wakeups;
    // While the cursor stays behind a head that brought none of this consumer's types: when it
    // moves anyway (a pass), so that retention and `consumer status` see it move.
    let mut lazy_until: Option<Instant> = None;
    // A consumer of every type has something in every move; a partition's range may end at a
    // barrier, which its pass must reach.
    let may_stay = !lazy.is_zero() && !ctx.spec.event_types.is_empty() && ctx.partition.is_none();
    let key = (ctx.consumer.clone(), ctx.instance_id.clone());
    // When to look for redrive requests due on this shard: `None` while none is known.
    let mut redrive_at: Option<Instant> = redrive_rx.borrow_and_update().contains(&key).then(Instant::now);
    let mut owned = Owned { ctx: &ctx, on: false };
    // The head at the last side pass (dispatch/side.rs).
    let mut side_head: Option<Position> = None;
    loop {
        if stop.is_cancelled() {
            return;
        }
        let mine = ctx.partition.is_none_or(|(index, _)| members_rx.borrow_and_update().owns(&ctx.consumer, index));
        owned.set(mine);
        if !mine {
            // Another dispatcher's share: hand the claim over and wait for the list to change.
            if let Some(lock) = claim.take()
                && let Err(e) = lock.release().await
            {
                tracing::warn!(consumer = %ctx.consumer, instance = %ctx.instance_id, error = %e, "releasing a partition's claim failed");
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                r = members_rx.changed() => if r.is_err() { return },
            }
            force = true;
            continue;
        }
        if redrive_at.is_some_and(|t| t <= Instant::now()) {
            redrive_at = match redrive::run(&ctx, &mut claim).await {
                Ok(Redriven::Busy) => Some(Instant::now() + poll * 10),
                Ok(Redriven::Done { next, .. }) => next.map(|d| Instant::now() + d),
                Err(e) => {
                    tracing::error!(consumer = %ctx.consumer, instance = %ctx.instance_id, error = %e, "redrive failed");
                    Some(Instant::now() + Duration::from_secs(1))
                }
            };
        }
        let head = head_rx.borrow_and_update().position;
        let behind = match (known, head) {
            (None, _) => true,
            (Some(k), Some(h)) => h > k,
            (Some(_), None) => false,
        };
        let retry_due = retry_at.is_some_and(|t| t <= Instant::now());
        let mut due = force || retry_due || (behind && !halted && retry_at.is_none());
        if due && !force && !retry_due && may_stay {
            let untouched = known.and_then(|k| touched.touches(k, &ctx.spec.event_types)) == Some(false);
            let until = *lazy_until.get_or_insert_with(|| Instant::now() + lazy);
            if untouched && until > Instant::now() {
                due = false;
                ctx.metrics.passes_skipped.get_or_create(&ShardLabels::new(&ctx.consumer, &ctx.instance_id)).inc();
            }
        }
        // While a failure waits for its retry, the other keys go on: a side pass per head move.
        if !due && retry_at.is_some() && !halted && head != side_head && side::applies(&ctx) && ctx.acked.goes_on() {
            side_head = head;
            if let Err(e) = side::run(&ctx).await {
                tracing::warn!(consumer = %ctx.consumer, instance = %ctx.instance_id, error = %e, "side pass failed");
            }
        }
        if due {
            force = false;
            retry_at = None;
            lazy_until = None;
            // A claim kept from its own pass (a backlog it drains alone) stays with it.
            let grouped = match (&group, &claim) {
                (Some(g), None) => g.pass(&ctx).await,
                _ => Reply::Alone,
            };
            let result = match grouped {
                Reply::Done(outcome) => Ok(outcome),
                Reply::Alone => pass::run(&ctx, &mut claim).await,
                Reply::Failed(failure) => pass::group_failed(&ctx, &failure).await,
            };
            match result {
                Ok(outcome) => {
                    error_delay = Duration::from_millis(200);
                    halted = false;
                    match outcome {
                        // Its cursor update cleared the error.
                        Outcome::Delivered { .. } => noted = false,
                        Outcome::CaughtUp { .. }
                        | Outcome::Backoff { .. }
                        | Outcome::Halted { .. }
                        | Outcome::AtBarrier { .. }
                            if noted =>
                        {
                            noted = !unnote(&ctx).await
                        }
                        _ => {}
                    }
                    match outcome {
                        Outcome::Delivered { cursor, more } => {
                            known = Some(cursor);
                            if more {
                                force = true;
                                continue;
                            }
                        }
                        Outcome::CaughtUp { cursor } => known = Some(cursor),
                        Outcome::Backoff { cursor, retry_in } => {
                            known = Some(cursor);
                            retry_at = Some(Instant::now() + retry_in);
                        }
                        Outcome::Halted { cursor } | Outcome::AtBarrier { cursor } => {
                            known = Some(cursor);
                            halted = true;
                        }
                        // Another process has it; look again later in case it dies.
                        Outcome::Busy => retry_at = Some(Instant::now() + poll * 10),
                        Outcome::Missing => {
                            known = None;
                            retry_at = Some(Instant::now() + Duration::from_secs(2));
                        }
                        Outcome::Changed => {
                            known = None;
                            retry_at = Some(Instant::now() + poll);
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(consumer = %ctx.consumer, instance = %ctx.instance_id, error = %e, "pass failed");
                    ctx.metrics.passes_failed.get_or_create(&ShardLabels::new(&ctx.consumer, &ctx.instance_id)).inc();
                    note(&ctx, &e).await;
                    noted = true;
                    retry_at = Some(Instant::now() + error_delay);
                    error_delay = (error_delay * 2).min(Duration::from_secs(30));
                }
            }
        }
        let sleep_until = [retry_at, redrive_at, lazy_until].into_iter().flatten().min();
        let sleep_until = sleep_until.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = stop.cancelled() => return,
            r = head_rx.changed() => if r.is_err() { return },
            r = nudge_rx.changed() => {
                if r.is_err() { return }
                force = true;
            }
            r = refresh_rx.changed() => {
                if r.is_err() { return }
                force = halted;
            }
            r = members_rx.changed() => if r.is_err() { return },
            r = redrive_rx.changed() => {
                if r.is_err() { return }
                if redrive_rx.borrow_and_update().contains(&key) {
                    redrive_at = Some(Instant::now());
                }
            }
            _ = tokio::time::sleep_until(sleep_until) => {}
        }
    }
}

/// Clears what [`note`] wrote once a pass works again, also when it found nothing to deliver (a
/// delivery clears it anyway): otherwise a one-off failure would show the consumer as degraded
/// until its next event. True when cleared.
async fn unnote(ctx: &ShardCtx) -> bool {
    let clear = shards::clear_noted_error(&ctx.pool, &ctx.consumer, &ctx.instance_id);
    match tokio::time::timeout(Duration::from_secs(2), clear).await {
        Ok(Ok(())) => true,
        Ok(Err(err)) => {
            tracing::debug!(consumer = %ctx.consumer, error = %err, "could not clear the failed pass's note");
            false
        }
        Err(_) => false,
    }
}

/// Shows a failed pass where `consumer status` and the EventConsumer's status show errors: an
/// error no event caused (a batch that cannot commit, cursors ahead of the database) counts no
/// attempt and leaves the status as it was, and would otherwise be in the logs only. The next
/// delivery clears it. Bounded, since the database may be what failed.
async fn note(ctx: &ShardCtx, e: &highwater_store::Error) {
    let message = format!("pass failed: {e}");
    let note = shards::note_error(&ctx.pool, &ctx.consumer, &ctx.instance_id, &message);
    match tokio::time::timeout(Duration::from_secs(2), note).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::debug!(consumer = %ctx.consumer, error = %err, "could not note the failed pass"),
        Err(_) => tracing::debug!(consumer = %ctx.consumer, "noting the failed pass timed out"),
    }
}
