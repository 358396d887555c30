//! Checks of the kafka and nats sinks' fields that the types cannot express. Each problem names
//! its field and the fix; the dispatcher checks the same again when it builds the sink.
use std::collections::BTreeMap;

use crate::{
    KafkaSink, NatsSink, SecretRef,
    validate::{
        BROKER_HEADERS, KAFKA_TOPIC_FIELDS, NATS_SUBJECT_FIELDS, RESERVED_KAFKA_PROPERTIES, check_template, duration,
        is_header_name,
    },
};

pub(crate) fn kafka(k: &KafkaSink, problems: &mut Vec<String>) {
    if k.brokers.is_empty() {
        problems.push("sink.kafka.brokers: name at least one broker as host:port".to_owned());
    }
    for b in &k.brokers {
        if !is_host_port(b) {
            problems.push(format!("sink.kafka.brokers: {b:?} is not host:port"));
        }
    }
    if let Err(e) = check_template(&k.topic, &KAFKA_TOPIC_FIELDS) {
        problems.push(format!("sink.kafka.topic: {e}"));
    } else if let Some(bad) = k.topic.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-{}".contains(*c))) {
        problems.push(format!(
            "sink.kafka.topic: {:?} has {bad:?}; Kafka topic names use letters, digits, '.', '_' and '-'",
            k.topic
        ));
    }
    if let Some(t) = &k.timeout {
        positive_duration("sink.kafka.timeout", t, problems);
    }
    if let Some(s) = &k.sasl {
        if s.username.is_empty() {
            problems.push("sink.kafka.sasl.username: is empty".to_owned());
        }
        secret("sink.kafka.sasl.password", &s.password, problems);
    }
    headers("sink.kafka.headers", &k.headers, problems);
    for key in k.properties.keys() {
        if RESERVED_KAFKA_PROPERTIES.contains(&key.as_str()) || key.starts_with("sasl.") || key.starts_with("ssl.") {
            problems.push(format!(
                "sink.kafka.properties: {key:?} is set by the kafka sink itself (its delivery guarantee or the \
                 tls/sasl fields); remove it"
            ));
        }
    }
}

pub(crate) fn nats(n: &NatsSink, problems: &mut Vec<String>) {
    if n.servers.is_empty() {
        problems.push("sink.nats.servers: name at least one server as nats://host:port".to_owned());
    }
    for s in &n.servers {
        let rest = s.strip_prefix("nats://").or_else(|| s.strip_prefix("tls://")).unwrap_or(s);
        if !is_host_port(rest.rsplit('@').next().unwrap_or(rest)) {
            problems.push(format!("sink.nats.servers: {s:?} is not nats://host:port"));
        }
    }
    if let Err(e) = check_template(&n.subject, &NATS_SUBJECT_FIELDS) {
        problems.push(format!("sink.nats.subject: {e}"));
    } else if n.subject.contains(['*', '>', ' ', '\t']) || n.subject.split('.').any(str::is_empty) {
        problems.push(format!(
            "sink.nats.subject: {:?} is not a publish subject: no wildcards ('*', '>'), spaces or empty tokens",
            n.subject
        ));
    }
    if let Some(t) = &n.timeout {
        positive_duration("sink.nats.timeout", t, problems);
    }
    match (&n.username, &n.password) {
        (Some(_), None) | (None, Some(_)) => {
            problems.push("sink.nats: username and password go together; set both or neither".to_owned())
        }
        (Some(_), Some(p)) => secret("sink.nats.password", p, problems),
        (None, None) => {}
    }
    if let Some(t) = &n.token {
        if n.username.is_some() {
            problems.push("sink.nats: set either token or username/password, not both".to_owned());
        }
        secret("sink.nats.token", t, problems);
    }
    headers("sink.nats.headers", &n.headers, problems);
}

fn is_host_port(s: &str) -> bool {
    match s.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}

