//! What operators look at and do: status and lag, shard transitions, retention.
mod status;

pub use status::{ShardStatus, render_table, status};
