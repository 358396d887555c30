//! The JSON object external sinks emit for one event: the log sink's line, the webhook's body.
//! One definition, so a receiver can move from one sink to the other without a new parser.
use serde::Serialize;

use super::{DeliveryContext, idempotency_key};
use highwater_store::Event;

#[derive(Serialize)]
pub struct Envelope<'a> {
    pub consumer: &'a str,
    pub instance_id: &'a str,
    pub idempotency_key: String,
    pub event: &'a Event,
}

impl<'a> Envelope<'a> {
    pub fn new(ctx: &'a DeliveryContext<'_>, event: &'a Event) -> Self {
        Envelope {
            consumer: ctx.consumer,
            instance_id: ctx.instance_id,
            idempotency_key: idempotency_key(ctx.consumer, event.id),
            event,
        }
    }
}
