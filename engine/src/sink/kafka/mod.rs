//! The kafka sink: one record per event through an idempotent producer (`acks=all`). A batch is
//! queued at once and then awaited; the pass moves the cursor only when every record of the batch
//! is acknowledged, so an interruption redelivers at most the batch it interrupted (at least
//! once; each record carries its event id for the consumers to drop redeliveries). No
//! transaction is open while the batch is out.
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use highwater_crds::{KAFKA_TOPIC_FIELDS, KafkaSink as KafkaSinkSpec, RecordKey, RecordValue};
use rdkafka::{
    ClientConfig,
    error::{KafkaError, RDKafkaErrorCode},
    message::{Header, OwnedHeaders},
    producer::{FutureProducer, FutureRecord, Producer},
};

use super::{
    DeliveryContext, ExternalSink, SinkError,
    record::{self, Template},
};
use highwater_store::{Error, Event, Result};

mod config;
mod context;

use context::{Context, LastError};

pub struct KafkaSink {
    /// Replaced when librdkafka reports a fatal error (an idempotent producer that lost its
    /// sequence state can produce nothing more): the next attempt gets a fresh one.
    producer: Mutex<Arc<FutureProducer<Context>>>,
    config: ClientConfig,
    topic: Template,
    key: RecordKey,
    value: RecordValue,
    timeout: Duration,
    headers: Vec<(String, String)>,
    last_error: LastError,
}

impl KafkaSink {
    /// Builds the producer; it connects in the background, so a broker that is down fails the
    /// first delivery (with the reason in `last_error`), not the build.
    pub fn new(spec: &KafkaSinkSpec) -> Result<Self> {
        let topic = Template::parse("sink.kafka.topic", &spec.topic, &KAFKA_TOPIC_FIELDS)?;
        if let Some(t) = topic.fixed() {
            topic_name(t).map_err(|e| Error::config(format!("sink.kafka.topic: {e}")))?;
        }
        let timeout = config::timeout(spec)?;
        let last_error = LastError::default();
        let config = config::client_config(spec, timeout)?;
        let producer = create(&config, &last_error)?;
        Ok(KafkaSink {
            producer: Mutex::new(Arc::new(producer)),
            config,
            topic,
            key: spec.key.unwrap_or(RecordKey::StreamId),
            value: spec.value.unwrap_or(RecordValue::Payload),
            timeout,
            headers: spec.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            last_error,
        })
    }

    fn headers(&self, ctx: &DeliveryContext<'_>, index: usize, ev: &Event) -> OwnedHeaders {
        let own = record::headers(ctx, index, ev);
        let mut h = OwnedHeaders::new_with_capacity(own.len() + self.headers.len());
        for (k, v) in &own {
            h = h.insert(Header { key: k, value: Some(v.as_bytes()) });
        }
        for (k, v) in &self.headers {
            h = h.insert(Header { key: k, value: Some(v.as_bytes()) });
        }
        h
    }

    /// The error of a record that was not acknowledged, with the client's latest complaint when
    /// the record's own error is only a timeout.
    fn failed(&self, topic: &str, ev: &Event, e: &KafkaError) -> String {
        let code = e.rdkafka_error_code();
        let hint = hint(e);
        if matches!(code, Some(RDKafkaErrorCode::MessageTimedOut | RDKafkaErrorCode::RequestTimedOut)) {
            return self.timed_out(topic, ev, self.timeout);
        }
        format!("kafka: topic {topic:?}: event {} not acknowledged: {e}{hint}", ev.id)
    }

    fn timed_out(&self, topic: &str, ev: &Event, after: Duration) -> String {
        let mut msg = format!(
            "kafka: topic {topic:?}: event {} not acknowledged within {}",
            ev.id,
            humantime::format_duration(after)
        );
        if let Some(last) = self.last_error.recent() {
            msg.push_str(&format!("; client errors: {last}"));
            if last.contains("SASL authentication error") {
                msg.push_str(" (check sink.kafka.sasl.username and the secret its password comes from)");
            }
        }
        msg
    }
}

fn create(config: &ClientConfig, last_error: &LastError) -> Result<FutureProducer<Context>> {
    config
        .create_with_context(Context(last_error.clone()))
        .map_err(|e| Error::config(format!("sink.kafka: cannot create the producer: {e}")))
}

/// What to do about an error whose cause is on the brokers' side, if it is one of those.
fn hint(e: &KafkaError) -> &'static str {
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            " (create the topic, or enable auto.create.topics.enable on the brokers)"
        }
        Some(RDKafkaErrorCode::TopicAuthorizationFailed) => " (grant the sink's user WRITE on the topic)",
        Some(RDKafkaErrorCode::MessageSizeTooLarge) => {
            " (raise the topic's max.message.bytes, or set properties.message.max.bytes)"
        }
        _ => "",
    }
}

/// A Kafka topic name: 1-249 of letters, digits, '.', '_' and '-', not `.` or `..`.
fn topic_name(t: &str) -> Result<(), String> {
    let ok = !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok { Ok(()) } else { Err(format!("{t:?} is not a Kafka topic name (1-249 letters, digits, '.', '_', '-')")) }
}

