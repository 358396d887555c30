//! What the command line and the quickstart print on a terminal: the tables (laid out by
//! comfy-table) and the renderings of the store's rows. The store returns rows; it prints nothing.
pub mod dead_letters;
pub mod shard_changes;
pub mod status;
pub mod table;

pub use dead_letters::render_dead_letters;
pub use shard_changes::render_shard_changes;
pub use status::render_table;
