//! The group pass (issue 46): the consumers of this dispatcher whose passes are due together
//! (woken by the same head move) are claimed, loaded and read once; their SQL sinks' batches and
//! cursor moves commit in one transaction, and their external sinks (webhook, Kafka, NATS, SSE,
//! log) deliver concurrently, each consumer in its own order, their cursors moving together in one
//! statement after the acknowledgements — per head move, not per consumer.
//!
//! Workers keep their state (backoff, halts, the lazy cursor, redrives): a worker whose pass is
//! due asks the group ([`Group::pass`]) instead of running it, and gets either the outcome of
//! its part or [`Reply::Alone`], for which it runs its own pass (`pass::run`) at once. Alone is
//! always safe: nothing of that shard was committed by the group, and its own pass loads the
//! row again. A shard goes alone when the group cannot serve it exactly as its own pass would:
//! it is not due (backoff, dead, disabled), waits at a barrier, has events a bootstrap saw, is
//! far behind the group (it catches up on its own reads, so the group's stay short), its batch
//! fails, or anything goes wrong with the group's transaction.
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use highwater_crds::ErrorMode;
use highwater_store::{
    Event, Position, Result,
    group::{self, Move},
    pg::{PgPool, PoolConnection},
    shards::Shard,
    sql_sink::{
        Statement,
        group::{Member, Verdict, apply_all, prepare_all},
    },
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{
    flow::Allowed,
    pass::{GroupFailure, Outcome, ShardCtx},
};
use crate::{
    metrics::{GroupLabels, Metrics, SinkLabels},
    sink::{ExternalSink, Sink, SinkError},
};

/// The most events one read of a group pass returns (headers only: a SQL sink reads bodies
/// server-side).
const WINDOW: i64 = 10_000;

/// Reads per group pass: the members a read could not reach (ahead of a laggard) get the next.
const READS: usize = 2;

/// The longest a member's batch may run in the group's transaction (its `statement_timeout`
/// there, when shorter than its own): the group commits together, so a slow consumer would delay
/// all the others. One that runs past it delivers alone, and stays alone for [`SLOW_FOR`].
const BOUND: Duration = Duration::from_millis(100);
const SLOW_FOR: Duration = Duration::from_secs(30);

/// How long the group waits, after the first request, for the other workers the same head move
/// woke.
const GATHER: Duration = Duration::from_millis(1);

/// A worker's answer from the group.
#[derive(Debug)]
pub enum Reply {
    Done(Outcome),
    /// Run the pass alone, now.
    Alone,
    /// Its batch failed in the group (nothing of it committed): the shard's own claim handles
    /// the failure (`pass::group_failed`).
    Failed(Box<GroupFailure>),
}

struct Request {
    ctx: Arc<ShardCtx>,
    reply: oneshot::Sender<Reply>,
}

/// The handle workers ask through.
#[derive(Clone)]
pub struct Group {
    tx: mpsc::UnboundedSender<Request>,
}

impl Group {
    /// Starts the group's task, until `stop`.
    pub fn start(pool: PgPool, metrics: Arc<Metrics>, stop: CancellationToken) -> Group {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(pool, metrics, rx, stop));
        Group { tx }
    }

    /// Whether this shard's passes may go through the group: an unpartitioned consumer that
    /// reads events as stored and does not skip streams (those read with their own statements:
    /// partitions, upcasts, blocked streams), with a SQL sink or an external one (a rate-limited
    /// one takes its tokens for its batch in the pass, as in its own).
    pub fn serves(ctx: &ShardCtx) -> bool {
        ctx.partition.is_none()
            && ctx.spec.error_mode != ErrorMode::SkipStream
            && ctx.spec.event_versions.as_ref().and_then(|v| v.want()).is_none()
            // A filter runs in its consumer's own read (store/src/event_filter.rs).
            && ctx.spec.filter.is_none()
            && match &ctx.sink {
                Sink::Transactional(s) => s.statement().is_some(),
                Sink::External(_) => true,
            }
    }

    /// This shard's part of the next group pass.
    pub async fn pass(&self, ctx: &Arc<ShardCtx>) -> Reply {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Request { ctx: ctx.clone(), reply }).is_err() {
            return Reply::Alone;
        }
        answer.await.unwrap_or(Reply::Alone)
    }
}

