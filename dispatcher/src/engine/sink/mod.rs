//! Where events go. A sink is either transactional (it runs inside the transaction that moves the
//! cursor, so its effect is exactly once) or external (at-least-once, no transaction open while
//! it works, events carry an idempotency key).
use std::sync::Arc;

use async_trait::async_trait;
use highwater_crds::ConsumerSpec;
use sqlx::PgConnection;

use crate::{Error, Event, Result};

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
}

#[async_trait]
pub trait Sink: Send + Sync {
    fn kind(&self) -> &'static str;

    /// `true`: `deliver` gets the cursor transaction in `ctx.tx` and must do all its work in it.
    fn transactional(&self) -> bool {
        false
    }

    /// Delivers `events` in order, stopping at the first failure.
    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError>;
}

/// The idempotency key of an external delivery: stable across redeliveries.
pub fn idempotency_key(consumer: &str, event_id: i64) -> String {
    format!("{consumer}:{event_id}")
}

/// Builds the sink a spec declares. The `sse` sink is not built here: it needs the dispatcher's
/// HTTP server (see `crate::sse::Hub::sink`).
pub fn build(spec: &ConsumerSpec, webhook_targets: &Arc<TargetPolicy>) -> Result<Arc<dyn Sink>> {
    if let Some(s) = &spec.sink.sql {
        return Ok(Arc::new(SqlSink::new(s)?));
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
