use std::time::Duration;

use crate::{ConsumerSpec, Delivery};

pub const MAX_MAX_ATTEMPTS: u32 = 1000;
pub const MAX_BATCH_SIZE: u32 = 10_000;
/// Partitions of a Shared consumer: beyond a few per dispatcher, a partition's read filters out most
/// of the rows it scans.
pub const MAX_PARTITIONS: u32 = 256;
/// Events an SSE client may fall behind before it is disconnected (`sink.sse.buffer`): the
/// dispatcher allocates the buffer up front.
pub const MAX_SSE_BUFFER: u32 = 1_000_000;

/// A whole-number field of a consumer spec: its path below `spec`, its range and its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumberField {
    pub path: &'static str,
    pub min: u32,
    pub max: u32,
    pub default: u32,
}

/// Every whole-number field of a consumer spec (`eventVersions` has its own rule).
pub const CONSUMER_NUMBERS: [NumberField; 4] = [
    NumberField { path: "maxAttempts", min: 1, max: MAX_MAX_ATTEMPTS, default: 10 },
    NumberField { path: "batchSize", min: 1, max: MAX_BATCH_SIZE, default: 100 },
    NumberField { path: "partitions", min: 1, max: MAX_PARTITIONS, default: 1 },
    NumberField { path: "sink.sse.buffer", min: 1, max: MAX_SSE_BUFFER, default: 1024 },
];

impl NumberField {
    /// The problem with `shown` (the value as written) in this field: the field, the range and
    /// the fix. `integer`: whether it is a whole number at all (then it is out of range).
    pub fn problem(&self, shown: &str, integer: bool) -> String {
        let what = if integer { "is out of range" } else { "is not a whole number" };
        format!(
            "{}: {shown} {what}: write a whole number from {} to {} (default {})",
            self.path, self.min, self.max, self.default
        )
    }

    fn check(&self, value: u32, problems: &mut Vec<String>) {
        if !(self.min..=self.max).contains(&value) {
            problems.push(self.problem(&value.to_string(), true));
        }
    }
}

/// Headers the webhook sink sets itself; a definition that set one would contradict them.
pub const RESERVED_WEBHOOK_HEADERS: [&str; 9] = [
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "traceparent",
    "tracestate",
];

/// Record headers the kafka and nats sinks set on every record from the event; a definition's
/// `headers` may not set them (nor anything else starting with `highwater-`).
pub const BROKER_HEADERS: [&str; 12] = [
    "highwater-event-id",
    "highwater-event-type",
    "highwater-stream-type",
    "highwater-stream-id",
    "highwater-stream-version",
    "highwater-tenant-id",
    "highwater-correlation-id",
    "highwater-causation-id",
    "highwater-created-at",
    "highwater-consumer",
    "traceparent",
    "tracestate",
];

/// librdkafka properties the kafka sink sets for its guarantees; `properties` may not change them.
pub const RESERVED_KAFKA_PROPERTIES: [&str; 9] = [
    "bootstrap.servers",
    "enable.idempotence",
    "acks",
    "request.required.acks",
    "security.protocol",
    "compression.codec",
    "compression.type",
    "transactional.id",
    "message.timeout.ms",
];

/// The placeholders of topic and subject templates, by sink.
pub const KAFKA_TOPIC_FIELDS: [&str; 3] = ["streamType", "eventType", "tenantId"];
pub const NATS_SUBJECT_FIELDS: [&str; 4] = ["streamType", "streamId", "eventType", "tenantId"];

/// Checks a `{field}` template: braces balanced, every placeholder one of `allowed`.
pub fn check_template(template: &str, allowed: &[&str]) -> Result<(), String> {
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return Err(format!("{template:?} has a '}}' without its '{{'"));
        }
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| format!("{template:?} has a '{{' without its '}}'"))?;
        let field = &after[..close];
        if !allowed.contains(&field) {
            return Err(format!(
                "{template:?}: {{{field}}} is not a placeholder; use one of {}",
                placeholders(allowed)
            ));
        }
        rest = &after[close + 1..];
    }
    if template.is_empty() {
        return Err("is empty".to_owned());
    }
    Ok(())
}

