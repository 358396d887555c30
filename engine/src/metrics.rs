//! The dispatcher's Prometheus metrics. Labels stay bounded: consumer and instance names and the
//! four shard statuses, never event ids or error text.
use std::sync::atomic::AtomicU64;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        exemplar::HistogramWithExemplars,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use highwater_store::shards::Status;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabels {
    pub consumer: String,
    pub instance_id: String,
}

impl ShardLabels {
    pub fn new(consumer: &str, instance_id: &str) -> Self {
        ShardLabels { consumer: consumer.to_owned(), instance_id: instance_id.to_owned() }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub consumer: String,
    pub instance_id: String,
    pub status: String,
}

/// A consumer's sink: `kind` is the sink's kind (`kafka`, `nats`, `webhook`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub consumer: String,
    pub sink: String,
}

/// `outcome`: `used` or `discarded` (see [`highwater_store::read_ahead`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadAheadLabels {
    pub consumer: String,
    pub instance_id: String,
    pub outcome: &'static str,
}

/// `outcome` of a shard's part in a group pass (dispatch/group.rs): `delivered` (batch applied
/// and cursor moved with the group), `moved` (cursor moved past other types' events), `alone`
/// (its own pass ran instead), `failed` (its batch failed; its own claim handled the failure),
/// `busy` (another process held it).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    pub outcome: &'static str,
    /// The member's sink kind (`sql`, `webhook`, `log`, …).
    pub sink: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsumerLabels {
    pub consumer: String,
}

/// Why a consumer waited: `cause` is `receiver` (a `Retry-After` it answered) or `rateLimit`
/// (`spec.rateLimit`'s bucket was empty).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ThrottleLabels {
    pub consumer: String,
    pub cause: &'static str,
}

type HistogramFamily = Family<ShardLabels, Histogram, fn() -> Histogram>;

/// The exemplar of a delivery-latency observation: the trace of the observed event (issue 48),
/// so that a Grafana panel links a latency spike to one trace. `trace_id` is the label name
/// Grafana's Prometheus data source looks for by default.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TraceExemplar {
    pub trace_id: String,
}

type LatencyWithExemplars = HistogramWithExemplars<TraceExemplar>;

fn latency_with_exemplars() -> LatencyWithExemplars {
    HistogramWithExemplars::new(exponential_buckets(0.001, 2.0, 17))
}

