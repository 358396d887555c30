//! Where events go. A sink is either transactional (it runs inside the transaction that moves the
//! cursor, so its effect is exactly once) or external (at-least-once, no transaction open while
//! it works, events carry an idempotency key).
use std::sync::Arc;

use async_trait::async_trait;
use highwater_crds::ConsumerSpec;
use highwater_store::pg::{PgConnection, Postgres, Transaction};

use highwater_store::{
    Error, Event, Result,
    shards::{Advance, Shard},
};

mod envelope;
mod kafka;
mod log;
mod measured;
mod nats;
mod record;
mod secret;
mod sql;
pub(crate) mod trace;
mod webhook;

pub use kafka::KafkaSink;
pub use log::LogSink;
pub use measured::measured;
pub use nats::NatsSink;
pub use sql::SqlSink;
pub use webhook::{TargetPolicy, WebhookSink};

/// A consumer's sink: one of two kinds, which the pass handles apart. Only a transactional sink
/// has a transaction to work in; an external one never sees a connection.
#[derive(Clone)]
pub enum Sink {
    /// Runs inside the transaction that moves the cursor: exactly once.
    Transactional(Arc<dyn TransactionalSink>),
    /// Acknowledged, then the cursor moves: at least once.
    External(Arc<dyn ExternalSink>),
}

impl Sink {
    pub fn kind(&self) -> &'static str {
        match self {
            Sink::Transactional(s) => s.kind(),
            Sink::External(s) => s.kind(),
        }
    }

    /// `false`: the sink never reads events' payload and metadata in this process (the SQL sink
    /// reads the events server-side), so the dispatcher does not fetch and decode them.
    pub fn needs_bodies(&self) -> bool {
        match self {
            Sink::Transactional(s) => s.needs_bodies(),
            Sink::External(s) => s.needs_bodies(),
        }
    }
}

/// Who is delivering.
pub struct DeliveryContext<'a> {
    pub consumer: &'a str,
    pub instance_id: &'a str,
    /// The attempt of the batch's first event (`crate::trace::process::attempt`), for its span.
    pub attempt: i32,
    /// While tracing: the trace context each event's delivery carries, one per event of the
    /// batch (its `process` span: `crate::trace::plan`); empty otherwise, and each event then
    /// carries its own ([`trace::Outgoing::of`]).
    pub trace: Vec<trace::Outgoing>,
}

impl<'a> DeliveryContext<'a> {
    pub fn new(consumer: &'a str, instance_id: &'a str, attempt: i32) -> Self {
        DeliveryContext { consumer, instance_id, attempt, trace: Vec::new() }
    }

    /// The trace context the delivery of `events[index]` carries (`key`: its idempotency key).
    pub fn outgoing(&self, index: usize, ev: &Event, key: &str) -> Option<trace::Outgoing> {
        match self.trace.get(index) {
            Some(t) => Some(t.clone()),
            None => trace::Outgoing::of(ev, key),
        }
    }
}

/// The first event that could not be delivered; every event before `index` was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkError {
    pub index: usize,
    pub message: String,
    /// The sink stopped at `index` for a reason that is not that event's fault (the batch as a
    /// whole ran into a time limit): deliver from it again without counting a failed attempt.
    /// Only with `index > 0`, so every call makes progress.
    pub deferred: bool,
    /// The receiver asked for more than a retry (webhook status codes): a pause, or to stop.
    pub backpressure: Option<Backpressure>,
}

impl SinkError {
    /// Event `index` failed.
    pub fn at(index: usize, message: impl Into<String>) -> Self {
        SinkError { index, message: message.into(), deferred: false, backpressure: None }
    }
}

/// What a receiver asked for beyond "this attempt failed" (docs/sinks.md, "Backpressure").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backpressure {
    /// `429` or `503` with `Retry-After`: pause the consumer's deliveries this long.
    Pause(std::time::Duration),
    /// `410 Gone`: the endpoint is gone for good; disable the consumer.
    Gone,
}

/// A sink outside the database (webhook, Kafka, NATS, log, SSE): no transaction is open while it
/// works; the cursor moves once it acknowledged, and events carry an idempotency key.
#[async_trait]
pub trait ExternalSink: Send + Sync {
    fn kind(&self) -> &'static str;

    /// See [`Sink::needs_bodies`].
    fn needs_bodies(&self) -> bool {
        true
    }

