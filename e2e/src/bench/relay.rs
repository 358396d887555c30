//! Scenario 11, relay to Kafka: highwater's kafka sink side by side with Debezium's outbox
//! EventRouter ([`super::debezium`]), on one PostgreSQL (`wal_level=logical`) and one Kafka 4.4
//! broker ([`crate::brokers::kafka`]), in one run.
//!
//! Every transaction writes the event twice in one statement: to `highwater.events` and to a
//! seed-style `public.outbox` table (`id uuid, aggregatetype, aggregateid, type, payload`) that
//! Debezium reads through its own replication slot and publication. So both relays see the same
//! events, committed in the same transactions at the same rate.
//!
//! - Backlog: the slot is created, then the backlog is written; each relay then starts alone and
//!   is timed until its topic holds every record (high watermarks, polled every 20 ms). The rate
//!   is taken from the first record in Kafka to the last (a JVM starts slower than the dispatcher;
//!   its start is in the note), with the CPU seconds and peak RSS of the relay process (/proc).
//! - Latency: both relays run at once while writers commit at a steady rate; each payload carries
//!   `clock_timestamp()` of its transaction in microseconds, and each topic stamps records with
//!   the broker's append time (`message.timestamp.type=LogAppendTime`, milliseconds). A real Kafka
//!   consumer reads both topics back; commit-to-Kafka is the append time minus the commit time
//!   (one machine, one clock). The writers commit with `synchronous_commit=on`, PostgreSQL's
//!   default, although the cluster's is off: a walsender only sends WAL that is flushed, and with
//!   it off a commit waits for the WAL writer's next round (`wal_writer_delay`, 200 ms), a delay
//!   only Debezium's path would pay. fsync stays off, so the flush costs no disk wait.
//!
//! [`super::outbox`] writes the events, [`super::topics`] creates and reads the topics.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{
    BenchDb, Peers, Report, Sizes,
    db::{ScenarioDb, consumer_yaml},
    debezium::{self, DebeziumRelay},
    dispatcher::{self, DispatcherOpts, DispatcherProc},
    outbox::{fill_both, prepare_outbox, write_both_sql, write_steadily},
    report::{per_s, ratio},
    topics::{PARTITIONS, commit_to_kafka_ms, create_topics, wait_records},
};
use crate::brokers::kafka::{Kafka, KafkaOptions};

const S: &str = "11 relay to Kafka";
/// The PostgreSQL settings the scenario needs for Debezium's logical replication.
pub const SETTINGS: [(&str, &str); 3] =
    [("wal_level", "logical"), ("max_replication_slots", "10"), ("max_wal_senders", "10")];

const HIGHWATER: &str = "highwater (kafka sink)";
const DEBEZIUM: &str = "Debezium 3.6.1 (embedded, outbox EventRouter)";

pub async fn run(bench: &BenchDb, sizes: &Sizes, peers: Peers, report: &mut Report) -> Result<()> {
    let pool = sqlx::PgPool::connect(&bench.pg.url()).await?;
    for (name, _) in SETTINGS {
        let v: String = sqlx::query_scalar("SELECT current_setting($1)").bind(name).fetch_one(&pool).await?;
        report.header.push((format!("PostgreSQL {name}"), v));
    }
    pool.close().await;
    report.header.push((
        "Kafka".into(),
        format!("{} (KRaft, one process, {PARTITIONS} partitions per topic)", crate::brokers::kafka::VERSION),
    ));
    if peers.debezium {
        // Resolved and compiled before any clock starts.
        debezium::classpath().await?;
    }
    let kafka = Kafka::start(KafkaOptions::default()).await.context("starting Kafka for the relay scenario")?;
    let bootstrap = kafka.bootstrap();
    create_topics(
        &bootstrap,
        &["highwater.backlog", "highwater.backlog-big", "debezium.backlog", "highwater.latency", "debezium.latency"],
    )
    .await?;
    backlog(bench, sizes, peers, &bootstrap, report).await?;
    latency(bench, sizes, peers, &bootstrap, report).await?;
    Ok(())
}

/// What one relay did with the backlog.
struct Drained {
    /// Process start to the last record in Kafka.
    total: Duration,
    /// First record in Kafka to the last.
    streaming: Duration,
    cpu: Duration,
    peak_rss: u64,
}

