//! highwater: gap-free, post-commit delivery of events appended to PostgreSQL.
//!
//! The library holds everything the `highwater` binary does, so the operator, the tests and the
//! benchmarks call the same code. Three layers, each in its folder, dependencies pointing down
//! only (see `docs/architecture.md`):
//!
//! - the store, its own crate `highwater-store` (re-exported here: [`db`], [`shards`], …): the
//!   schema and every statement against it (append, cursors, consumer definitions, retention, the
//!   ops commands). It does not depend on this crate, so Cargo refuses an upward import;
//! - `engine`: the delivery loop, its sinks, SSE and the HTTP endpoints, on top of the store;
//! - `devtools` and [`cli`]: the embedded PostgreSQL, the quickstart and the command line, on top.
//!
//! The engine and devtools folders are private; what other crates use is re-exported here.
#![forbid(unsafe_code)]

mod devtools;
/// The CLI's terminal tables.
use render::table;

pub mod cli;
pub mod logging;
pub mod render;
pub mod shutdown;

/// "<crate version> (<git revision>)", as `highwater --version` and `highwater-operator
/// --version` print it (the workspace gives both crates one version; `build.rs` finds the
/// revision).
pub const VERSION: &str = env!("HIGHWATER_VERSION");

pub use applied::{Appended, Token, append_position, token};
pub use body::Body;
pub use devtools::{embedded, quickstart};
pub use error::{Error, Result};
pub use events::{Event, NewEvent, append};
pub use highwater_engine::{
    discard_http, dispatch, http, instance, metrics, ops_http, redrive_http, sink, sse, trace, wait, wait_http,
};
pub use highwater_store::{
    applied, body, db, definitions, doctor, error, event_types, events, kubernetes, migrate, notify, ops, partitions,
    pooler, position, read_ahead, retention, roles, shards, sleepers,
};
pub use position::{Position, Xid8};
pub use wait::{Waited, wait_applied, wait_applied_on};
