//! Events for the unit tests of this crate.
use highwater_store::Event;

/// Event `id` of stream `order/{stream}`, type `OrderPlaced`, in transaction `id`, with empty
/// payload and metadata.
pub fn event(id: i64, stream: &str) -> Event {
    Event {
        id,
        tx_id: id as u64,
        stream_type: "order".into(),
        stream_id: stream.into(),
        stream_version: None,
        event_type: "OrderPlaced".into(),
        tenant_id: None,
        payload: serde_json::json!({}).into(),
        metadata: serde_json::json!({}).into(),
        created_at: chrono::Utc::now(),
    }
}
