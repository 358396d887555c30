//! The web console's reads (`highwater console`, crate `highwater-console`): typed, paged by key
//! (never OFFSET), each page bounded. The console's actions are `highwater_ops` operations; what
//! it shows beyond these comes from `ops::status` and `ops::fence_holder`, as for the CLI.
pub mod dead_letters;
