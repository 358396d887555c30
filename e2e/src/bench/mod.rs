//! The benchmark harness behind `cargo run --release -p highwater-e2e --bin bench -- SCENARIO`:
//! its own PostgreSQL with recorded settings, dispatcher processes, the peers on the same
//! database in the same run, and a table of figures. Speed is measured here, never in a test;
//! `e2e/tests/bench_smoke.rs` only runs every scenario at tiny size so the harness cannot rot.
//!
//! One file per job: [`db`] the database and its settings, [`dispatcher`] the dispatcher
//! processes, [`report`] the table, one file per scenario ([`drain`], [`latency`], [`append`],
//! [`idle`], [`fleet`], [`operator`], [`memory`], [`wait`]) and per peer ([`bound`] under pgbench, [`watermill`],
//! [`river`], both built by [`go_peers`]; [`debezium`] in the [`relay`] scenario, with [`outbox`] and [`topics`]).
pub mod append;
pub mod bound;
pub mod consumers;
pub mod consumers_steady;
pub mod db;
pub mod debezium;
pub mod dispatcher;
pub mod drain;
pub mod filter;
pub mod fleet;
pub mod go_peers;
pub mod idle;
pub mod latency;
pub mod memory;
pub mod operator;
pub mod outbox;
pub mod relay;
pub mod report;
pub mod river;
pub mod scaleout;
pub mod server_cpu;
pub mod sizes;
pub mod storage;
pub mod topics;
pub mod tracing;
pub mod wait;
pub mod watermill;

pub use db::BenchDb;
pub use report::{Report, Row};
pub use sizes::{Peers, Sizes};