async fn backlog(bench: &BenchDb, sizes: &Sizes, peers: Peers, bootstrap: &str, report: &mut Report) -> Result<()> {
    let n = sizes.relay_events;
    let db = bench.scenario("relay_backlog").await?;
    prepare_outbox(&db, "dbz_backlog").await?;
    fill_both(&db, n).await?;
    let timeout = Duration::from_secs(900);

    let hw = drain_highwater(&db, bootstrap, "relay", "highwater.backlog", sizes.batch, n).await?;
    add_drained(report, HIGHWATER, n, &hw, &format!("batchSize {}", sizes.batch));

    if peers.debezium {
        let props = debezium::properties(
            bench.pg.port(),
            "relay_backlog",
            "dbz_backlog",
            "dbz_backlog",
            bootstrap,
            "debezium.backlog",
        );
        let started = Instant::now();
        let mut dbz = DebeziumRelay::start("debezium-backlog", &props).await?;
        let pid = dbz.pid()?;
        let (peak, first) =
            peak_rss(pid, wait_records(bootstrap, "debezium.backlog", n, timeout, started, || dbz.check_running()))
                .await;
        let first = first?;
        let dz = Drained {
            total: started.elapsed(),
            streaming: started.elapsed() - first,
            cpu: dispatcher::cpu(pid)?,
            peak_rss: peak,
        };
        drop(dbz);
        add_drained(report, DEBEZIUM, n, &dz, "max.batch.size 2048 (default)");
        let rate = |d: &Drained| n as f64 / d.streaming.as_secs_f64();
        report.add(
            S,
            "highwater ÷ Debezium",
            &format!("events/s to Kafka, backlog of {}", per_s(n as f64)),
            ratio(rate(&hw), rate(&dz)),
            "goal ≥ 2×",
        );
        report.add(
            S,
            "highwater ÷ Debezium",
            "CPU seconds per event, backlog",
            ratio(hw.cpu.as_secs_f64(), dz.cpu.as_secs_f64()),
            "lower is better",
        );
    }
    // The same backlog again with larger batches: the sequential batch cycle (read, produce, wait
    // for every acknowledgement, move the cursor) is what bounds a drain; a batch amortises it.
    let big = sizes.batch * 5;
    let hw = drain_highwater(&db, bootstrap, "relay-big", "highwater.backlog-big", big, n).await?;
    add_drained(report, &format!("{HIGHWATER}, batchSize {big}"), n, &hw, &format!("batchSize {big}"));
    Ok(())
}

/// One dispatcher draining the backlog with consumer (and group) `name` to `topic`.
async fn drain_highwater(
    db: &ScenarioDb,
    bootstrap: &str,
    name: &str,
    topic: &str,
    batch: i64,
    n: i64,
) -> Result<Drained> {
    db.apply(&consumer_yaml(name, name, batch, &kafka_sink(bootstrap, topic))).await?;
    let started = Instant::now();
    let mut d = DispatcherProc::start(&db.url, &format!("{name}-0"), &DispatcherOpts::group(name)).await?;
    let pid = d.pid();
    let (peak, first) = peak_rss(
        pid,
        wait_records(bootstrap, topic, n, Duration::from_secs(900), started, || match d.child.try_wait()? {
            Some(status) => bail!("the dispatcher exited ({status})"),
            None => Ok(()),
        }),
    )
    .await;
    Ok(Drained { total: started.elapsed(), streaming: started.elapsed() - first?, cpu: d.cpu()?, peak_rss: peak })
}

fn add_drained(report: &mut Report, subject: &str, n: i64, d: &Drained, settings: &str) {
    let rate = n as f64 / d.streaming.as_secs_f64();
    let goal = if subject.starts_with(HIGHWATER) { "; goal ≥ 50,000/s" } else { "" };
    report.add(
        S,
        subject,
        &format!("events/s to Kafka, backlog of {}", per_s(n as f64)),
        per_s(rate),
        format!(
            "first record to last; {:.1} s from process start ({}/s){goal}; {settings}",
            d.total.as_secs_f64(),
            per_s(n as f64 / d.total.as_secs_f64())
        ),
    );
    report.add(
        S,
        subject,
        "CPU seconds, backlog",
        format!("{:.1} s", d.cpu.as_secs_f64()),
        format!("{:.1} µs per event, process start included", d.cpu.as_secs_f64() * 1e6 / n as f64),
    );
    report.add(S, subject, "peak RSS, backlog", format!("{:.1} MiB", d.peak_rss as f64 / 1048576.0), "");
}

