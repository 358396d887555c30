//! The operator's metrics; labels are bounded (error kinds only).
use std::time::Instant;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
}

/// Every value of [`crate::Error::metric_label`].
pub const ERROR_KINDS: [&str; 4] = ["kubernetes", "database", "finalizer", "config"];

pub struct Metrics {
    registry: Registry,
    pub reconciles: Counter,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub shards_created: Counter,
    pub shards_removed: Counter,
    pub pod_shard_removal: Histogram,
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("highwater_operator");
        let m = Metrics {
            reconciles: Counter::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            shards_created: Counter::default(),
            shards_removed: Counter::default(),
            pod_shard_removal: Histogram::new(exponential_buckets(0.05, 2.0, 12)),
            leader: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register("reconciles", "EventConsumer and EventType reconciles started", m.reconciles.clone());
        registry.register("reconcile_errors", "Reconciles that failed, by kind", m.reconcile_errors.clone());
        registry.register("reconcile_duration_seconds", "Time per reconcile", m.reconcile_duration.clone());
        registry.register("shards_created", "Per-pod shards registered for dispatcher pods", m.shards_created.clone());
        registry.register(
            "shards_removed",
            "Per-pod shards deleted because their pod was gone",
            m.shards_removed.clone(),
        );
        registry.register(
            "pod_shard_removal_seconds",
            "From a pod's deletion timestamp to the removal of its shards",
            m.pod_shard_removal.clone(),
        );
        registry.register("leader", "1 while this replica holds the leader Lease", m.leader.clone());
        // Every kind is exported from the start (at 0), so rates and alerts over the errors have
        // a series to work on before the first error, not an empty result.
        for kind in ERROR_KINDS {
            let _ = m.reconcile_errors.get_or_create(&ErrorLabels { kind: kind.to_owned() });
        }
        Metrics { registry, ..m }
    }

    /// Counts a reconcile and observes its duration when the guard drops.
    pub fn reconcile_started(&self) -> ReconcileTimer<'_> {
        self.reconciles.inc();
        ReconcileTimer { hist: &self.reconcile_duration, start: Instant::now() }
    }

    pub fn reconcile_failed(&self, kind: &str) {
        self.reconcile_errors.get_or_create(&ErrorLabels { kind: kind.to_owned() }).inc();
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        highwater::metrics::encode(&self.registry)
    }
}

pub struct ReconcileTimer<'a> {
    hist: &'a Histogram,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.hist.observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_is_exported_at_zero_before_any_error() {
        let text = Metrics::new().encode();
        for kind in ERROR_KINDS {
            let line = format!("highwater_operator_reconcile_errors_total{{kind=\"{kind}\"}} 0");
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
    }
}
