//! The highwater Kubernetes operator: reconciles `EventConsumer` resources into consumer rows and
//! `EventType` resources into the event type registry, manages the per-pod shards of dispatcher
//! pods, and reports status. It shares the store code
//! of the `highwater` crate and the API types of `highwater-crds`.
#![forbid(unsafe_code)]

mod annotations;
pub mod cli;
pub mod context;
pub mod controller;
pub mod doctor;
mod error;
pub mod event_types;
mod events;
mod http;
mod leader;
pub mod metrics;
pub mod pods;
pub mod status;
mod stopping;
mod stream_annotations;

pub use error::{Error, Result};
