//! The benchmark harness at tiny size, so it cannot rot: every scenario runs against its own
//! PostgreSQL with every peer (the Go peers come from `e2e/bench/peers/build.sh`, which .ci/run
//! runs beforehand) and prints every figure. The operator scenario needs the e2e control plane
//! (cached by `e2e/control-plane/build.sh`) and `highwater-operator` built in the same target
//! directory (`cargo test --workspace` builds it; alone: `cargo build -p highwater-operator`). The figures themselves are not judged here: speed
//! is measured by the benchmark (docs/benchmarks.md), never by a timed test.
use std::process::Command;

/// The table's rows as (scenario, subject, metric, value).
fn rows(markdown: &str) -> Vec<[String; 4]> {
    markdown
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| scenario"))
        .map(|l| {
            let c: Vec<String> = l.split(" | ").map(|c| c.trim_matches(['|', ' ']).to_owned()).collect();
            [c[0].clone(), c[1].clone(), c[2].clone(), c[3].clone()]
        })
        .collect()
}

/// The leading number of a value like `12,345`, `6.2 ms` or `20.6 MiB`.
fn number(v: &str) -> f64 {
    let n: String =
        v.chars().take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',').filter(|c| *c != ',').collect();
    n.parse().unwrap_or_else(|_| panic!("{v:?} is not a figure"))
}

