//! Scenario 12, steady part (issue 38): writers append at a steady rate (pgbench, each append its
//! own transaction, the type drawn from the mix) while N consumers that split the types between
//! them apply each event to a SQL projection that stamps `clock_timestamp()`. Reported per count
//! and mix: p50/p99 commit-to-sink (the stamp minus the event's `created_at`, both the server's
//! clock), server and dispatcher CPU per delivered event, passes skipped by the lazy cursor and
//! the dispatcher's connections. Each many-consumer run is made twice, with the lazy cursor (the
//! default) and with `--lazy-cursor-interval 0` (every consumer follows every head move), so the
//! two are compared in one run.
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use sqlx::Row;

use super::{
    BenchDb, Report, Sizes,
    consumers::{Mix, split_consumers},
    dispatcher::{DispatcherOpts, DispatcherProc},
    latency::write_script_steadily,
    report::per_s,
    server_cpu::server_cpu,
};

const S: &str = "12 consumers, steady";
const SINK: &str =
    "{sql: {statement: 'INSERT INTO public.bench_steady (event_id, delivered_at) VALUES ($2, clock_timestamp())'}}";
const WRITERS: u32 = 4;

/// The pgbench script: one append of a type drawn from `mix` over `types` types.
fn script(mix: Mix, types: usize) -> String {
    let pick = match mix {
        Mix::Uniform => format!("\\set t random(0, {})\n", types - 1),
        Mix::Skewed => {
            format!("\\set r random(0, 9)\n\\set t case when :r = 0 then random(1, {}) else 0 end\n", types - 1)
        }
    };
    format!("{pick}SELECT highwater.append('order', 'o-' || :client_id, 'T' || :t, '{{}}'::jsonb);\n")
}

struct Steady {
    rate: f64,
    delivered: i64,
    p50_ms: f64,
    p99_ms: f64,
    server_us: f64,
    dispatcher_us: f64,
    skipped: f64,
    connections: i64,
}

