//! Scenario 1, backlog drain: the events are appended first, then consumers drain them; the
//! clock runs from the definition's apply to the last cursor reaching the last event. Peers
//! drain the same number of events on the same cluster.
use std::time::Duration;

use anyhow::Result;

use super::{
    BenchDb, Peers, Report, Sizes, bound,
    bound::Loop,
    db::{
        NOOP_SINK, PROJECTION_SET_SINK, PROJECTION_SET_TABLE, PROJECTION_SINK, PROJECTION_TABLE, ScenarioDb,
        consumer_yaml,
    },
    dispatcher::{DispatcherOpts, DispatcherProc, peak_rss},
    report::{per_s, ratio},
    river, watermill,
};

const S: &str = "1 drain";
const TIMEOUT: Duration = Duration::from_secs(1800);

/// What scenario 7 reports from this scenario's dispatcher.
#[derive(Debug, Default, Clone, Copy)]
pub struct Memory {
    pub idle_rss: u64,
    pub one_consumer_peak_rss: u64,
    pub many_consumers_peak_rss: u64,
}

/// What one drain measured.
struct Drained {
    per_s: f64,
    peak_rss: u64,
    /// The dispatcher's CPU time (user + system) per event delivered, in µs: its own cost, which
    /// a busy or slow host moves less than the throughput.
    cpu_us: f64,
}

/// Drains `events` through `consumers` new consumers with `sink`: events/s over all of them, the
/// dispatcher's peak RSS and CPU per event meanwhile.
async fn timed(
    db: &ScenarioDb,
    d: &DispatcherProc,
    prefix: &str,
    consumers: usize,
    sink: &str,
    sizes: &Sizes,
    last_id: i64,
) -> Result<Drained> {
    let names: Vec<String> = (0..consumers).map(|i| format!("{prefix}-{i}")).collect();
    let yaml: String = names.iter().map(|n| consumer_yaml(n, "drain", sizes.batch, sink)).collect();
    let cpu = d.cpu()?;
    db.apply(&yaml).await?;
    let (peak_rss, took) = peak_rss(&[d], db.wait_caught_up(&names, last_id, TIMEOUT)).await;
    let took = took?;
    let events = (sizes.drain_events * consumers as i64) as f64;
    let cpu_us = (d.cpu()? - cpu).as_secs_f64() * 1e6 / events;
    Ok(Drained { per_s: events / took.as_secs_f64(), peak_rss, cpu_us })
}

/// Reports `d`'s CPU per event for the drain `what`.
fn report_cpu(report: &mut Report, what: &str, d: &Drained) {
    let metric = format!("dispatcher CPU µs/event, {what}");
    report.add(S, "highwater", &metric, format!("{:.2}", d.cpu_us), "user + system time of the process");
}

pub async fn run(bench: &BenchDb, sizes: &Sizes, peers: Peers, report: &mut Report) -> Result<Memory> {
    let db = bench.scenario("drain").await?;
    let last_id = db.fill(sizes.drain_events).await?;
    sqlx::query(PROJECTION_TABLE).execute(&db.pool).await?;
    sqlx::query(PROJECTION_SET_TABLE).execute(&db.pool).await?;
    let d = DispatcherProc::start(&db.url, "drain-0", &DispatcherOpts::group("drain")).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut mem = Memory { idle_rss: d.rss()?, ..Memory::default() };
    let n = sizes.drain_events;
    let note = format!("{} events, batch {}", per_s(n as f64), sizes.batch);

    let noop_run = timed(&db, &d, "noop", 1, NOOP_SINK, sizes, last_id).await?;
    let noop = noop_run.per_s;
    mem.one_consumer_peak_rss = noop_run.peak_rss;
    report.add(S, "highwater", "events/s, 1 consumer, no-op sink", per_s(noop), &note);
    let sql_run = timed(&db, &d, "projection", 1, PROJECTION_SINK, sizes, last_id).await?;
    let sql = sql_run.per_s;
    report.add(S, "highwater", "events/s, 1 consumer, SQL projection sink (per event)", per_s(sql), &note);
    let set_run = timed(&db, &d, "projection-set", 1, PROJECTION_SET_SINK, sizes, last_id).await?;
    let set = set_run.per_s;
    report.add(S, "highwater", "events/s, 1 consumer, SQL projection sink (set form)", per_s(set), &note);
    report.add(S, "highwater SQL (per event) / no-op", "1 consumer", ratio(sql, noop), "goal ≥ 0.40×");
    let k = sizes.drain_consumers;
    let many_run = timed(&db, &d, "many", k, NOOP_SINK, sizes, last_id).await?;
    let many = many_run.per_s;
    mem.many_consumers_peak_rss = many_run.peak_rss;
    report.add(S, "highwater", &format!("events/s, {k} consumers, no-op sink (sum)"), per_s(many), &note);
    report_cpu(report, "1 consumer, no-op sink", &noop_run);
    report_cpu(report, "1 consumer, SQL projection (per event)", &sql_run);
    report_cpu(report, "1 consumer, SQL projection (set form)", &set_run);
    report_cpu(report, &format!("{k} consumers, no-op sink"), &many_run);
    drop(d);

    if peers.bound {
        let b1 = bound::drain(&db, bench.pg.port(), n, sizes.batch, 1).await?;
        report.add(S, "pgbench bound", "events/s, 1 cursor", per_s(b1), "same loop as plain SQL");
        let bk = bound::drain(&db, bench.pg.port(), n, sizes.batch, k as u32).await?;
        report.add(S, "pgbench bound", &format!("events/s, {k} cursors (sum)"), per_s(bk), "same loop as plain SQL");
        let bp = bound::drain_loop(&db, bench.pg.port(), n, sizes.batch, 1, Loop::ProjectPerEvent).await?;
        report.add(S, "pgbench bound", "events/s, SQL projection per event", per_s(bp), "same loop as plain SQL");
        let bs = bound::drain_loop(&db, bench.pg.port(), n, sizes.batch, 1, Loop::ProjectSet).await?;
        report.add(S, "pgbench bound", "events/s, SQL projection set form", per_s(bs), "same loop as plain SQL");
        report.add(S, "highwater / bound", "1 consumer, no-op sink", ratio(noop, b1), "goal ≥ 0.80×");
        report.add(S, "highwater / bound", &format!("{k} consumers"), ratio(many, bk), "goal ≥ 0.60×");
        report.add(S, "highwater / bound", "SQL projection, per event", ratio(sql, bp), "goal ≥ 0.70×");
        report.add(S, "highwater / bound", "SQL projection, set form", ratio(set, bs), "goal ≥ 0.70×");
    }
    if peers.watermill {
        match watermill::drain(bench, n, sizes.batch).await {
            Ok(w) => {
                report.add(S, "watermill-sql", "events/s, 1 consumer group", per_s(w.drain_per_s), &note);
                report.add(
                    S,
                    "highwater / watermill-sql",
                    "1 consumer, no-op sink",
                    ratio(noop, w.drain_per_s),
                    "goal ≥ 5×",
                );
            }
            Err(e) => report.add(S, "watermill-sql", "events/s", "failed", format!("{e:#}")),
        }
    }
    if peers.river {
        match river::drain(bench, n).await {
            Ok(r) => {
                report.add(S, "River", "jobs/s, 1000 workers, no-op worker", per_s(r.drain_per_s), &note);
                report.add(S, "highwater / River", "1 consumer, no-op sink", ratio(noop, r.drain_per_s), "goal ≥ 1.5×");
            }
            Err(e) => report.add(S, "River", "jobs/s", "failed", format!("{e:#}")),
        }
    }
    Ok(mem)
}
