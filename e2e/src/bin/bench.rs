//! `cargo run --release -p highwater-e2e --bin bench -- SCENARIO [--size tiny|full] [--peers ...]`
//!
//! Starts its own PostgreSQL, runs one scenario (or `all`) with the peers on the same cluster,
//! and prints a Markdown table (docs/bench/history.md holds the runs, docs/benchmarks.md the
//! current figures). `bench highwater ARGS...` is the `highwater` command line itself: the
//! scenarios re-execute this binary that way to run real dispatcher processes.
use std::{io::Write, path::PathBuf, time::Instant};

use anyhow::{Result, bail};
use clap::{Parser, ValueEnum};
use highwater_e2e::bench::{
    BenchDb, Peers, Report, Sizes, append, consumers, consumers_steady, drain, filter, fleet, idle, latency, memory,
    operator, relay, scaleout, storage, tracing, wait,
};

#[derive(Parser, Debug)]
#[command(name = "bench", about = "highwater benchmarks side by side with their peers, on one PostgreSQL")]
struct Args {
    /// Which scenario to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// `full`: the sizes the benchmark issue names (1,000,000 events, ...); `tiny`: seconds, for
    /// the smoke test.
    #[arg(long, value_enum, default_value = "full")]
    size: Size,
    /// Events of the drain (scenarios 1 and 7), overriding --size.
    #[arg(long)]
    events: Option<i64>,
    /// Events per consumer in the fleet scenario, overriding --size.
    #[arg(long)]
    fleet_events: Option<i64>,
    /// Peers to run beside highwater: any of bound, watermill, river, debezium; or all, or none.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    peers: Vec<String>,
    /// Also write the table (with the settings) to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    /// 1: backlog drain.
    Drain,
    /// 2: commit-to-sink latency with and without NOTIFY.
    Latency,
    /// 3: append API versus plain INSERT.
    Append,
    /// 4: idle cost of many consumers on several dispatchers.
    Idle,
    /// 5: several dispatcher processes on shared consumers.
    Fleet,
    /// 6: the operator on the e2e control plane: pod deletion to shard removal, reconcile rate.
    Operator,
    /// 7: dispatcher memory, idle and draining.
    Memory,
    /// 8: read-your-writes wait latency with many waiters, and the statements they cost.
    Wait,
    /// 9: partitioned event storage: drain over 30 partitions, retention by DELETE vs by drop.
    Storage,
    /// 10: one slow Shared consumer over 1 and 4 dispatchers, unpartitioned and with 8 partitions.
    ScaleOut,
    /// 11: relay to Kafka beside Debezium's outbox EventRouter (own Kafka broker, wal_level=logical;
    /// not part of `all`).
    Relay,
    /// 12: many consumers, each of a few event types: the drain's cost against one consumer of all,
    /// then the steady run (writers at a steady rate; the lazy cursor against every cursor
    /// following the head).
    Consumers,
    /// 12's steady run alone.
    ConsumersSteady,
    /// 13: tracing overhead: dispatcher CPU per event with tracing off, sampled at 1 % and at
    /// 100 %, exporting to a real Jaeger (e2e/trace-backend/build.sh; not part of `all`).
    Tracing,
    /// 14: a filter selecting 1 % of the events: database CPU per event read against an
    /// unfiltered consumer's per event delivered.
    Filter,
    /// 1, 2 and 3 in one run: the drain (with its SQL projections), the latency and the append,
    /// the figures the projections issue's goals are stated in (docs/benchmarks.md).
    Projections,
    /// Every scenario above but relay and tracing, in one run.
    All,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Size {
    Tiny,
    Full,
}

fn peers(list: &[String]) -> Result<Peers> {
    let mut p = Peers::default();
    for name in list {
        match name.as_str() {
            "all" => p = Peers::all(),
            "none" => {}
            "bound" => p.bound = true,
            "watermill" => p.watermill = true,
            "river" => p.river = true,
            "debezium" => p.debezium = true,
            other => bail!("unknown peer {other:?}: expected bound, watermill, river, debezium, all or none"),
        }
    }
    Ok(p)
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<u64>().ok()))
        .map_or("?".into(), |kb| format!("{:.0} GiB", kb as f64 / 1024.0 / 1024.0));
    format!("{cores} cores ({cpu}), {mem} RAM")
}

