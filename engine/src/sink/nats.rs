//! The nats sink: JetStream publish of one message per event with `Nats-Msg-Id` = the event id, so
//! the stream drops a redelivery inside its duplicate window. The batch is published at once and
//! every acknowledgement awaited before the pass moves the cursor (at least once; exactly once
//! into the stream while redeliveries fall inside the window). No transaction is open meanwhile.
use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_nats::{
    ConnectErrorKind, ConnectOptions, HeaderMap,
    jetstream::{self, context::PublishErrorKind, message::PublishMessage},
};
use async_trait::async_trait;
use highwater_crds::{MAX_BATCH_SIZE, NATS_SUBJECT_FIELDS, NatsSink as NatsSinkSpec, RecordValue};

use super::{
    DeliveryContext, ExternalSink, SinkError,
    record::{self, Template},
    secret,
};
use highwater_store::{Error, Event, Result};

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

pub struct NatsSink {
    servers: Vec<String>,
    options: Box<dyn Fn() -> ConnectOptions + Send + Sync>,
    subject: Template,
    value: RecordValue,
    timeout: Duration,
    headers: Vec<(String, String)>,
    /// Connected on the first delivery, so a server that is down fails a delivery (and shows in
    /// `last_error`), not the consumer's start. The client reconnects by itself afterwards.
    js: tokio::sync::Mutex<Option<jetstream::Context>>,
    /// The connection's latest trouble (disconnected, authorization violation, ...), to explain
    /// a publish that timed out.
    last_event: Arc<Mutex<Option<String>>>,
}

impl NatsSink {
    /// Reads the credentials now (a missing secret stops the consumer with the field named).
    pub fn new(spec: &NatsSinkSpec) -> Result<Self> {
        if spec.servers.is_empty() {
            return Err(Error::config("sink.nats.servers: name at least one server as nats://host:port"));
        }
        let subject = Template::parse("sink.nats.subject", &spec.subject, &NATS_SUBJECT_FIELDS)?;
        let timeout = match &spec.timeout {
            None => DEFAULT_TIMEOUT,
            Some(t) => humantime::parse_duration(t)
                .map_err(|e| Error::config(format!("sink.nats.timeout: {t:?} is not a duration ({e})")))?,
        };
        if timeout.is_zero() {
            return Err(Error::config("sink.nats.timeout: must be above zero"));
        }
        let user = match (&spec.username, &spec.password) {
            (Some(u), Some(p)) => Some((u.clone(), secret::read("sink.nats.password", p)?)),
            (None, None) => None,
            _ => return Err(Error::config("sink.nats: username and password go together; set both or neither")),
        };
        let token = spec.token.as_ref().map(|t| secret::read("sink.nats.token", t)).transpose()?;
        let tls = spec.tls.clone();
        if let Some(t) = &tls
            && t.cert_file.is_some() != t.key_file.is_some()
        {
            return Err(Error::config("sink.nats.tls: certFile and keyFile go together; set both or neither"));
        }
        let last_event: Arc<Mutex<Option<String>>> = Arc::default();
        let events = last_event.clone();
        let options = move || {
            let events = events.clone();
            let mut o = ConnectOptions::new()
                .name(concat!("highwater/", env!("CARGO_PKG_VERSION")))
                .connection_timeout(timeout.min(Duration::from_secs(10)))
                // Reconnect for as long as it takes: the shard's retries and backoff decide
                // when to give up, not the client.
                .max_reconnects(None)
                .event_callback(move |e| {
                    let events = events.clone();
                    async move {
                        if !matches!(e, async_nats::Event::Connected) {
                            tracing::warn!(event = %e, "nats sink: connection event");
                            *events.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                        }
                    }
                });
            if let Some((u, p)) = &user {
                o = o.user_and_password(u.clone(), p.clone());
            }
            if let Some(t) = &token {
                o = o.token(t.clone());
            }
            if let Some(t) = &tls {
                o = o.require_tls(true);
                if let Some(ca) = &t.ca_file {
                    o = o.add_root_certificates(PathBuf::from(ca));
                }
                if let (Some(c), Some(k)) = (&t.cert_file, &t.key_file) {
                    o = o.add_client_certificate(PathBuf::from(c), PathBuf::from(k));
                }
            }
            o
        };
        Ok(NatsSink {
            servers: spec.servers.clone(),
            options: Box::new(options),
            subject,
            value: spec.value.unwrap_or(RecordValue::Payload),
            timeout,
            headers: spec.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            js: tokio::sync::Mutex::new(None),
            last_event,
        })
    }

