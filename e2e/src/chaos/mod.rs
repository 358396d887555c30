//! The chaos run: steady load from concurrent writers, dispatcher processes that keep being
//! SIGKILLed, PostgreSQL restarted, and the network between dispatchers and the database cut,
//! black-holed and slowed; then an auditor compares, per consumer, what was committed with what
//! was delivered. `cargo run --release -p highwater-e2e --bin chaos -- --duration 10m` for the
//! long run; `e2e/tests/chaos_short.rs` runs a short one in the test suite.
//!
//! Consumers: `chaos-sql`, a shared SQL sink (exactly once: no loss, no duplicate), `chaos-log`, a
//! shared log sink to a file (at least once: no loss, duplicates bounded by one batch per
//! interruption), and `chaos-pi`, a PerInstance SQL sink (each process from its start: no gap, no
//! duplicate).
pub mod audit;
pub mod faults;
pub mod fleet;
pub mod load;

use std::{
    fmt,
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use highwater::embedded::{EmbeddedOptions, EmbeddedPostgres};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use self::{
    audit::{CursorWatch, Delivery},
    faults::FaultCounters,
    fleet::Fleet,
    load::LoadCounters,
};
use crate::proxy::Proxy;

#[derive(Clone, Debug, clap::Args)]
pub struct Config {
    /// How long the faults go on (the drain afterwards is extra).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Dispatcher processes running at any time.
    #[arg(long, default_value_t = 3)]
    pub dispatchers: usize,
    /// Concurrent writers.
    #[arg(long, default_value_t = 4)]
    pub writers: usize,
    /// Batch size of both consumers (the redelivery bound is one batch per interruption).
    #[arg(long, default_value_t = 20)]
    pub batch_size: u32,
    /// A random dispatcher is SIGKILLed about this often (±50%).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub kill_every: Duration,
    /// PostgreSQL is restarted about this often (±50%).
    #[arg(long, default_value = "25s", value_parser = humantime::parse_duration)]
    pub pg_restart_every: Duration,
    /// The network goes bad about this often (±50%), in turn cut, half-open and slow.
    #[arg(long, default_value = "8s", value_parser = humantime::parse_duration)]
    pub net_fault_every: Duration,
    /// How long a network fault lasts (±50%).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub net_fault_for: Duration,
    /// Also hold one transaction (with an event) open this long, from a quarter into the run: the
    /// fence stays behind it meanwhile. 0 for none.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub hold_transaction: Duration,
    /// How long the consumers get to catch up once the faults stop.
    #[arg(long, default_value = "180s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
}

/// The figures of one run.
#[derive(Debug)]
pub struct Report {
    pub config: Config,
    pub events: usize,
    pub committed_tx: u64,
    pub failed_tx: u64,
    pub kills: u64,
    pub pg_restarts: u64,
    pub cuts: u64,
    pub half_opens: u64,
    pub slow_links: u64,
    pub unexpected_exits: usize,
    pub drained_in: Duration,
    pub cursor_samples: u64,
    pub cursor_regressions: Vec<String>,
    /// How long the long transaction was held, and whether it committed (a PostgreSQL restart
    /// rolls it back).
    pub long_transaction: Option<(Duration, bool)>,
    pub sql: Delivery,
    pub log: Delivery,
    pub per_instance: Delivery,
}

impl Report {
    /// Interruptions that may each make an at-least-once sink deliver one batch again: a kill, a
    /// restart, a network fault or a process exit catches at most one batch of the shared shard
    /// between delivery and cursor update.
    pub fn interruptions(&self) -> u64 {
        self.kills + self.pg_restarts + self.cuts + self.half_opens + self.slow_links + self.unexpected_exits as u64
    }

    pub fn duplicate_bound(&self) -> u64 {
        self.interruptions() * u64::from(self.config.batch_size)
    }

    /// Every broken promise; empty when the run passed.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        for d in [&self.sql, &self.log, &self.per_instance] {
            if d.lost > 0 {
                v.push(format!("{}: {} committed events never delivered {:?}", d.consumer, d.lost, d.gaps));
            }
            if d.phantom > 0 {
                v.push(format!("{}: {} deliveries of events that were never committed", d.consumer, d.phantom));
            }
            if d.torn > 0 {
                v.push(format!("{}: {} torn lines", d.consumer, d.torn));
            }
        }
        for d in [&self.sql, &self.per_instance] {
            if d.duplicates > 0 {
                v.push(format!("{}: {} events applied twice by an exactly-once sink", d.consumer, d.duplicates));
            }
        }
        if self.log.duplicates as u64 > self.duplicate_bound() {
            v.push(format!(
                "{}: {} redeliveries, more than the bound {} (interruptions x batch size)",
                self.log.consumer,
                self.log.duplicates,
                self.duplicate_bound()
            ));
        }
        if self.cursor_samples == 0 {
            v.push("the cursor watch took no sample".into());
        }
        v.extend(self.cursor_regressions.iter().map(|r| format!("cursor moved backwards: {r}")));
        v
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "chaos: {:?} of faults, {} dispatchers, {} writers, batch size {}",
            c.duration, c.dispatchers, c.writers, c.batch_size
        )?;
        writeln!(
            f,
            "  events committed     {} ({} transactions acknowledged, {} failed or ambiguous)",
            self.events, self.committed_tx, self.failed_tx
        )?;
        writeln!(f, "  dispatcher SIGKILLs  {}", self.kills)?;
        writeln!(f, "  unexpected exits     {}", self.unexpected_exits)?;
        writeln!(f, "  PostgreSQL restarts  {}", self.pg_restarts)?;
        writeln!(
            f,
            "  network faults       {} cuts, {} half-open, {} slow",
            self.cuts, self.half_opens, self.slow_links
        )?;
        writeln!(f, "  drained in           {:.1?} after the faults stopped", self.drained_in)?;
        writeln!(
            f,
            "  cursor samples       {} ({} moves backwards)",
            self.cursor_samples,
            self.cursor_regressions.len()
        )?;
        if let Some((held, committed)) = self.long_transaction {
            let end = if committed { "committed" } else { "rolled back by a restart" };
            writeln!(f, "  long transaction     held {held:.1?}, {end}")?;
        }
        for (d, kind) in [
            (&self.sql, "shared SQL sink, exactly once"),
            (&self.log, "shared log sink, at least once"),
            (&self.per_instance, "PerInstance SQL sink, exactly once per process"),
        ] {
            writeln!(
                f,
                "  {:<10} ({kind}): lost {}, duplicates {}, phantom {}, torn {}",
                d.consumer, d.lost, d.duplicates, d.phantom, d.torn
            )?;
        }
        write!(
            f,
            "  redelivery bound     {} (interruptions {} x batch size)",
            self.duplicate_bound(),
            self.interruptions()
        )
    }
}

