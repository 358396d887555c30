use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::status::EventConsumerStatus;

/// What an `EventConsumer` declares. Field names are the YAML/Kubernetes names (camelCase).
/// The same document works with `kubectl apply` (the operator) and `highwater consumer apply`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "highwater.dev",
    version = "v1alpha1",
    kind = "EventConsumer",
    namespaced,
    shortname = "ec",
    status = "EventConsumerStatus",
    doc = "A consumer of highwater events: its delivery mode, retries, filter and sink.",
    printcolumn(name = "Delivery", type_ = "string", json_path = ".spec.delivery"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Lag", type_ = "integer", json_path = ".status.totalLag"),
    printcolumn(name = "Partitions", type_ = "string", json_path = ".status.partitions"),
    printcolumn(name = "Rebuild", type_ = "string", json_path = ".status.rebuild"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.matches('^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$')")
        .message("metadata.name must be a DNS-1123 label (1-63 lowercase letters, digits and '-')")
)]
#[x_kube(
    validation = Rule::new("!has(self.sink.sse) || self.delivery == 'PerInstance'")
        .message("sink.sse needs delivery: PerInstance (SSE clients are attached to one dispatcher instance)"),
    validation = Rule::new("!has(self.partitions) || self.partitions == 1 || self.delivery == 'Shared'")
        .message("partitions above 1 need delivery: Shared (a PerInstance consumer delivers every event on every instance)"),
    validation = Rule::new("has(self.consumerName) == has(oldSelf.consumerName) && (!has(self.consumerName) || self.consumerName == oldSelf.consumerName)")
        .message("consumerName is immutable: the consumer's cursors belong to its name; create a new resource instead")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConsumerSpec {
    /// Name of the consumer in the database; defaults to the resource name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"))]
    pub consumer_name: Option<String>,
    /// `Shared`: exactly one dispatcher delivers each event. `PerInstance`: every dispatcher
    /// instance delivers every event (process-local effects such as SSE).
    #[x_kube(validation = Rule::new("self == oldSelf").message("delivery is immutable: its cursors belong to the mode; create a new consumer instead"))]
    pub delivery: Delivery,
    /// Dispatcher group that runs this consumer (`highwater dispatch --group`).
    #[serde(default = "default_group")]
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"))]
    pub group: String,
    /// Attempts per event before the shard goes `dead` (or, with `errorMode: skip`, before the
    /// event is parked in the dead-letter table).
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_attempts: u32,
    /// Events read and delivered per pass.
    #[serde(default = "default_batch_size")]
    #[schemars(range(min = 1, max = 10000))]
    pub batch_size: u32,
    /// Shared consumers only: split the events by a stable hash of (stream type, stream id) into
    /// this many partitions, each a shard with its own cursor, delivered in parallel by the
    /// group's dispatchers (each takes its share). One stream's events stay in one partition, in
    /// order. Changing it waits for every partition to reach one position (a barrier), then splits
    /// anew from there: nothing lost, nothing applied twice by a SQL sink.
    #[serde(default = "default_partitions", skip_serializing_if = "is_one")]
    #[schemars(range(min = 1, max = 256))]
    pub partitions: u32,
    /// Event types delivered; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_types: Vec<String>,
    /// How payloads of event types with versions are read (docs/events.md, "Versions"): absent
    /// or `stored`, as appended; `latest`, every event upcast to the latest version of its type
    /// (the upcasts registered with the versions, applied on read for every sink, rebuilds and
    /// redrives included); or per type, `{OrderPlaced: latest, OrderShipped: 2}` (a number: up to
    /// that version; a type not named reads as stored). Needs dispatchers of release 0.4.0 with
    /// event versions (schema version 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "event_versions_schema")]
    pub event_versions: Option<EventVersions>,
    /// Where a new shard starts: `earliest` (default for Shared) or `latest` (default for
    /// PerInstance, which has no history to replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_from: Option<StartFrom>,
    /// `halt` stops the shard on a poison event (status `dead`); `skip` parks it and goes on;
    /// `skipStream` parks it and every later event of its stream (until it is redriven) while
    /// other streams go on.
    #[serde(default)]
    pub error_mode: ErrorMode,
    /// Retry backoff between failed attempts.
    #[serde(default)]
    pub backoff: Backoff,
    /// A suspended consumer's shards are `disabled`: nothing is delivered, nothing is lost.
    #[serde(default)]
    pub suspend: bool,
    /// Webhook sink: up to this many requests of one shard in flight at once, events of one
    /// ordering key (`orderingKey`) never concurrently and always in order. 1 (the default):
    /// one request at a time.
    #[serde(default = "default_partitions", skip_serializing_if = "is_one")]
    #[schemars(range(min = 1, max = 256))]
    pub concurrency: u32,
    /// With `concurrency` above 1: which events keep their order. `stream` (the default): the
    /// events of one stream (stream type and id); `tenant`: of one tenant; `metadata.FIELD`: of
    /// one value of that metadata field; `payload.A.B`: of one value at that path of the payload
    /// (objects only; an event without it has the empty key); `none`: no order.
    #[serde(default, skip_serializing_if = "OrderingKey::is_stream")]
    #[schemars(with = "String", regex(pattern = r"^(stream|tenant|none|metadata\.[^.\s]+|payload(\.[^.\s]+)+)$"))]
    pub ordering_key: OrderingKey,
    /// External sinks (webhook, kafka, nats, log): at most `perSecond` events a second for the
    /// consumer as a whole, across all its dispatchers (a token bucket in the database, not a
    /// limit per pod), with bursts of up to `burst` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// A SQL boolean expression over the event (`payload`, `metadata`, `stream_type`,
    /// `stream_id`, `tenant_id`, `event_type`, `id`, `created_at`), evaluated in the database's
    /// read: only events for which it is true are delivered; the others never leave the
    /// database. Checked at apply time by PostgreSQL (read-only, immutable or stable functions
    /// only). A change applies from the cursor on; `consumer rewind` re-evaluates history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Where events go. Exactly one sink.
    pub sink: SinkSpec,
    /// What deleting the resource does: `Delete` removes the consumer and its cursors, `Retain`
    /// keeps them, disabled. Only the operator reads it.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

/// `spec.eventVersions`: one choice for every type, or one per type.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged, try_from = "serde_json::Value")]
pub enum EventVersions {
    All(VersionChoice),
    PerType(BTreeMap<String, VersionChoice>),
}

/// `latest`, `stored`, or a version number.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum VersionChoice {
    Keyword(VersionKeyword),
    Version(u32),
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum VersionKeyword {
    Latest,
    Stored,
}

impl VersionChoice {
    fn want(self) -> Option<serde_json::Value> {
        match self {
            VersionChoice::Keyword(VersionKeyword::Stored) => None,
            VersionChoice::Keyword(VersionKeyword::Latest) => Some(serde_json::Value::from("latest")),
            VersionChoice::Version(n) => Some(serde_json::Value::from(n)),
        }
    }
}

impl TryFrom<serde_json::Value> for EventVersions {
    type Error = String;

    fn try_from(v: serde_json::Value) -> Result<Self, String> {
        fn choice(v: &serde_json::Value, at: &str) -> Result<VersionChoice, String> {
            match v {
                serde_json::Value::String(s) if s == "latest" => Ok(VersionChoice::Keyword(VersionKeyword::Latest)),
                serde_json::Value::String(s) if s == "stored" => Ok(VersionChoice::Keyword(VersionKeyword::Stored)),
                serde_json::Value::Number(n) if n.as_u64().is_some_and(|n| (1..=u64::from(u32::MAX)).contains(&n)) => {
                    Ok(VersionChoice::Version(n.as_u64().unwrap_or(1) as u32))
                }
                other => Err(format!(
                    "eventVersions{at}: {other} is not `latest`, `stored` or a version number (1 or more); \
                     write e.g. `eventVersions: latest` or `eventVersions: {{OrderPlaced: latest, OrderShipped: 2}}`"
                )),
            }
        }
        match &v {
            serde_json::Value::Object(m) => m
                .iter()
                .map(|(t, c)| choice(c, &format!(".{t}")).map(|c| (t.clone(), c)))
                .collect::<Result<BTreeMap<_, _>, _>>()
                .map(EventVersions::PerType),
            other => choice(other, "").map(EventVersions::All),
        }
    }
}

impl EventVersions {
    /// The choice as `highwater.upcast_for` takes it (`{"*": "latest"}`, `{"OrderPlaced": 2}`);
    /// `None` when every type reads as stored (no upcast is called at all).
    pub fn want(&self) -> Option<serde_json::Value> {
        let map: serde_json::Map<String, serde_json::Value> = match self {
            EventVersions::All(c) => c.want().map(|w| ("*".to_owned(), w)).into_iter().collect(),
            EventVersions::PerType(m) => m.iter().filter_map(|(t, c)| c.want().map(|w| (t.clone(), w))).collect(),
        };
        (!map.is_empty()).then_some(serde_json::Value::Object(map))
    }
}

/// A string or a map of type → string or number: the CRD leaves its shape to the dispatcher's
/// validation (a structural schema cannot say "a string or an object").
fn event_versions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "How payloads of versioned event types are read: `stored` (default), `latest`, or per type {OrderPlaced: latest, OrderShipped: 2}.",
        "x-kubernetes-preserve-unknown-fields": true,
        "nullable": true
    })
}

