//! Scenario 14, filters (issue 49): the database's CPU per event read by a consumer whose
//! `spec.filter` selects 1 % of the events, against an unfiltered consumer's per event delivered
//! (goal ≤ 1.2×: the filter runs in the read, so the events it drops never leave PostgreSQL),
//! and the dispatcher's CPU beside it. Each consumer drains the same backlog on a dispatcher of
//! its own; the two take turns, `rounds` times, so that a slow minute of the host does not land
//! on one of them only.
use std::time::Duration;

use anyhow::Result;

use super::{
    BenchDb, Report, Sizes,
    db::NOOP_SINK,
    dispatcher::{DispatcherOpts, DispatcherProc},
    report::{per_s, ratio},
    server_cpu::server_cpu,
};

const S: &str = "14 filter";
const TIMEOUT: Duration = Duration::from_secs(1800);
/// Every hundredth order (the backlog's `order_id` runs 1..=n).
const ONE_PERCENT: &str = "(payload->>'order_id')::bigint % 100 = 0";

#[derive(Default, Clone, Copy)]
struct Drained {
    server_us: f64,
    dispatcher_us: f64,
    delivered: f64,
}

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let db = bench.scenario("filter").await?;
    let events = (sizes.drain_events / 5).max(1_000);
    let last_id = db.fill(events).await?;
    let rounds = if events >= 100_000 { 3 } else { 1 };
    let subjects = ["unfiltered", "filter selecting 1 %"];
    let mut runs: [Vec<Drained>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for (k, subject) in subjects.iter().enumerate() {
            let d = DispatcherProc::start(&db.url, &format!("filter-{k}-{round}"), &DispatcherOpts::group("filter"))
                .await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let name = format!("filtered-{k}-{round}");
            let filter = if k == 1 { format!("  filter: \"{ONE_PERCENT}\"\n") } else { String::new() };
            let yaml = format!(
                "---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {name}}}\nspec:\n  \
                 delivery: Shared\n  group: filter\n  batchSize: {}\n  sink: {NOOP_SINK}\n{filter}",
                sizes.batch
            );
            let (server, dispatcher) = (server_cpu(&db.pool).await?, d.cpu_ns()?);
            db.apply(&yaml).await?;
            db.wait_caught_up(std::slice::from_ref(&name), last_id, TIMEOUT).await?;
            let (server, dispatcher) = (server_cpu(&db.pool).await? - server, d.cpu_ns()?.saturating_sub(dispatcher));
            let delivered = d.counter("highwater_events_processed_total").await?;
            eprintln!("{subject}: {delivered} delivered of {events}");
            runs[k].push(Drained {
                server_us: server.as_secs_f64() * 1e6 / events as f64,
                dispatcher_us: dispatcher.as_secs_f64() * 1e6 / events as f64,
                delivered,
            });
        }
    }
    let mean = |rs: &[Drained], f: fn(&Drained) -> f64| rs.iter().map(f).sum::<f64>() / rs.len() as f64;
    let base = mean(&runs[0], |r| r.server_us);
    for (subject, rs) in subjects.iter().zip(&runs) {
        let server = mean(rs, |r| r.server_us);
        let each: Vec<String> = rs.iter().map(|r| format!("{:.2}", r.server_us)).collect();
        let note = format!(
            "{} events, batch {}, no-op sink, mean of {} drains ({}); every backend of the cluster",
            per_s(events as f64),
            sizes.batch,
            rs.len(),
            each.join(", ")
        );
        report.add(S, subject, "server CPU µs/event read", format!("{server:.2}"), note);
        report.add(S, subject, "ratio to unfiltered", ratio(server, base), "goal: filter ≤ 1.2×");
        report.add(S, subject, "dispatcher CPU µs/event read", format!("{:.2}", mean(rs, |r| r.dispatcher_us)), "");
        report.add(
            S,
            subject,
            "events delivered",
            per_s(mean(rs, |r| r.delivered)),
            "highwater_events_processed_total",
        );
    }
    Ok(())
}
