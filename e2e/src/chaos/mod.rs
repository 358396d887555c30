//! The chaos run: steady load from concurrent writers, dispatcher processes that keep being
//! SIGKILLed, PostgreSQL restarted, and the network between dispatchers and the database cut,
//! black-holed and slowed; then an auditor compares, per consumer, what was committed with what
//! was delivered. `cargo run --release -p highwater-e2e --bin chaos -- --duration 10m` for the
//! long run; `e2e/tests/chaos_short.rs` runs a short one in the test suite.
//!
//! Consumers: `chaos-sql`, a shared SQL sink (exactly once: no loss, no duplicate), `chaos-log`, a
//! shared log sink to a file (at least once: no loss, duplicates bounded by one batch per
//! interruption), `chaos-kafka`, a shared kafka sink to a real broker whose topic an auditor reads
//! back ([`kafka`]; the same at-least-once promise), and `chaos-pi`, a PerInstance SQL sink (each
//! process from its start: no gap, no duplicate). Operator commands run meanwhile on their own clocks (`ops`), each on a consumer of
//! its own: `chaos-rw` is rewound, `chaos-poison` stops on poison events that are skipped,
//! `chaos-toggle` is disabled and enabled, `chaos-dead`'s sink breaks until it is dead and it is
//! restarted; `events prune` keeps deleting what every shard has passed, and `consumer gc`
//! collects the shards of the killed instances. The cluster starts a little below a power of ten
//! of transaction ids (`--xid-boundary`), which the run crosses while all this goes on.
pub mod audit;
pub mod boundary;
pub mod faults;
pub mod fleet;
pub mod kafka;
pub mod load;
pub mod ops;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use highwater::embedded::EmbeddedOptions;
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
    /// Leave out `chaos-kafka` (its broker needs Java 17 and Maven).
    #[arg(long)]
    pub no_kafka: bool,
    /// How long the consumers get to catch up once the faults stop.
    #[arg(long, default_value = "180s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// The transaction id the run crosses: a power of ten (10^10 is at epoch 2, where xid8 values
    /// exceed 2^32).
    #[arg(long, default_value_t = 100_000)]
    pub xid_boundary: u64,
    /// The cluster starts this many transaction ids below the boundary.
    #[arg(long, default_value_t = 20_000)]
    pub xid_lead: u64,
    /// `events prune` runs about this often (±50%), with a cut-off twice `--prune-lag` behind the
    /// writers, then once behind the slowest shard...
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    pub prune_every: Duration,
    /// ... deleting the events older than this (the cut-off keeps catching up with the writers).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub prune_lag: Duration,
    /// Events deleted per prune transaction (one batch usually holds every candidate).
    #[arg(long, default_value_t = 5000)]
    pub prune_batch: i64,
    /// `consumer rewind chaos-rw` about this often, to a time and to latest in turn.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub rewind_every: Duration,
    /// How far back a rewind to a time goes at most.
    #[arg(long, default_value = "6s", value_parser = humantime::parse_duration)]
    pub rewind_back: Duration,
    /// A poison event is appended about this often.
    #[arg(long, default_value = "6s", value_parser = humantime::parse_duration)]
    pub poison_every: Duration,
    /// `consumer skip chaos-poison` about this often.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub skip_every: Duration,
    /// `consumer disable`/`enable chaos-toggle` about this often.
    #[arg(long, default_value = "6s", value_parser = humantime::parse_duration)]
    pub toggle_every: Duration,
    /// `consumer gc` of the killed instances about this often.
    #[arg(long, default_value = "6s", value_parser = humantime::parse_duration)]
    pub gc_every: Duration,
    /// `chaos-dead`'s sink breaks (until the shard is dead, then `consumer restart`) about this often.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub dead_every: Duration,
}

