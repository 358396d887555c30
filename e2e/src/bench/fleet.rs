//! Scenario 5, fleet: several dispatcher processes share the same shared consumers; each shard
//! is claimed by one process at a time, so throughput and the spread of work across processes
//! (from each process's `/metrics`) show how well the claims distribute.
use std::time::Duration;

use anyhow::Result;

use super::{
    BenchDb, Report, Sizes,
    db::{NOOP_SINK, consumer_yaml},
    dispatcher::{DispatcherOpts, DispatcherProc},
    report::per_s,
};

const S: &str = "5 fleet";

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let db = bench.scenario("fleet").await?;
    let last_id = db.fill(sizes.fleet_events).await?;
    let mut procs = Vec::new();
    for i in 0..sizes.fleet_dispatchers {
        procs.push(DispatcherProc::start(&db.url, &format!("fleet-{i}"), &DispatcherOpts::group("fleet")).await?);
    }
    let names: Vec<String> = (0..sizes.fleet_consumers).map(|i| format!("fleet-{i}")).collect();
    let yaml: String = names.iter().map(|n| consumer_yaml(n, "fleet", sizes.batch, NOOP_SINK)).collect();
    db.apply(&yaml).await?;
    let took = db.wait_caught_up(&names, last_id, Duration::from_secs(1800)).await?;
    let total = (sizes.fleet_events * names.len() as i64) as f64;
    let shape = format!(
        "{} shared consumers × {} events, {} processes",
        names.len(),
        per_s(sizes.fleet_events as f64),
        procs.len()
    );
    report.add(S, "highwater", "events/s (sum over consumers)", per_s(total / took.as_secs_f64()), &shape);
    for p in &procs {
        let done = p.processed().await?;
        // Not `sum()`: an empty f64 sum is -0.0, printed "-0.0 %" for a process that delivered nothing.
        let events = done.iter().fold(0.0, |acc, (_, v)| acc + v);
        let touched = done.iter().filter(|(_, v)| *v > 0.0).count();
        report.add(
            S,
            &format!("highwater, process {}", p.instance),
            "share of deliveries",
            format!("{:.1} %", events / total * 100.0),
            format!("{} events; delivered for {touched} of {} consumers", per_s(events), names.len()),
        );
    }
    Ok(())
}