    async fn context(&self) -> Result<jetstream::Context, String> {
        let mut js = self.js.lock().await;
        if let Some(c) = js.as_ref() {
            return Ok(c.clone());
        }
        let client = (self.options)().connect(self.servers.as_slice()).await.map_err(|e| {
            let hint = match e.kind() {
                ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                    " (check sink.nats username/password or token and the secret they come from)"
                }
                ConnectErrorKind::Tls => " (check sink.nats.tls and the server's certificate)",
                // rustls' verdicts on the server's certificate come as I/O errors.
                _ if e.to_string().contains("certificate") => {
                    " (check sink.nats.tls: does caFile name the CA that signed the server's certificate?)"
                }
                _ => "",
            };
            format!("nats: cannot connect to {}: {e}{hint}", self.servers.join(","))
        })?;
        let c = jetstream::ContextBuilder::new()
            .timeout(self.timeout)
            .ack_timeout(self.timeout)
            .max_ack_inflight(MAX_BATCH_SIZE as usize)
            .build(client);
        *js = Some(c.clone());
        Ok(c)
    }

    fn headers(&self, ctx: &DeliveryContext<'_>, index: usize, ev: &Event) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in record::headers(ctx, index, ev) {
            h.insert(k, v.as_str());
        }
        for (k, v) in &self.headers {
            h.insert(k.as_str(), v.as_str());
        }
        h
    }

    fn failed(&self, subject: &str, ev: &Event, e: &jetstream::context::PublishError) -> String {
        match e.kind() {
            PublishErrorKind::StreamNotFound => format!(
                "nats: subject {subject:?}: event {}: no JetStream stream captures the subject (create a stream \
                 whose subjects include it)",
                ev.id
            ),
            PublishErrorKind::TimedOut => {
                let mut m = format!(
                    "nats: subject {subject:?}: event {} not acknowledged within {}",
                    ev.id,
                    humantime::format_duration(self.timeout)
                );
                if let Some(last) = self.last_event.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    m.push_str(&format!("; last connection event: {last}"));
                }
                m
            }
            _ => format!("nats: subject {subject:?}: event {}: {e}", ev.id),
        }
    }
}

/// A publish subject: tokens split by '.', none empty, no wildcard or whitespace.
fn subject_ok(s: &str) -> bool {
    !s.is_empty() && !s.contains(['*', '>', ' ', '\t', '\r', '\n']) && s.split('.').all(|t| !t.is_empty())
}

#[async_trait]
impl ExternalSink for NatsSink {
    fn kind(&self) -> &'static str {
        "nats"
    }

    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        let js = self.context().await.map_err(|message| SinkError::at(0, message))?;
        let mut pending = Vec::with_capacity(events.len());
        let mut publish_error = None;
        for (index, ev) in events.iter().enumerate() {
            let subject = self.subject.render(ev);
            if !subject_ok(&subject) {
                publish_error = Some(SinkError::at(
                    index,
                    format!(
                        "nats: event {}: subject {subject:?} is not a publish subject (an event field put a \
                         wildcard, whitespace or an empty token in it)",
                        ev.id
                    ),
                ));
                break;
            }
            // A failure stops queueing but not the wait below: the events before it count as
            // delivered only once acknowledged.
            let value = match record::value(self.value, ctx, ev) {
                Ok(v) => v,
                Err(e) => {
                    publish_error = Some(SinkError::at(index, format!("nats: encoding event {}: {e}", ev.id)));
                    break;
                }
            };
            let msg = PublishMessage::build()
                .payload(value.into())
                .headers(self.headers(ctx, index, ev))
                .message_id(ev.id.to_string());
            match js.send_publish(subject.clone(), msg).await {
                Ok(ack) => pending.push((subject, ack)),
                Err(e) => {
                    publish_error = Some(SinkError::at(index, self.failed(&subject, ev, &e)));
                    break;
                }
            }
        }
        // Await every acknowledgement (each bounded by the timeout), so nothing of this attempt
        // is still in flight when the next one starts; the first failure decides.
        let mut first_failure = None;
        for (index, (subject, ack)) in pending.into_iter().enumerate() {
            let res = ack.await;
            if first_failure.is_none()
                && let Err(e) = res
            {
                first_failure = Some(SinkError::at(index, self.failed(&subject, &events[index], &e)));
            }
        }
        match first_failure.or(publish_error) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_checked() {
        assert!(subject_ok("events.order.OrderPlaced"));
        for bad in ["", "a..b", ".a", "a.*", "a.>", "a b"] {
            assert!(!subject_ok(bad), "{bad:?}");
        }
    }

    #[test]
    fn missing_credentials_are_refused_at_build() {
        let spec: NatsSinkSpec = serde_json::from_value(serde_json::json!({
            "servers": ["nats://127.0.0.1:4222"], "subject": "events",
            "username": "u", "password": {"env": "HIGHWATER_TEST_NO_SUCH_VAR"}
        }))
        .unwrap();
        let e = NatsSink::new(&spec).err().unwrap().to_string();
        assert!(e.contains("sink.nats.password") && e.contains("HIGHWATER_TEST_NO_SUCH_VAR is not set"), "{e}");
    }
}
