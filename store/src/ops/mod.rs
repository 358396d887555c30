//! What operators look at and do: status and lag, shard transitions, retention.
mod audit;
mod dead_letters;
pub mod discard;
mod fence;
mod gc;
mod rebuild;
pub mod redrive;
pub mod replay;
mod rewind;
mod scope;
mod status;
mod transitions;

pub use audit::{Audit, ShardChangeRecord, shard_changes};
pub use dead_letters::{DeadLetter, dead_letters};
pub use fence::{FenceHolder, holder as fence_holder};
pub use gc::{Collected, GcOptions, GcReport, MIN_STALE_AFTER, gc};
pub use rebuild::{Bootstrapped, Rebuilt, bootstrap, mark_bootstrap_pending, rebuild};
pub use rewind::{RewindTo, Skipped, describe_skips, rewind, rewind_skipping, rewind_skips};
pub use status::{Filter, RebuildProgress, ShardStatus, status, status_where};
pub use transitions::{Action, Transition, disable, enable, restart, skip};
