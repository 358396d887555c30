//! The log line of each shard change (restart, skip, disable, enable, rewind, rebuild) on target
//! `highwater::audit`, with who and why, for log pipelines; the record of it is the row the
//! store wrote in `highwater.shard_changes` with the change. Redrive and discard record theirs on
//! the dead letters themselves.
use crate::Audit;

pub(crate) fn record(audit: &Audit, what: &str) {
    tracing::info!(
        target: "highwater::audit",
        by = %audit.by,
        reason = audit.reason.as_deref().unwrap_or(""),
        "{what}"
    );
}
