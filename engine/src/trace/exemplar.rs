//! The exemplar of an event's delivery-latency observation (issue 48): the writer's trace id when
//! the event carries a valid `traceparent` whose writer sampled it, so that the exemplar points at
//! a trace the backend has (the writer's spans and the dispatcher's `process` span, which follows
//! the writer's sampling decision). An event without context, or an unsampled one, gets none:
//! the dispatcher's own trace of it is not known here, and an unsampled trace was never exported.
use highwater_store::Event;

use crate::{metrics::TraceExemplar, sink::trace::is_valid_traceparent};

/// The event's sampled trace id, if any. One parse of the metadata; called only while tracing is
/// on.
pub fn of(ev: &Event) -> Option<TraceExemplar> {
    let [parent] = ev.metadata.str_fields(["traceparent"]);
    trace_id(&parent?).map(|trace_id| TraceExemplar { trace_id })
}

/// The trace id of a valid `traceparent` with the sampled flag set.
fn trace_id(tp: &str) -> Option<String> {
    if !is_valid_traceparent(tp) {
        return None;
    }
    let mut parts = tp.split('-');
    let trace_id = parts.nth(1)?;
    let flags = u8::from_str_radix(parts.nth(1)?, 16).ok()?;
    (flags & 1 == 1).then(|| trace_id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_valid_sampled_traceparent_gives_an_exemplar() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736";
        assert_eq!(trace_id(&format!("00-{id}-00f067aa0ba902b7-01")).as_deref(), Some(id));
        // Trace Context level 2's random flag beside sampled (OpenTelemetry Python writes 03).
        assert_eq!(trace_id(&format!("00-{id}-00f067aa0ba902b7-03")).as_deref(), Some(id));
        assert_eq!(trace_id(&format!("00-{id}-00f067aa0ba902b7-00")), None);
        assert_eq!(trace_id(&format!("00-{id}-0000000000000000-01")), None);
        assert_eq!(trace_id("garbage"), None);
    }
}
