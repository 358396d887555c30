//! The audit of operations that change shards rather than dead letters (restart, skip, disable,
//! enable, rewind, rebuild): the shards have no column for who changed them, so each change is
//! one log line on target `highwater::audit` with who and why. Redrive and discard record theirs
//! on the dead letters themselves.
use crate::Audit;

pub(crate) fn record(audit: &Audit, what: &str) {
    tracing::info!(
        target: "highwater::audit",
        by = %audit.by,
        reason = audit.reason.as_deref().unwrap_or(""),
        "{what}"
    );
}