impl EventConsumer {
    /// The consumer's name in the database: `spec.consumerName`, else the resource name.
    pub fn consumer_name(&self) -> String {
        self.spec.consumer_name.clone().unwrap_or_else(|| self.name_any())
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeletionPolicy {
    #[default]
    Delete,
    Retain,
}

/// `consumers.delivery` (text, checked by the schema): the store decodes it and binds it as this
/// enum, never spells it in a statement.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Encode, sqlx::Decode))]
pub enum Delivery {
    Shared,
    PerInstance,
}

// `text` by its built-in OID (what `#[sqlx(type_name = "text")]` would look up by name, one
// catalog query per connection before the first statement that binds a delivery mode).
#[cfg(feature = "sqlx")]
impl sqlx::Type<sqlx::Postgres> for Delivery {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <&str as sqlx::Type<sqlx::Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Shared => "Shared",
            Delivery::PerInstance => "PerInstance",
        }
    }
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so that table columns (`{:<11}`) line up.
        f.pad(self.as_str())
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StartFrom {
    Earliest,
    Latest,
}

impl StartFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            StartFrom::Earliest => "earliest",
            StartFrom::Latest => "latest",
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ErrorMode {
    #[default]
    Halt,
    Skip,
    /// Skip, and park every later event of the failing event's stream (stream type and id) as
    /// a dead letter blocked by it, until it is redriven: per-stream order kept.
    #[serde(rename = "skipStream")]
    SkipStream,
}

impl ErrorMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorMode::Halt => "halt",
            ErrorMode::Skip => "skip",
            ErrorMode::SkipStream => "skipStream",
        }
    }
}

