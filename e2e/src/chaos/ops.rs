//! Operator commands run during the chaos, each on its own clock like the faults, through the same
//! library functions the CLI calls: `events prune` with a cut-off that keeps catching up with the
//! writers, `consumer rewind` (to a time, then to latest) on a dedicated consumer, `consumer skip`
//! of the poison event a consumer is stuck on, `consumer disable`/`enable`, `consumer gc` of the
//! instances the chaos killed, and `consumer restart` of a consumer whose sink broke until it went
//! dead. Each outcome is counted; a refusal is counted with its reason.
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex as StdMutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use highwater::{
    Error, NewEvent, Position, Xid8, append,
    ops::{self, GcOptions, RewindTo},
    retention::{Criteria, prune_batch},
};
use highwater_crds::SHARED_INSTANCE;
use sqlx::PgPool;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::{
    audit::CursorWatch,
    faults::{jitter, pause},
    fleet::Fleet,
    load::EVENT_TYPE,
};

pub const RW_CONSUMER: &str = "chaos-rw";
pub const POISON_CONSUMER: &str = "chaos-poison";
pub const TOGGLE_CONSUMER: &str = "chaos-toggle";
pub const DEAD_CONSUMER: &str = "chaos-dead";
pub const STREAM_TYPE: &str = "chaos";

/// The operations' clocks (each ±50%); the durations of the prune's cut-off and of the rewinds'
/// look-back.
#[derive(Clone, Debug)]
pub struct Clocks {
    pub prune_every: Duration,
    pub prune_lag: Duration,
    pub prune_batch: i64,
    pub rewind_every: Duration,
    pub rewind_back: Duration,
    pub poison_every: Duration,
    pub skip_every: Duration,
    pub toggle_every: Duration,
    pub gc_every: Duration,
    pub dead_every: Duration,
}

/// How often each operation ran and was refused (by reason) or failed (database restarting).
#[derive(Clone, Debug, Default)]
pub struct OpCount {
    pub ran: u64,
    pub refused: BTreeMap<String, u64>,
    pub failed: u64,
    /// What the successful runs did in total (events deleted, shards collected, ...).
    pub affected: u64,
}

impl OpCount {
    pub fn refusals(&self) -> u64 {
        self.refused.values().sum()
    }
}

/// One rewind of [`RW_CONSUMER`], for the auditor.
#[derive(Clone, Debug)]
pub struct RewindRecord {
    /// `None` for a rewind to latest.
    pub to_time: Option<DateTime<Utc>>,
    pub before: Position,
    pub after: Position,
    /// Database time once the rewind had committed: events deleted before it are not owed.
    pub done_at: DateTime<Utc>,
    /// The sink table's highest sequence number once the rewind had committed: later rows are
    /// deliveries after it.
    pub seq_mark: i64,
    /// The newest event below the fence once the rewind had committed.
    pub head: Position,
    /// The database restarted under this rewind: whether it applied is unknown, and the auditor
    /// checks no delivery from the window before it on.
    pub ambiguous: bool,
}

#[derive(Default)]
pub struct OpsLog {
    counts: StdMutex<BTreeMap<&'static str, OpCount>>,
    rewinds: StdMutex<Vec<RewindRecord>>,
    skipped: StdMutex<Vec<i64>>,
}

impl OpsLog {
    fn count(&self, op: &'static str, f: impl FnOnce(&mut OpCount)) {
        f(self.counts.lock().expect("ops lock").entry(op).or_default());
    }

    fn outcome<T>(&self, op: &'static str, r: &highwater::Result<T>, affected: impl FnOnce(&T) -> u64) {
        match r {
            Ok(v) => {
                let n = affected(v);
                self.count(op, |c| {
                    c.ran += 1;
                    c.affected += n;
                })
            }
            Err(Error::Refused(refusal)) => {
                let msg = refusal.to_string();
                let why = reason(&msg);
                eprintln!("chaos: {op} refused: {}", msg.lines().next().unwrap_or_default());
                self.count(op, |c| *c.refused.entry(why).or_default() += 1)
            }
            Err(e) => {
                eprintln!("chaos: {op} failed: {e}");
                self.count(op, |c| c.failed += 1)
            }
        }
    }