#[async_trait]
impl ExternalSink for KafkaSink {
    fn kind(&self) -> &'static str {
        "kafka"
    }

    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        let producer = self.producer.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let res = self.deliver_with(&producer, ctx, events).await;
        match res {
            Err(mut e) => {
                if let Some((_, reason)) = producer.client().fatal_error() {
                    e.message.push_str(&format!("; the producer hit a fatal error ({reason}) and is replaced"));
                    match create(&self.config, &self.last_error) {
                        Ok(fresh) => *self.producer.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(fresh),
                        Err(err) => tracing::error!(error = %err, "kafka sink: cannot replace the producer"),
                    }
                    // Dropping a producer flushes and joins its thread: not on the runtime.
                    tokio::task::spawn_blocking(move || drop(producer));
                }
                Err(e)
            }
            ok => ok,
        }
    }
}

impl KafkaSink {
    async fn deliver_with(
        &self,
        producer: &FutureProducer<Context>,
        ctx: &mut DeliveryContext<'_>,
        events: &[Event],
    ) -> Result<(), SinkError> {
        let mut pending = Vec::with_capacity(events.len());
        // Queue the whole batch first (the producer batches per partition), then wait for each
        // acknowledgement in event order.
        let mut queue_error = None;
        for (index, ev) in events.iter().enumerate() {
            let topic = self.topic.render(ev);
            if let Err(e) = topic_name(&topic) {
                queue_error = Some(SinkError::at(index, format!("kafka: event {}: topic {e}", ev.id)));
                break;
            }
            // A failure stops queueing but not the wait below: the events before it count as
            // delivered only once acknowledged.
            let value = match record::value(self.value, ctx, ev) {
                Ok(v) => v,
                Err(e) => {
                    queue_error = Some(SinkError::at(index, format!("kafka: encoding event {}: {e}", ev.id)));
                    break;
                }
            };
            let key = record::key(self.key, ev);
            let mut rec = FutureRecord::<[u8], [u8]>::to(&topic).payload(&value).headers(self.headers(ctx, index, ev));
            if let Some(k) = &key {
                rec = rec.key(k);
            }
            match producer.send_result(rec) {
                Ok(f) => pending.push((topic, f)),
                Err((e, _)) => {
                    let message =
                        format!("kafka: topic {topic:?}: event {}: cannot queue the record: {e}{}", ev.id, hint(&e));
                    queue_error = Some(SinkError::at(index, message));
                    break;
                }
            }
        }
        // Every queued record is awaited even after a failure, so none is left in flight to land
        // after a later retry has moved on (they are bounded by message.timeout.ms). The first
        // failure decides; a bound above the producer's own timeout guards against a lost callback.
        let guard = self.timeout + Duration::from_secs(5);
        let mut first_failure = None;
        for (index, (topic, f)) in pending.into_iter().enumerate() {
            let res = tokio::time::timeout(guard, f).await;
            if first_failure.is_some() {
                continue;
            }
            let message = match res {
                Ok(Ok(Ok(_))) => continue,
                Ok(Ok(Err((e, _)))) => self.failed(&topic, &events[index], &e),
                Ok(Err(_canceled)) => format!("kafka: event {}: the producer dropped the record", events[index].id),
                Err(_) => self.timed_out(&topic, &events[index], guard),
            };
            first_failure = Some(SinkError::at(index, message));
        }
        match first_failure.or(queue_error) {
            Some(e) => Err(e),
            None => {
                self.last_error.clear();
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_are_checked() {
        assert!(topic_name("events.order_v1-x").is_ok());
        for bad in ["", ".", "..", "a b", "a/b", &"x".repeat(250)] {
            assert!(topic_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reserved_properties_and_missing_secrets_are_refused_at_build() {
        let spec = |extra: serde_json::Value| -> KafkaSinkSpec {
            let mut v = serde_json::json!({"brokers": ["127.0.0.1:9"], "topic": "t"});
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            serde_json::from_value(v).unwrap()
        };
        let e = KafkaSink::new(&spec(serde_json::json!({"properties": {"acks": "1"}}))).err().unwrap();
        assert!(e.to_string().contains("\"acks\" is set by the kafka sink itself"), "{e}");
        let e = KafkaSink::new(&spec(serde_json::json!({"sasl": {
            "mechanism": "PLAIN", "username": "u", "password": {"env": "HIGHWATER_TEST_NO_SUCH_VAR"}
        }})))
        .err()
        .unwrap();
        assert!(e.to_string().contains("HIGHWATER_TEST_NO_SUCH_VAR is not set"), "{e}");
        let e = KafkaSink::new(&spec(serde_json::json!({"topic": "a b"}))).err().unwrap();
        assert!(e.to_string().contains("not a Kafka topic name"), "{e}");
        assert!(KafkaSink::new(&spec(serde_json::json!({"compression": "lz4", "key": "none"}))).is_ok());
    }
}
