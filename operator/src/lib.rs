//! The highwater Kubernetes operator: reconciles `EventConsumer` resources into consumer rows,
//! manages the per-pod shards of dispatcher pods, and reports status. It shares the store code
//! of the `highwater` crate and the API types of `highwater-crds`.
#![forbid(unsafe_code)]

pub mod cli;
