//! Scenario 13, tracing overhead (issue 48): the dispatcher's CPU per delivered event of one
//! consumer, with tracing off, sampled at 1 % and at 100 %, exporting over OTLP to a real Jaeger;
//! through the no-op sink (the log sink to /dev/null: the cheapest delivery, so the spans' own
//! cost shows whole) and through a webhook to a local receiver answering at once (one request per
//! event, as users run it). Both are external sinks: every event gets its `process` span. Every event carries a sampled writer's context, as from a traced application.
//! Each mode drains the same backlog with a consumer of its own on a dispatcher of its own, and
//! the modes take turns, `rounds` times, so that a slow minute of the host does not land on one
//! mode only. Not part of `all`: it needs the cached Jaeger build (e2e/trace-backend/build.sh).
use std::time::Duration;

use anyhow::Result;

use super::{
    BenchDb, Report, Sizes,
    db::{NOOP_SINK, ScenarioDb, consumer_yaml},
    dispatcher::{DispatcherOpts, DispatcherProc},
    report::{per_s, ratio},
};
use crate::jaeger::Jaeger;

const S: &str = "13 tracing";
const TIMEOUT: Duration = Duration::from_secs(1800);

/// A mode: its name and the dispatcher's `OTEL_*` environment beyond the endpoint.
struct Mode {
    name: &'static str,
    /// `None`: tracing off (no endpoint set).
    env: Option<&'static [(&'static str, &'static str)]>,
}

const MODES: [Mode; 3] = [
    Mode { name: "tracing off", env: None },
    // Not parent-based: the writers' contexts are all sampled, so following them is 100 %.
    Mode {
        name: "sampled at 1 %",
        env: Some(&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "0.01")]),
    },
    // The default sampler: parent-based, so every span of a sampled writer is recorded.
    Mode { name: "sampled at 100 %", env: Some(&[]) },
];

/// What one drain of one mode measured.
#[derive(Default, Clone, Copy)]
struct Drained {
    cpu_us: f64,
    per_s: f64,
    ended: f64,
    exported: f64,
    dropped: f64,
}

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let jaeger = Jaeger::start().await?;
    let (url, _) = super::scaleout::slow_endpoint(Duration::ZERO).await?;
    let webhook = format!("{{webhook: {{url: \"{url}\"}}}}");
    // Jaeger keeps every span in memory: a fifth of the drain's backlog is plenty to measure; the
    // webhook, one request per event, a fiftieth.
    let noop_events = (sizes.drain_events / 5).max(1_000);
    for (sink, yaml_sink, events) in
        [("no-op sink", NOOP_SINK, noop_events), ("webhook", webhook.as_str(), (noop_events / 10).max(1_000))]
    {
        let db = bench.scenario(&format!("tracing_{}", if sink == "webhook" { "webhook" } else { "noop" })).await?;
        let last_id = fill(&db, events).await?;
        let runs = drains(&db, &jaeger, yaml_sink, sizes.batch, events, last_id).await?;
        let mean = |rs: &[Drained], f: fn(&Drained) -> f64| rs.iter().map(f).sum::<f64>() / rs.len() as f64;
        let off = mean(&runs[0], |r| r.cpu_us);
        for (mode, rs) in MODES.iter().zip(&runs) {
            let subject = format!("{}, {sink}", mode.name);
            let cpu = mean(rs, |r| r.cpu_us);
            let each: Vec<String> = rs.iter().map(|r| format!("{:.2}", r.cpu_us)).collect();
            let note = format!(
                "{} events, batch {}, mean of {} drains ({}); every event with a sampled writer's context",
                per_s(events as f64),
                sizes.batch,
                rs.len(),
                each.join(", ")
            );
            report.add(S, &subject, "dispatcher CPU µs/event", format!("{cpu:.2}"), note);
            report.add(S, &subject, "ratio to tracing off", ratio(cpu, off), "goal: 100 % ≤ 1.3×");
            report.add(S, &subject, "events/s", per_s(mean(rs, |r| r.per_s)), "");
            if mode.env.is_some() {
                let (ended, exported, dropped) =
                    (mean(rs, |r| r.ended), mean(rs, |r| r.exported), mean(rs, |r| r.dropped));
                report.add(S, &subject, "spans ended per drain", per_s(ended), "highwater_trace_spans_ended_total");
                report.add(S, &subject, "spans exported per drain", per_s(exported), "_exported_total");
                report.add(S, &subject, "spans the backend refused per drain", per_s(dropped), "_dropped_total");
                report.add(
                    S,
                    &subject,
                    "spans the full queue dropped per drain",
                    per_s((ended - exported - dropped).max(0.0)),
                    "ended − exported − dropped (OTEL_BSP_MAX_QUEUE_SIZE, default 2048)",
                );
            }
        }
    }
    Ok(())
}

/// `events` events, each with a sampled writer's `traceparent`; the highest id.
async fn fill(db: &ScenarioDb, events: i64) -> Result<i64> {
    let traceparent =
        "jsonb_build_object('traceparent', '00-' || md5(g::text) || '-' || left(md5('w' || g), 16) || '-01')";
    db.fill_more_with(events, traceparent).await?;
    sqlx::query("VACUUM ANALYZE highwater.events").execute(&db.pool).await?;
    Ok(sqlx::query_scalar("SELECT max(id) FROM highwater.events").fetch_one(&db.pool).await?)
}

/// Every mode's drains of the backlog through `sink`, the modes taking turns.
async fn drains(
    db: &ScenarioDb,
    jaeger: &Jaeger,
    sink: &str,
    batch: i64,
    events: i64,
    last_id: i64,
) -> Result<Vec<Vec<Drained>>> {
    let endpoint = jaeger.otlp_endpoint();
    let rounds = if events >= 20_000 { 3 } else { 1 };
    let mut runs: Vec<Vec<Drained>> = vec![Vec::new(); MODES.len()];
    for round in 0..rounds {
        for (m, mode) in MODES.iter().enumerate() {
            let mut opts = DispatcherOpts::group("tracing");
            if let Some(env) = mode.env {
                opts.env.push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.clone()));
                opts.env.push(("OTEL_SERVICE_NAME".into(), "highwater-bench".into()));
                opts.env.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
            }
            let d = DispatcherProc::start(&db.url, &format!("tracing-{m}-{round}"), &opts).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let name = format!("traced-{m}-{round}");
            let cpu = d.cpu_ns()?;
            db.apply(&consumer_yaml(&name, "tracing", batch, sink)).await?;
            let took = db.wait_caught_up(std::slice::from_ref(&name), last_id, TIMEOUT).await?;
            let cpu = d.cpu_ns()?.saturating_sub(cpu);
            // The batch processor exports every 5 s by default: wait for the queue to drain.
            tokio::time::sleep(if mode.env.is_some() { Duration::from_secs(6) } else { Duration::ZERO }).await;
            runs[m].push(Drained {
                cpu_us: cpu.as_secs_f64() * 1e6 / events as f64,
                per_s: events as f64 / took.as_secs_f64(),
                ended: d.counter("highwater_trace_spans_ended_total").await?,
                exported: d.counter("highwater_trace_spans_exported_total").await?,
                dropped: d.counter("highwater_trace_spans_dropped_total").await?,
            });
        }
    }
    Ok(runs)
}
