//! Where events go. A sink is either transactional (it runs inside the transaction that moves the
//! cursor, so its effect is exactly once) or external (at-least-once, no transaction open while
//! it works, events carry an idempotency key).
use std::sync::Arc;

use async_trait::async_trait;
use highwater_crds::ConsumerSpec;
use sqlx::{Connection, PgConnection};

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
mod trace;
mod webhook;

pub use kafka::KafkaSink;
pub use log::LogSink;
pub use measured::measured;
pub use nats::NatsSink;
pub use sql::SqlSink;
pub use webhook::{TargetPolicy, WebhookSink};

/// Who is delivering, and for transactional sinks the open transaction.
pub struct DeliveryContext<'a> {
    pub consumer: &'a str,
    pub instance_id: &'a str,
    pub tx: Option<&'a mut PgConnection>,
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
}

impl SinkError {
    /// Event `index` failed.
    pub fn at(index: usize, message: impl Into<String>) -> Self {
        SinkError { index, message: message.into(), deferred: false }
    }
}

#[async_trait]
pub trait Sink: Send + Sync {
    fn kind(&self) -> &'static str;

    /// `true`: `deliver` gets the cursor transaction in `ctx.tx` and must do all its work in it.
    /// On an error the caller rolls that transaction back and applies the events before the
    /// failing one again (a call on that prefix), so a failed call may leave anything behind.
    fn transactional(&self) -> bool {
        false
    }

    /// `false`: the sink never reads events' payload and metadata in this process (the SQL sink
    /// reads the events server-side), so the dispatcher does not fetch and decode them.
    fn needs_bodies(&self) -> bool {
        true
    }

    /// For transactional sinks, called on the cursor connection before the cursor transaction
    /// opens, outside it: work that would otherwise take a transaction id (catalog writes) for
    /// the whole delivery. An error fails the batch's first event.
    async fn prepare(&self, _conn: &mut PgConnection) -> Result<(), SinkError> {
        Ok(())
    }

    /// For transactional sinks, what opens the cursor transaction: `BEGIN` and, in the same round
    /// trip (one simple query), the transaction-local settings the sink's work needs. `deliver`
    /// runs in a transaction opened with it; it must leave the transaction open.
    fn begin(&self, _consumer: &str, _instance_id: &str) -> String {
        "BEGIN".to_owned()
    }

    /// Delivers `events` in order, stopping at the first failure.
    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError>;

    /// For transactional sinks: delivers `events` and, when every one applied, moves the cursor
    /// (`advance`), atomically, on `conn`, which is in no transaction. Nothing is committed
    /// unless the answer is [`Applied::Moved`]. An error of the transaction itself (its BEGIN,
    /// the move, a COMMIT whose failure no event's checks reproduce) is no event's fault: it is
    /// the pass's `Err`, retried without counting an attempt against any event, because
    /// blaming the first event could park or kill an event that applied. (The SQL sink runs a
    /// deferred constraint's check per event when the batch's COMMIT fails, and blames the
    /// event whose check fails: sql.rs.)
    async fn deliver_and_advance(
        &self,
        conn: &mut PgConnection,
        who: (&str, &str),
        events: &[Event],
        advance: &Advance<'_>,
    ) -> highwater_store::Result<Applied> {
        in_transaction(self, conn, who, events, advance).await
    }
}

/// What [`Sink::deliver_and_advance`] did.
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

/// [`Sink::deliver_and_advance`] as every transactional sink can: a transaction opened with the
/// sink's [`Sink::begin`], `deliver`, the move, commit (rollback if either failed or was refused).
pub async fn in_transaction<S: Sink + ?Sized>(
    sink: &S,
    conn: &mut PgConnection,
    (consumer, instance_id): (&str, &str),
    events: &[Event],
    advance: &Advance<'_>,
) -> highwater_store::Result<Applied> {
    let deliver = async |tx: &mut PgConnection| {
        sink.deliver(&mut DeliveryContext { consumer, instance_id, tx: Some(tx) }, events).await
    };
    in_transaction_with(sink, conn, (consumer, instance_id), deliver, advance).await
}

/// [`in_transaction`] with the delivery given: for a sink that delivers differently on a retry.
pub async fn in_transaction_with<S: Sink + ?Sized>(
    sink: &S,
    conn: &mut PgConnection,
    (consumer, instance_id): (&str, &str),
    deliver: impl AsyncFnOnce(&mut PgConnection) -> Result<(), SinkError>,
    advance: &Advance<'_>,
) -> highwater_store::Result<Applied> {
    let mut tx = conn.begin_with(sqlx::AssertSqlSafe(sink.begin(consumer, instance_id))).await?;
    if let Err(e) = deliver(&mut tx).await {
        tx.rollback().await?;
        return Ok(Applied::Failed(e));
    }
    let Some(moved) = advance.run(&mut tx).await? else {
        tx.rollback().await?;
        return Ok(Applied::Refused);
    };
    tx.commit().await?;
    Ok(Applied::Moved(moved))
}

/// The idempotency key of an external delivery: stable across redeliveries.
pub fn idempotency_key(consumer: &str, event_id: i64) -> String {
    format!("{consumer}:{event_id}")
}

/// Builds the sink a spec declares. The `sse` sink is not built here: it needs the dispatcher's
/// HTTP server (see `crate::sse::Hub::sink`).
pub fn build(spec: &ConsumerSpec, webhook_targets: &Arc<TargetPolicy>) -> Result<Arc<dyn Sink>> {
    if let Some(s) = &spec.sink.sql {
        let mut sink = SqlSink::new(s)?;
        sink.event_versions = spec.event_versions.as_ref().and_then(|v| v.want());
        return Ok(Arc::new(sink));
    }
    if let Some(s) = &spec.sink.log {
        return Ok(Arc::new(LogSink::new(s)?));
    }
    if let Some(s) = &spec.sink.webhook {
        return Ok(Arc::new(WebhookSink::new(s, webhook_targets)?));
    }
    if let Some(s) = &spec.sink.kafka {
        return Ok(Arc::new(KafkaSink::new(s)?));
    }
    if let Some(s) = &spec.sink.nats {
        return Ok(Arc::new(NatsSink::new(s)?));
    }
    Err(Error::refused("the consumer declares no sink"))
}
