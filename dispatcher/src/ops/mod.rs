//! What operators look at and do: status and lag, shard transitions, retention.
mod gc;
mod rewind;
mod scope;
mod status;
mod transitions;

pub use gc::{Collected, GcOptions, GcReport, MIN_STALE_AFTER, gc};
pub use rewind::{RewindTo, rewind};
pub use status::{ShardStatus, render_table, status};
pub use transitions::{Action, Transition, disable, enable, restart, skip};