#[test]
fn every_scenario_and_peer_prints_its_figures_at_tiny_size() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("table.md");
    let out = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["all", "--size", "tiny", "--peers", "all", "--markdown"])
        .arg(&table)
        .output()
        .expect("run the bench binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench all --size tiny failed:\n{stderr}");
    let md = std::fs::read_to_string(&table).unwrap();
    let rows = rows(&md);
    let figure = |scenario: &str, subject: &str, metric: &str| -> f64 {
        let r = rows
            .iter()
            .find(|r| r[0] == scenario && r[1] == subject && r[2].starts_with(metric))
            .unwrap_or_else(|| panic!("no row {scenario} / {subject} / {metric} in:\n{md}"));
        number(&r[3])
    };

    for metric in [
        "events/s, 1 consumer, no-op sink",
        "events/s, 1 consumer, SQL projection sink (per event)",
        "events/s, 1 consumer, SQL projection sink (set form)",
        "events/s, 3 consumers",
    ] {
        assert!(figure("1 drain", "highwater", metric) > 0.0, "{metric}");
    }
    for metric in ["events/s, 1 cursor", "events/s, SQL projection per event", "events/s, SQL projection set form"] {
        assert!(figure("1 drain", "pgbench bound", metric) > 0.0, "{metric}");
    }
    assert!(figure("1 drain", "watermill-sql", "events/s") > 0.0, "watermill-sql peer:\n{md}");
    assert!(figure("1 drain", "River", "jobs/s") > 0.0, "River peer:\n{md}");
    // One row set per run: NOTIFY at the base, the high and half the high rate, polling at the
    // base rate.
    let modes: Vec<&str> = rows
        .iter()
        .filter(|r| r[0] == "2 latency" && r[2].starts_with("commit-to-sink p50"))
        .map(|r| r[1].as_str())
        .collect();
    assert_eq!(modes.len(), 4, "four latency runs:\n{md}");
    assert_eq!(modes.iter().filter(|m| m.contains("NOTIFY while asleep")).count(), 3, "{modes:?}");
    for mode in modes {
        let p50 = figure("2 latency", mode, "commit-to-sink p50");
        let max = figure("2 latency", mode, "commit-to-sink max");
        assert!(p50 > 0.0 && p50 <= max, "{mode}: p50 {p50} max {max}");
    }
    assert!(figure("3 append", "outbox INSERT (hand-written outbox table)", "events/s") > 0.0);
    assert!(figure("3 append", "append API (highwater.append)", "events/s") > 0.0);
    assert!(figure("3 append", "plain INSERT (table without xid8, index, trigger)", "events/s") > 0.0);
    assert!(figure("3 append", "append API (highwater.append), NOTIFY sent", "events/s") > 0.0);
    // Idle dispatchers still poll the head (the safety net), so the figure is never zero.
    assert!(figure("4 idle", "highwater", "statements/s per dispatcher") > 0.0);
    let shares: f64 =
        rows.iter().filter(|r| r[0] == "5 fleet" && r[2] == "share of deliveries").map(|r| number(&r[3])).sum();
    assert!((shares - 100.0).abs() < 0.5, "fleet shares add up to {shares} %:\n{md}");
    let p50 = figure("6 operator", "highwater-operator", "pod deletion → shard removal p50");
    assert!(p50 <= figure("6 operator", "highwater-operator", "pod deletion → shard removal max"));
    assert!(figure("6 operator", "highwater-operator", "EventConsumers reconciled into rows per second") > 0.0);
    assert!(figure("7 memory", "highwater", "dispatcher RSS, idle") > 1.0);
    assert!(figure("7 memory", "highwater", "dispatcher peak RSS, drain, 1 consumer") > 1.0);
    let p50 = figure("8 read-your-writes wait", "highwater", "commit-to-wait-return p50");
    assert!(p50 > 0.0 && p50 <= figure("8 read-your-writes wait", "highwater", "commit-to-wait-return max"));
    assert!(figure("8 read-your-writes wait", "highwater", "wait statements/s") > 0.0);
    for shape in ["1 dispatcher(s), partitions 1", "1 dispatcher(s), partitions 8", "4 dispatcher(s), partitions 8"] {
        let subject = format!("highwater, {shape}");
        assert!(figure("10 scale-out", &subject, "webhook events/s") > 0.0, "{shape}");
        assert!(figure("10 scale-out", &subject, "SQL projection events/s") > 0.0, "{shape}");
    }
    // Tiny: 600 events over 20 types, one consumer of all and 20 of one each: the same deliveries;
    // then the skewed mix (one type with 90% of the events), then 500 events a transaction.
    for subject in [
        "1 consumer",
        "20 consumers",
        "1 consumer, skewed",
        "20 consumers, skewed",
        "1 consumer, 500 events/tx",
        "20 consumers, 500 events/tx",
    ] {
        assert!(figure("12 consumers", subject, "drain s") > 0.0, "{subject}");
        assert!(figure("12 consumers", subject, "server CPU µs/delivery") > 0.0, "{subject}");
        assert!(figure("12 consumers", subject, "dispatcher CPU µs/delivery") > 0.0, "{subject}");
    }
    // Filters: the filtered consumer delivers 1 % of what the unfiltered one does, and the
    // database's CPU per event read is a figure for both.
    let all = figure("14 filter", "unfiltered", "events delivered");
    let some = figure("14 filter", "filter selecting 1 %", "events delivered");
    assert!(all >= 1000.0 && some > 0.0 && some * 100.0 <= all, "{all} and {some} delivered:\n{md}");
    for subject in ["unfiltered", "filter selecting 1 %"] {
        assert!(figure("14 filter", subject, "server CPU µs/event read") > 0.0, "{subject}");
    }
    // The steady run: writers at 200/s; 20 consumers with the lazy cursor and with every cursor
    // following the head. Only the lazy one skips passes.
    for subject in [
        "1 consumer",
        "20 consumers, lazy cursor",
        "20 consumers, every cursor follows the head",
        "1 consumer, skewed",
        "20 consumers, skewed, lazy cursor",
        "20 consumers, skewed, every cursor follows the head",
    ] {
        let p50 = figure("12 consumers, steady", subject, "commit-to-sink p50");
        assert!(p50 > 0.0 && p50 <= figure("12 consumers, steady", subject, "commit-to-sink p99"), "{subject}");
        assert!(figure("12 consumers, steady", subject, "server CPU µs/delivery") > 0.0, "{subject}");
        assert!(figure("12 consumers, steady", subject, "dispatcher connections") >= 1.0, "{subject}");
    }
    assert_eq!(figure("12 consumers, steady", "20 consumers, every cursor follows the head", "passes skipped"), 0.0);
    assert!(figure("12 consumers, steady", "20 consumers, skewed, lazy cursor", "passes skipped") > 0.0);
}