async fn latency(bench: &BenchDb, sizes: &Sizes, peers: Peers, bootstrap: &str, report: &mut Report) -> Result<()> {
    let db = bench.scenario("relay_latency").await?;
    prepare_outbox(&db, "dbz_latency").await?;
    db.apply(&consumer_yaml("relay", "relay", sizes.batch, &kafka_sink(bootstrap, "highwater.latency"))).await?;
    let d = DispatcherProc::start(&db.url, "relay-0", &DispatcherOpts::group("relay")).await?;
    let mut dbz = None;
    if peers.debezium {
        let props = debezium::properties(
            bench.pg.port(),
            "relay_latency",
            "dbz_latency",
            "dbz_latency",
            bootstrap,
            "debezium.latency",
        );
        dbz = Some(DebeziumRelay::start("debezium-latency", &props).await?);
    }
    let mut topics = vec![(HIGHWATER, "highwater.latency", d.pid())];
    if let Some(z) = &dbz {
        topics.push((DEBEZIUM, "debezium.latency", z.pid()?));
    }
    // One warm-up event through both (its payload has no commit time): both relays are
    // streaming before the clock starts.
    sqlx::query(sqlx::AssertSqlSafe(write_both_sql(false))).bind("warm-up").bind(0_i64).execute(&db.pool).await?;
    for (_, topic, _) in &topics {
        wait_records(bootstrap, topic, 1, Duration::from_secs(60), Instant::now(), || Ok(())).await?;
    }
    let cpu_before: Vec<Duration> = topics.iter().map(|(_, _, pid)| dispatcher::cpu(*pid)).collect::<Result<_>>()?;
    let written = write_steadily(&db.url, sizes.latency_rate, sizes.latency_writers, sizes.latency_duration).await?;
    let rate = written as f64 / sizes.latency_duration.as_secs_f64();
    for (i, (subject, topic, pid)) in topics.iter().enumerate() {
        wait_records(bootstrap, topic, written as i64 + 1, Duration::from_secs(120), Instant::now(), || Ok(())).await?;
        let cpu = dispatcher::cpu(*pid)? - cpu_before[i];
        let mut ms = commit_to_kafka_ms(bootstrap, topic, written as usize + 1).await?;
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1];
        let note = format!(
            "{} events at {rate:.0}/s from {} writers (synchronous_commit=on), both relays running",
            ms.len(),
            sizes.latency_writers
        );
        let goal = if *subject == HIGHWATER { format!("{note}; goal p99 ≤ 50 ms") } else { note.clone() };
        let metric = |m: &str| format!("commit-to-Kafka {m} at {}/s", sizes.latency_rate);
        report.add(S, subject, &metric("p50"), format!("{:.1} ms", at(0.5)), &note);
        report.add(S, subject, &metric("p99"), format!("{:.1} ms", at(0.99)), goal);
        report.add(
            S,
            subject,
            &metric("max"),
            format!("{:.1} ms", ms[ms.len() - 1]),
            "broker append time, 1 ms resolution",
        );
        report.add(
            S,
            subject,
            &format!("CPU seconds at {}/s", sizes.latency_rate),
            format!("{:.2} s", cpu.as_secs_f64()),
            format!(
                "over {:.0} s ({:.1} % of a core)",
                sizes.latency_duration.as_secs_f64(),
                100.0 * cpu.as_secs_f64() / sizes.latency_duration.as_secs_f64()
            ),
        );
    }
    drop(dbz);
    drop(d);
    Ok(())
}

fn kafka_sink(bootstrap: &str, topic: &str) -> String {
    format!("{{kafka: {{brokers: [\"{bootstrap}\"], topic: {topic}}}}}")
}

/// Samples the RSS of `pid` every 50 ms until `stop` resolves; the highest seen.
async fn peak_rss<F: std::future::Future>(pid: u32, stop: F) -> (u64, F::Output) {
    let mut peak = 0;
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            out = &mut stop => return (peak.max(dispatcher::rss(pid).unwrap_or(0)), out),
            _ = tick.tick() => peak = peak.max(dispatcher::rss(pid).unwrap_or(0)),
        }
    }
}
