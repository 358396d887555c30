//! An idempotent consumer of the records highwater's `kafka` sink publishes: it keeps a read
//! model of order totals in PostgreSQL and applies each event exactly once, however often Kafka
//! delivers it. highwater guarantees at least once (a redelivery after an interruption, at most
//! one batch), and Kafka consumers redeliver too (a crash between the database commit and the
//! offset commit); the event id in the `highwater-event-id` header makes both harmless.
//!
//! The rule: in one database transaction, insert the event id into `processed_events` and, only
//! if that inserted a row, apply the event. Then commit the Kafka offset. A crash anywhere
//! leaves either both or neither in the database; a replay finds the id and skips the event.
use anyhow::{Context, Result, bail};
use rdkafka::{
    Message,
    consumer::{CommitMode, Consumer, StreamConsumer},
    message::{BorrowedMessage, Headers},
};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// The read model and the table of processed event ids (idempotent: runs at every start).
pub async fn migrate(pool: &PgPool) -> Result<()> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS processed_events (
             event_id     bigint PRIMARY KEY,
             processed_at timestamptz NOT NULL DEFAULT now()
         );
         CREATE TABLE IF NOT EXISTS order_totals (
             order_id text PRIMARY KEY,
             events   bigint NOT NULL,
             total    bigint NOT NULL
         );",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// What one record says, from its headers and its payload (`{"amount": N}`).
#[derive(Debug, Clone, PartialEq)]
pub struct OrderEvent {
    pub event_id: i64,
    pub order_id: String,
    pub amount: i64,
}

impl OrderEvent {
    pub fn from_message(m: &BorrowedMessage<'_>) -> Result<OrderEvent> {
        let header = |name: &str| -> Result<String> {
            let h = m.headers().context("the record has no headers: is it from highwater's kafka sink?")?;
            let v = h
                .iter()
                .find(|h| h.key == name)
                .and_then(|h| h.value)
                .with_context(|| format!("the record has no {name} header"))?;
            Ok(String::from_utf8(v.to_vec())?)
        };
        let event_id = header("highwater-event-id")?.parse().context("highwater-event-id is not a number")?;
        let order_id = header("highwater-stream-id")?;
        let payload: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or_default())
            .with_context(|| format!("event {event_id}: the value is not JSON"))?;
        let Some(amount) = payload["amount"].as_i64() else {
            bail!("event {event_id}: the payload has no integer amount");
        };
        Ok(OrderEvent { event_id, order_id, amount })
    }
}

/// Applies `e` unless its event id was processed before; `true` when it was applied now.
pub async fn apply(pool: &PgPool, e: &OrderEvent) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let first = sqlx::query("INSERT INTO processed_events (event_id) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(e.event_id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
        == 1;
    if first {
        sqlx::query(
            "INSERT INTO order_totals (order_id, events, total) VALUES ($1, 1, $2)
             ON CONFLICT (order_id) DO UPDATE
               SET events = order_totals.events + 1, total = order_totals.total + EXCLUDED.total",
        )
        .bind(&e.order_id)
        .bind(e.amount)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(first)
}

/// Counts of a run: records read, and of those the ones applied (the rest were redeliveries).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub read: u64,
    pub applied: u64,
}

/// Reads `consumer` (already subscribed or assigned) until `stop`, applying each record; the
/// offset is committed after the database transaction, so a crash in between only redelivers.
pub async fn run(consumer: &StreamConsumer, pool: &PgPool, stop: CancellationToken) -> Result<Counts> {
    let mut counts = Counts::default();
    loop {
        let m = tokio::select! {
            _ = stop.cancelled() => return Ok(counts),
            m = consumer.recv() => m?,
        };
        let e = OrderEvent::from_message(&m)?;
        counts.read += 1;
        if apply(pool, &e).await? {
            counts.applied += 1;
        }
        consumer.commit_message(&m, CommitMode::Async)?;
    }
}