async fn run_one(bench: &BenchDb, sizes: &Sizes, n: usize, mix: Mix, lazy: bool) -> Result<Steady> {
    let types = sizes.consumers_types;
    if n > types {
        bail!("the steady run splits the types: at most {types} consumers, not {n}");
    }
    let name = format!(
        "steady_{}_{n}_{}",
        if mix == Mix::Skewed { "skewed" } else { "uniform" },
        if lazy { "lazy" } else { "eager" }
    );
    let db = bench.scenario(&name).await?;
    for t in 0..types {
        highwater::event_types::register(&db.pool, &format!("T{t}"), None, None).await?;
    }
    sqlx::raw_sql("CREATE TABLE bench_steady (event_id bigint NOT NULL, delivered_at timestamptz NOT NULL)")
        .execute(&db.pool)
        .await?;
    let (_, yaml) = split_consumers(n, types, "steady", sizes.batch, SINK);
    db.apply(&yaml).await?;
    let mut opts = DispatcherOpts::group("steady");
    if !lazy {
        opts.lazy_cursor_interval = Some(Duration::ZERO);
    }
    let d = DispatcherProc::start(&db.url, &name.replace('_', "-"), &opts).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (server, dispatcher) = (server_cpu(&db.pool).await?, d.cpu_ns()?);
    // The dispatcher's connections, sampled while the writers run (the bench's own pool, also
    // named "highwater", taken off).
    let sampling = {
        let pool = db.pool.clone();
        tokio::spawn(async move {
            let mut most = 0i64;
            loop {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'highwater'",
                )
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
                most = most.max(n - i64::from(pool.size()));
                tokio::time::sleep(Duration::from_millis(250)).await;
                if pool.is_closed() {
                    return most;
                }
            }
        })
    };
    let (appended, took) = write_script_steadily(
        bench,
        &name,
        sizes.consumers_steady_rate,
        WRITERS,
        sizes.consumers_steady_duration,
        &script(mix, types),
    )
    .await?;
    // Every event is of one type and each type has one consumer: one delivery per event.
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.events WHERE event_type LIKE 'T%'")
        .fetch_one(&db.pool)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done: i64 = sqlx::query_scalar("SELECT count(*) FROM bench_steady").fetch_one(&db.pool).await?;
        if done >= events {
            break;
        }
        if Instant::now() > deadline {
            bail!("{name}: {done} of {events} events delivered within 120 s after the writers stopped");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (server, dispatcher) = (server_cpu(&db.pool).await? - server, d.cpu_ns()?.saturating_sub(dispatcher));
    let row = sqlx::query(
        "SELECT count(*) AS n, percentile_disc(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY l) AS p
           FROM (SELECT (extract(epoch FROM s.delivered_at - e.created_at) * 1000)::float8 AS l
                   FROM bench_steady s JOIN highwater.events e ON e.id = s.event_id) x",
    )
    .fetch_one(&db.pool)
    .await?;
    let delivered: i64 = row.try_get("n")?;
    let ps: Vec<f64> = row.try_get("p")?;
    let skipped = d.counter("highwater_passes_skipped_total").await?;
    drop(d);
    db.pool.close().await;
    let connections = sampling.await.unwrap_or(0);
    let per = |t: Duration| t.as_secs_f64() * 1e6 / delivered.max(1) as f64;
    Ok(Steady {
        rate: appended as f64 / took.as_secs_f64(),
        delivered,
        p50_ms: ps[0],
        p99_ms: ps[1],
        server_us: per(server),
        dispatcher_us: per(dispatcher),
        skipped,
        connections,
    })
}

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    for mix in [Mix::Uniform, Mix::Skewed] {
        for &n in &sizes.consumers_steady_counts {
            // One consumer of every type has something in every head move: nothing to compare.
            let modes: &[bool] = if n == 1 { &[true] } else { &[true, false] };
            for &lazy in modes {
                let r = run_one(bench, sizes, n, mix, lazy).await?;
                let subject = format!(
                    "{n} consumer{}{}{}",
                    if n == 1 { "" } else { "s" },
                    if mix == Mix::Skewed { ", skewed" } else { "" },
                    match (n, lazy) {
                        (1, _) => "",
                        (_, true) => ", lazy cursor",
                        (_, false) => ", every cursor follows the head",
                    }
                );
                let note = format!(
                    "{} events/s reached from {WRITERS} writers over {} types{}, {} deliveries",
                    per_s(r.rate),
                    sizes.consumers_types,
                    if mix == Mix::Skewed { " (one with 90%)" } else { "" },
                    per_s(r.delivered as f64)
                );
                report.add(S, &subject, "commit-to-sink p50", format!("{:.1} ms", r.p50_ms), &note);
                report.add(S, &subject, "commit-to-sink p99", format!("{:.1} ms", r.p99_ms), "goal ≤ 50 ms at 200");
                report.add(
                    S,
                    &subject,
                    "server CPU µs/delivery",
                    format!("{:.1}", r.server_us),
                    "every backend, the writers' included",
                );
                report.add(S, &subject, "dispatcher CPU µs/delivery", format!("{:.1}", r.dispatcher_us), "");
                report.add(
                    S,
                    &subject,
                    "passes skipped",
                    format!("{:.0}", r.skipped),
                    "highwater_passes_skipped_total",
                );
                report.add(S, &subject, "dispatcher connections", r.connections.to_string(), "most seen");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_draw_a_type_per_append() {
        assert!(script(Mix::Uniform, 20).starts_with("\\set t random(0, 19)\n"));
        let skewed = script(Mix::Skewed, 20);
        assert!(skewed.contains("case when :r = 0 then random(1, 19) else 0 end"), "{skewed}");
        assert!(skewed.ends_with("'T' || :t, '{}'::jsonb);\n"), "{skewed}");
    }
}