/// `spec.orderingKey`: the events that are delivered one after the other, in order; written as
/// `stream`, `tenant`, `none`, `metadata.FIELD` or `payload.A.B`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(try_from = "String", into = "String")]
pub enum OrderingKey {
    #[default]
    Stream,
    Tenant,
    None,
    /// The value of this top-level metadata field.
    Metadata(String),
    /// The value at this path of the payload (object keys).
    Payload(Vec<String>),
}

impl OrderingKey {
    fn is_stream(&self) -> bool {
        *self == OrderingKey::Stream
    }
}

impl TryFrom<String> for OrderingKey {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let fix = "write stream, tenant, none, metadata.FIELD or payload.A.B (object keys separated by dots)";
        let field = |rest: &str| !rest.is_empty() && !rest.chars().any(char::is_whitespace);
        Ok(match s.as_str() {
            "stream" => OrderingKey::Stream,
            "tenant" => OrderingKey::Tenant,
            "none" => OrderingKey::None,
            _ => match s.split_once('.') {
                Some(("metadata", f)) if field(f) && !f.contains('.') => OrderingKey::Metadata(f.to_owned()),
                Some(("payload", path)) if path.split('.').all(field) => {
                    OrderingKey::Payload(path.split('.').map(str::to_owned).collect())
                }
                _ => return Err(format!("orderingKey {s:?} is not an ordering key: {fix}")),
            },
        })
    }
}

impl From<OrderingKey> for String {
    fn from(k: OrderingKey) -> String {
        match k {
            OrderingKey::Stream => "stream".into(),
            OrderingKey::Tenant => "tenant".into(),
            OrderingKey::None => "none".into(),
            OrderingKey::Metadata(f) => format!("metadata.{f}"),
            OrderingKey::Payload(p) => format!("payload.{}", p.join(".")),
        }
    }
}

/// `spec.rateLimit`: a token bucket shared by the consumer's dispatchers.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimit {
    /// Events a second, for the consumer as a whole (e.g. `200`, or `0.5` for one every two
    /// seconds); above zero, at most 1000000.
    pub per_second: f64,
    /// Events that may go at once after a quiet spell (the bucket's size); default one second's
    /// worth (`perSecond` rounded up), at least 1, at most 1000000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub burst: Option<u32>,
}

impl RateLimit {
    /// The bucket's size: `burst`, or one second's worth.
    pub fn burst(&self) -> u32 {
        self.burst.unwrap_or_else(|| self.per_second.ceil().clamp(1.0, 1_000_000.0) as u32)
    }
}