fn placeholders(allowed: &[&str]) -> String {
    allowed.iter().map(|f| format!("{{{f}}}")).collect::<Vec<_>>().join(", ")
}

/// An HTTP header name is a token (RFC 9110, section 5.1).
pub(crate) fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Everything wrong with a definition, each with the field it concerns and the fix.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{}", .problems.join("; "))]
pub struct SpecError {
    pub problems: Vec<String>,
}

/// Consumer names become metric labels, advisory-lock keys and Kubernetes names: keep them to a
/// DNS-1123 label.
pub fn validate_consumer_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "consumer name {name:?} is invalid: use 1-63 lowercase letters, digits and '-', \
             starting and ending with a letter or digit"
        ))
    }
}

/// PostgreSQL's largest `statement_timeout`: INT_MAX milliseconds.
pub const MAX_SQL_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// The error for a `sink.sql.timeout` over [`MAX_SQL_TIMEOUT`]; the dispatcher refuses one too.
pub fn sql_timeout_too_long(value: &str) -> String {
    format!(
        "sink.sql.timeout: {value:?} is over PostgreSQL's statement_timeout limit ({}); write at most that, or 0s for none",
        humantime::format_duration(MAX_SQL_TIMEOUT)
    )
}

pub(crate) fn duration(field: &str, value: &str, problems: &mut Vec<String>) -> Option<Duration> {
    match humantime::parse_duration(value) {
        Ok(d) => Some(d),
        Err(e) => {
            problems.push(format!("{field}: {value:?} is not a duration ({e}); write e.g. 500ms, 10s, 5m"));
            None
        }
    }
}

