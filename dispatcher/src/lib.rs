//! highwater: gap-free, post-commit delivery of events appended to PostgreSQL.
//!
//! The library holds everything the `highwater` binary does, so the operator, the tests and the
//! benchmarks call the same code: the store (schema, append, cursors), consumer definitions, the
//! delivery engine and its sinks, and an embedded PostgreSQL for the quickstart and the tests.
#![forbid(unsafe_code)]

pub mod cli;
pub mod db;
pub mod definitions;
pub mod dispatch;
pub mod embedded;
pub mod error;
pub mod event_types;
pub mod events;
pub mod http;
pub mod instance;
pub mod metrics;
pub mod ops;
pub mod position;
pub mod quickstart;
pub mod retention;
pub mod shards;
pub mod sink;
pub mod sse;

pub use error::{Error, Result};
pub use events::{Event, NewEvent, append};
pub use position::{Position, Xid8};