/// Exponential backoff bounds, as durations such as `200ms`, `5s`, `10m`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Backoff {
    /// Delay before the first retry, and the shortest delay of any retry; each further failure
    /// doubles the delay's upper bound, up to max.
    #[serde(default = "default_backoff_initial")]
    pub initial: String,
    /// The longest delay between retries, jitter included (jitter only lowers a delay, by at most
    /// half, never below initial).
    #[serde(default = "default_backoff_max")]
    pub max: String,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: default_backoff_initial(), max: default_backoff_max() }
    }
}

/// One of the sinks; set exactly one field.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = Rule::new("[has(self.sql), has(self.log), has(self.sse), has(self.webhook), has(self.kafka), has(self.nats)].filter(x, x).size() == 1")
    .message("set exactly one sink: sql, log, sse, webhook, kafka or nats"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SinkSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<SqlSink>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogSink>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse: Option<SseSink>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookSink>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaSink>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats: Option<NatsSink>,
}

/// Runs a SQL statement in the transaction that advances the cursor: exactly once. In the
/// `perEvent` form (the default) the statement runs once per event with parameters `$1` payload
/// (jsonb), `$2` event id (bigint), `$3` stream type, `$4` stream id, `$5` event type, `$6` tenant
/// id (NULL for the system tenant), `$7` metadata (jsonb), `$8` stream version (bigint, may be
/// NULL), `$9` created at (timestamptz). In the `set` form it runs once per batch over the
/// relation `highwater_batch`, whose columns are those nine: `payload`, `id`, `stream_type`,
/// `stream_id`, `event_type`, `tenant_id`, `metadata`, `stream_version`, `created_at`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SqlSink {
    pub statement: String,
    /// `perEvent` (default): the statement runs once per event with `$1`..`$9`. `set`: once per
    /// batch, reading the events from `highwater_batch`.
    #[serde(default, skip_serializing_if = "SqlForm::is_per_event")]
    pub form: SqlForm,
    /// Role taken with `SET LOCAL ROLE` while the statement runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// `statement_timeout` for the sink's statements (a duration such as `30s`; default 30s, `0s`
    /// for none; at most PostgreSQL's limit, about 24 days 20 hours). It limits a whole batch:
    /// a timeout while the first event runs fails that event; in the per-event form, a later one
    /// ends the batch before the running event, where the next batch starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// SQL run by a rebuild (`highwater consumer rebuild`, annotation `highwater.dev/rebuild`) in
    /// the same transaction that rewinds the cursor, e.g. `TRUNCATE order_totals`: the read model
    /// is emptied and refilled from the first event with no moment in between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<String>,
    /// SQL that fills the read model from the application's current tables, run once when the
    /// consumer is created (and by a rebuild when events it needs were pruned), in one snapshot;
    /// the cursor is placed so that exactly the events that snapshot did not see are delivered
    /// afterwards. The shard stays disabled until it has run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<String>,
}

/// How a SQL sink's statement sees the events.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub enum SqlForm {
    #[default]
    PerEvent,
    Set,
}

impl SqlForm {
    pub fn as_str(self) -> &'static str {
        match self {
            SqlForm::PerEvent => "perEvent",
            SqlForm::Set => "set",
        }
    }

    fn is_per_event(&self) -> bool {
        *self == SqlForm::PerEvent
    }
}

/// Writes each event as one JSON line.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogSink {
    /// `stdout` (default), `stderr`, or a file path to append to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// HTTP POST of each event (or of each batch) as JSON, following the Standard Webhooks
/// convention: `webhook-id` (the idempotency key `consumer:event_id`), `webhook-timestamp`,
/// `webhook-signature` (HMAC-SHA256 with the secret). At least once.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookSink {
    /// `http://` or `https://` URL the events are POSTed to.
    pub url: String,
    /// POST each batch as one JSON array instead of one request per event.
    #[serde(default)]
    pub batch: bool,
    /// Request timeout (default 10s); a timeout is a failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Signing secret, from an environment variable of the dispatcher or a file it can read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretRef>,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// Where a secret comes from; set exactly one field. The value never appears in a definition.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRef {
    /// Name of an environment variable of the dispatcher process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Path of a file (e.g. a mounted Kubernetes Secret); surrounding whitespace is trimmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// Publishes each event as one Kafka record with an idempotent producer (`acks=all`); the cursor