const SQL_CONSUMER: &str = "chaos-sql";
const LOG_CONSUMER: &str = "chaos-log";
const PI_CONSUMER: &str = "chaos-pi";

/// Runs the chaos and the audit; the report says whether every promise held
/// ([`Report::violations`]). `work` gets each dispatcher's log and the log sink's file.
pub async fn run(config: Config, work: &std::path::Path) -> Result<Report> {
    let bin = fleet::highwater_bin()?;
    let pg = EmbeddedPostgres::start(EmbeddedOptions::default()).await.context("starting PostgreSQL")?;
    let admin = highwater::db::connect(&pg.url(), 10).await?;
    highwater::db::migrate(&admin).await?;
    highwater::event_types::register(&admin, load::EVENT_TYPE, None, None).await?;
    sqlx::raw_sql(
        "CREATE TABLE chaos_applied (event_id bigint NOT NULL);
         CREATE TABLE chaos_pi (instance_id text NOT NULL, event_id bigint NOT NULL);",
    )
    .execute(&admin)
    .await?;
    let log_file = work.join("chaos-log.jsonl");
    let consumers = format!(
        "---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {SQL_CONSUMER}}}\n\
         spec: {{delivery: Shared, batchSize: {b}, sink: {{sql: {{statement: 'INSERT INTO chaos_applied VALUES ($2)'}}}}}}\n\
         ---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {LOG_CONSUMER}}}\n\
         spec: {{delivery: Shared, batchSize: {b}, sink: {{log: {{target: '{}'}}}}}}\n\
         ---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {PI_CONSUMER}}}\n\
         spec: {{delivery: PerInstance, batchSize: {b}, sink: {{sql: {{statement: \"INSERT INTO chaos_pi \
         VALUES (current_setting('highwater.instance_id'), $2)\"}}}}}}\n",
        log_file.display(),
        b = config.batch_size
    );
    let defs = highwater::definitions::parse(&consumers, "chaos")?;
    highwater::definitions::apply(&admin, &defs).await?;

    let proxy = Arc::new(Proxy::start(([127, 0, 0, 1], pg.port()).into()).await?);
    let through_proxy = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
    let fleet = Arc::new(Mutex::new(Fleet::start(bin, through_proxy, work, config.dispatchers)?));
    let pg = Arc::new(Mutex::new(pg));

    let stop_load = CancellationToken::new();
    let stop_faults = CancellationToken::new();
    let stop_watch = CancellationToken::new();
    let load_counters = Arc::new(LoadCounters::default());
    let faults = Arc::new(FaultCounters::default());
    let watch = CursorWatch::default();
    let watcher = watch.spawn(admin.clone(), Duration::from_millis(200), stop_watch.clone());
    let mut writers = load::start(admin.clone(), config.writers, stop_load.clone(), load_counters.clone());
    let fault_tasks = [
        tokio::spawn(faults::kill_dispatchers(fleet.clone(), config.kill_every, faults.clone(), stop_faults.clone())),
        tokio::spawn(faults::restart_postgres(
            pg.clone(),
            config.pg_restart_every,
            faults.clone(),
            stop_faults.clone(),
        )),
        tokio::spawn(faults::break_network(
            proxy.clone(),
            config.net_fault_every,
            config.net_fault_for,
            faults.clone(),
            stop_faults.clone(),
        )),
    ];
    let long_tx = (!config.hold_transaction.is_zero())
        .then(|| tokio::spawn(load::hold_transaction(admin.clone(), config.duration / 4, config.hold_transaction)));
    tokio::time::sleep(config.duration).await;
    stop_faults.cancel();
    for t in fault_tasks {
        t.await?;
    }
    stop_load.cancel();
    while writers.join_next().await.is_some() {}
    let long_transaction = match long_tx {
        Some(t) => Some(t.await?),
        None => None,
    };

    // Drain: wait until every consumer holds every committed event (or the timeout).
    let drain_start = Instant::now();
    let audit_all = |running: Vec<String>| {
        let admin = admin.clone();
        let log_file = log_file.clone();
        async move {
            let committed = audit::committed(&admin).await?;
            let sql = audit::sql_sink(&admin, SQL_CONSUMER, "chaos_applied", &committed).await?;
            let log = audit::log_sink(LOG_CONSUMER, &log_file, &committed)?;
            let pi = audit::per_instance(&admin, PI_CONSUMER, "chaos_pi", &running).await?;
            anyhow::Ok((committed.len(), sql, log, pi))
        }
    };
    let all_in = |a: &(usize, Delivery, Delivery, Delivery)| a.1.lost == 0 && a.2.lost == 0 && a.3.lost == 0;
    let drained = loop {
        let running = {
            let mut f = fleet.lock().await;
            f.replace_exited()?;
            f.running()
        };
        let a = audit_all(running).await?;
        if all_in(&a) || drain_start.elapsed() > config.drain_timeout {
            break a;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let drained_in = drain_start.elapsed();
    // Deliveries still in flight would show up after the audit: stop the fleet, then audit again.
    let (unexpected_exits, running) = {
        let mut f = fleet.lock().await;
        let running = f.running();
        f.stop();
        (f.unexpected_exits, running)
    };
    let _ = watch.sample(&admin).await;
    stop_watch.cancel();
    watcher.await?;
    let (events, sql, log, per_instance) = if all_in(&drained) { audit_all(running).await? } else { drained };
    Ok(Report {
        config,
        events,
        committed_tx: load_counters.committed_tx.load(Ordering::Relaxed),
        failed_tx: load_counters.failed_tx.load(Ordering::Relaxed),
        kills: faults.kills.load(Ordering::Relaxed),
        pg_restarts: faults.pg_restarts.load(Ordering::Relaxed),
        cuts: faults.cuts.load(Ordering::Relaxed),
        half_opens: faults.half_opens.load(Ordering::Relaxed),
        slow_links: faults.slow_links.load(Ordering::Relaxed),
        unexpected_exits,
        drained_in,
        cursor_samples: watch.samples(),
        cursor_regressions: watch.regressions(),
        long_transaction,
        sql,
        log,
        per_instance,
    })
}
