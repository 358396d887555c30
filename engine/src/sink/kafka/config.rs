//! The librdkafka producer configuration a `kafka` sink spec declares. The properties behind the
//! delivery guarantee are fixed here and cannot be overridden by `properties` (the CRD validation
//! refuses them too).
use std::time::Duration;

use highwater_crds::{KafkaCompression, KafkaSink as KafkaSinkSpec, RESERVED_KAFKA_PROPERTIES};
use rdkafka::ClientConfig;

use crate::sink::secret;
use highwater_store::{Error, Result};

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

pub fn timeout(spec: &KafkaSinkSpec) -> Result<Duration> {
    let t = match &spec.timeout {
        None => return Ok(DEFAULT_TIMEOUT),
        Some(t) => humantime::parse_duration(t)
            .map_err(|e| Error::config(format!("sink.kafka.timeout: {t:?} is not a duration ({e})")))?,
    };
    if t < Duration::from_millis(100) {
        return Err(Error::config("sink.kafka.timeout: must be at least 100ms"));
    }
    Ok(t)
}

pub fn client_config(spec: &KafkaSinkSpec, timeout: Duration) -> Result<ClientConfig> {
    if spec.brokers.is_empty() {
        return Err(Error::config("sink.kafka.brokers: name at least one broker as host:port"));
    }
    let mut c = ClientConfig::new();
    for (k, v) in &spec.properties {
        if RESERVED_KAFKA_PROPERTIES.contains(&k.as_str()) || k.starts_with("sasl.") || k.starts_with("ssl.") {
            return Err(Error::config(format!(
                "sink.kafka.properties: {k:?} is set by the kafka sink itself; remove it"
            )));
        }
        c.set(k, v);
    }
    let ms = timeout.as_millis().to_string();
    c.set("bootstrap.servers", spec.brokers.join(","))
        // Idempotence: a retry inside the producer never writes a record twice nor reorders a
        // partition; acks=all: a record is acknowledged only once every in-sync replica has it.
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.type", spec.compression.unwrap_or(KafkaCompression::Zstd).as_str())
        // A record not acknowledged within the timeout fails its batch's attempt; the shard
        // retries with its backoff.
        .set("message.timeout.ms", &ms)
        // A request the broker does not answer (killed, network cut) fails within the same
        // bound, instead of librdkafka's 30 s, so the records are not left in flight.
        .set("request.timeout.ms", &ms)
        // An unknown topic fails in seconds (not librdkafka's default 30 s), so a missing topic
        // shows up in `last_error` while the broker still answers.
        .set("topic.metadata.propagation.max.ms", timeout.min(Duration::from_secs(5)).as_millis().to_string())
        .set("client.id", concat!("highwater/", env!("CARGO_PKG_VERSION")));
    if !spec.properties.contains_key("linger.ms") {
        // A batch is handed over at once and then awaited: a short linger only delays it.
        c.set("linger.ms", "2");
    }
    let protocol = match (spec.tls.is_some(), spec.sasl.is_some()) {
        (false, false) => "plaintext",
        (true, false) => "ssl",
        (false, true) => "sasl_plaintext",
        (true, true) => "sasl_ssl",
    };
    c.set("security.protocol", protocol);
    if let Some(tls) = &spec.tls {
        if let Some(ca) = &tls.ca_file {
            c.set("ssl.ca.location", ca);
        }
        match (&tls.cert_file, &tls.key_file) {
            (Some(cert), Some(key)) => {
                c.set("ssl.certificate.location", cert).set("ssl.key.location", key);
            }
            (None, None) => {}
            _ => return Err(Error::config("sink.kafka.tls: certFile and keyFile go together; set both or neither")),
        }
    }
    if let Some(sasl) = &spec.sasl {
        let password = secret::read("sink.kafka.sasl.password", &sasl.password)?;
        c.set("sasl.mechanism", sasl.mechanism.as_str())
            .set("sasl.username", &sasl.username)
            .set("sasl.password", password);
    }
    Ok(c)
}
