//! `spec.concurrency` (issue 49): up to N deliveries of one shard's batch in flight, the events of
//! one ordering key (`spec.orderingKey`: the stream by default) one after the other, in order.
//!
//! The batch is split by key, keeping each key's events in batch order; each key's events go one
//! request at a time, up to `concurrency` keys at once. Every key runs until its events are
//! delivered or one of them fails: a key is never stopped early, so that every event before the
//! first failure (in batch order) is known to be delivered, and the cursor may move to just
//! before it (the watermark). Events of other keys after it that were delivered are remembered
//! (dispatch/acked.rs): the retry sends the failing key's events and the others' new ones, not
//! those again, unless the shard changed meanwhile (another dispatcher, an operator's command) or
//! the dispatcher died; then they are sent again with the same idempotency keys.
use std::{
    borrow::Cow,
    collections::{HashMap, HashSet},
};

use futures::StreamExt;
use highwater_crds::OrderingKey;
use highwater_store::Event;

use super::acked::AckedAhead;
use crate::sink::{DeliveryContext, ExternalSink, SinkError};

/// Whose delivery it is, for the requests' context.
#[derive(Clone, Copy)]
pub struct On<'a> {
    pub consumer: &'a str,
    pub instance_id: &'a str,
    /// The batch's attempt (its first event's), for the spans, as for one request.
    pub attempt: i32,
}

/// Delivers `events` but the `known` ones (acknowledged at an earlier attempt of this batch),
/// with up to `concurrency` requests in flight, telling `acked` of each acknowledgement; the
/// error is the failure at the lowest index, with the index in `events`.
pub async fn deliver(
    sink: &dyn ExternalSink,
    on: On<'_>,
    events: &[Event],
    key: &OrderingKey,
    concurrency: usize,
    known: &HashSet<i64>,
    acked: &AckedAhead,
) -> Result<(), SinkError> {
    let groups = by_key(events, key, known);
    let failures: Vec<SinkError> = futures::stream::iter(groups)
        .map(|indices| async move {
            for i in indices {
                let mut d = DeliveryContext::new(on.consumer, on.instance_id, on.attempt);
                if let Err(e) = sink.deliver(&mut d, std::slice::from_ref(&events[i])).await {
                    acked.failed(&events[i]);
                    return Some(SinkError { index: i, ..e });
                }
                acked.acknowledged(&events[i]);
            }
            None
        })
        .buffer_unordered(concurrency.max(1))
        .filter_map(|f| async move { f })
        .collect()
        .await;
    match failures.into_iter().min_by_key(|e| e.index) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The indices of `events` but the `known` ones by ordering key, each key's in batch order, keys
/// in the order of their first event (so the oldest waiting events go first).
fn by_key(events: &[Event], key: &OrderingKey, known: &HashSet<i64>) -> Vec<Vec<usize>> {
    let todo = events.iter().enumerate().filter(|(_, e)| !known.contains(&e.id));
    if *key == OrderingKey::None {
        return todo.map(|(i, _)| vec![i]).collect();
    }
    let mut slot: HashMap<(Cow<'_, str>, Cow<'_, str>), usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, e) in todo {
        let k = key_of(e, key);
        let g = *slot.entry(k).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }
    groups
}

/// One event's ordering key. A field's value is its JSON text (so `1` and `"1"` differ); an
/// event without the field has the empty key, and all such events keep their order together.
fn key_of<'e>(e: &'e Event, key: &OrderingKey) -> (Cow<'e, str>, Cow<'e, str>) {
    match key {
        OrderingKey::Tenant => ("".into(), e.tenant_id.as_deref().unwrap_or("").into()),
        OrderingKey::Metadata(field) => ("m".into(), json_at(e.metadata.get(), std::slice::from_ref(field)).into()),
        OrderingKey::Payload(path) => ("p".into(), json_at(e.payload.get(), path).into()),
        OrderingKey::Stream | OrderingKey::None => (e.stream_type.as_str().into(), e.stream_id.as_str().into()),
    }
}

/// One event's ordering key as one text (for the side pass's held keys).
pub(super) fn key_text(e: &Event, key: &OrderingKey) -> String {
    let (a, b) = key_of(e, key);
    format!("{}\u{0}{}", a, b)
}

/// The JSON text at `path` (object keys) of the JSON text `doc`; empty when absent.
fn json_at(doc: &str, path: &[String]) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(doc) else { return String::new() };
    match path.iter().try_fold(&v, |v, k| v.get(k)) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, stream: &str, tenant: Option<&str>) -> Event {
        Event { tenant_id: tenant.map(Into::into), ..crate::fixtures::event(id, stream) }
    }

    #[test]
    fn keys_keep_their_events_in_batch_order() {
        let evs = [event(1, "a", Some("t1")), event(2, "b", Some("t1")), event(3, "a", None), event(4, "c", None)];
        let none = HashSet::new();
        assert_eq!(by_key(&evs, &OrderingKey::Stream, &none), vec![vec![0, 2], vec![1], vec![3]]);
        assert_eq!(by_key(&evs, &OrderingKey::Tenant, &none), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(by_key(&evs, &OrderingKey::None, &none), vec![vec![0], vec![1], vec![2], vec![3]]);
        // Events acknowledged at an earlier attempt are not sent again.
        let known = HashSet::from([2, 3]);
        assert_eq!(by_key(&evs, &OrderingKey::Stream, &known), vec![vec![0], vec![3]]);
    }

    #[test]
    fn a_metadata_field_or_a_payload_path_is_the_key() {
        let with = |id, payload: serde_json::Value, metadata: serde_json::Value| Event {
            payload: payload.into(),
            metadata: metadata.into(),
            ..event(id, "s", None)
        };
        let evs = [
            with(1, serde_json::json!({"order": {"customer": "c1"}}), serde_json::json!({"region": "eu"})),
            with(2, serde_json::json!({"order": {"customer": "c2"}}), serde_json::json!({"region": "us"})),
            with(3, serde_json::json!({"order": {"customer": "c1"}}), serde_json::json!({})),
            with(4, serde_json::json!({"order": {}}), serde_json::json!({"region": "eu"})),
        ];
        let key: OrderingKey = "payload.order.customer".to_owned().try_into().unwrap();
        assert_eq!(by_key(&evs, &key, &HashSet::new()), vec![vec![0, 2], vec![1], vec![3]]);
        let key: OrderingKey = "metadata.region".to_owned().try_into().unwrap();
        assert_eq!(by_key(&evs, &key, &HashSet::new()), vec![vec![0, 3], vec![1], vec![2]]);
    }
}
