//! The highwater Kubernetes operator: reconciles `EventConsumer` resources into consumer rows and
//! manages per-pod shards. Not written yet; it shares the store code of the `highwater` crate.
#![forbid(unsafe_code)]