    /// Delivers `events` in order, stopping at the first failure.
    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError>;
}

/// A sink that works in the cursor transaction (the SQL sink): its effect and the cursor move
/// commit together. Its transaction is the store's (`highwater_store::sql_sink`): the sink
/// opens it, applies in it, and moves the cursor with it; the caller commits or rolls back.
#[async_trait]
pub trait TransactionalSink: Send + Sync {
    fn kind(&self) -> &'static str;

    /// See [`Sink::needs_bodies`].
    fn needs_bodies(&self) -> bool {
        true
    }

    /// Called on the cursor connection before the cursor transaction opens, outside it: work
    /// that would otherwise take a transaction id (catalog writes) for the whole delivery. An
    /// error fails the batch's first event.
    async fn prepare(&self, conn: &mut PgConnection) -> Result<(), SinkError>;

    /// The SQL statement a group pass applies in its one transaction beside the group's other
    /// consumers (dispatch/group.rs); `None`: this sink runs its own passes.
    fn statement(&self) -> Option<&highwater_store::sql_sink::Statement> {
        None
    }

    /// Opens the cursor transaction on `conn`, with what the sink's work needs set in it (in the
    /// same round trip). `who`: the consumer and the instance.
    async fn begin<'c>(&self, conn: &'c mut PgConnection, who: (&str, &str)) -> Result<Transaction<'c, Postgres>>;

    /// Delivers `events` in the transaction `tx` (opened with [`TransactionalSink::begin`]), in
    /// order, stopping at the first failure; leaves the transaction open. On an error the caller
    /// rolls that transaction back and applies the events before the failing one again (a call
    /// on that prefix), so a failed call may leave anything behind.
    async fn deliver(&self, tx: &mut PgConnection, events: &[Event]) -> Result<(), SinkError>;

    /// Delivers `events` and, when every one applied, moves the cursor (`advance`), atomically,
    /// on `conn`, which is in no transaction. Nothing is committed unless the answer is
    /// [`Applied::Moved`]. An error of the transaction itself (its BEGIN, the move, a COMMIT
    /// whose failure no event's checks reproduce) is no event's fault: it is the pass's `Err`,
    /// retried without counting an attempt against any event, because blaming the first event
    /// could park or kill an event that applied. (The SQL sink runs a deferred constraint's
    /// check per event when the batch's COMMIT fails, and blames the event whose check fails:
    /// `highwater_store::sql_sink`.)
    async fn deliver_and_advance(
        &self,
        conn: &mut PgConnection,
        who: (&str, &str),
        events: &[Event],
        advance: &Advance<'_>,
    ) -> Result<Applied>;
}

/// What [`TransactionalSink::deliver_and_advance`] did.
#[derive(Debug)]
pub enum Applied {
    /// Every event applied and the cursor moved, committed together: the shard row as the move
    /// left it.
    Moved(Shard),
    /// The move was refused (the shard changed under the pass); nothing was committed.
    Refused,
    /// An event failed; nothing was committed.
    Failed(SinkError),
}

/// The idempotency key of an external delivery: stable across redeliveries.
pub fn idempotency_key(consumer: &str, event_id: i64) -> String {
    format!("{consumer}:{event_id}")
}

/// Builds the sink a spec declares. The `sse` sink is not built here: it needs the dispatcher's
/// HTTP server (see `crate::sse::Hub::sink`).
pub fn build(spec: &ConsumerSpec, webhook_targets: &Arc<TargetPolicy>) -> Result<Sink> {
    if let Some(s) = &spec.sink.sql {
        let sink = SqlSink::new(s, spec.event_versions.as_ref().and_then(|v| v.want()))?;
        return Ok(Sink::Transactional(Arc::new(sink)));
    }
    if let Some(s) = &spec.sink.log {
        return Ok(Sink::External(Arc::new(LogSink::new(s)?)));
    }
    if let Some(s) = &spec.sink.webhook {
        return Ok(Sink::External(Arc::new(WebhookSink::new(s, webhook_targets)?)));
    }
    if let Some(s) = &spec.sink.kafka {
        return Ok(Sink::External(Arc::new(KafkaSink::new(s)?)));
    }
    if let Some(s) = &spec.sink.nats {
        return Ok(Sink::External(Arc::new(NatsSink::new(s)?)));
    }
    Err(Error::refused("the consumer declares no sink"))
}