    pub fn counts(&self) -> BTreeMap<&'static str, OpCount> {
        self.counts.lock().expect("ops lock").clone()
    }

    pub fn get(&self, op: &str) -> OpCount {
        self.counts.lock().expect("ops lock").get(op).cloned().unwrap_or_default()
    }

    pub fn rewinds(&self) -> Vec<RewindRecord> {
        self.rewinds.lock().expect("ops lock").clone()
    }

    pub fn skipped(&self) -> Vec<i64> {
        self.skipped.lock().expect("ops lock").clone()
    }
}

pub const PRUNE: &str = "events prune (now - lag)";
pub const PRUNE_SLOWEST: &str = "events prune (slowest shard)";
pub const REWIND_TIME: &str = "consumer rewind --to TIME";
pub const REWIND_LATEST: &str = "consumer rewind --to latest";
pub const SKIP: &str = "consumer skip";
pub const DISABLE: &str = "consumer disable";
pub const ENABLE: &str = "consumer enable";
pub const GC: &str = "consumer gc";
pub const RESTART: &str = "consumer restart";
pub const POISON: &str = "poison events appended";
pub const BREAK: &str = "sink broken until dead";

/// A refusal's reason without its numbers: the blocking consumers for a prune, else the first
/// shard's reason.
fn reason(msg: &str) -> String {
    if msg.starts_with("refusing to prune") {
        let mut consumers: Vec<&str> = msg
            .lines()
            .skip(1)
            .filter(|l| l.contains(": cursor "))
            .filter_map(|l| l.trim().split('/').next())
            .collect();
        consumers.dedup();
        return format!("shards behind: {}", consumers.join(", "));
    }
    let line = msg.lines().nth(1).map(str::trim).unwrap_or_else(|| msg.lines().next().unwrap_or_default());
    let line = line.split_once(": ").filter(|(h, _)| h.starts_with("shard ")).map_or(line, |(_, r)| r);
    let line: String = line.chars().map(|c| if c.is_ascii_digit() { 'N' } else { c }).collect();
    let mut short: String = line.chars().take(70).collect();
    if let Some(i) = short.find(" (") {
        short.truncate(i);
    }
    short
}

/// Runs every operation on its own clock until `stop`.
pub fn spawn_all(
    pool: PgPool,
    fleet: Arc<Mutex<Fleet>>,
    watch: CursorWatch,
    clocks: Clocks,
    log: Arc<OpsLog>,
    stop: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    vec![
        tokio::spawn(prune_loop(pool.clone(), clocks.clone(), log.clone(), stop.clone())),
        tokio::spawn(rewind_loop(pool.clone(), watch, clocks.clone(), log.clone(), stop.clone())),
        tokio::spawn(poison_loop(pool.clone(), clocks.poison_every, log.clone(), stop.clone())),
        tokio::spawn(skip_loop(pool.clone(), clocks.skip_every, log.clone(), stop.clone())),
        tokio::spawn(toggle_loop(pool.clone(), clocks.toggle_every, log.clone(), stop.clone())),
        tokio::spawn(gc_loop(pool.clone(), fleet, clocks.gc_every, log.clone(), stop.clone())),
        tokio::spawn(dead_loop(pool, clocks.dead_every, log, stop)),
    ]
}

/// `events prune --stream-type chaos` of the events older than `lag`: the loop of
/// `retention::prune` (a batch per transaction under the SHARE lock, the newest candidate carried
/// as the bound), with a cut-off in seconds where the CLI's is in days.
pub async fn prune(pool: &PgPool, lag: Duration, batch: i64) -> highwater::Result<u64> {
    let cutoff: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp() - make_interval(secs => $1)")
        .bind(lag.as_secs_f64())
        .fetch_one(pool)
        .await?;
    prune_before(pool, cutoff, batch).await
}

