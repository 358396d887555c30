//! The short chaos run of the test suite (the long one: `cargo run --release -p highwater-e2e --bin
//! chaos -- --duration 10m`, figures in docs/reliability.md). Under steady load, dispatchers are
//! SIGKILLed every few seconds, PostgreSQL restarts, the network to the database is cut,
//! black-holed and slowed; afterwards no committed event is lost, the SQL sink applied none twice,
//! the log sink's redeliveries stay within one batch per interruption, and no cursor moved
//! backwards except by the run's rewinds. The same holds for `chaos-kafka`, whose topic on a real
//! Kafka broker an auditor reads back (lost 0, redeliveries within one batch per interruption).
//! Meanwhile operators prune, rewind, skip, disable and enable, gc and restart on their own clocks, and transaction ids cross 10^5: no event is deleted
//! before every shard that is not disabled passed it, a rewind to a time delivers again every
//! event created since, a rewind to latest nothing, a skipped event is in the dead letters only.
//!
//! Needs `highwater` built in the target directory (`cargo test --workspace` builds it; alone:
//! `cargo build -p highwater --bin highwater`), and Java 17 and Maven for the Kafka broker
//! (`.ci/run` installs them).
use std::time::Duration;

use highwater_e2e::chaos::{self, Config, ops};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_loss_under_kills_restarts_and_network_faults() {
    let config = Config {
        duration: Duration::from_secs(45),
        dispatchers: 3,
        writers: 3,
        batch_size: 20,
        kill_every: Duration::from_secs(3),
        pg_restart_every: Duration::from_secs(18),
        net_fault_every: Duration::from_secs(7),
        net_fault_for: Duration::from_secs(2),
        hold_transaction: Duration::from_secs(8),
        no_kafka: false,
        drain_timeout: Duration::from_secs(120),
        xid_boundary: 100_000,
        xid_lead: 20_000,
        prune_every: Duration::from_secs(3),
        prune_lag: Duration::from_millis(1500),
        prune_batch: 5000,
        rewind_every: Duration::from_secs(3),
        rewind_back: Duration::from_secs(5),
        poison_every: Duration::from_secs(5),
        skip_every: Duration::from_secs(2),
        toggle_every: Duration::from_secs(4),
        gc_every: Duration::from_secs(5),
        dead_every: Duration::from_secs(8),
    };
    let work = tempfile::tempdir().unwrap();
    let report = chaos::run(config, work.path()).await.expect("the chaos run");
    println!("{report}");
    assert!(report.events > 500, "steady load: {} events", report.events);
    assert!(report.kills >= 8, "dispatchers were killed: {}", report.kills);
    assert!(report.pg_restarts >= 1, "PostgreSQL restarted");
    assert!(report.cuts >= 1 && report.half_opens >= 1, "the network was cut and black-holed");
    let ran = |op: &str| report.ops.get(op).map_or(0, |c| c.ran);
    let affected = |op: &str| report.ops.get(op).map_or(0, |c| c.affected);
    assert!(report.deleted >= 1, "events prune deleted events: {:?}", report.ops);
    for op in [ops::REWIND_TIME, ops::REWIND_LATEST, ops::SKIP, ops::DISABLE, ops::ENABLE, ops::RESTART] {
        assert!(ran(op) >= 1, "{op} ran: {:?}", report.ops.get(op));
    }
    assert!(affected(ops::GC) >= 1, "consumer gc collected killed instances' shards: {:?}", report.ops.get(ops::GC));
    let kafka = report.kafka.as_ref().expect("chaos-kafka ran (its broker started)");
    assert!(kafka.lost == 0 && kafka.phantom == 0, "chaos-kafka: {kafka:?}");
    assert!(kafka.duplicates as u64 <= report.duplicate_bound(), "chaos-kafka: {kafka:?}");
    let violations = report.violations();
    if !violations.is_empty() {
        let keep = work.keep();
        panic!("promises broken (logs in {}):\n{}", keep.display(), violations.join("\n"));
    }
}