async fn run(args: Args) -> Result<Report> {
    let mut sizes = match args.size {
        Size::Tiny => Sizes::tiny(),
        Size::Full => Sizes::full(),
    };
    if let Some(n) = args.events {
        sizes.drain_events = n;
    }
    if let Some(n) = args.fleet_events {
        sizes.fleet_events = n;
    }
    let peers = peers(&args.peers)?;
    if peers.go() && args.scenario != Scenario::Relay {
        // Built (or found in the cache) before the clock of any scenario starts.
        highwater_e2e::bench::go_peers::dir()?;
    }
    let bench = if args.scenario == Scenario::Relay {
        BenchDb::start_with(&relay::SETTINGS).await?
    } else {
        BenchDb::start().await?
    };
    let mut report = Report::default();
    report.header.push(("command".into(), std::env::args().skip(1).collect::<Vec<_>>().join(" ")));
    report.header.push(("machine".into(), machine()));
    for (k, v) in bench.settings().await? {
        report.header.push((format!("PostgreSQL {k}"), v));
    }
    let started = Instant::now();
    use Scenario::*;
    let s = args.scenario;
    if matches!(s, Drain | Projections | All) {
        let m = drain::run(&bench, &sizes, peers, &mut report).await?;
        if s == All {
            memory::add_rows(&m, &sizes, &mut report);
        }
    }
    if matches!(s, Latency | Projections | All) {
        latency::run(&bench, &sizes, &mut report).await?;
    }
    if matches!(s, Append | Projections | All) {
        append::run(&bench, &sizes, &mut report).await?;
    }
    if matches!(s, Idle | All) {
        idle::run(&bench, &sizes, &mut report).await?;
    }
    if matches!(s, Fleet | All) {
        fleet::run(&bench, &sizes, &mut report).await?;
    }
    if matches!(s, Operator | All) {
        operator::run(&bench, &sizes, &mut report).await?;
    }
    if matches!(s, Wait | All) {
        wait::run(&bench, &sizes, &mut report).await?;
    }
    if s == Memory {
        memory::run(&bench, &sizes, &mut report).await?;
    }
    if matches!(s, Storage | All) {
        storage::run(&bench, &sizes, &mut report).await?;
    }
    if matches!(s, ScaleOut | All) {
        scaleout::run(&bench, &sizes, &mut report).await?;
    }
    if matches!(s, Consumers | All) {
        consumers::run(&bench, &sizes, &mut report).await?;
    }
    if matches!(s, Consumers | ConsumersSteady | All) {
        consumers_steady::run(&bench, &sizes, &mut report).await?;
    }
    if matches!(s, Filter | All) {
        filter::run(&bench, &sizes, &mut report).await?;
    }
    if s == Tracing {
        tracing::run(&bench, &sizes, &mut report).await?;
    }
    if s == Relay {
        relay::run(&bench, &sizes, peers, &mut report).await?;
    }
    report.header.push(("wall time".into(), format!("{:.0} s", started.elapsed().as_secs_f64())));
    Ok(report)
}

// The dispatcher's own allocator (dispatcher/src/main.rs): `bench highwater ...` is the dispatcher
// the scenarios measure.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("highwater") {
        return highwater_main(&argv[1..]);
    }
    let args = Args::parse();
    let markdown = args.markdown.clone();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(report) => {
            let table = report.markdown();
            let _ = std::io::stdout().write_all(table.as_bytes());
            if let Some(path) = markdown
                && let Err(e) = std::fs::write(&path, &table)
            {
                eprintln!("error: writing {}: {e}", path.display());
                return std::process::ExitCode::FAILURE;
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The `highwater` binary's own main, for the dispatcher processes.
fn highwater_main(argv: &[String]) -> std::process::ExitCode {
    let cli = highwater::cli::Cli::parse_from(argv);
    highwater::cli::init_tracing(cli.global.log_format);
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    match rt.block_on(highwater::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
