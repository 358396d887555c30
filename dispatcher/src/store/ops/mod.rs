//! What operators look at and do: status and lag, shard transitions, retention.
mod dead_letters;
mod gc;
mod rewind;
mod scope;
mod status;
pub mod top;
mod transitions;

pub use dead_letters::{DeadLetter, dead_letters, render_dead_letters};
pub use gc::{Collected, GcOptions, GcReport, MIN_STALE_AFTER, gc};
pub use rewind::{RewindTo, rewind};
pub use status::{Filter, ShardStatus, render_table, status, status_where};
pub use transitions::{Action, Transition, disable, enable, restart, skip};
