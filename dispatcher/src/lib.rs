//! highwater: gap-free, post-commit delivery of events appended to PostgreSQL.
//!
//! The library holds everything the `highwater` binary does, so the operator, the tests and the
//! benchmarks call the same code. Three layers, each in its folder, dependencies pointing down
//! only (see `docs/architecture.md`):
//!
//! - [`store`](crate::db): the schema and every statement against it (append, cursors, consumer
//!   definitions, retention, the ops commands);
//! - `engine`: the delivery loop, its sinks, SSE and the HTTP endpoints, on top of the store;
//! - `devtools` and [`cli`]: the embedded PostgreSQL, the quickstart and the command line, on top.
//!
//! The layer folders are private; what other crates use is re-exported here.
#![forbid(unsafe_code)]

/// The snapshot fence, highwater's core correctness rule in one place: the oldest transaction id
/// still running in the cluster. Every transaction below it has ended, so an event below it can
/// never appear behind a cursor later. A macro so that statements stay `&'static str`
/// (`concat!`); see "Positions and the snapshot fence" in docs/delivery.md.
macro_rules! fence {
    () => {
        "pg_snapshot_xmin(pg_current_snapshot())"
    };
}

mod devtools;
mod engine;
mod store;
/// The CLI's terminal tables, used by the store's renderings and the CLI alike.
mod table;

pub mod cli;
pub mod error;
pub mod logging;
pub mod shutdown;

/// "<crate version> (<git revision>)", as `highwater --version` and `highwater-operator
/// --version` print it (the workspace gives both crates one version; `build.rs` finds the
/// revision).
pub const VERSION: &str = env!("HIGHWATER_VERSION");

pub use applied::{Appended, Token, append_position, token};
pub use body::Body;
pub use devtools::{embedded, pgbouncer, quickstart};
pub use engine::{discard_http, dispatch, http, instance, metrics, ops_http, redrive_http, sink, sse, wait, wait_http};
pub use error::{Error, Result};
pub use events::{Event, NewEvent, append};
pub use position::{Position, Xid8};
pub use store::{
    applied, body, db, definitions, doctor, event_types, events, kubernetes, literal, migrate, notify, ops, partitions,
    pooler, position, read_ahead, retention, roles, shards, sleepers,
};
pub use wait::{Waited, wait_applied, wait_applied_on};
