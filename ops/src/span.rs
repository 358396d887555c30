//! A span per operation run (issue 48: redrive, discard, replay, rebuild, shard changes, and the
//! CLI's retention runs), through OpenTelemetry's global tracer: the process that runs the
//! operation set it up when the `OTEL_*` variables asked for tracing (the dispatcher for its HTTP
//! API, the CLI for its commands: `highwater_engine::trace::init`). Without it the global tracer
//! is OpenTelemetry's no-op one and a run pays a few allocations.
//!
//! The span is a root, kind `INTERNAL`, named `highwater {operation}`: an operation is not
//! part of any event's trace. The deliveries it asks for are: their `process` spans are in the
//! events' own traces.
use std::{fmt::Display, time::SystemTime};

use opentelemetry::{
    KeyValue, global,
    trace::{Span, SpanKind, Status, Tracer},
};

/// Longest attribute value kept: a request or outcome beyond it is cut (a selection of ids).
const MAX_VALUE: usize = 2_000;

/// A run's span, ended by [`Run::end`].
pub struct Run {
    span: global::BoxedSpan,
}

/// Starts the span of a run of `operation` asked for by `by` (and `reason`), with `request`, a
/// description of what was asked.
pub fn start(operation: &str, by: &str, reason: Option<&str>, request: String) -> Run {
    let tracer = global::tracer("highwater");
    let mut attributes = vec![
        KeyValue::new("highwater.operation", operation.to_owned()),
        KeyValue::new("highwater.operation.by", by.to_owned()),
        KeyValue::new("highwater.operation.request", cut(request)),
    ];
    if let Some(r) = reason {
        attributes.push(KeyValue::new("highwater.operation.reason", r.to_owned()));
    }
    let span = tracer
        .span_builder(format!("highwater {operation}"))
        .with_kind(SpanKind::Internal)
        .with_start_time(SystemTime::now())
        .with_attributes(attributes)
        .start(&tracer);
    Run { span }
}

impl Run {
    /// Ends the span with what came of the run: `outcome` (a description) or the error.
    pub fn end<T, E: Display>(mut self, res: &Result<T, E>, outcome: impl FnOnce(&T) -> String) {
        if !self.span.is_recording() {
            return;
        }
        match res {
            Ok(v) => self.span.set_attribute(KeyValue::new("highwater.operation.outcome", cut(outcome(v)))),
            Err(e) => {
                self.span.set_attribute(KeyValue::new("error.type", "operation_failed"));
                self.span.set_status(Status::error(cut(e.to_string())));
            }
        }
        self.span.end();
    }
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_VALUE {
        let mut at = MAX_VALUE;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_on_a_character() {
        assert_eq!(cut("abc".into()), "abc");
        let long = "é".repeat(MAX_VALUE);
        let c = cut(long);
        assert!(c.len() <= MAX_VALUE + '…'.len_utf8() && c.ends_with('…'), "{}", c.len());
    }
}
