//! Scenario 13, tracing overhead (issue 48): the dispatcher's CPU per delivered event of one
//! consumer with the no-op sink (the log sink to /dev/null, an external sink, so every event gets
//! its `process` span), with tracing off, sampled at 1 % and at 100 %, exporting over OTLP to a
//! real Jaeger. Every event carries a sampled writer's context, as from a traced application.
//! Each mode drains the same backlog with a consumer of its own on a dispatcher of its own, and
//! the modes take turns, `rounds` times, so that a slow minute of the host does not land on one
//! mode only. Not part of `all`: it needs the cached Jaeger build (e2e/trace-backend/build.sh).
use std::time::Duration;

use anyhow::Result;

use super::{
    BenchDb, Report, Sizes,
    db::{NOOP_SINK, consumer_yaml},
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
    exported: f64,
    dropped: f64,
}

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let jaeger = Jaeger::start().await?;
    let db = bench.scenario("tracing").await?;
    // Jaeger keeps every span in memory: a fifth of the drain's backlog is plenty to measure.
    let events = (sizes.drain_events / 5).max(1_000);
    let mut from = 1;
    while from <= events {
        let to = (from + 9_999).min(events);
        sqlx::query(
            "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload, metadata)
             SELECT 'order', 'o-' || (g % 1000), 'OrderPlaced', jsonb_build_object('order_id', g, 'amount', 42),
                    jsonb_build_object('correlation_id', gen_random_uuid()::text,
                                       'traceparent', '00-' || md5(g::text) || '-' || left(md5('w' || g), 16) || '-01')
               FROM generate_series($1::bigint, $2::bigint) g",
        )
        .bind(from)
        .bind(to)
        .execute(&db.pool)
        .await?;
        from = to + 1;
    }
    sqlx::query("VACUUM ANALYZE highwater.events").execute(&db.pool).await?;
    let last_id: i64 = sqlx::query_scalar("SELECT max(id) FROM highwater.events").fetch_one(&db.pool).await?;
    let endpoint = jaeger.otlp_endpoint();
    let rounds = if events >= 100_000 { 3 } else { 1 };
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
            db.apply(&consumer_yaml(&name, "tracing", sizes.batch, NOOP_SINK)).await?;
            let took = db.wait_caught_up(std::slice::from_ref(&name), last_id, TIMEOUT).await?;
            let cpu = d.cpu_ns()?.saturating_sub(cpu);
            // The batch processor exports every 5 s by default: wait for the queue to drain.
            tokio::time::sleep(if mode.env.is_some() { Duration::from_secs(6) } else { Duration::ZERO }).await;
            runs[m].push(Drained {
                cpu_us: cpu.as_secs_f64() * 1e6 / events as f64,
                per_s: events as f64 / took.as_secs_f64(),
                exported: d.counter("highwater_trace_spans_exported_total").await?,
                dropped: d.counter("highwater_trace_spans_dropped_total").await?,
            });
        }
    }
    let mean = |rs: &[Drained], f: fn(&Drained) -> f64| rs.iter().map(f).sum::<f64>() / rs.len() as f64;
    let off = mean(&runs[0], |r| r.cpu_us);
    for (mode, rs) in MODES.iter().zip(&runs) {
        let cpu = mean(rs, |r| r.cpu_us);
        let each: Vec<String> = rs.iter().map(|r| format!("{:.2}", r.cpu_us)).collect();
        let note = format!(
            "{} events, batch {}, mean of {} drains ({}), no-op sink; every event with a sampled writer's context",
            per_s(events as f64),
            sizes.batch,
            rs.len(),
            each.join(", ")
        );
        report.add(S, mode.name, "dispatcher CPU µs/event", format!("{cpu:.2}"), note);
        report.add(S, mode.name, "ratio to tracing off", ratio(cpu, off), "goal: 100 % ≤ 1.3×");
        report.add(S, mode.name, "events/s", per_s(mean(rs, |r| r.per_s)), "");
        if mode.env.is_some() {
            let exported = mean(rs, |r| r.exported);
            let dropped = mean(rs, |r| r.dropped);
            report.add(
                S,
                mode.name,
                "spans exported per drain",
                per_s(exported),
                "highwater_trace_spans_exported_total",
            );
            report.add(S, mode.name, "spans dropped per drain", per_s(dropped), "queue full (OTEL_BSP_MAX_QUEUE_SIZE)");
        }
    }
    Ok(())
}