fn positive_duration(field: &str, value: &str, problems: &mut Vec<String>) {
    if duration(field, value, problems).is_some_and(|d| d.is_zero()) {
        problems.push(format!("{field}: must be above zero"));
    }
}

fn secret(field: &str, s: &SecretRef, problems: &mut Vec<String>) {
    if s.env.is_some() == s.file.is_some() {
        problems.push(format!("{field}: set exactly one of env, file"));
    }
}

fn headers(field: &str, headers: &BTreeMap<String, String>, problems: &mut Vec<String>) {
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if !is_header_name(name) {
            problems.push(format!("{field}: {name:?} is not a valid header name"));
        } else if BROKER_HEADERS.contains(&lower.as_str())
            || lower.starts_with("highwater-")
            || lower.starts_with("nats-")
        {
            problems.push(format!("{field}: {name:?} is set by the sink itself; remove it"));
        }
        // The value is not quoted: headers often carry tokens.
        if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            problems.push(format!("{field}: the value of {name:?} has control characters"));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ConsumerSpec;

    fn spec(sink: serde_json::Value) -> ConsumerSpec {
        serde_json::from_value(serde_json::json!({"delivery": "Shared", "sink": sink})).unwrap()
    }

    #[test]
    fn a_plain_kafka_sink_is_valid() {
        spec(serde_json::json!({"kafka": {"brokers": ["127.0.0.1:9092"], "topic": "events.{streamType}"}}))
            .validate("relay")
            .unwrap();
    }

    #[test]
    fn kafka_mistakes_are_named() {
        let s = spec(serde_json::json!({"kafka": {
            "brokers": ["kafka"], "topic": "events.{stream}", "timeout": "0s",
            "sasl": {"mechanism": "SCRAM-SHA-256", "username": "", "password": {}},
            "headers": {"highwater-event-id": "1", "Nats-Msg-Id": "x"},
            "properties": {"acks": "1", "ssl.ca.location": "/x", "linger.ms": "5"}
        }}));
        let e = s.validate("relay").unwrap_err().to_string();
        for needle in [
            "\"kafka\" is not host:port",
            "{stream} is not a placeholder; use one of {streamType}, {eventType}, {tenantId}",
            "sink.kafka.timeout: must be above zero",
            "sink.kafka.sasl.username: is empty",
            "sink.kafka.sasl.password: set exactly one of env, file",
            "\"highwater-event-id\" is set by the sink itself",
            "\"Nats-Msg-Id\" is set by the sink itself",
            "\"acks\" is set by the kafka sink itself",
            "\"ssl.ca.location\" is set by the kafka sink itself",
        ] {
            assert!(e.contains(needle), "missing {needle:?} in {e}");
        }
        assert!(!e.contains("linger.ms"), "{e}");
    }

    #[test]
    fn nats_mistakes_are_named() {
        spec(serde_json::json!({"nats": {"servers": ["nats://127.0.0.1:4222"], "subject": "events.{streamType}.{eventType}"}}))
            .validate("relay")
            .unwrap();
        let s = spec(serde_json::json!({"nats": {
            "servers": ["127.0.0.1"], "subject": "events.>.{streamType", "username": "u"
        }}));
        let e = s.validate("relay").unwrap_err().to_string();
        for needle in ["\"127.0.0.1\" is not nats://host:port", "without its '}'", "username and password go together"]
        {
            assert!(e.contains(needle), "missing {needle:?} in {e}");
        }
        let s = spec(serde_json::json!({"nats": {"servers": ["nats://h:4222"], "subject": "events..x"}}));
        assert!(s.validate("relay").unwrap_err().to_string().contains("empty tokens"));
    }

    #[test]
    fn two_sinks_with_kafka_are_refused() {
        let s = spec(serde_json::json!({"log": {}, "kafka": {"brokers": ["h:1"], "topic": "t"}}));
        assert!(
            s.validate("x").unwrap_err().to_string().contains("exactly one of sql, log, sse, webhook, kafka, nats")
        );
    }
}
