//! How big each scenario runs: `full` is the size the issue names, `tiny` the smoke test's.
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Sizes {
    /// Scenario 1: events appended before the drain.
    pub drain_events: i64,
    /// Scenario 1: consumers draining the same events at once in the second run.
    pub drain_consumers: usize,
    /// Batch size of every consumer and of the peers' read loops.
    pub batch: i64,
    /// Scenario 2: events per second, writers, and how long.
    pub latency_rate: u32,
    pub latency_writers: u32,
    /// Scenario 2's second rate (NOTIFY wake-ups only), with its writers.
    pub latency_high_rate: u32,
    pub latency_high_writers: u32,
    pub latency_duration: Duration,
    /// Scenario 3: how long each writer style runs, with how many clients.
    pub append_duration: Duration,
    pub append_clients: u32,
    /// Scenario 4.
    pub idle_consumers: usize,
    pub idle_dispatchers: usize,
    pub idle_window: Duration,
    /// Scenario 5.
    pub fleet_events: i64,
    pub fleet_consumers: usize,
    pub fleet_dispatchers: usize,
    /// Scenario 6: pods deleted one at a time, EventConsumers applied at once.
    pub operator_deletions: usize,
    pub operator_consumers: usize,
    /// Scenario 8: waiters pending beside the writers' own waits.
    pub wait_waiters: usize,
    /// Scenario 10: events per shape, webhook (20 ms per request) and SQL projection.
    pub scaleout_webhook_events: i64,
    pub scaleout_sql_events: i64,
    /// Scenario 11: the backlog each relay publishes to Kafka (its latency run uses the
    /// latency rate, writers and duration).
    pub relay_events: i64,
    /// Scenario 12: the backlog spread over `consumers_types` event types, and the numbers of
    /// consumers that select them.
    pub consumers_events: i64,
    pub consumers_types: usize,
    pub consumers_counts: Vec<usize>,
    /// The counts run again over the skewed mix: one hot type with 90% of the events, the others
    /// sharing the rest.
    pub consumers_skewed_counts: Vec<usize>,
    /// The uniform mix again with these numbers of events a transaction (the runs above append
    /// one a transaction), for the counts `consumers_tx_counts`.
    pub consumers_tx_sizes: Vec<i64>,
    pub consumers_tx_counts: Vec<usize>,
    /// The steady run: these numbers of consumers (each at most the number of types), writers
    /// appending `consumers_steady_rate` events/s for `consumers_steady_duration`.
    pub consumers_steady_counts: Vec<usize>,
    pub consumers_steady_rate: u32,
    pub consumers_steady_duration: Duration,
}

impl Sizes {
    pub fn full() -> Self {
        Sizes {
            drain_events: 1_000_000,
            drain_consumers: 10,
            batch: 1000,
            latency_rate: 1000,
            latency_writers: 4,
            latency_high_rate: 10_000,
            latency_high_writers: 8,
            latency_duration: Duration::from_secs(30),
            append_duration: Duration::from_secs(15),
            append_clients: 4,
            idle_consumers: 100,
            idle_dispatchers: 5,
            idle_window: Duration::from_secs(30),
            fleet_events: 100_000,
            fleet_consumers: 20,
            fleet_dispatchers: 3,
            operator_deletions: 100,
            operator_consumers: 1000,
            wait_waiters: 1000,
            scaleout_webhook_events: 3_000,
            scaleout_sql_events: 200_000,
            relay_events: 1_000_000,
            consumers_events: 20_000,
            consumers_types: 200,
            consumers_counts: vec![1, 10, 100, 200, 1000],
            consumers_skewed_counts: vec![1, 200, 1000],
            consumers_tx_sizes: vec![3, 500],
            consumers_tx_counts: vec![1, 200],
            consumers_steady_counts: vec![1, 200],
            consumers_steady_rate: 2000,
            consumers_steady_duration: Duration::from_secs(20),
        }
    }

    pub fn tiny() -> Self {
        Sizes {
            drain_events: 3_000,
            drain_consumers: 3,
            batch: 500,
            latency_rate: 200,
            latency_writers: 2,
            latency_high_rate: 1000,
            latency_high_writers: 2,
            latency_duration: Duration::from_secs(2),
            append_duration: Duration::from_secs(1),
            append_clients: 2,
            idle_consumers: 10,
            idle_dispatchers: 2,
            idle_window: Duration::from_secs(2),
            fleet_events: 1_000,
            fleet_consumers: 4,
            fleet_dispatchers: 2,
            operator_deletions: 5,
            operator_consumers: 20,
            wait_waiters: 50,
            scaleout_webhook_events: 100,
            scaleout_sql_events: 2_000,
            relay_events: 3_000,
            consumers_events: 600,
            consumers_types: 20,
            consumers_counts: vec![1, 20],
            consumers_skewed_counts: vec![1, 20],
            consumers_tx_sizes: vec![500],
            consumers_tx_counts: vec![1, 20],
            consumers_steady_counts: vec![1, 20],
            consumers_steady_rate: 200,
            consumers_steady_duration: Duration::from_secs(2),
        }
    }
}

/// Which peers run beside highwater.
#[derive(Clone, Copy, Debug, Default)]
pub struct Peers {
    pub bound: bool,
    pub watermill: bool,
    pub river: bool,
    /// Debezium's embedded engine in the relay scenario (Java, Maven).
    pub debezium: bool,
}

impl Peers {
    pub fn all() -> Self {
        Peers { bound: true, watermill: true, river: true, debezium: true }
    }

    pub fn go(&self) -> bool {
        self.watermill || self.river
    }
}
