//! The store: highwater's schema and every statement against it. The only layer that writes SQL
//! against `highwater.*`; the engine, the CLI and the operator call it.
pub mod applied;
pub mod body;
pub mod db;
pub mod definitions;
pub mod doctor;
pub mod event_types;
pub mod events;
pub mod kubernetes;
pub mod literal;
pub mod migrate;
pub mod notify;
pub mod ops;
pub mod partitions;
pub mod pooler;
pub mod position;
pub mod reach;
pub mod read_ahead;
pub mod retention;
pub mod roles;
pub mod shards;
mod sink_statement;
pub mod sleepers;
mod yaml_numbers;
