//! The `process` span of each event, planned before its delivery so that the delivery carries
//! it: the span's ids and the sampler's decision are fixed first, the webhook request or the
//! Kafka/NATS record carries `traceparent` = (the trace, this span, the decision), and the span
//! is built with those ids once the outcome is known ([`super::process::delivered`]). So the
//! receiver's span is a child of the dispatcher's, itself a child of the writer's; and events a
//! failed batch never attempted make no span (a span started early would be exported when
//! dropped).
//!
//! The SDK draws ids from its `IdGenerator` as it builds a span; [`PlannedIds`] hands it the
//! planned ones through a thread-local set just around the (synchronous) build, and random ids
//! otherwise. The decision comes from the sampler the provider was built with ([`SAMPLER`]):
//! the built-in samplers are functions of the parent and the trace id, so the SDK decides the
//! same again when it builds the span.
use std::{cell::Cell, str::FromStr, sync::OnceLock};

use opentelemetry::{
    Context,
    trace::{SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState},
};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, ShouldSample};

use crate::sink::trace::{Outgoing, derived_trace_id, is_valid_traceparent, is_valid_tracestate};
use highwater_store::Event;

/// The provider's sampler (set once by [`super::init`]).
pub(super) static SAMPLER: OnceLock<Sampler> = OnceLock::new();

thread_local! {
    /// The ids the next span built on this thread takes (set by [`Planned::build`]).
    static NEXT: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// The provider's id generator: the planned ids while one is set, random ones otherwise.
#[derive(Debug, Default)]
pub(super) struct PlannedIds(RandomIdGenerator);

impl IdGenerator for PlannedIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT.with(Cell::get).map_or_else(|| self.0.new_trace_id(), |(t, _)| t)
    }
    fn new_span_id(&self) -> SpanId {
        NEXT.with(Cell::get).map_or_else(|| self.0.new_span_id(), |(_, s)| s)
    }
}

/// One event's span, before its delivery.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The writer's span (remote), or an empty context: the span is then a trace's root.
    pub(super) parent: Context,
    pub(super) trace_id: TraceId,
    pub(super) span_id: SpanId,
    /// The sampler's decision: an unsampled span is not even built.
    pub(super) sampled: bool,
    /// What the delivery carries.
    pub outgoing: Outgoing,
}

impl Planned {
    /// Runs `build` (which builds one span) with this plan's ids as the generator's.
    pub(super) fn build<T>(&self, build: impl FnOnce() -> T) -> T {
        NEXT.with(|n| n.set(Some((self.trace_id, self.span_id))));
        let out = build();
        NEXT.with(|n| n.set(None));
        out
    }
}

/// The plans of `events`' spans, named `name`; `None` while tracing is off.
pub fn plan(name: &str, events: &[Event]) -> Option<Vec<Planned>> {
    let sampler = SAMPLER.get()?;
    let ids = RandomIdGenerator::default();
    Some(
        events
            .iter()
            .map(|ev| {
                let [parent, state, correlation] =
                    ev.metadata.str_fields(["traceparent", "tracestate", "correlation_id"]);
                let writer = parent.as_deref().and_then(|p| remote(p, state.as_deref()));
                let (parent, trace_id) = match writer {
                    Some(sc) => {
                        let t = sc.trace_id();
                        (Context::new().with_remote_span_context(sc), t)
                    }
                    // No writer's context: the trace the derived context names (every delivery
                    // of the event in one trace, as without tracing), else a new one.
                    None => (
                        Context::new(),
                        correlation
                            .as_deref()
                            .and_then(derived_trace_id)
                            .and_then(|t| TraceId::from_hex(&t).ok())
                            .unwrap_or_else(|| ids.new_trace_id()),
                    ),
                };
                let span_id = ids.new_span_id();
                let decision = sampler.should_sample(Some(&parent), trace_id, name, &SpanKind::Consumer, &[], &[]);
                let sampled = decision.decision == SamplingDecision::RecordAndSample;
                let flags = parent.span().span_context().trace_flags().with_sampled(sampled);
                let state = decision.trace_state.header();
                let outgoing = Outgoing {
                    traceparent: format!("00-{trace_id}-{span_id}-{:02x}", flags.to_u8()),
                    tracestate: (!state.is_empty()).then_some(state),
                };
                Planned { parent, trace_id, span_id, sampled, outgoing }
            })
            .collect(),
    )
}

/// The writer's context from a valid `traceparent` (and `tracestate`), as the W3C propagator
/// reads it, without the propagator's map.
fn remote(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    if !is_valid_traceparent(traceparent) {
        return None;
    }
    // Valid means `vv-<32 hex>-<16 hex>-<2 hex>[-…]`: fixed offsets in every version.
    let trace_id = TraceId::from_hex(&traceparent[3..35]).ok()?;
    let span_id = SpanId::from_hex(&traceparent[36..52]).ok()?;
    let flags = u8::from_str_radix(&traceparent[53..55], 16).ok()?;
    let state =
        tracestate.filter(|s| is_valid_tracestate(s)).and_then(|s| TraceState::from_str(s).ok()).unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()), true, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writers_context_is_read_at_its_offsets() {
        let sc = remote("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        assert_eq!(sc.trace_state().header(), "congo=t61rcWkgMzE");
        let unsampled = remote("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", None).unwrap();
        assert!(!unsampled.is_sampled());
        assert!(remote("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None).is_none());
        assert!(remote("garbage", None).is_none());
    }

    #[test]
    fn planned_ids_are_taken_only_inside_build() {
        let g = PlannedIds::default();
        let p = Planned {
            parent: Context::new(),
            trace_id: TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            span_id: SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            sampled: true,
            outgoing: Outgoing { traceparent: String::new(), tracestate: None },
        };
        assert_eq!(p.build(|| (g.new_trace_id(), g.new_span_id())), (p.trace_id, p.span_id));
        assert_ne!(g.new_span_id(), p.span_id, "random again after the build");
    }
}