impl ConsumerSpec {
    /// Checks what the types cannot: bounds, the one-sink rule, mode/sink compatibility.
    pub fn validate(&self, name: &str) -> Result<(), SpecError> {
        let mut problems = Vec::new();
        if let Err(e) = validate_consumer_name(name) {
            problems.push(e);
        }
        let [attempts, batch, partitions, sse_buffer] = CONSUMER_NUMBERS;
        attempts.check(self.max_attempts, &mut problems);
        batch.check(self.batch_size, &mut problems);
        if let Some(b) = self.sink.sse.as_ref().and_then(|s| s.buffer) {
            sse_buffer.check(b, &mut problems);
        }
        if !(partitions.min..=partitions.max).contains(&self.partitions) {
            partitions.check(self.partitions, &mut problems);
        } else if self.partitions > 1 && self.delivery == crate::Delivery::PerInstance {
            problems.push(format!(
                "partitions: {} needs delivery: Shared (a PerInstance consumer delivers every event on every \
                 instance; there is nothing to split)",
                self.partitions
            ));
        } else if self.partitions > 1 && self.sink.sql.as_ref().is_some_and(|s| s.bootstrap.is_some()) {
            problems.push(format!(
                "partitions: {} cannot be combined with sink.sql.bootstrap (the bootstrap's snapshot is kept \
                 on one shard); bootstrap with partitions: 1, then raise it",
                self.partitions
            ));
        }
        if let Err(e) = validate_consumer_name(&self.group) {
            problems.push(format!("group: {}", e.replace("consumer name", "group name")));
        }
        for t in &self.event_types {
            if t.is_empty() {
                problems.push("eventTypes: an entry is empty".to_owned());
            }
        }
        let initial = duration("backoff.initial", &self.backoff.initial, &mut problems);
        let max = duration("backoff.max", &self.backoff.max, &mut problems);
        if let (Some(i), Some(m)) = (initial, max)
            && (i.is_zero() || i > m)
        {
            problems.push(format!(
                "backoff: initial ({}) must be above zero and at most max ({})",
                self.backoff.initial, self.backoff.max
            ));
        }
        let s = &self.sink;
        let sinks = [
            s.sql.is_some(),
            s.log.is_some(),
            s.sse.is_some(),
            s.webhook.is_some(),
            s.kafka.is_some(),
            s.nats.is_some(),
        ]
        .iter()
        .filter(|s| **s)
        .count();
        if sinks != 1 {
            problems
                .push(format!("sink: exactly one of sql, log, sse, webhook, kafka, nats must be set, found {sinks}"));
        }
        if let Some(k) = &self.sink.kafka {
            crate::validate_brokers::kafka(k, &mut problems);
        }
        if let Some(n) = &self.sink.nats {
            crate::validate_brokers::nats(n, &mut problems);
        }
        if let Some(sql) = &self.sink.sql {
            if sql.statement.trim().is_empty() {
                problems.push("sink.sql.statement: is empty".to_owned());
            }
            if let Some(role) = &sql.role
                && (role.is_empty() || role.len() > 63)
            {
                problems.push(format!("sink.sql.role: {role:?} is not a role name"));
            }
            if let Some(t) = &sql.timeout
                && let Some(d) = duration("sink.sql.timeout", t, &mut problems)
                && d > MAX_SQL_TIMEOUT
            {
                problems.push(sql_timeout_too_long(t));
            }
            for (field, v) in [("reset", &sql.reset), ("bootstrap", &sql.bootstrap)] {
                if v.as_ref().is_some_and(|v| v.trim().is_empty()) {
                    problems.push(format!("sink.sql.{field}: is empty (leave it out instead)"));
                }
            }
        }
        if let Some(w) = &self.sink.webhook {
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) || w.url.len() < 10 {
                problems.push(format!("sink.webhook.url: {:?} is not an http:// or https:// URL", w.url));
            }
            if let Some(t) = &w.timeout {
                duration("sink.webhook.timeout", t, &mut problems);
            }
            if let Some(s) = &w.secret
                && s.env.is_some() == s.file.is_some()
            {
                problems.push("sink.webhook.secret: set exactly one of env, file".to_owned());
            }
            for (header, value) in &w.headers {
                if !is_header_name(header) {
                    problems.push(format!("sink.webhook.headers: {header:?} is not a valid header name"));
                } else if RESERVED_WEBHOOK_HEADERS.contains(&header.to_ascii_lowercase().as_str()) {
                    problems
                        .push(format!("sink.webhook.headers: {header:?} is set by the webhook sink itself; remove it"));
                }
                // The value is not quoted: headers often carry tokens.
                if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
                    problems.push(format!("sink.webhook.headers: the value of {header:?} has control characters"));
                }
            }
        }
        if self.concurrency > 1 {
            if !(1..=256).contains(&self.concurrency) {
                problems.push(format!(
                    "concurrency: {} is out of range: write a whole number from 1 to 256 (default 1)",
                    self.concurrency
                ));
            } else if self.sink.webhook.as_ref().is_none_or(|w| w.batch) {
                problems.push(format!(
                    "concurrency: {} applies to a webhook sink with one request per event (batch: false); \
                     kafka, nats and log sinks have their whole batch in flight already (batchSize sets how \
                     much): remove concurrency, or set partitions to spread the consumer over dispatchers",
                    self.concurrency
                ));
            }
        } else if self.concurrency == 0 {
            problems.push("concurrency: 0 is out of range: write a whole number from 1 to 256 (default 1)".to_owned());
        }
        if self.ordering_key != crate::OrderingKey::Stream && self.concurrency <= 1 {
            problems.push(
                "orderingKey: applies with concurrency above 1 (one request at a time keeps every order); \
                 remove orderingKey or raise concurrency"
                    .to_owned(),
            );
        }
        if let Some(r) = &self.rate_limit {
            if !(r.per_second.is_finite() && r.per_second > 0.0 && r.per_second <= 1_000_000.0) {
                problems.push(format!(
                    "rateLimit.perSecond: {} is not a rate; write events a second above 0 and at most 1000000, \
                     e.g. perSecond: 200",
                    r.per_second
                ));
            }
            if let Some(b) = r.burst
                && !(1..=1_000_000).contains(&b)
            {
                problems.push(format!("rateLimit.burst: {b} is out of range; write 1 to 1000000 (or leave it out)"));
            }
            if self.sink.sql.is_some() || self.sink.sse.is_some() {
                problems.push(
                    "rateLimit: applies to external sinks (webhook, kafka, nats, log); a sql or sse sink is not \
                     rate limited: remove rateLimit"
                        .to_owned(),
                );
            }
        }
        if let Some(f) = &self.filter {
            if f.trim().is_empty() {
                problems.push("filter: is empty (leave it out to deliver every event)".to_owned());
            } else if f.contains(';') {
                problems.push(
                    "filter: one boolean expression, without `;` (e.g. filter: \"(payload->>'total')::numeric > 1000\")"
                        .to_owned(),
                );
            }
            if self.sink.sql.is_some() || self.sink.sse.is_some() {
                problems.push(
                    "filter: applies to external sinks (webhook, kafka, nats, log); a sql sink filters in its \
                     statement (WHERE): remove filter"
                        .to_owned(),
                );
            }
        }
        if self.sink.sse.is_some() && self.delivery != Delivery::PerInstance {
            problems.push(
                "sink.sse: server-sent events reach clients of one dispatcher instance, so they \
                 need `delivery: PerInstance`"
                    .to_owned(),
            );
        }
        if problems.is_empty() { Ok(()) } else { Err(SpecError { problems }) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SinkSpec, SqlSink, SseSink};

    /// `rateLimit` and `filter`: each problem names its field and the fix.
    #[test]
    fn rate_limits_and_filters_are_checked() {
        let webhook = |extra: serde_json::Value| -> ConsumerSpec {
            let mut v = serde_json::json!({"delivery": "Shared", "sink": {"webhook": {"url": "http://127.0.0.1:9/h"}}});
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            serde_json::from_value(v).unwrap()
        };
        let problems = |s: ConsumerSpec| s.validate("c").err().map(|e| e.problems).unwrap_or_default();
        assert!(problems(webhook(serde_json::json!({"rateLimit": {"perSecond": 200, "burst": 50}}))).is_empty());
        assert_eq!(webhook(serde_json::json!({"rateLimit": {"perSecond": 0.5}})).rate_limit.unwrap().burst(), 1);
        assert_eq!(webhook(serde_json::json!({"rateLimit": {"perSecond": 200}})).rate_limit.unwrap().burst(), 200);
        let p = problems(webhook(serde_json::json!({"rateLimit": {"perSecond": 0}})));
        assert!(
            p[0].starts_with("rateLimit.perSecond: 0 is not a rate") && p[0].contains("e.g. perSecond: 200"),
            "{p:?}"
        );
        let p = problems(webhook(serde_json::json!({"rateLimit": {"perSecond": 5, "burst": 0}})));
        assert!(p[0].starts_with("rateLimit.burst: 0 is out of range"), "{p:?}");
        let p = problems(webhook(serde_json::json!({"filter": "  "})));
        assert!(p[0].starts_with("filter: is empty"), "{p:?}");
        assert!(problems(webhook(serde_json::json!({"concurrency": 32, "orderingKey": "tenant"}))).is_empty());
        let key = |k: &str| webhook(serde_json::json!({"concurrency": 8, "orderingKey": k})).ordering_key;
        assert_eq!(key("payload.order.customer"), crate::OrderingKey::Payload(vec!["order".into(), "customer".into()]));
        assert_eq!(key("metadata.region"), crate::OrderingKey::Metadata("region".into()));
        for bad in ["customer", "payload.", "metadata.a.b", "payload.a..b", "Stream"] {
            let v = serde_json::json!({"delivery": "Shared", "orderingKey": bad, "sink": {"log": {}}});
            let e = serde_json::from_value::<ConsumerSpec>(v).expect_err(bad).to_string();
            assert!(e.contains("is not an ordering key") && e.contains("payload.A.B"), "{bad}: {e}");
        }
        let p = problems(webhook(serde_json::json!({"orderingKey": "none"})));
        assert!(p[0].starts_with("orderingKey: applies with concurrency above 1"), "{p:?}");
        let p = problems(webhook(serde_json::json!({"concurrency": 300})));
        assert!(p[0].starts_with("concurrency: 300 is out of range"), "{p:?}");
        let mut batch = webhook(serde_json::json!({"concurrency": 4}));
        batch.sink.webhook.as_mut().unwrap().batch = true;
        let p = problems(batch);
        assert!(p[0].starts_with("concurrency: 4 applies to a webhook sink with one request per event"), "{p:?}");
        let mut sql = spec();
        sql.filter = Some("true".into());
        sql.rate_limit = Some(crate::RateLimit { per_second: 5.0, burst: None });
        let p = problems(sql);
        assert!(p.iter().any(|p| p.starts_with("filter: applies to external sinks")), "{p:?}");
        assert!(p.iter().any(|p| p.starts_with("rateLimit: applies to external sinks")), "{p:?}");
    }

    fn spec() -> ConsumerSpec {
        serde_json::from_value(serde_json::json!({
            "delivery": "Shared",
            "sink": {"sql": {"statement": "select 1"}}
        }))
        .unwrap()
    }

    #[test]
    fn defaults_are_valid() {
        let s = spec();
        assert_eq!(s.max_attempts, 10);
        assert_eq!(s.batch_size, 100);
        assert_eq!(s.group, "default");
        s.validate("orders").unwrap();
    }

    #[test]
    fn sse_on_shared_is_refused() {
        let mut s = spec();
        s.sink = SinkSpec { sse: Some(SseSink::default()), ..Default::default() };
        let e = s.validate("live").unwrap_err();
        assert!(e.to_string().contains("delivery: PerInstance"), "{e}");
    }

    #[test]
    fn two_sinks_are_refused() {
        let mut s = spec();
        s.sink.log = Some(Default::default());
        assert!(s.validate("x").unwrap_err().to_string().contains("exactly one"));
    }

    #[test]
    fn bounds_and_names() {
        let mut s = spec();
        s.max_attempts = 0;
        s.batch_size = 20_000;
        s.sink.sql = Some(SqlSink { statement: " ".into(), timeout: Some("soon".into()), ..Default::default() });
        let e = s.validate("Bad_Name").unwrap_err();
        assert_eq!(e.problems.len(), 5, "{e}");
    }

    #[test]
    fn a_sql_timeout_over_postgresql_s_limit_is_refused() {
        let mut s = spec();
        s.sink.sql = Some(SqlSink { statement: "SELECT 1".into(), timeout: Some("24d".into()), ..Default::default() });
        s.validate("ok").expect("24 days is within the limit");
        s.sink.sql.as_mut().unwrap().timeout = Some("30d".into());
        let e = s.validate("ok").unwrap_err().to_string();
        assert!(e.contains("sink.sql.timeout") && e.contains("24days 20h 31m 23s 647ms"), "{e}");
    }

    #[test]
    fn webhook_headers_are_checked_at_validation() {
        let mut s = spec();
        s.sink.sql = None;
        s.sink.webhook = Some(crate::WebhookSink {
            url: "https://hooks.example.com/x".into(),
            batch: false,
            timeout: None,
            secret: None,
            headers: [("Webhook-Signature", "x"), ("bad header", "x"), ("x-token", "a\nb"), ("x-team", "billing")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        });
        let e = s.validate("hook").unwrap_err().to_string();
        assert!(e.contains("\"Webhook-Signature\" is set by the webhook sink itself"), "{e}");
        assert!(e.contains("\"bad header\" is not a valid header name"), "{e}");
        assert!(e.contains("the value of \"x-token\" has control characters"), "{e}");
        assert!(!e.contains("x-team") && !e.contains("a\nb"), "{e}");
    }

    #[test]
    fn hostile_consumer_names_are_refused_with_the_rule() {
        let long = "a".repeat(64);
        for name in ["", "x'; DROP TABLE highwater.events; --", "../etc", "a\"b", "a b", "-a", "a-", "Ünïcode", &long]
        {
            let e = validate_consumer_name(name).unwrap_err();
            assert!(e.contains("1-63 lowercase letters, digits and '-'"), "{name:?}: {e}");
        }
        for name in ["a", "order-projection", &"a".repeat(63)] {
            assert!(validate_consumer_name(name).is_ok(), "{name:?}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r: Result<ConsumerSpec, _> = serde_json::from_value(serde_json::json!({
            "delivery": "Shared", "maxAttempt": 3, "sink": {"log": {}}
        }));
        assert!(r.unwrap_err().to_string().contains("unknown field `maxAttempt`"));
    }
}
