//! The dispatcher's own spans, exported over OTLP (issue 48, part 3): a `process` span per
//! delivered event, a child of the writer's span stored with the event (the messaging semantic
//! conventions' consumer side), so that one trace runs from the writer's request through the
//! dispatcher to the receiver.
//!
//! Off unless the standard `OTEL_*` variables ask for it ([`config`]); off, a delivery pays one
//! load of an unset `OnceLock`. On, spans go to the SDK's batch processor, which exports them
//! from its own thread: a delivery never waits for the backend, and spans the backend does not
//! take are dropped and counted (`highwater_trace_spans_*_total`, [`counts`]).
//!
//! The one hook into delivery is the sink wrapper (`sink::measured`): [`plan::plan`] before each
//! external delivery (the ids the delivery carries to the receiver), [`process::delivered`] after
//! it; nothing in `dispatch/` calls this module.
pub mod config;
pub mod counts;
pub mod exemplar;
mod export;
pub mod plan;
pub mod process;

pub use export::{Tracing, init};