impl Config {
    fn clocks(&self) -> ops::Clocks {
        ops::Clocks {
            prune_every: self.prune_every,
            prune_lag: self.prune_lag,
            prune_batch: self.prune_batch,
            rewind_every: self.rewind_every,
            rewind_back: self.rewind_back,
            poison_every: self.poison_every,
            skip_every: self.skip_every,
            toggle_every: self.toggle_every,
            gc_every: self.gc_every,
            dead_every: self.dead_every,
        }
    }
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
    /// `chaos-kafka`, read back from the topic (none with `--no-kafka`).
    pub kafka: Option<Delivery>,
    pub per_instance: Delivery,
    pub poison: Delivery,
    pub dead: Delivery,
    pub toggle: Delivery,
    pub rewinds: audit::RewindAudit,
    /// The operations, by name: how many ran, were refused (by reason), failed.
    pub ops: BTreeMap<&'static str, ops::OpCount>,
    pub deleted: usize,
    /// Deleted events a shard that was not disabled had not passed.
    pub early_deletions: Vec<String>,
    pub skip_problems: Vec<String>,
    pub crossing: boundary::Crossing,
    pub watch_rewinds: u64,
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
        for d in [&self.sql, &self.log, &self.per_instance, &self.poison, &self.dead, &self.toggle]
            .into_iter()
            .chain(self.kafka.as_ref())
        {
            if d.unexpected > 0 {
                v.push(format!("{}: {} deliveries of events it must not get (skipped)", d.consumer, d.unexpected));
            }
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
        for d in [&self.sql, &self.per_instance, &self.poison, &self.dead, &self.toggle] {
            if d.duplicates > 0 {
                v.push(format!("{}: {} events applied twice by an exactly-once sink", d.consumer, d.duplicates));
            }
        }
        for d in std::iter::once(&self.log).chain(self.kafka.as_ref()) {
            if d.duplicates as u64 > self.duplicate_bound() {
                v.push(format!(
                    "{}: {} redeliveries, more than the bound {} (interruptions x batch size)",
                    d.consumer,
                    d.duplicates,
                    self.duplicate_bound()
                ));
            }
        }
        if self.cursor_samples == 0 {
            v.push("the cursor watch took no sample".into());
        }
        v.extend(self.cursor_regressions.iter().map(|r| format!("cursor moved backwards: {r}")));
        if !self.early_deletions.is_empty() {
            v.push(format!(
                "events prune deleted {} events before every shard that is not disabled had passed them; the first: {}",
                self.early_deletions.len(),
                self.early_deletions.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
            ));
        }
        v.extend(self.rewinds.problems.iter().map(|p| format!("{}: {p}", ops::RW_CONSUMER)));
        v.extend(self.skip_problems.iter().cloned());
        if !self.crossing.crossed() {
            v.push(format!("the run did not cross transaction id {}: {:?}", self.crossing.boundary, self.crossing));
        }
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
            "  cursor samples       {} ({} moves backwards; {} rewinds made by the run)",
            self.cursor_samples,
            self.cursor_regressions.len(),
            self.watch_rewinds
        )?;
        let x = &self.crossing;
        writeln!(
            f,
            "  transaction ids      {} -> {} (epoch {} -> {}), boundary {}: {} ({} events below it, {} at or above; {} ids used up by the harness)",
            x.start_xid,
            x.end_xid,
            x.start_xid >> 32,
            x.end_xid >> 32,
            x.boundary,
            x.crossed_after.map_or("NOT crossed".to_owned(), |d| format!("crossed {d:.1?} into the run")),
            x.events_below,
            x.events_above,
            x.burned
        )?;
        writeln!(f, "  operations           (ran / refused / failed)")?;
        for (name, c) in &self.ops {
            let why: Vec<String> = c.refused.iter().map(|(r, n)| format!("{n}x {r}")).collect();
            writeln!(
                f,
                "    {name:<28} {:>4} / {:>4} / {:>3}  (affected {}){}",
                c.ran,
                c.refusals(),
                c.failed,
                c.affected,
                if why.is_empty() { String::new() } else { format!(": {}", why.join("; ")) }
            )?;
        }
        writeln!(
            f,
            "  retention            {} events deleted, {} before every live shard had passed them",
            self.deleted,
            self.early_deletions.len()
        )?;
        writeln!(
            f,
            "  rewinds ({})     {} windows checked, {} events delivered again after rewinds to a time, {} deliveries after rewinds to latest, {} problems",
            ops::RW_CONSUMER,
            self.rewinds.windows_checked,
            self.rewinds.redelivered_after_time,
            self.rewinds.deliveries_after_latest,
            self.rewinds.problems.len()
        )?;
        if let Some((held, committed)) = self.long_transaction {
            let end = if committed { "committed" } else { "rolled back by a restart" };
            writeln!(f, "  long transaction     held {held:.1?}, {end}")?;
        }
        for (d, kind) in [
            (&self.sql, "shared SQL sink, exactly once"),
            (&self.log, "shared log sink, at least once"),
            (&self.per_instance, "PerInstance SQL sink, exactly once per process"),
            (&self.poison, "skips of poison events, exactly once otherwise"),
            (&self.dead, "dead and restarted, exactly once"),
            (&self.toggle, "disabled and enabled, exactly once"),
        ] {
            writeln!(
                f,
                "  {:<12} ({kind}): lost {}, duplicates {}, phantom {}, torn {}, unexpected {}",
                d.consumer, d.lost, d.duplicates, d.phantom, d.torn, d.unexpected
            )?;
        }
        if let Some(d) = &self.kafka {
            writeln!(
                f,
                "  {:<12} (shared kafka sink, at least once, its topic read back): lost {}, duplicates {}, phantom {}",
                d.consumer, d.lost, d.duplicates, d.phantom
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

/// What one audit found.
struct Audited {
    events: usize,
    sql: Delivery,
    log: Delivery,
    kafka: Option<Delivery>,
    pi: Delivery,
    poison: Delivery,
    dead: Delivery,
    toggle: Delivery,
    rewinds: audit::RewindAudit,
    deleted: usize,
    early: Vec<String>,
    skips: Vec<String>,
    below: usize,
    above: usize,
}

impl Audited {
    fn all_in(&self) -> bool {
        [&self.sql, &self.log, &self.pi, &self.poison, &self.dead, &self.toggle]
            .into_iter()
            .chain(self.kafka.as_ref())
            .all(|d| d.lost == 0)
            && self.rewinds.behind == 0
    }
}

async fn audit_all(
    admin: &sqlx::PgPool,
    log_file: &std::path::Path,
    kafka: Option<&kafka::ChaosKafka>,
    running: &[String],
    log: &ops::OpsLog,
    boundary: u64,
) -> Result<Audited> {
    let all = audit::all_events(admin).await?;
    let committed = &all.ids;
    let skipped = log.skipped();
    let not_poison: BTreeSet<i64> =
        committed.iter().copied().filter(|id| !all.by_id[id].poison && !skipped.contains(id)).collect();
    let toggle_owed: BTreeSet<i64> = committed
        .iter()
        .copied()
        .filter(|id| {
            !all.by_id[id]
                .unpassed
                .iter()
                .any(|u| u.starts_with(&format!("{}/__shared__:disabled ", ops::TOGGLE_CONSUMER)))
        })
        .collect();
    Ok(Audited {
        events: committed.len(),
        sql: audit::sql_sink(admin, SQL_CONSUMER, "chaos_applied", committed).await?,
        log: audit::log_sink(LOG_CONSUMER, log_file, committed)?,
        kafka: match kafka {
            Some(k) => Some(k.audit(committed).await?),
            None => None,
        },
        pi: audit::per_instance(admin, PI_CONSUMER, "chaos_pi", running).await?,
        poison: audit::sql_sink_expecting(admin, ops::POISON_CONSUMER, "chaos_poison", &not_poison, committed).await?,
        dead: audit::sql_sink(admin, ops::DEAD_CONSUMER, "chaos_dead", committed).await?,
        toggle: audit::sql_sink_expecting(admin, ops::TOGGLE_CONSUMER, "chaos_toggle", &toggle_owed, committed).await?,
        rewinds: audit::rewinds(admin, "chaos_rw", &all, &log.rewinds()).await?,
        deleted: all.by_id.values().filter(|e| e.deleted_at.is_some()).count(),
        early: audit::early_deletions(&all),
        skips: audit::skips(admin, ops::POISON_CONSUMER, "chaos_poison", &skipped).await?,
        below: all.by_id.values().filter(|e| e.pos.tx < boundary).count(),
        above: all.by_id.values().filter(|e| e.pos.tx >= boundary).count(),
    })
}

/// Runs the chaos and the audit; the report says whether every promise held
/// ([`Report::violations`]). `work` gets each dispatcher's log and the log sink's file.
pub async fn run(config: Config, work: &std::path::Path) -> Result<Report> {
    let bin = fleet::highwater_bin()?;
    let start_xid = config.xid_boundary.checked_sub(config.xid_lead).context("--xid-lead is above --xid-boundary")?;
    // The broker starts meanwhile: its JVM takes seconds.
    let (pg, broker) = tokio::join!(highwater_testkit::start_at(EmbeddedOptions::default(), start_xid), async {
        match config.no_kafka {
            true => Ok(None),
            false => kafka::ChaosKafka::start().await.map(Some),
        }
    });
    let pg = pg.context("starting PostgreSQL")?;
    let broker = broker?;
    let admin = highwater::db::connect(&pg.url(), 10).await?;
    highwater::db::migrate(&admin).await?;
    highwater::event_types::register(&admin, load::EVENT_TYPE, None, None).await?;
    sqlx::raw_sql(
        "CREATE TABLE chaos_applied (event_id bigint NOT NULL);
         CREATE TABLE chaos_pi (instance_id text NOT NULL, event_id bigint NOT NULL);
         CREATE TABLE chaos_rw (seq bigserial PRIMARY KEY, event_id bigint NOT NULL);
         CREATE TABLE chaos_poison (event_id bigint NOT NULL, poison boolean NOT NULL CHECK (NOT poison));
         CREATE TABLE chaos_toggle (event_id bigint NOT NULL);
         CREATE TABLE chaos_dead (event_id bigint NOT NULL, ok boolean NOT NULL CHECK (ok));
         CREATE TABLE chaos_switch (broken boolean NOT NULL);
         INSERT INTO chaos_switch VALUES (false);",
    )
    .execute(&admin)
    .await?;
    sqlx::raw_sql(audit::DELETION_TRIGGER).execute(&admin).await?;
    let log_file = work.join("chaos-log.jsonl");
    let retry = "maxAttempts: 2, backoff: {initial: 100ms, max: 200ms}";
    let consumers = format!(
        "---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {SQL_CONSUMER}}}\n\
         spec: {{delivery: Shared, batchSize: {b}, sink: {{sql: {{statement: 'INSERT INTO chaos_applied VALUES ($2)'}}}}}}\n\
         ---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {LOG_CONSUMER}}}\n\
         spec: {{delivery: Shared, batchSize: {b}, sink: {{log: {{target: '{}'}}}}}}\n\
         ---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {PI_CONSUMER}}}\n\
         spec: {{delivery: PerInstance, batchSize: {b}, sink: {{sql: {{statement: \"INSERT INTO chaos_pi \
         VALUES (current_setting('highwater.instance_id'), $2)\"}}}}}}\n\
         ---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {rw}}}\n\
         spec: {{delivery: Shared, batchSize: {b}, sink: {{sql: {{statement: 'INSERT INTO chaos_rw (event_id) VALUES ($2)'}}}}}}\n\
         ---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {poison}}}\n\
         spec: {{delivery: Shared, batchSize: {b}, {retry}, sink: {{sql: {{statement: \"INSERT INTO chaos_poison \
         VALUES ($2, coalesce(($1->>'poison')::boolean, false))\"}}}}}}\n\
         ---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {toggle}}}\n\
         spec: {{delivery: Shared, batchSize: {b}, sink: {{sql: {{statement: 'INSERT INTO chaos_toggle VALUES ($2)'}}}}}}\n\
         ---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {dead}}}\n\
         spec: {{delivery: Shared, batchSize: {b}, {retry}, sink: {{sql: {{statement: 'INSERT INTO chaos_dead \
         SELECT $2, NOT broken FROM chaos_switch'}}}}}}\n",
        log_file.display(),
        b = config.batch_size,
        rw = ops::RW_CONSUMER,
        poison = ops::POISON_CONSUMER,
        toggle = ops::TOGGLE_CONSUMER,
        dead = ops::DEAD_CONSUMER,
    );
    let consumers = match &broker {
        Some(k) => consumers + &k.consumer_yaml(config.batch_size),
        None => consumers,
    };
    let defs = highwater::definitions::parse(&consumers, "chaos")?;
    highwater::definitions::apply(&admin, &defs).await?;
    let crossing = Arc::new(std::sync::Mutex::new(boundary::Crossing {
        boundary: config.xid_boundary,
        start_xid: boundary::next_xid(&admin).await?,
        ..Default::default()
    }));

    let proxy = Arc::new(Proxy::start(([127, 0, 0, 1], pg.port()).into()).await?);
    let through_proxy = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
    let fleet = Arc::new(Mutex::new(Fleet::start(bin, through_proxy, work, config.dispatchers)?));
    let pg = Arc::new(Mutex::new(pg));

    let stop_load = CancellationToken::new();
    let stop_faults = CancellationToken::new();
    let stop_watch = CancellationToken::new();
    let load_counters = Arc::new(LoadCounters::default());
    let faults = Arc::new(FaultCounters::default());
    let ops_log = Arc::new(ops::OpsLog::default());
    let watch = CursorWatch::default();
    let watcher = watch.spawn(admin.clone(), Duration::from_millis(200), stop_watch.clone());
    let crossing_watch =
        boundary::watch(admin.clone(), config.xid_boundary, config.duration, crossing.clone(), stop_watch.clone());
    let mut writers = load::start(admin.clone(), config.writers, stop_load.clone(), load_counters.clone());
    let mut fault_tasks = vec![
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
    fault_tasks.extend(ops::spawn_all(
        admin.clone(),
        fleet.clone(),
        watch.clone(),
        config.clocks(),
        ops_log.clone(),
        stop_faults.clone(),
    ));
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

    // Drain: the operations put every consumer back to delivering (enable, repair and restart,
    // skip the poison events left, collect the killed instances' shards), then wait until every
    // consumer holds every committed event (or the timeout).
    let drain_start = Instant::now();
    ops::enable_toggle(&admin, &ops_log).await;
    let drained = loop {
        let running = {
            let mut f = fleet.lock().await;
            f.replace_exited()?;
            f.running()
        };
        ops::repair_dead(&admin, &ops_log).await;
        let failing: Option<i64> = sqlx::query_scalar(
            "SELECT failing_event_id FROM highwater.consumer_shards WHERE consumer = $1 AND status = 'dead'",
        )
        .bind(ops::POISON_CONSUMER)
        .fetch_optional(&admin)
        .await
        .ok()
        .flatten()
        .flatten();
        if failing.is_some() {
            ops::skip_once(&admin, &ops_log).await;
        }
        if !fleet.lock().await.killed.is_empty() {
            ops::gc_once(&admin, &fleet, &ops_log, false).await;
        }
        let a = audit_all(&admin, &log_file, broker.as_ref(), &running, &ops_log, config.xid_boundary).await?;
        if a.all_in() || drain_start.elapsed() > config.drain_timeout {
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
    crossing_watch.await?;
    let a = if drained.all_in() {
        audit_all(&admin, &log_file, broker.as_ref(), &running, &ops_log, config.xid_boundary).await?
    } else {
        drained
    };
    let mut crossing = crossing.lock().expect("crossing lock").clone();
    crossing.end_xid = boundary::next_xid(&admin).await?;
    crossing.events_below = a.below;
    crossing.events_above = a.above;
    Ok(Report {
        config,
        events: a.events,
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
        sql: a.sql,
        log: a.log,
        kafka: a.kafka,
        per_instance: a.pi,
        poison: a.poison,
        dead: a.dead,
        toggle: a.toggle,
        rewinds: a.rewinds,
        ops: ops_log.counts(),
        deleted: a.deleted,
        early_deletions: a.early,
        skip_problems: a.skips,
        crossing,
        watch_rewinds: watch.rewinds(),
    })
}