pub async fn prune_before(pool: &PgPool, cutoff: DateTime<Utc>, batch: i64) -> highwater::Result<u64> {
    let c = Criteria { cutoff, stream_types: Some(vec![STREAM_TYPE.to_owned()]) };
    let mut bound: Option<Position> = None;
    let mut total = 0u64;
    loop {
        let mut tx = pool.begin().await?;
        let b = prune_batch(&mut tx, &c, batch, bound).await?;
        tx.commit().await?;
        bound = bound.max(b.bound);
        let n: i64 = b.deleted.iter().map(|t| t.count).sum();
        total += n as u64;
        if n < batch {
            return Ok(total);
        }
    }
}

/// The creation time of the oldest event the slowest shard that is not disabled has not passed:
/// a cut-off that retention can usually honour.
async fn behind_slowest(pool: &PgPool) -> highwater::Result<Option<DateTime<Utc>>> {
    let slowest: Option<(Xid8, i64)> = sqlx::query_as(
        "SELECT cursor_tx, cursor_id FROM highwater.consumer_shards WHERE status <> 'disabled'
          ORDER BY cursor_tx, cursor_id LIMIT 1",
    )
    .fetch_optional(pool)
    .await?;
    let Some((tx, id)) = slowest else { return Ok(None) };
    Ok(sqlx::query_scalar("SELECT min(created_at) FROM highwater.events WHERE (tx_id, id) > ($1, $2)")
        .bind(tx)
        .bind(id)
        .fetch_one(pool)
        .await?)
}

/// Twice a cut-off `prune_lag` behind the writers (usually refused: some shard is always that far
/// behind under the faults), then once one behind the slowest shard (usually deletes).
async fn prune_loop(pool: PgPool, clocks: Clocks, log: Arc<OpsLog>, stop: CancellationToken) {
    let mut n = 0u64;
    while pause(jitter(clocks.prune_every), &stop).await {
        n += 1;
        let catch_up = !n.is_multiple_of(3);
        let (op, r) = if catch_up {
            (PRUNE, prune(&pool, clocks.prune_lag, clocks.prune_batch).await)
        } else {
            let r = async {
                match behind_slowest(&pool).await? {
                    Some(t) => prune_before(&pool, t, clocks.prune_batch).await,
                    None => Ok(0),
                }
            }
            .await;
            (PRUNE_SLOWEST, r)
        };
        log.outcome(op, &r, |n| *n);
    }
}

/// The newest event below the fence.
pub async fn head(pool: &PgPool) -> highwater::Result<Position> {
    let row: Option<(Xid8, i64)> = sqlx::query_as(
        "SELECT tx_id, id FROM highwater.events WHERE tx_id < pg_snapshot_xmin(pg_current_snapshot())
          ORDER BY tx_id DESC, id DESC LIMIT 1",
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Position::from).unwrap_or(Position::ZERO))
}

async fn cursor(pool: &PgPool, consumer: &str) -> highwater::Result<Position> {
    let row: (Xid8, i64) = sqlx::query_as(
        "SELECT cursor_tx, cursor_id FROM highwater.consumer_shards WHERE consumer = $1 AND instance_id = $2",
    )
    .bind(consumer)
    .bind(SHARED_INSTANCE)
    .fetch_one(pool)
    .await?;
    Ok(row.into())
}