fn latency_histogram() -> Histogram {
    // 1 ms .. ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

pub struct Metrics {
    registry: Registry,
    pub lag_events: Family<ShardLabels, Gauge>,
    pub lag_seconds: Family<ShardLabels, Gauge<f64, AtomicU64>>,
    pub processed: Family<ShardLabels, Counter>,
    pub failed: Family<ShardLabels, Counter>,
    pub passes_failed: Family<ShardLabels, Counter>,
    pub passes_skipped: Family<ShardLabels, Counter>,
    /// With exemplars (trace ids) while tracing is on; each bucket keeps its latest.
    pub delivery_latency: Family<ShardLabels, LatencyWithExemplars, fn() -> LatencyWithExemplars>,
    pub handler_duration: HistogramFamily,
    pub shard_status: Family<StatusLabels, Gauge>,
    pub attempts: Family<ShardLabels, Gauge>,
    pub fence_age: Gauge<f64, AtomicU64>,
    pub heartbeat_age: Family<ShardLabels, Gauge<f64, AtomicU64>>,
    pub rebuild_done: Family<ShardLabels, Gauge>,
    pub rebuild_total: Family<ShardLabels, Gauge>,
    pub ready: Gauge,
    pub sink_errors: Family<SinkLabels, Counter>,
    pub sink_publish: Family<SinkLabels, Histogram, fn() -> Histogram>,
    pub partitions_owned: Family<ConsumerLabels, Gauge>,
    pub read_ahead: Family<ReadAheadLabels, Counter>,
    pub group_passes: Counter,
    pub group_reads: Counter,
    pub group_parts: Family<GroupLabels, Counter>,
    pub throttled_seconds: Family<ThrottleLabels, Counter<f64, AtomicU64>>,
    pub receiver_pauses: Family<ConsumerLabels, Counter>,
    pub receiver_gone: Family<ConsumerLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("highwater");
        let m = Metrics {
            lag_events: Family::default(),
            lag_seconds: Family::default(),
            processed: Family::default(),
            failed: Family::default(),
            passes_failed: Family::default(),
            passes_skipped: Family::default(),
            delivery_latency: Family::new_with_constructor(latency_with_exemplars),
            handler_duration: Family::new_with_constructor(latency_histogram),
            shard_status: Family::default(),
            attempts: Family::default(),
            fence_age: Gauge::default(),
            heartbeat_age: Family::default(),
            rebuild_done: Family::default(),
            rebuild_total: Family::default(),
            ready: Gauge::default(),
            sink_errors: Family::default(),
            sink_publish: Family::new_with_constructor(latency_histogram),
            partitions_owned: Family::default(),
            read_ahead: Family::default(),
            group_passes: Counter::default(),
            group_reads: Counter::default(),
            group_parts: Family::default(),
            throttled_seconds: Family::default(),
            receiver_pauses: Family::default(),
            receiver_gone: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "consumer_lag_events",
            "Committed events of the consumer's types after the shard's cursor",
            m.lag_events.clone(),
        );
        registry.register(
            "consumer_lag_seconds",
            "Age of the oldest committed event the shard has not delivered (0 when caught up)",
            m.lag_seconds.clone(),
        );
        registry.register(
            "consumer_partitions_owned",
            "Partitions of a partitioned Shared consumer that this dispatcher delivers: its share among the \
             group's live dispatchers",
            m.partitions_owned.clone(),
        );
        registry.register("events_processed", "Events delivered and acknowledged by the sink", m.processed.clone());
        registry.register(
            "events_failed",
            "Failed delivery attempts (one per failing event per attempt)",
            m.failed.clone(),
        );
        registry.register(
            "passes_failed",
            "Passes that failed before any event was to blame (a batch that cannot commit, a statement or \
             connection the database refuses): retried with backoff, no attempt counted",
            m.passes_failed.clone(),
        );
        registry.register(
            "passes_skipped",
            "Head moves after which the shard ran no pass: none of the new events is of its types, so its cursor \
             stays behind the head (the lazy cursor) for at most --lazy-cursor-interval",
            m.passes_skipped.clone(),
        );
        registry.register(
            "delivery_latency_seconds",
            "From the event's insert to the sink's acknowledgement",
            m.delivery_latency.clone(),
        );
        registry.register("handler_duration_seconds", "Time the sink took per batch", m.handler_duration.clone());
        registry.register(
            "shard_status",
            "1 for the shard's current status (idle, processing, dead, disabled), 0 for the others",
            m.shard_status.clone(),
        );
        registry.register("shard_attempts", "Failed attempts on the shard's current failing event", m.attempts.clone());
        registry.register(
            "fence_age_seconds",
            "Age of the oldest transaction holding a transaction id: it holds the delivery fence back",
            m.fence_age.clone(),
        );
        registry.register(
            "stale_shard_heartbeat_age_seconds",
            "Heartbeat age of the group's per-instance shards whose instance stopped beating over a minute ago",
            m.heartbeat_age.clone(),
        );
        registry.register(
            "rebuild_events_done",
            "Events a rebuild in progress has replayed (no series when no rebuild runs)",
            m.rebuild_done.clone(),
        );
        registry.register(
            "rebuild_events_expected",
            "Events a rebuild in progress replays: those that existed when it started",
            m.rebuild_total.clone(),
        );
        registry.register(
            "ready",
            "1 when the dispatcher is ready (database reachable, shards registered)",
            m.ready.clone(),
        );
        registry.register(
            "sink_errors",
            "Failed deliveries of a batch (or its first failing event) by the consumer's sink",
            m.sink_errors.clone(),
        );
        registry.register(
            "sink_publish_seconds",
            "Time from handing a batch to the sink to its acknowledgement (for kafka and nats: every \
             record acknowledged by the brokers)",
            m.sink_publish.clone(),
        );
        registry.register(
            "throttled_seconds",
            "Seconds a consumer's deliveries waited in this dispatcher: cause=receiver for a Retry-After the \
             receiver answered (429/503), cause=rateLimit for spec.rateLimit's empty bucket",
            m.throttled_seconds.clone(),
        );
        registry.register(
            "receiver_pauses",
            "429/503 answers with Retry-After that paused the consumer (no attempt counted up to the bound)",
            m.receiver_pauses.clone(),
        );
        registry.register(
            "receiver_gone",
            "410 Gone answers: each disabled the consumer until an operator enables it",
            m.receiver_gone.clone(),
        );
        registry.register(
            "read_ahead_batches",
            "Batches read while the previous one was delivered (external sinks, full batches), by whether \
             the next pass used them or read again because the shard changed meanwhile",
            m.read_ahead.clone(),
        );
        registry.register(
            "group_passes",
            "Group passes: one claim, one read and one transaction for the due passes of many consumers",
            m.group_passes.clone(),
        );
        registry.register(
            "group_pass_reads",
            "Reads of group passes: one serves every member whose cursor lies before where it stopped; the \
             members beyond a laggard get a second",
            m.group_reads.clone(),
        );
        registry.register(
            "group_pass_shards",
            "Shards' parts in group passes, by outcome: delivered, moved (past other types' events), alone \
             (ran its own pass instead), failed (its batch failed; handled under its own claim), busy",
            m.group_parts.clone(),
        );
        crate::trace::counts::register(&mut registry);
        Metrics { registry, ..m }
    }

    pub fn set_status(&self, consumer: &str, instance_id: &str, status: Status) {
        for s in Status::ALL {
            let labels = StatusLabels {
                consumer: consumer.to_owned(),
                instance_id: instance_id.to_owned(),
                status: s.as_str().to_owned(),
            };
            self.shard_status.get_or_create(&labels).set(i64::from(s == status));
        }
    }

    /// Drops the series of a shard this process no longer runs.
    pub fn forget(&self, consumer: &str, instance_id: &str) {
        let l = ShardLabels::new(consumer, instance_id);
        self.lag_events.remove(&l);
        self.lag_seconds.remove(&l);
        self.attempts.remove(&l);
        self.rebuild_done.remove(&l);
        self.rebuild_total.remove(&l);
        for s in Status::ALL {
            self.shard_status.remove(&StatusLabels {
                consumer: consumer.to_owned(),
                instance_id: instance_id.to_owned(),
                status: s.as_str().to_owned(),
            });
        }
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        encode(&self.registry)
    }
}

/// A registry as OpenMetrics text (the dispatcher's and the operator's).
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("writing to a String cannot fail");
    out
}
