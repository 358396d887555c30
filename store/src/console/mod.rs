//! The web console's reads (`highwater console`, crate `highwater-console`): typed, paged by key
//! (never OFFSET), each page bounded. The console's actions are `highwater_ops` operations; what
//! it shows beyond these comes from `ops::status`, `ops::fence_holder`, `events::read_stream`,
//! the event-type registry and `doctor`, as for the CLI.
pub mod consumer;
pub mod dead_letters;
pub mod events;