/// Alternately rewinds [`RW_CONSUMER`] to a time (up to `rewind_back` ago) and to latest. Before
/// a rewind to latest, waits until the consumer has delivered again everything the rewind to a
/// time owed it (else that rewind is put off), so that the auditor can hold each rewind to its
/// promise. The cursor watch is held meanwhile: it learns of each rewind before it samples again.
async fn rewind_loop(pool: PgPool, watch: CursorWatch, clocks: Clocks, log: Arc<OpsLog>, stop: CancellationToken) {
    let mut to_time = true;
    let mut owed: Option<Position> = None;
    while pause(jitter(clocks.rewind_every), &stop).await {
        if let Some(h) = owed {
            match cursor(&pool, RW_CONSUMER).await {
                Ok(c) if c >= h => owed = None,
                _ => {
                    log.count(REWIND_LATEST, |c| {
                        *c.refused.entry("put off: still delivering again after the last rewind".into()).or_default() +=
                            1
                    });
                    continue;
                }
            }
        }
        let op = if to_time { REWIND_TIME } else { REWIND_LATEST };
        let gate = watch.gate();
        let _held = gate.lock().await;
        let to = if to_time {
            let back = clocks.rewind_back.mul_f64(rand::random_range(0.2..1.0));
            match sqlx::query_scalar("SELECT clock_timestamp() - make_interval(secs => $1)")
                .bind(back.as_secs_f64())
                .fetch_one(&pool)
                .await
            {
                Ok(t) => RewindTo::Time(t),
                Err(_) => continue,
            }
        } else {
            RewindTo::Latest
        };
        // Claim the shard as a dispatcher does (its advisory lock), so that no pass runs from
        // the sequence mark to the end of the rewind: every sink row up to the mark was delivered
        // before the rewind, every later one after it.
        let claimed = async {
            let mut conn = pool.acquire().await?;
            sqlx::query("SET lock_timeout = '5s'").execute(&mut *conn).await?;
            sqlx::query("SELECT pg_advisory_lock(hashtextextended($1, 0))")
                .bind(format!("highwater\u{1f}{RW_CONSUMER}\u{1f}{SHARED_INSTANCE}"))
                .execute(&mut *conn)
                .await?;
            let seq_mark: i64 =
                sqlx::query_scalar("SELECT coalesce(max(seq), 0) FROM chaos_rw").fetch_one(&mut *conn).await?;
            sqlx::Result::<(sqlx::pool::PoolConnection<sqlx::Postgres>, i64)>::Ok((conn, seq_mark))
        }
        .await;
        let Ok((mut claim, seq_mark)) = claimed else {
            log.count(op, |c| {
                *c.refused.entry("put off: could not claim the shard within 5s".into()).or_default() += 1
            });
            continue;
        };
        let r = ops::rewind_skipping(&pool, RW_CONSUMER, None, to, &ops::Audit::by("test")).await;
        log.outcome(op, &r, |_| 1);
        let t = match r {
            Ok(ts) if !ts.is_empty() => ts[0].clone(),
            Err(Error::Refused(_)) => {
                claim.close_on_drop();
                continue;
            }
            // The database went away: the rewind may or may not have committed.
            _ => {
                claim.close_on_drop();
                ambiguous(&pool, &watch, &log).await;
                return;
            }
        };
        watch.rewound(&t.consumer, &t.instance_id, t.cursor_after);
        let after = async {
            let done_at: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()").fetch_one(&mut *claim).await?;
            let head = head(&pool).await?;
            highwater::Result::<(DateTime<Utc>, Position)>::Ok((done_at, head))
        }
        .await;
        // Closing the connection releases the claim.
        claim.close_on_drop();
        drop(claim);
        let Ok((done_at, head)) = after else {
            ambiguous(&pool, &watch, &log).await;
            return;
        };
        let rec = RewindRecord {
            to_time: match to {
                RewindTo::Time(t) => Some(t),
                _ => None,
            },
            before: t.cursor_before,
            after: t.cursor_after,
            done_at,
            seq_mark,
            head,
            ambiguous: false,
        };
        eprintln!("chaos: {op}: cursor {} -> {}", rec.before, rec.after);
        if to_time {
            owed = Some(rec.head);
        }
        log.rewinds.lock().expect("ops lock").push(rec);
        to_time = !to_time;
    }
}

