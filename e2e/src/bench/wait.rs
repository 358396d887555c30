//! Scenario 8, read-your-writes wait: writers append at a steady rate (each append its own
//! transaction, through `highwater.append_position`, which returns the write's token) and each
//! write is followed by `wait_applied` on a shared consumer with a SQL projection sink, timed
//! from the commit to the wait's return. Meanwhile `wait_waiters` more waiters keep waiting on
//! the newest token (each waits again, on the next newest token, as soon as it is released), so
//! that many waits are pending at any moment. Reported: the latency percentiles, and what the waiters cost the
//! database: the statements of the process's wait hub per second (one per cursor-advance
//! notification at most, whatever the number of waiters) beside the notifications per second.
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Result;
use highwater::{Token, Waited, wait};
use tokio::sync::watch;

use super::{
    BenchDb, Report, Sizes,
    db::{PROJECTION_SINK, PROJECTION_TABLE, consumer_yaml},
    dispatcher::{DispatcherOpts, DispatcherProc},
};

const S: &str = "8 read-your-writes wait";

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let db = bench.scenario("ryw_wait").await?;
    sqlx::query(PROJECTION_TABLE).execute(&db.pool).await?;
    db.apply(&consumer_yaml("ryw", "ryw", sizes.batch, PROJECTION_SINK)).await?;
    let _d = DispatcherProc::start(&db.url, "ryw-0", &DispatcherOpts::group("ryw")).await?;
    let pool = highwater::db::connect(&db.url, sizes.latency_writers + 4).await?;
    let hub = wait::hub(&pool);

    // The background waiters, on the newest token.
    let first: Token = {
        let mut conn = pool.acquire().await?;
        highwater::token(&mut conn).await?
    };
    let (newest_tx, newest_rx) = watch::channel(first);
    let stop = tokio_util::sync::CancellationToken::new();
    let mut background = Vec::new();
    for _ in 0..sizes.wait_waiters {
        let (pool, mut rx, stop) = (pool.clone(), newest_rx.clone(), stop.clone());
        background.push(tokio::spawn(async move {
            loop {
                let token = *rx.borrow_and_update();
                let r = wait::wait_applied(&pool, "ryw", token, Duration::from_secs(30)).await?;
                anyhow::ensure!(r == Waited::Applied, "a background wait timed out: {r:?}");
                // Then wait again on a newer token (a newer write).
                tokio::select! {
                    _ = stop.cancelled() => return anyhow::Ok(()),
                    changed = rx.changed() => if changed.is_err() { return anyhow::Ok(()) },
                }
            }
        }));
    }

    let (q0, n0, t0) = (hub.queries(), hub.notifications(), Instant::now());
    let per_writer = sizes.latency_rate / sizes.latency_writers;
    let period = Duration::from_secs_f64(1.0 / per_writer as f64);
    let ticks = (sizes.latency_duration.as_secs_f64() * per_writer as f64) as u64;
    let newest = Arc::new(newest_tx);
    let mut writers = Vec::new();
    for w in 0..sizes.latency_writers {
        let (pool, newest) = (pool.clone(), newest.clone());
        writers.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut waits = Vec::new();
            for i in 0..ticks {
                tick.tick().await;
                let token: highwater::Xid8 =
                    sqlx::query_scalar("SELECT token FROM highwater.append_position('order', $1, 'OrderPlaced', $2)")
                        .bind(format!("o-{w}-{i}"))
                        .bind(serde_json::json!({"order_id": i, "amount": 42}))
                        .fetch_one(&pool)
                        .await?;
                let committed = Instant::now();
                let token = Token(token);
                newest.send_modify(|t| *t = (*t).max(token));
                let pool = pool.clone();
                // Waits run beside the writer, so the write rate holds whatever the latency.
                waits.push(tokio::spawn(async move {
                    let r = wait::wait_applied(&pool, "ryw", token, Duration::from_secs(30)).await?;
                    anyhow::ensure!(r == Waited::Applied, "a wait timed out: {r:?}");
                    anyhow::Ok(committed.elapsed())
                }));
            }
            let mut out = Vec::with_capacity(waits.len());
            for h in waits {
                out.push(h.await??);
            }
            anyhow::Ok(out)
        }));
    }
    let mut latencies = Vec::new();
    for w in writers {
        latencies.extend(w.await??);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let (queries, notes) = (hub.queries() - q0, hub.notifications() - n0);
    stop.cancel();
    for b in background {
        b.await??;
    }
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    let note = format!(
        "{} writes at {:.0}/s from {} writers, each waited for; {} more waiters pending throughout",
        latencies.len(),
        latencies.len() as f64 / elapsed,
        sizes.latency_writers,
        sizes.wait_waiters
    );
    for (label, p) in [("p50", 0.5), ("p99", 0.99)] {
        report.add(S, "highwater", &format!("commit-to-wait-return {label}"), ms(pct(p)), &note);
    }
    report.add(S, "highwater", "commit-to-wait-return max", ms(*latencies.last().unwrap()), &note);
    report.add(
        S,
        "highwater",
        "wait statements/s",
        format!("{:.1}", queries as f64 / elapsed),
        format!(
            "all waiters of the process share one statement per wake-up: {:.1} cursor-advance notifications/s",
            notes as f64 / elapsed
        ),
    );
    Ok(())
}