async fn run(pool: PgPool, metrics: Arc<Metrics>, mut rx: mpsc::UnboundedReceiver<Request>, stop: CancellationToken) {
    // The group's own session: its claims, and the SQL sinks' functions prepared on it.
    let mut session: Option<Session> = None;
    // Shards whose batch ran past BOUND, and until when they deliver alone.
    let mut slow: HashMap<(String, String), Instant> = HashMap::new();
    loop {
        let first = tokio::select! {
            _ = stop.cancelled() => return,
            r = rx.recv() => match r { Some(r) => r, None => return },
        };
        let mut requests = vec![first];
        tokio::time::sleep(GATHER).await;
        while let Ok(r) = rx.try_recv() {
            requests.push(r);
        }
        let now = Instant::now();
        slow.retain(|_, until| *until > now);
        let (alone, mut requests): (Vec<Request>, Vec<Request>) =
            requests.into_iter().partition(|r| slow.contains_key(&(r.ctx.consumer.clone(), r.ctx.instance_id.clone())));
        for r in alone {
            metrics.group_parts.get_or_create(&GroupLabels { outcome: "alone", sink: r.ctx.sink.kind() }).inc();
            let _ = r.reply.send(Reply::Alone);
        }
        // A lone external consumer drains faster alone: its own pass keeps its claim from batch
        // to batch and reads the next batch while the sink works (there is no read to share).
        if let [only] = &requests[..]
            && matches!(only.ctx.sink, Sink::External(_))
        {
            let r = requests.pop().expect("one request");
            metrics.group_parts.get_or_create(&GroupLabels { outcome: "alone", sink: r.ctx.sink.kind() }).inc();
            let _ = r.reply.send(Reply::Alone);
            continue;
        }
        if requests.is_empty() {
            continue;
        }
        let ctxs: Vec<&ShardCtx> = requests.iter().map(|r| &*r.ctx).collect();
        let replies = match pass(&pool, &mut session, &ctxs, &mut slow).await {
            Ok(replies) => replies,
            Err(e) => {
                tracing::warn!(error = %e, shards = ctxs.len(), "group pass failed; its shards run their own passes");
                // Its claims may still be held: closing the session drops them.
                if let Some(mut s) = session.take() {
                    s.conn.close_on_drop();
                }
                ctxs.iter().map(|_| Reply::Alone).collect()
            }
        };
        metrics.group_passes.inc();
        if let Some(s) = session.as_mut() {
            metrics.group_reads.inc_by(std::mem::take(&mut s.reads));
        }
        for (r, reply) in requests.into_iter().zip(replies) {
            let outcome = match &reply {
                Reply::Done(Outcome::Delivered { .. }) => "delivered",
                Reply::Done(Outcome::Busy) => "busy",
                Reply::Done(_) => "moved",
                Reply::Alone => "alone",
                Reply::Failed(_) => "failed",
            };
            metrics.group_parts.get_or_create(&GroupLabels { outcome, sink: r.ctx.sink.kind() }).inc();
            let _ = r.reply.send(reply);
        }
    }
}

struct Session {
    conn: PoolConnection,
    /// The statements whose functions this session has (`sql_sink_prepare`).
    prepared: HashSet<(&'static str, String)>,
    /// Reads made, for `highwater_group_pass_reads_total`.
    reads: u64,
}

/// One group pass over `ctxs`; a reply per shard, in order.
async fn pass(
    pool: &PgPool,
    session: &mut Option<Session>,
    ctxs: &[&ShardCtx],
    slow: &mut HashMap<(String, String), Instant>,
) -> Result<Vec<Reply>> {
    if session.is_none() {
        *session = Some(Session { conn: pool.acquire().await?, prepared: HashSet::new(), reads: 0 });
    }
    let s = session.as_mut().expect("set above");
    let keys: Vec<(&str, &str)> = ctxs.iter().map(|c| (c.consumer.as_str(), c.instance_id.as_str())).collect();
    let claimed = group::claim(&mut s.conn, &keys).await?;
    let mine: Vec<usize> = (0..ctxs.len()).filter(|&i| claimed.claimed[i]).collect();
    let mut replies: Vec<Option<Reply>> =
        claimed.claimed.iter().map(|ok| (!ok).then_some(Reply::Done(Outcome::Busy))).collect();
    let worked = claimed_pass(s, ctxs, &mine, &mut replies, slow).await;
    // The claims go before the replies do: a shard told to go alone claims it again at once.
    group::release(&mut s.conn, claimed).await?;
    worked?;
    Ok(replies.into_iter().map(|r| r.unwrap_or(Reply::Alone)).collect())
}

/// A member of the pass: its shard as loaded, its batch, where its cursor goes.
struct Part<'a> {
    i: usize,
    shard: Shard,
    events: Vec<Event>,
    end: Position,
    more: bool,
    to: To<'a>,
}

