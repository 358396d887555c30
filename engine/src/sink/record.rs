//! What the broker sinks (kafka, nats) put in one record for one event: the topic or subject
//! rendered from a template, the key, the value, and the headers that let a downstream consumer
//! drop redeliveries and follow the event without parsing the value.
use highwater_crds::{RecordKey, RecordValue};

use super::{DeliveryContext, envelope::Envelope, idempotency_key, trace};
use highwater_store::{Error, Event, Result};

/// What `{tenantId}` becomes for an event of the system tenant (no tenant id).
pub const SYSTEM_TENANT: &str = "system";

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    StreamType,
    StreamId,
    EventType,
    TenantId,
}

/// A topic or subject: literal text and `{field}` placeholders, parsed once when the sink is built.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// `field` names the definition's field in the error; `allowed` lists its placeholders.
    pub fn parse(field: &str, template: &str, allowed: &[&str]) -> Result<Template> {
        highwater_crds::check_template(template, allowed).map_err(|e| Error::config(format!("{field}: {e}")))?;
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let close = open + rest[open..].find('}').expect("checked above");
            parts.push(match &rest[open + 1..close] {
                "streamType" => Part::StreamType,
                "streamId" => Part::StreamId,
                "eventType" => Part::EventType,
                _ => Part::TenantId,
            });
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(Template { parts })
    }

    /// The fixed text when the template has no placeholder.
    pub fn fixed(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [Part::Literal(s)] => Some(s),
            _ => None,
        }
    }

    pub fn render(&self, ev: &Event) -> String {
        let mut out = String::new();
        for p in &self.parts {
            out.push_str(match p {
                Part::Literal(s) => s,
                Part::StreamType => &ev.stream_type,
                Part::StreamId => &ev.stream_id,
                Part::EventType => &ev.event_type,
                Part::TenantId => ev.tenant_id.as_deref().unwrap_or(SYSTEM_TENANT),
            });
        }
        out
    }
}

pub fn key(kind: RecordKey, ev: &Event) -> Option<Vec<u8>> {
    match kind {
        RecordKey::StreamId => Some(ev.stream_id.as_bytes().to_vec()),
        RecordKey::StreamTypeAndId => Some(format!("{}/{}", ev.stream_type, ev.stream_id).into_bytes()),
        RecordKey::EventId => Some(ev.id.to_string().into_bytes()),
        RecordKey::None => None,
    }
}

pub fn value(kind: RecordValue, ctx: &DeliveryContext<'_>, ev: &Event) -> Result<Vec<u8>, serde_json::Error> {
    match kind {
        RecordValue::Payload => serde_json::to_vec(&ev.payload),
        RecordValue::Envelope => serde_json::to_vec(&Envelope::new(ctx, ev)),
    }
}

/// The headers every record carries (names in `highwater_crds::BROKER_HEADERS`); absent values
/// (no version, system tenant, no correlation) are left out rather than sent empty.
/// The headers of `ev`, the batch's event at `index` (its trace context: [`DeliveryContext::outgoing`]).
pub fn headers(ctx: &DeliveryContext<'_>, index: usize, ev: &Event) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("highwater-event-id", ev.id.to_string()),
        ("highwater-event-type", ev.event_type.clone()),
        ("highwater-stream-type", ev.stream_type.clone()),
        ("highwater-stream-id", ev.stream_id.clone()),
    ];
    if let Some(v) = ev.stream_version {
        h.push(("highwater-stream-version", v.to_string()));
    }
    if let Some(t) = &ev.tenant_id {
        h.push(("highwater-tenant-id", t.clone()));
    }
    // One parse of the metadata for the headers that read it.
    let [correlation, causation, parent, state] = ev
        .metadata
        .str_fields(["correlation_id", "causation_id", "traceparent", "tracestate"])
        .map(|v| v.filter(|s| !s.is_empty()));
    if let Some(c) = &correlation {
        h.push(("highwater-correlation-id", c.clone()));
    }
    if let Some(c) = causation {
        h.push(("highwater-causation-id", c));
    }
    h.push(("highwater-created-at", ev.created_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)));
    h.push(("highwater-consumer", ctx.consumer.to_owned()));
    let key = idempotency_key(ctx.consumer, ev.id);
    let trace = match ctx.trace.get(index) {
        Some(t) => Some(t.clone()),
        None => trace::Outgoing::from_fields(parent, state, correlation.as_deref(), &key),
    };
    if let Some(trace) = trace {
        h.push(("traceparent", trace.traceparent));
        if let Some(state) = trace.tracestate {
            h.push(("tracestate", state));
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        Event {
            id: 42,
            tx_id: 7,
            stream_type: "order".into(),
            stream_id: "o-1".into(),
            stream_version: Some(3),
            event_type: "OrderPlaced".into(),
            tenant_id: None,
            payload: serde_json::json!({"total": 5}).into(),
            metadata: serde_json::json!({"correlation_id": "c-1"}).into(),
            created_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn templates_render_the_event_fields() {
        let all = highwater_crds::NATS_SUBJECT_FIELDS;
        let t = Template::parse("f", "events.{streamType}.{eventType}.{tenantId}.{streamId}", &all).unwrap();
        assert_eq!(t.render(&event()), "events.order.OrderPlaced.system.o-1");
        assert_eq!(t.fixed(), None);
        assert_eq!(Template::parse("f", "orders", &all).unwrap().fixed(), Some("orders"));
        let e = Template::parse("sink.kafka.topic", "x.{streamId}", &highwater_crds::KAFKA_TOPIC_FIELDS).unwrap_err();
        assert!(e.to_string().contains("sink.kafka.topic") && e.to_string().contains("{streamId}"), "{e}");
    }

    #[test]
    fn headers_carry_the_event_and_leave_absent_values_out() {
        let ctx = DeliveryContext::new("relay", "__shared__", 1);
        let h = headers(&ctx, 0, &event());
        let get = |k: &str| h.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("highwater-event-id"), Some("42"));
        assert_eq!(get("highwater-stream-version"), Some("3"));
        assert_eq!(get("highwater-correlation-id"), Some("c-1"));
        assert_eq!(get("highwater-tenant-id"), None);
        assert_eq!(get("highwater-causation-id"), None);
        assert!(get("traceparent").is_some());
        for (name, _) in &h {
            assert!(highwater_crds::BROKER_HEADERS.contains(name), "{name} is not reserved");
        }
        assert_eq!(key(RecordKey::StreamTypeAndId, &event()), Some(b"order/o-1".to_vec()));
    }

    #[test]
    fn the_writers_trace_goes_on_with_the_record() {
        let ctx = DeliveryContext::new("relay", "__shared__", 1);
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut ev = event();
        ev.metadata = serde_json::json!({"correlation_id": "c-1", "traceparent": tp, "tracestate": "a=b"}).into();
        let h = headers(&ctx, 0, &ev);
        let get = |k: &str| h.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("traceparent"), Some(tp));
        assert_eq!(get("tracestate"), Some("a=b"));
        assert!(highwater_crds::BROKER_HEADERS.contains(&"tracestate"));
        // Without it: the derived one, and no tracestate.
        let h = headers(&ctx, 0, &event());
        assert!(h.iter().all(|(n, _)| *n != "tracestate"));
    }
}
