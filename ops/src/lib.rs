//! highwater's operations on a consumer's deliveries: redrive, discard, replay, and on its shards:
//! restart, skip, disable, enable, rewind (one [`ShardChange`]) and rebuild. Each exists once
//! here, as an [`Operation`] (validate → preview → confirm above a threshold → execute →
//! progress, audited with who and why), and every front end drives it through [`run`]: the CLI
//! (`highwater consumer redrive|discard|replay`), the dispatcher's HTTP API
//! (`POST /v1/consumers/{name}/…`) and the operator's annotations. The statements stay in the
//! store (`highwater_store::ops`); this crate holds the flow and the [`Error`]s, which each front
//! end maps once: exit codes ([`Error::exit_code`]), HTTP statuses (`IntoResponse`, feature
//! `http`) and Kubernetes Events ([`Error::is_refusal`]).
mod audit;
mod discard;
mod error;
#[cfg(feature = "http")]
mod http;
mod operation;
mod rebuild;
mod redrive;
mod replay;
pub mod span;
mod tokens;
mod transition;

pub use discard::Discard;
pub use error::{EXIT_PENDING, Error, Result};
pub use operation::{Audit, Confirm, Operation, Progressing, Question, Ran, execute, run, wait};
pub use rebuild::Rebuild;
pub use redrive::Redrive;
pub use replay::Replay;
pub use tokens::load_tokens;
pub use transition::{Change, ShardChange};

/// The store's request and plan types the operations take and give (one import for front ends).
pub use highwater_store::ops::{discard as discard_rows, redrive as redrive_rows, replay as replay_rows};

/// An operation that takes more deliveries than this asks for a confirmation (`--yes`,
/// `"yes": true`): an accidental replay of a whole dead-letter table is the mistake it prevents.
pub const CONFIRM_ABOVE: usize = highwater_store::ops::redrive::CONFIRM_ABOVE;
