//! What became of the dispatcher's spans, for `/metrics`: exporting is best effort, so what it
//! loses is counted instead of slowing or failing a delivery.
use std::sync::LazyLock;

use prometheus_client::{metrics::counter::Counter, registry::Registry};

/// One set per process: the tracer provider is global too.
pub struct SpanCounts {
    /// Sampled spans ended and handed to the batch processor.
    pub ended: Counter,
    /// Spans the backend accepted.
    pub exported: Counter,
    /// Spans of batches the backend did not take (unreachable, refused, timed out): dropped, not
    /// retried. Spans the processor's queue had no room for (`OTEL_BSP_MAX_QUEUE_SIZE`) are
    /// `ended - exported - dropped` once the queue has drained.
    pub dropped: Counter,
}

pub static COUNTS: LazyLock<SpanCounts> = LazyLock::new(|| SpanCounts {
    ended: Counter::default(),
    exported: Counter::default(),
    dropped: Counter::default(),
});

/// Registers the three counters (`highwater_trace_spans_{ended,exported,dropped}_total`).
pub fn register(registry: &mut Registry) {
    registry.register(
        "trace_spans_ended",
        "Sampled dispatcher spans (OpenTelemetry) handed to the exporter's queue",
        COUNTS.ended.clone(),
    );
    registry.register("trace_spans_exported", "Dispatcher spans the OTLP backend accepted", COUNTS.exported.clone());
    registry.register(
        "trace_spans_dropped",
        "Dispatcher spans dropped because the OTLP backend did not take their batch (unreachable, refused, timed out)",
        COUNTS.dropped.clone(),
    );
}
