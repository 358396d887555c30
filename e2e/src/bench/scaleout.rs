//! Scenario 10, scale-out: one Shared consumer whose sink is slow, delivered by 1 dispatcher
//! unpartitioned (today's shape), by 1 dispatcher with `partitions: 8`, and by 4 dispatchers
//! with `partitions: 8` (each takes 2). Two sinks: a webhook against a local endpoint that takes
//! 20 ms per request (one request per event), and the SQL projection of scenario 1.
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Result, bail};
use highwater::Xid8;

use super::{
    BenchDb, Report, Sizes,
    db::{PROJECTION_SINK, PROJECTION_TABLE, ScenarioDb},
    dispatcher::{DispatcherOpts, DispatcherProc},
    report::{per_s, ratio},
};

const S: &str = "10 scale-out";
/// The shapes compared: (dispatchers, partitions).
const SHAPES: [(usize, u32); 3] = [(1, 1), (1, 8), (4, 8)];

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let (url, requests) = slow_endpoint(Duration::from_millis(20)).await?;
    let webhook = format!("{{webhook: {{url: \"{url}\"}}}}");
    let mut rates = Vec::new();
    for (k, n) in SHAPES {
        let rate = shape(bench, "scaleout_webhook", k, n, sizes.scaleout_webhook_events, &webhook, sizes.batch).await?;
        rates.push(rate);
        report.add(
            S,
            &format!("highwater, {k} dispatcher(s), partitions {n}"),
            "webhook events/s (20 ms per request)",
            per_s(rate),
            format!(
                "{} events; vs 1 dispatcher unpartitioned: {}",
                sizes.scaleout_webhook_events,
                ratio(rate, rates[0])
            ),
        );
    }
    let served = requests.load(Ordering::Relaxed);
    let expected = sizes.scaleout_webhook_events as u64 * SHAPES.len() as u64;
    if served < expected {
        bail!("the endpoint served {served} requests, fewer than the {expected} events delivered");
    }
    let mut sql = Vec::new();
    for (k, n) in SHAPES {
        let rate = shape(bench, "scaleout_sql", k, n, sizes.scaleout_sql_events, PROJECTION_SINK, sizes.batch).await?;
        sql.push(rate);
        report.add(
            S,
            &format!("highwater, {k} dispatcher(s), partitions {n}"),
            "SQL projection events/s",
            per_s(rate),
            format!("{} events; vs 1 dispatcher unpartitioned: {}", sizes.scaleout_sql_events, ratio(rate, sql[0])),
        );
    }
    Ok(())
}

/// One run: a fresh database with `events` events, `k` dispatchers started and sharing the
/// group, then the consumer applied; the time from the apply until every shard passed the last
/// event.
async fn shape(bench: &BenchDb, name: &str, k: usize, n: u32, events: i64, sink: &str, batch: i64) -> Result<f64> {
    let db = bench.scenario(&format!("{name}_{k}_{n}")).await?;
    sqlx::raw_sql(PROJECTION_TABLE).execute(&db.pool).await?;
    db.fill(events).await?;
    let mut procs = Vec::new();
    for i in 0..k {
        procs.push(DispatcherProc::start(&db.url, &format!("so-{i}"), &DispatcherOpts::group("scaleout")).await?);
    }
    // Every dispatcher has seen the others (liveness refreshed each second) before the clock starts.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let yaml = format!(
        "---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: slow}}\nspec:\n  \
         delivery: Shared\n  group: scaleout\n  partitions: {n}\n  batchSize: {b}\n  sink: {sink}\n",
        b = batch.min(100)
    );
    let started = Instant::now();
    db.apply(&yaml).await?;
    wait_every_shard_past_the_end(&db, Duration::from_secs(900)).await?;
    let took = started.elapsed();
    drop(procs);
    Ok(events as f64 / took.as_secs_f64())
}

async fn wait_every_shard_past_the_end(db: &ScenarioDb, timeout: Duration) -> Result<()> {
    let (tx, id): (Xid8, i64) =
        sqlx::query_as("SELECT tx_id, id FROM highwater.events ORDER BY tx_id DESC, id DESC LIMIT 1")
            .fetch_one(&db.pool)
            .await?;
    let deadline = Instant::now() + timeout;
    loop {
        let (shards, behind): (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE (cursor_tx, cursor_id) < ($1, $2) OR status <> 'idle')
               FROM highwater.consumer_shards WHERE consumer = 'slow'",
        )
        .bind(tx)
        .bind(id)
        .fetch_one(&db.pool)
        .await?;
        if shards > 0 && behind == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("consumer slow did not catch up within {timeout:?}: {behind} of {shards} shards behind");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A local HTTP endpoint that answers every request after `delay`; returns its URL and the
/// number of requests served.
pub(super) async fn slow_endpoint(delay: Duration) -> Result<(String, Arc<AtomicU64>)> {
    let served = Arc::new(AtomicU64::new(0));
    let count = served.clone();
    let app = axum::Router::new().fallback(move || {
        let count = count.clone();
        async move {
            tokio::time::sleep(delay).await;
            count.fetch_add(1, Ordering::Relaxed);
            axum::http::StatusCode::NO_CONTENT
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{addr}/events"), served))
}
