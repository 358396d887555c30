//! The `process` span of each event an external sink handled, per the OpenTelemetry messaging
//! semantic conventions (consumer side): kind `Consumer`, named `process {consumer}`, a child of
//! the writer's span when the event carries its context (`traceparent`/`tracestate` in its
//! metadata, stored by `highwater.append`), else the root of a trace of its own. Sampling is the
//! writer's decision (parent-based) unless `OTEL_TRACES_SAMPLER` says otherwise. Each span is
//! planned before the delivery ([`super::plan`]), which carries it to the receiver.
use std::time::SystemTime;

use opentelemetry::{
    KeyValue,
    trace::{Span, SpanKind, Status, Tracer},
};

use super::{counts::COUNTS, export::TRACER, plan::Planned};
use crate::sink::{DeliveryContext, SinkError};
use highwater_store::{Event, shards::Shard};

/// Whether spans are made at all: false unless [`super::init`] started tracing.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// The attempt of a batch's first event: one more than the shard's failed attempts when it is
/// the event that failed before, else 1. (Later events of a batch are on their first attempt.)
pub fn attempt(shard: &Shard, events: &[Event]) -> i32 {
    match events.first() {
        Some(e) if shard.failing_event_id == Some(e.id) => shard.attempts + 1,
        _ => 1,
    }
}

/// What became of one event of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Failed => "failed",
        }
    }
}

/// The events a sink's `deliver` call handled, with their outcomes: the ones before the failing
/// index delivered, the failing one failed, the rest not attempted (no span). A deferred stop
/// (the batch ran into its time limit) did not attempt the event it stopped at.
pub fn outcomes<'e>(events: &'e [Event], result: &Result<(), SinkError>) -> impl Iterator<Item = (&'e Event, Outcome)> {
    let (delivered, failed) = match result {
        Ok(()) => (events.len(), None),
        Err(e) if e.deferred => (e.index.min(events.len()), None),
        Err(e) => (e.index.min(events.len()), events.get(e.index).map(|_| e.message.as_str())),
    };
    events[..delivered]
        .iter()
        .map(|e| (e, Outcome::Delivered))
        .chain(failed.map(|_| (&events[delivered], Outcome::Failed)))
}

/// The span name of `consumer`'s deliveries.
pub fn name(consumer: &str) -> String {
    format!("process {consumer}")
}

/// One span per event `deliver` handled (see [`outcomes`]), from `started` to now, with the ids
/// `plans` (one per event of `events`) gave the delivery. Does nothing while tracing is off.
pub fn delivered(
    sink: &'static str,
    ctx: &DeliveryContext<'_>,
    events: &[Event],
    plans: &[Planned],
    started: SystemTime,
    result: &Result<(), SinkError>,
) {
    let Some(tracer) = TRACER.get() else { return };
    let name = name(ctx.consumer);
    for ((i, (ev, outcome)), plan) in outcomes(events, result).enumerate().zip(plans) {
        // The sampler decided when the span was planned (the same decision the SDK would make
        // again: it reads the parent and the trace id): an unsampled span is not built at all.
        if !plan.sampled {
            continue;
        }
        let mut span = plan.build(|| {
            tracer
                .span_builder(name.clone())
                .with_kind(SpanKind::Consumer)
                .with_start_time(started)
                .start_with_context(tracer, &plan.parent)
        });
        if !span.is_recording() {
            continue;
        }
        let [correlation] = ev.metadata.str_fields(["correlation_id"]);
        let waited = started.duration_since(SystemTime::from(ev.created_at)).unwrap_or_default();
        let attempt = if i == 0 { ctx.attempt } else { 1 };
        let mut attributes = vec![
            KeyValue::new("messaging.system", "highwater"),
            KeyValue::new("messaging.operation.name", "process"),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.consumer.group.name", ctx.consumer.to_owned()),
            KeyValue::new("messaging.destination.name", ev.stream_type.clone()),
            KeyValue::new("messaging.message.id", ev.id.to_string()),
            KeyValue::new("highwater.consumer", ctx.consumer.to_owned()),
            KeyValue::new("highwater.instance_id", ctx.instance_id.to_owned()),
            KeyValue::new("highwater.sink", sink),
            KeyValue::new("highwater.event.id", ev.id),
            KeyValue::new("highwater.event.type", ev.event_type.clone()),
            KeyValue::new("highwater.stream.id", ev.stream_id.clone()),
            KeyValue::new("highwater.attempt", i64::from(attempt)),
            KeyValue::new("highwater.outcome", outcome.as_str()),
            // From the event's commit (its created_at) to this delivery's start: the time it
            // waited below the fence, behind earlier events and in backoff.
            KeyValue::new("highwater.waited_seconds", waited.as_secs_f64()),
        ];
        if let Some(c) = correlation {
            attributes.push(KeyValue::new("messaging.message.conversation_id", c));
        }
        span.set_attributes(attributes);
        if outcome == Outcome::Failed {
            let message = result.as_ref().err().map(|e| e.message.clone()).unwrap_or_default();
            span.set_attribute(KeyValue::new("error.type", "delivery_failed"));
            span.set_status(Status::error(message));
        }
        let sampled = span.span_context().is_sampled();
        span.end();
        if sampled {
            COUNTS.ended.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(n: i64) -> Vec<Event> {
        (1..=n).map(|id| Event { tx_id: 7, ..crate::fixtures::event(id, "o-1") }).collect()
    }

    fn ids(events: &[Event], result: Result<(), SinkError>) -> Vec<(i64, Outcome)> {
        outcomes(events, &result).map(|(e, o)| (e.id, o)).collect()
    }

    #[test]
    fn spans_cover_what_the_sink_attempted() {
        let evs = events(3);
        let d = Outcome::Delivered;
        assert_eq!(ids(&evs, Ok(())), vec![(1, d), (2, d), (3, d)]);
        assert_eq!(ids(&evs, Err(SinkError::at(1, "boom"))), vec![(1, d), (2, Outcome::Failed)]);
        assert_eq!(ids(&evs, Err(SinkError::at(0, "boom"))), vec![(1, Outcome::Failed)]);
        let deferred = SinkError { index: 2, message: "time".into(), deferred: true, backpressure: None };
        assert_eq!(ids(&evs, Err(deferred)), vec![(1, d), (2, d)]);
    }

    #[test]
    fn off_makes_no_span() {
        // No init in unit tests: the call returns at once.
        assert!(!enabled());
        let ctx = DeliveryContext::new("c", "__shared__", 1);
        delivered("log", &ctx, &events(2), &[], SystemTime::now(), &Ok(()));
        assert_eq!(COUNTS.ended.get(), 0);
    }
}
