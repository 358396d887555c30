//! Redrive requests (`consumer redrive`, `crate::ops::redrive`) delivered by the dispatcher that
//! runs the shard they name, through the very sink of the shard's live delivery, under the
//! shard's claim. The cursor is neither read nor moved: a redrive is a delivery beside the
//! stream, not a position in it.
//!
//! - A SQL sink: the request is marked redriven and the event applied in one transaction opened
//!   like the live one (`Sink::begin`: the same settings; the apply sets the same tenant, role,
//!   correlation and causation), so a kill before the commit leaves the request pending and
//!   nothing applied: exactly once more.
//! - An external sink: no transaction is open while it works; the mark follows the
//!   acknowledgement, so a kill in between delivers it again with the same idempotency key
//!   (consumer and event id), as live delivery does.
//! - A failure (the sink's error, or an event pruned since the request) makes it a dead letter
//!   again with the new error and one more attempt.
use std::time::Duration;

use sqlx::Connection;

use super::pass::{Claim, ShardCtx};
use crate::{
    Result,
    ops::redrive::{self, Due},
    shards,
    sink::DeliveryContext,
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
    let (due, next) = redrive::due(conn, &ctx.consumer, &ctx.instance_id, PER_RUN).await?;
    let (mut delivered, mut failed) = (0, 0);
    if due.is_empty() {
        return Ok(Redriven::Done { delivered, failed, next });
    }
    let ids: Vec<i64> = due.iter().map(|d| d.event_id).collect();
    let want = ctx.spec.event_versions.as_ref().and_then(|v| v.want());
    let events = redrive::events(conn, &ids, want.as_ref()).await?;
    for d in &due {
        let outcome = match events.get(&d.event_id) {
            None => Err(format!("event {} was pruned before its redrive: there is nothing to deliver", d.event_id)),
            Some(event) if ctx.sink.transactional() => transactional(ctx, claim, d, event).await?,
            Some(event) => external(ctx, claim.lock.conn(), d, event).await?,
        };
        let conn = claim.lock.conn();
        match outcome {
            Ok(true) => {
                delivered += 1;
                tracing::info!(consumer = %ctx.consumer, instance = %ctx.instance_id, event_id = d.event_id, "dead letter redriven");
            }
            // No longer pending (taken back, or done meanwhile): nothing was applied.
            Ok(false) => {}
            Err(error) => {
                failed += 1;
                tracing::warn!(consumer = %ctx.consumer, instance = %ctx.instance_id, event_id = d.event_id, error = %error, "redrive failed; a dead letter again");
                redrive::mark_failed(conn, &ctx.consumer, &ctx.instance_id, d, &error).await?;
            }
        }
    }
    Ok(Redriven::Done { delivered, failed, next })
}

/// `Ok(true)`: applied and marked in one transaction; `Ok(false)`: no longer pending, nothing
/// applied; `Err`: the sink's error, nothing applied.
async fn transactional(
    ctx: &ShardCtx,
    claim: &mut Claim,
    d: &Due,
    event: &crate::Event,
) -> Result<std::result::Result<bool, String>> {
    let conn = claim.lock.conn();
    if !claim.prepared {
        if let Err(e) = ctx.sink.prepare(conn).await {
            return Ok(Err(e.message));
        }
        claim.prepared = true;
    }
    let mut tx = conn.begin_with(sqlx::AssertSqlSafe(ctx.sink.begin(&ctx.consumer, &ctx.instance_id))).await?;
    // The mark first: its row lock keeps a second delivery of this request out until this
    // transaction ends, and that one then finds it done.
    if !redrive::mark_redriven(&mut tx, &ctx.consumer, &ctx.instance_id, d).await? {
        tx.rollback().await?;
        return Ok(Ok(false));
    }
    let res = {
        let mut dc = DeliveryContext { consumer: &ctx.consumer, instance_id: &ctx.instance_id, tx: Some(&mut *tx) };
        ctx.sink.deliver(&mut dc, std::slice::from_ref(event)).await
    };
    match res {
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

/// The sink works with no transaction open; the mark follows its acknowledgement.
async fn external(
    ctx: &ShardCtx,
    conn: &mut sqlx::PgConnection,
    d: &Due,
    event: &crate::Event,
) -> Result<std::result::Result<bool, String>> {
    let mut dc = DeliveryContext { consumer: &ctx.consumer, instance_id: &ctx.instance_id, tx: None };
    match ctx.sink.deliver(&mut dc, std::slice::from_ref(event)).await {
        Ok(()) => Ok(Ok(redrive::mark_redriven(conn, &ctx.consumer, &ctx.instance_id, d).await?)),
        Err(e) => Ok(Err(e.message)),
    }
}
