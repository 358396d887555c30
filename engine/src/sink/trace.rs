//! The W3C Trace Context `traceparent` of an external delivery (webhook request, Kafka record,
//! NATS message), derived from the event so that every redelivery of the same event lands in the
//! same trace, with no tracing state to keep.
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// `00-{trace-id}-{span-id}-01`. The trace id is the correlation id when it is a UUID (the
/// default that `highwater.append` fills in), else the first 16 bytes of its SHA-256; the span id
/// is the first 8 bytes of the SHA-256 of the idempotency key (the `webhook-id`). `None` without a correlation id.
pub fn traceparent(correlation_id: Option<&str>, webhook_id: &str) -> Option<String> {
    let cid = correlation_id.filter(|c| !c.is_empty())?;
    let trace_id = match Uuid::parse_str(cid) {
        // The all-zero trace id is invalid in Trace Context; hash the nil UUID like any string.
        Ok(u) if !u.is_nil() => u.simple().to_string(),
        _ => hex::encode(&Sha256::digest(cid.as_bytes())[..16]),
    };
    let span_id = hex::encode(&Sha256::digest(webhook_id.as_bytes())[..8]);
    Some(format!("00-{trace_id}-{span_id}-01"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