/// A rewind whose outcome is unknown (the database restarted under it): tells the cursor watch
/// where the cursor is now, records the point from which the auditor cannot check rewinds, and
/// the run makes no more rewinds.
async fn ambiguous(pool: &PgPool, watch: &CursorWatch, log: &OpsLog) {
    eprintln!("chaos: a rewind's outcome is unknown (database restarting); no more rewinds in this run");
    for _ in 0..300 {
        if let Ok(c) = cursor(pool, RW_CONSUMER).await {
            watch.rewound(RW_CONSUMER, SHARED_INSTANCE, c);
            let now: DateTime<Utc> =
                sqlx::query_scalar("SELECT clock_timestamp()").fetch_one(pool).await.unwrap_or_default();
            log.rewinds.lock().expect("ops lock").push(RewindRecord {
                to_time: None,
                before: c,
                after: c,
                done_at: now,
                seq_mark: i64::MAX,
                head: c,
                ambiguous: true,
            });
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Appends an event that [`POISON_CONSUMER`]'s sink cannot apply.
async fn poison_loop(pool: PgPool, every: Duration, log: Arc<OpsLog>, stop: CancellationToken) {
    while pause(jitter(every), &stop).await {
        let r = async {
            let mut tx = pool.begin().await?;
            let ev = NewEvent::new(STREAM_TYPE, "poison", EVENT_TYPE, serde_json::json!({"poison": true}));
            let id = append(&mut tx, &ev).await?;
            tx.commit().await?;
            highwater::Result::Ok(id)
        }
        .await;
        log.outcome(POISON, &r, |_| 1);
    }
}

/// `consumer skip chaos-poison --event ID` of the event it is failing on (without `--event` when
/// it fails on none: refused).
pub async fn skip_once(pool: &PgPool, log: &OpsLog) {
    let failing: highwater::Result<Option<i64>> = sqlx::query_scalar(
        "SELECT failing_event_id FROM highwater.consumer_shards WHERE consumer = $1 AND instance_id = $2",
    )
    .bind(POISON_CONSUMER)
    .bind(SHARED_INSTANCE)
    .fetch_one(pool)
    .await
    .map_err(Into::into);
    let r = match failing {
        Ok(event) => ops::skip(pool, POISON_CONSUMER, None, event, &ops::Audit::by("test")).await,
        Err(e) => Err(e),
    };
    if let Ok(ts) = &r {
        for t in ts {
            if let ops::Action::Skipped { event_id } = t.action {
                eprintln!("chaos: skipped event {event_id} of {POISON_CONSUMER}");
                log.skipped.lock().expect("ops lock").push(event_id);
            }
        }
    }
    log.outcome(SKIP, &r, |ts| ts.len() as u64);
}

async fn skip_loop(pool: PgPool, every: Duration, log: Arc<OpsLog>, stop: CancellationToken) {
    while pause(jitter(every), &stop).await {
        skip_once(&pool, &log).await;
    }
}

/// Disables and enables [`TOGGLE_CONSUMER`] in turn; one time in four asks for the other
/// transition, which is refused.
async fn toggle_loop(pool: PgPool, every: Duration, log: Arc<OpsLog>, stop: CancellationToken) {
    let mut disabled = false;
    while pause(jitter(every), &stop).await {
        let want_disable = disabled == rand::random_bool(0.25);
        if want_disable {
            let r = ops::disable(&pool, TOGGLE_CONSUMER, None, &ops::Audit::by("test")).await;
            if r.is_ok() {
                disabled = true;
            }
            log.outcome(DISABLE, &r, |ts| ts.len() as u64);
        } else {
            let r = ops::enable(&pool, TOGGLE_CONSUMER, None, &ops::Audit::by("test")).await;
            if r.is_ok() {
                disabled = false;
            }
            log.outcome(ENABLE, &r, |ts| ts.len() as u64);
        }
    }
}

/// Enables [`TOGGLE_CONSUMER`] if it is disabled (for the drain).
pub async fn enable_toggle(pool: &PgPool, log: &OpsLog) {
    let status: highwater::Result<String> =
        sqlx::query_scalar("SELECT status FROM highwater.consumer_shards WHERE consumer = $1 AND instance_id = $2")
            .bind(TOGGLE_CONSUMER)
            .bind(SHARED_INSTANCE)
            .fetch_one(pool)
            .await
            .map_err(Into::into);
    if matches!(status.as_deref(), Ok("disabled")) {
        let r = ops::enable(pool, TOGGLE_CONSUMER, None, &ops::Audit::by("test")).await;
        log.outcome(ENABLE, &r, |ts| ts.len() as u64);
    }
}

/// `consumer gc --stale-after 60s` once the shards of the instances the chaos killed have aged:
/// the harness sets their heartbeat back (a killed process never refreshes it; the run is too
/// short to wait the minute gc requires). One time in three, asks for a running instance's
/// shards instead, which is refused (its heartbeat is fresh).
pub async fn gc_once(pool: &PgPool, fleet: &Mutex<Fleet>, log: &OpsLog, allow_refusal: bool) {
    let (killed, running) = {
        let mut f = fleet.lock().await;
        (std::mem::take(&mut f.killed), f.running())
    };
    let aged = sqlx::query(
        "UPDATE highwater.consumer_shards SET heartbeat_at = now() - interval '5 minutes'
          WHERE instance_id = ANY ($1)",
    )
    .bind(&killed)
    .execute(pool)
    .await;
    if aged.is_err() {
        fleet.lock().await.killed.extend(killed);
        return;
    }
    let instance = (allow_refusal && rand::random_bool(0.33)).then(|| running.first().cloned()).flatten();
    let o = GcOptions { stale_after: ops::MIN_STALE_AFTER, consumer: None, instance, include_managed: false };
    let r = ops::gc(pool, &o).await;
    log.outcome(GC, &r, |rep| rep.deleted.len() as u64);
}

async fn gc_loop(pool: PgPool, fleet: Arc<Mutex<Fleet>>, every: Duration, log: Arc<OpsLog>, stop: CancellationToken) {
    while pause(jitter(every), &stop).await {
        gc_once(&pool, &fleet, &log, true).await;
    }
}

async fn set_broken(pool: &PgPool, broken: bool) -> highwater::Result<()> {
    sqlx::query("UPDATE chaos_switch SET broken = $1").bind(broken).execute(pool).await?;
    Ok(())
}

async fn status(pool: &PgPool, consumer: &str) -> highwater::Result<String> {
    Ok(sqlx::query_scalar("SELECT status FROM highwater.consumer_shards WHERE consumer = $1 AND instance_id = $2")
        .bind(consumer)
        .bind(SHARED_INSTANCE)
        .fetch_one(pool)
        .await?)
}

/// Breaks [`DEAD_CONSUMER`]'s sink until its shard is dead (halt after maxAttempts), leaves it
/// dead a moment, repairs the sink and `consumer restart`s it.
async fn dead_loop(pool: PgPool, every: Duration, log: Arc<OpsLog>, stop: CancellationToken) {
    while pause(jitter(every), &stop).await {
        if set_broken(&pool, true).await.is_err() {
            continue;
        }
        let mut dead = false;
        for _ in 0..100 {
            if matches!(status(&pool, DEAD_CONSUMER).await.as_deref(), Ok("dead")) {
                dead = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        log.count(BREAK, |c| {
            if dead { c.ran += 1 } else { *c.refused.entry("did not go dead within 10s".into()).or_default() += 1 }
        });
        if dead {
            tokio::time::sleep(Duration::from_millis(rand::random_range(300..2000))).await;
        }
        repair_dead(&pool, &log).await;
    }
}

/// Repairs [`DEAD_CONSUMER`]'s sink and restarts it if it is dead (also for the drain).
pub async fn repair_dead(pool: &PgPool, log: &OpsLog) {
    for _ in 0..50 {
        if set_broken(pool, false).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if matches!(status(pool, DEAD_CONSUMER).await.as_deref(), Ok("dead")) {
        let r = ops::restart(pool, DEAD_CONSUMER, None, &ops::Audit::by("test")).await;
        log.outcome(RESTART, &r, |ts| ts.len() as u64);
    }
}
