//! highwater-store: highwater's schema and every statement against it. The only layer that writes
//! SQL against `highwater.*`; the engine, the CLI and the operator call it (through the
//! `highwater` crate, which re-exports these modules at its root). A crate of its own so that
//! Cargo holds the layering: this crate does not depend on `highwater`, so nothing here can name
//! the engine, the developer tools or the CLI (docs/architecture.md).
#![forbid(unsafe_code)]

/// The snapshot fence, highwater's core correctness rule in one place: the oldest transaction id
/// still running in the cluster. Every transaction below it has ended, so an event below it can
/// never appear behind a cursor later. A macro so that statements stay `&'static str`
/// (`concat!`); see "Positions and the snapshot fence" in docs/delivery.md. Private to the store:
/// no statement is written outside it. The definitions call `highwater.fence()`, the same
/// expression (tested below).
macro_rules! fence {
    () => {
        "pg_snapshot_xmin(pg_current_snapshot())"
    };
}

// The SQL side's one place is `highwater.fence()` (migrations/definitions/fence.sql), which the
// definitions call: the same expression, qualified.
#[cfg(test)]
#[test]
fn the_sql_fence_is_the_rust_fence() {
    let sql = include_str!("../../migrations/definitions/fence.sql");
    assert!(sql.replace("pg_catalog.", "").contains(concat!("RETURN ", fence!(), ";")), "{sql}");
}

pub mod error;

pub mod applied;
pub mod body;
pub mod console;
pub mod db;
pub mod definitions;
pub mod dispatchers;
pub mod doctor;
pub mod event_filter;
pub mod event_types;
pub mod events;
pub mod flow;
pub mod group;
pub mod head;
pub mod kubernetes;
pub mod migrate;
pub mod notify;
pub mod observe;
pub mod ops;
pub mod partitions;
/// The connection types the layers above name. They run no statement of their own, and do not
/// depend on sqlx: every statement is this crate's (docs/architecture.md).
pub mod pg {
    pub use sqlx::{PgConnection, PgPool, Postgres, Transaction};
    /// A connection taken from a pool (returned to it when dropped).
    pub type PoolConnection = sqlx::pool::PoolConnection<Postgres>;
}
pub mod pooler;
pub mod position;
pub mod quickstart;
pub mod reach;
pub mod read_ahead;
pub mod retention;
pub mod roles;
pub mod shards;
mod sink_statement;
pub mod sleepers;
pub mod sql_sink;
pub mod tail;
mod yaml_numbers;

pub use applied::{Appended, Token, append_position, token};
pub use body::Body;
pub use error::{Error, Result};
pub use events::{Event, NewEvent, append};
pub use position::{Position, Xid8};