/// moves only after the brokers acknowledged every record of the batch. At least once: every
/// record carries the event id (header `highwater-event-id`) for consumers to drop redeliveries.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KafkaSink {
    /// Bootstrap brokers, `host:port`.
    #[schemars(length(min = 1))]
    pub brokers: Vec<String>,
    /// Topic, fixed or a template of `{streamType}`, `{eventType}` and `{tenantId}` (e.g.
    /// `events.{streamType}`).
    pub topic: String,
    /// What the record key is: `streamId` (default; one stream's events stay ordered on one
    /// partition), `streamTypeAndId` (`type/id`), `eventId` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<RecordKey>,
    /// `payload` (default: the event's JSON payload) or `envelope` (the JSON object the webhook
    /// and log sinks emit, with the event's fields and metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<RecordValue>,
    /// `none`, `gzip`, `snappy`, `lz4` or `zstd` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<KafkaCompression>,
    /// How long one batch may wait for the brokers' acknowledgements (default 30s); then the
    /// attempt fails and is retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// TLS to the brokers (`security.protocol` SSL or SASL_SSL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<BrokerTls>,
    /// SASL authentication (`security.protocol` SASL_PLAINTEXT, or SASL_SSL with tls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<KafkaSasl>,
    /// Extra record headers, the same on every record.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Further librdkafka producer properties (e.g. `linger.ms`); the ones this sink sets for
    /// its guarantees (idempotence, acks, security) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// The record key of a broker sink.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum RecordKey {
    StreamId,
    StreamTypeAndId,
    EventId,
    None,
}

/// The record value of a broker sink.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum RecordValue {
    Payload,
    Envelope,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum KafkaCompression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl KafkaCompression {
    pub fn as_str(self) -> &'static str {
        match self {
            KafkaCompression::None => "none",
            KafkaCompression::Gzip => "gzip",
            KafkaCompression::Snappy => "snappy",
            KafkaCompression::Lz4 => "lz4",
            KafkaCompression::Zstd => "zstd",
        }
    }
}

/// TLS to a broker. Paths are files the dispatcher can read (e.g. a mounted Secret).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BrokerTls {
    /// PEM file of the CA certificates that sign the brokers' certificates; default the system's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// PEM client certificate for mutual TLS (with keyFile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    /// PEM private key of the client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
}

/// SASL credentials for Kafka; the password comes from a secret, never from the definition.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KafkaSasl {
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: SecretRef,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// Publishes each event to NATS JetStream with `Nats-Msg-Id` = the event id, so the stream drops
/// a redelivery within its duplicate window; the cursor moves only after JetStream acknowledged
/// every message of the batch. At least once beyond the window.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NatsSink {
    /// Server URLs, `nats://host:port` (or `tls://`).
    #[schemars(length(min = 1))]
    pub servers: Vec<String>,
    /// Subject, fixed or a template of `{streamType}`, `{streamId}`, `{eventType}` and
    /// `{tenantId}` (e.g. `events.{streamType}.{eventType}`). A JetStream stream must capture it.
    pub subject: String,
    /// `payload` (default) or `envelope`, as for the kafka sink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<RecordValue>,
    /// How long one batch may wait for JetStream's acknowledgements (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Require TLS; with a CA file, trust only that CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<BrokerTls>,
    /// User name for user/password authentication (with password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<SecretRef>,
    /// Token authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<SecretRef>,
    /// Extra message headers, the same on every message.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// Server-sent events to clients connected to the dispatcher instance (PerInstance only).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SseSink {
    /// Events buffered per client before a slow client is disconnected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer: Option<u32>,
}

fn default_group() -> String {
    "default".to_owned()
}
fn default_max_attempts() -> u32 {
    10
}
fn default_partitions() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn default_batch_size() -> u32 {
    100
}
fn default_backoff_initial() -> String {
    "500ms".to_owned()
}
fn default_backoff_max() -> String {
    "5m".to_owned()
}

impl ConsumerSpec {
    /// The start position in effect: the declared one, or the default for the delivery mode.
    pub fn effective_start_from(&self) -> StartFrom {
        self.start_from.unwrap_or(match self.delivery {
            Delivery::Shared => StartFrom::Earliest,
            Delivery::PerInstance => StartFrom::Latest,
        })
    }

    pub fn sink_kind(&self) -> &'static str {
        if self.sink.sql.is_some() {
            "sql"
        } else if self.sink.log.is_some() {
            "log"
        } else if self.sink.sse.is_some() {
            "sse"
        } else if self.sink.webhook.is_some() {
            "webhook"
        } else if self.sink.kafka.is_some() {
            "kafka"
        } else if self.sink.nats.is_some() {
            "nats"
        } else {
            "none"
        }
    }
}