impl Part<'_> {
    /// Its cursor's move: from the cursor as loaded to `end`, its events delivered.
    fn movement(&self) -> Move<'_> {
        Move {
            consumer: &self.shard.consumer,
            instance_id: &self.shard.instance_id,
            from: self.shard.cursor,
            to: self.end,
            delivered: self.events.len() as i64,
        }
    }
}

/// Where a member's batch goes.
enum To<'a> {
    Sql(&'a Statement),
    External(&'a dyn ExternalSink),
}

async fn claimed_pass(
    s: &mut Session,
    ctxs: &[&ShardCtx],
    mine: &[usize],
    replies: &mut [Option<Reply>],
    slow: &mut HashMap<(String, String), Instant>,
) -> Result<()> {
    if mine.is_empty() {
        return Ok(());
    }
    let keys: Vec<(&str, &str)> =
        mine.iter().map(|&i| (ctxs[i].consumer.as_str(), ctxs[i].instance_id.as_str())).collect();
    let loaded = group::load(&mut s.conn, &keys).await?;
    let mut rows: HashMap<(&str, &str), &Shard> =
        loaded.shards.iter().map(|s| ((s.consumer.as_str(), s.instance_id.as_str()), s)).collect();
    // Due and plain, as its own pass would deliver it; anything else goes alone.
    let mut candidates = Vec::new();
    for &i in mine {
        let c = ctxs[i];
        match rows.remove(&(c.consumer.as_str(), c.instance_id.as_str())) {
            None => replies[i] = Some(Reply::Done(Outcome::Missing)),
            Some(sh)
                if sh.status.delivers()
                    && sh.barrier.is_none()
                    && sh.partition.is_none()
                    && sh.skip.is_empty()
                    && sh.retry_in_ms.is_none_or(|ms| ms <= 0)
                    && sh.cursor.tx < loaded.next_xid =>
            {
                candidates.push((i, sh.clone()))
            }
            Some(_) => {}
        }
    }
    // One read from the earliest member's cursor serves every member whose cursor lies before
    // where it stopped; the members beyond (ahead of a laggard) get a read of their own, from their
    // earliest cursor: a consumer far behind never holds the others back by more than one read of
    // WINDOW events, and a drain moves every member at once. Any left after READS go alone.
    let mut remaining = candidates;
    remaining.sort_by_key(|(_, sh)| sh.cursor);
    let mut parts = Vec::new();
    for _ in 0..READS {
        let Some(from) = remaining.first().map(|(_, sh)| sh.cursor) else { break };
        let types: Vec<String> = if remaining.iter().any(|(i, _)| ctxs[*i].spec.event_types.is_empty()) {
            Vec::new()
        } else {
            let set: HashSet<&String> = remaining.iter().flat_map(|(i, _)| &ctxs[*i].spec.event_types).collect();
            set.into_iter().cloned().collect()
        };
        // No more than the members can take: together, their batch sizes, counting members of the
        // same types once (their batches are the same events), so ten consumers of every type
        // read one batch, not ten.
        let mut by_types: HashMap<Vec<&String>, i64> = HashMap::new();
        for (i, _) in &remaining {
            let mut types: Vec<&String> = ctxs[*i].spec.event_types.iter().collect();
            types.sort();
            let size = by_types.entry(types).or_default();
            *size = (*size).max(i64::from(ctxs[*i].spec.batch_size));
        }
        let limit = by_types.values().sum::<i64>().min(WINDOW);
        // Bodies only for an external sink that sends them (a SQL sink reads them server-side).
        let bodies = remaining.iter().any(|(i, _)| matches!(&ctxs[*i].sink, Sink::External(e) if e.needs_bodies()));
        let events = group::read(&mut s.conn, from, loaded.fence, &types, limit, bodies).await?;
        s.reads += 1;
        // A full read may stop before the head: nobody's cursor passes its last event.
        let cut = (events.len() as i64 == limit).then(|| events.last().map(Event::position)).flatten();
        let (served, rest): (Vec<_>, Vec<_>) =
            remaining.into_iter().partition(|(_, sh)| cut.is_none_or(|p| sh.cursor < p));
        remaining = rest;
        for (i, shard) in served {
            let c = ctxs[i];
            let Some(to) = (match &c.sink {
                Sink::Transactional(s) => s.statement().map(To::Sql),
                Sink::External(e) => Some(To::External(&**e)),
            }) else {
                continue;
            };
            let wanted = |e: &&Event| {
                e.position() > shard.cursor
                    && (c.spec.event_types.is_empty() || c.spec.event_types.contains(&e.event_type))
            };
            let mut batch: Vec<Event> =
                events.iter().filter(wanted).take(c.spec.batch_size as usize).cloned().collect();
            // `spec.rateLimit`: the consumer's tokens for its batch, as its own pass takes them.
            let mut throttled = false;
            if c.spec.rate_limit.is_some() && !batch.is_empty() {
                match super::flow::rate_limited(c, &mut s.conn, batch.len()).await? {
                    Allowed::All => {}
                    Allowed::First(n) => {
                        batch.truncate(n);
                        throttled = true;
                    }
                    Allowed::None(wait) => {
                        replies[i] = Some(Reply::Done(Outcome::Backoff { cursor: shard.cursor, retry_in: wait }));
                        continue;
                    }
                }
            }
            let full = throttled || batch.len() == c.spec.batch_size as usize;
            let last = batch.last().map(Event::position);
            let (end, more) = match (full, cut) {
                (true, _) => (last.expect("a full batch has a last event"), true),
                (false, Some(p)) => (p, true),
                (false, None) => (loaded.head.into_iter().chain(last).max().unwrap_or(shard.cursor), false),
            };
            if end <= shard.cursor {
                replies[i] = Some(Reply::Done(Outcome::CaughtUp { cursor: shard.cursor }));
                continue;
            }
            parts.push(Part { i, shard, events: batch, end, more, to });
        }
    }
    if parts.is_empty() {
        return Ok(());
    }
    let (external, mut parts): (Vec<Part<'_>>, Vec<Part<'_>>) =
        parts.into_iter().partition(|p| matches!(p.to, To::External(_)));
    // The external deliveries run while the SQL members apply: they need no connection.
    let delivering = deliver_all(ctxs, &external);
    let (delivered, applied) = tokio::join!(delivering, apply_sql(s, ctxs, &mut parts, replies, slow));
    applied?;
    settle_external(s, ctxs, external, delivered, replies, slow).await
}

/// Every external member's batch through its sink, concurrently (each consumer's in its order).
async fn deliver_all(ctxs: &[&ShardCtx], parts: &[Part<'_>]) -> Vec<(Result<(), SinkError>, Duration)> {
    futures::future::join_all(parts.iter().map(|p| async move {
        let started = Instant::now();
        let To::External(sink) = p.to else { unreachable!("external parts only") };
        let res = if p.events.is_empty() {
            Ok(())
        } else {
            super::pass::deliver_external(ctxs[p.i], sink, &p.shard, &p.events).await
        };
        (res, started.elapsed())
    }))
    .await
}

/// After the acknowledgements: the cursors of the members whose batch was delivered move in one
/// statement; a failed batch is handled as the member's own pass handles it (the events before
/// the failure delivered, the attempt counted, backoff, dead shard or dead letter, the receiver's
/// pause or `410`). A member that took longer than [`BOUND`] delivers alone for [`SLOW_FOR`]:
/// the group waits for its slowest member.
async fn settle_external(
    s: &mut Session,
    ctxs: &[&ShardCtx],
    parts: Vec<Part<'_>>,
    delivered: Vec<(Result<(), SinkError>, Duration)>,
    replies: &mut [Option<Reply>],
    slow: &mut HashMap<(String, String), Instant>,
) -> Result<()> {
    let mut done = Vec::new();
    for (p, (res, took)) in parts.into_iter().zip(delivered) {
        let c = ctxs[p.i];
        if took > BOUND {
            tracing::info!(consumer = %c.consumer, instance = %c.instance_id, took = ?took, bound = ?BOUND, alone_for = ?SLOW_FOR,
                "a delivery ran past the group pass's bound: this consumer delivers alone for a while");
            slow.insert((c.consumer.clone(), c.instance_id.clone()), Instant::now() + SLOW_FOR);
        }
        match res {
            Ok(()) => done.push(p),
            Err(err) => {
                let outcome = super::pass::external_failed(c, &mut s.conn, &p.shard, &p.events, err).await?;
                replies[p.i] = Some(Reply::Done(outcome));
            }
        }
    }
    let moves: Vec<Move<'_>> = done.iter().map(Part::movement).collect();
    let moved: HashSet<(String, String)> =
        group::advance_all(&mut s.conn, &moves).await?.into_iter().map(|r| (r.consumer, r.instance_id)).collect();
    for p in done {
        let c = ctxs[p.i];
        replies[p.i] =
            Some(Reply::Done(if !moved.contains(&(p.shard.consumer.clone(), p.shard.instance_id.clone())) {
                // Changed under the pass (a rewind, a restart): its events go again, as after a crash.
                Outcome::Changed
            } else if p.events.is_empty() && !p.more {
                Outcome::CaughtUp { cursor: p.end }
            } else {
                c.acknowledged(&p.events);
                Outcome::Delivered { cursor: p.end, more: p.more }
            }));
    }
    Ok(())
}

/// The SQL members' batches and cursor moves, in one transaction.
async fn apply_sql(
    s: &mut Session,
    ctxs: &[&ShardCtx],
    parts: &mut Vec<Part<'_>>,
    replies: &mut [Option<Reply>],
    slow: &mut HashMap<(String, String), Instant>,
) -> Result<()> {
    if parts.is_empty() {
        return Ok(());
    }
    // Each distinct statement's functions, once per session.
    let missing: Vec<&Statement> = {
        let mut seen = HashSet::new();
        parts
            .iter()
            .filter(|p| !p.events.is_empty() && !s.prepared.contains(&key(statement(p))))
            .map(statement)
            .filter(|st| seen.insert(key(st)))
            .collect()
    };
    if !missing.is_empty() {
        for (st, ok) in missing.iter().zip(prepare_all(&mut s.conn, &missing).await?) {
            if ok {
                s.prepared.insert(key(st));
            }
        }
        // A statement that cannot be prepared: its own pass says why.
        parts.retain(|p| p.events.is_empty() || s.prepared.contains(&key(statement(p))));
    }
    let started = Instant::now();
    let members: Vec<Member<'_>> = parts
        .iter()
        .map(|p| Member {
            statement: statement(p),
            who: (p.shard.consumer.as_str(), p.shard.instance_id.as_str()),
            events: &p.events,
            advance: p.movement(),
        })
        .collect();
    let verdicts = apply_all(&mut s.conn, &members, BOUND).await?;
    let took = started.elapsed().as_secs_f64();
    for (p, verdict) in parts.drain(..).zip(verdicts) {
        let c = ctxs[p.i];
        replies[p.i] = Some(match verdict {
            Verdict::Alone => Reply::Alone,
            Verdict::Slow => {
                tracing::info!(consumer = %c.consumer, instance = %c.instance_id, bound = ?BOUND, alone_for = ?SLOW_FOR,
                    "a batch ran past the group pass's bound: this consumer delivers alone for a while");
                slow.insert((c.consumer.clone(), c.instance_id.clone()), Instant::now() + SLOW_FOR);
                Reply::Alone
            }
            Verdict::Failed { failed, whole } => Reply::Failed(Box::new(GroupFailure {
                full: p.more,
                shard: p.shard,
                events: p.events,
                end: p.end,
                error: SinkError {
                    index: failed.index,
                    message: failed.message,
                    deferred: failed.deferred,
                    backpressure: None,
                },
                whole,
            })),
            Verdict::Moved(_) if p.events.is_empty() => Reply::Done(if p.more {
                Outcome::Delivered { cursor: p.end, more: true }
            } else {
                Outcome::CaughtUp { cursor: p.end }
            }),
            Verdict::Moved(_) => {
                c.group_delivered(&p.events, took);
                Reply::Done(Outcome::Delivered { cursor: p.end, more: p.more })
            }
        });
    }
    Ok(())
}

/// A SQL member's statement.
fn statement<'a>(p: &Part<'a>) -> &'a Statement {
    match p.to {
        To::Sql(st) => st,
        To::External(_) => unreachable!("SQL parts only"),
    }
}

fn key(s: &Statement) -> (&'static str, String) {
    s.group_key()
}

impl ShardCtx {
    /// What a delivery through the group counts, as the shard's own pass counts it.
    fn group_delivered(&self, events: &[Event], took: f64) {
        self.acknowledged(events);
        self.metrics.handler_duration.get_or_create(&self.labels()).observe(took);
        let labels = SinkLabels { consumer: self.consumer.clone(), sink: self.sink.kind().to_owned() };
        self.metrics.sink_publish.get_or_create(&labels).observe(took);
    }
}