/// Scenario 11 (not part of `all`: it starts its own Kafka broker and the Debezium JVM) with its
/// Debezium peer: every relay's figures are printed, the backlog reached Kafka through both, and
/// the comparison row is there. Needs Java 17 with javac and Maven (`.ci/run` installs them); the
/// Debezium jars are resolved into the e2e cache on first use.
#[test]
fn relay_scenario_with_the_debezium_peer_at_tiny_size() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("table.md");
    let out = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["relay", "--size", "tiny", "--peers", "debezium", "--markdown"])
        .arg(&table)
        .output()
        .expect("run the bench binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench relay --size tiny failed:\n{stderr}");
    let md = std::fs::read_to_string(&table).unwrap();
    let rows = rows(&md);
    let figure = |subject: &str, metric: &str| -> f64 {
        let r = rows
            .iter()
            .find(|r| r[0] == "11 relay to Kafka" && r[1].starts_with(subject) && r[2].starts_with(metric))
            .unwrap_or_else(|| panic!("no row {subject} / {metric} in:\n{md}"));
        number(&r[3])
    };
    for subject in ["highwater", "Debezium"] {
        assert!(figure(subject, "events/s to Kafka, backlog") > 0.0, "{subject}:\n{md}");
        assert!(figure(subject, "CPU seconds, backlog") > 0.0, "{subject}:\n{md}");
        assert!(figure(subject, "peak RSS, backlog") > 1.0, "{subject}:\n{md}");
        let p50 = figure(subject, "commit-to-Kafka p50");
        assert!(p50 <= figure(subject, "commit-to-Kafka max"), "{subject}:\n{md}");
    }
    assert!(figure("highwater ÷ Debezium", "events/s to Kafka") > 0.0, "{md}");
}

/// Scenario 13 (not part of `all`: it runs the cached Jaeger of e2e/trace-backend/build.sh, which
/// `.ci/run` builds before the tests): every mode's figures are printed; at 100 % every event's
/// span reached Jaeger, at 1 % only some did, through both sinks.
#[test]
fn tracing_scenario_at_tiny_size() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("table.md");
    let out = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["tracing", "--size", "tiny", "--peers", "none", "--markdown"])
        .arg(&table)
        .output()
        .expect("run the bench binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench tracing --size tiny failed:\n{stderr}");
    let md = std::fs::read_to_string(&table).unwrap();
    let rows = rows(&md);
    let figure = |subject: &str, metric: &str| -> f64 {
        let r = rows
            .iter()
            .find(|r| r[0] == "13 tracing" && r[1] == subject && r[2].starts_with(metric))
            .unwrap_or_else(|| panic!("no row {subject} / {metric} in:\n{md}"));
        number(&r[3])
    };
    for sink in ["no-op sink", "webhook"] {
        for mode in ["tracing off", "sampled at 1 %", "sampled at 100 %"] {
            let subject = format!("{mode}, {sink}");
            assert!(figure(&subject, "dispatcher CPU µs/event") > 0.0, "{subject}:\n{md}");
            assert!(figure(&subject, "events/s") > 0.0, "{subject}:\n{md}");
        }
        let all = figure(&format!("sampled at 100 %, {sink}"), "spans exported per drain");
        let some = figure(&format!("sampled at 1 %, {sink}"), "spans exported per drain");
        assert!(all >= 1000.0 && some < all / 10.0, "{sink}: {all} and {some} spans exported:\n{md}");
        let ended = figure(&format!("sampled at 100 %, {sink}"), "spans ended per drain");
        assert_eq!(ended, all, "{sink}: every ended span exported at this size:\n{md}");
    }
}
