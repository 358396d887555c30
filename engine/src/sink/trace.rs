//! The W3C Trace Context an external delivery (webhook request, Kafka record, NATS message)
//! carries: the writer's, stored in the event's metadata by `highwater.append` (issue 48;
//! migrations/definitions/trace_context.sql), so that the receiver continues the trace of the
//! request that appended the event. An event without one gets a context derived from the event,
//! so that every redelivery of the same event lands in the same trace, with no tracing state to
//! keep.
use highwater_store::Event;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The `traceparent` and `tracestate` headers of one delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub traceparent: String,
    /// Only with the writer's own traceparent: it belongs to it.
    pub tracestate: Option<String>,
}

impl Outgoing {
    /// The event's context: the writer's when its metadata holds a valid one, else the one
    /// derived from its correlation id ([`traceparent`]); `None` with neither. One parse of the
    /// metadata.
    pub fn of(ev: &Event, idempotency_key: &str) -> Option<Outgoing> {
        let [parent, state, correlation] = ev.metadata.str_fields(["traceparent", "tracestate", "correlation_id"]);
        Outgoing::from_fields(parent, state, correlation.as_deref(), idempotency_key)
    }

    /// [`Outgoing::of`] from metadata fields a caller has already read.
    pub fn from_fields(
        parent: Option<String>,
        state: Option<String>,
        correlation_id: Option<&str>,
        idempotency_key: &str,
    ) -> Option<Outgoing> {
        match parent.filter(|p| is_valid_traceparent(p)) {
            Some(traceparent) => {
                let tracestate = state.filter(|s| is_valid_tracestate(s));
                Some(Outgoing { traceparent, tracestate })
            }
            None => traceparent(correlation_id, idempotency_key)
                .map(|traceparent| Outgoing { traceparent, tracestate: None }),
        }
    }
}

/// W3C Trace Context level 1, 3.2, as `highwater.trace_context` checks it at append (checked
/// again here: an event of an older release, or a row written around append, may hold anything).
pub fn is_valid_traceparent(tp: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    let mut parts = tp.splitn(5, '-');
    let (Some(version), Some(trace_id), Some(parent_id), Some(flags)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let rest = parts.next();
    version.len() == 2
        && hex(version)
        && version != "ff"
        && trace_id.len() == 32
        && hex(trace_id)
        && nonzero(trace_id)
        && parent_id.len() == 16
        && hex(parent_id)
        && nonzero(parent_id)
        && flags.len() == 2
        && hex(flags)
        && (rest.is_none() || version != "00")
}

/// At most 512 characters of printable ASCII (3.3); its members are passed on as they are.
pub fn is_valid_tracestate(ts: &str) -> bool {
    !ts.is_empty() && ts.len() <= 512 && ts.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// The derived context of an event without the writer's: `00-{trace-id}-{span-id}-01`. The
/// trace id is the correlation id when it is a UUID (the default that `highwater.append` fills
/// in), else the first 16 bytes of its SHA-256; the span id is the first 8 bytes of the SHA-256 of
/// the idempotency key (the `webhook-id`). `None` without a correlation id.
pub fn traceparent(correlation_id: Option<&str>, webhook_id: &str) -> Option<String> {
    let trace_id = derived_trace_id(correlation_id?)?;
    let span_id = hex::encode(&Sha256::digest(webhook_id.as_bytes())[..8]);
    Some(format!("00-{trace_id}-{span_id}-01"))
}

/// The trace id of [`traceparent`], in hex: the correlation id when it is a UUID, else the first
/// 16 bytes of its SHA-256. `None` for an empty one.
pub fn derived_trace_id(correlation_id: &str) -> Option<String> {
    let cid = Some(correlation_id).filter(|c| !c.is_empty())?;
    Some(match Uuid::parse_str(cid) {
        // The all-zero trace id is invalid in Trace Context; hash the nil UUID like any string.
        Ok(u) if !u.is_nil() => u.simple().to_string(),
        _ => hex::encode(&Sha256::digest(cid.as_bytes())[..16]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn uuid_correlation_ids_are_the_trace_id() {
        let tp = traceparent(Some("6F1C2A3B-0000-4000-8000-00000000002A"), "orders:42").unwrap();
        let span = hex::encode(&Sha256::digest(b"orders:42")[..8]);
        assert_eq!(tp, format!("00-6f1c2a3b00004000800000000000002a-{span}-01"));
    }

    #[test]
    fn other_correlation_ids_are_hashed() {
        let tp = traceparent(Some("order-42"), "orders:42").unwrap();
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[1], hex::encode(&Sha256::digest(b"order-42")[..16]));
        assert_eq!(parts[2].len(), 16);
        let nil = traceparent(Some("00000000-0000-0000-0000-000000000000"), "x:1").unwrap();
        assert!(!nil.starts_with("00-00000000000000000000000000000000"), "{nil}");
        assert_eq!(traceparent(None, "x:1"), None);
        assert_eq!(traceparent(Some(""), "x:1"), None);
    }

    #[test]
    fn the_writers_context_wins_over_the_derived_one() {
        let key = "orders:42";
        let writer =
            Outgoing::from_fields(Some(TP.into()), Some("congo=t61rcWkgMzE".into()), Some("order-42"), key).unwrap();
        assert_eq!(writer, Outgoing { traceparent: TP.into(), tracestate: Some("congo=t61rcWkgMzE".into()) });
        // A malformed one (which append would have left out) falls back, and its state with it.
        let derived = Outgoing::from_fields(Some("garbage".into()), Some("a=b".into()), Some("order-42"), key).unwrap();
        assert_eq!(derived, Outgoing { traceparent: traceparent(Some("order-42"), key).unwrap(), tracestate: None });
        assert_eq!(Outgoing::from_fields(None, None, None, key), None);
    }

    #[test]
    fn traceparents_are_checked_as_append_checks_them() {
        assert!(is_valid_traceparent(TP));
        assert!(is_valid_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"));
        for bad in [
            "garbage",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert!(!is_valid_traceparent(bad), "{bad}");
        }
        assert!(is_valid_tracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"));
        assert!(!is_valid_tracestate(&"v".repeat(513)));
        assert!(!is_valid_tracestate("a=\u{e9}"));
    }
}
