//! The delivery loop: one process runs every consumer of its group, one task per shard.
use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use highwater_crds::{Delivery, SHARED_INSTANCE, parse_partition_instance};
use highwater_store::pg::PgPool;
use tokio::{sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::{http, metrics::Metrics, sink, sse};
use highwater_store::{Error, Result, definitions, shards};

mod acked;
mod concurrent;
mod flow;
mod group;
mod held;
mod membership;
mod observe;
mod partitions;
pub mod pass;
mod redrive;
mod side;
mod touched;
mod wakeup;
mod worker;

pub use observe::fence_age;
pub use wakeup::{HEAD_QUERY, Head, read_head};

#[derive(Clone, Debug)]
pub struct DispatchConfig {
    pub group: String,
    pub instance_id: String,
    /// Head polling while the LISTEN connection is down or events wait above the fence.
    pub poll_interval: Duration,
    /// Head polling while LISTEN works and nothing waits: a safety net only.
    pub idle_poll_interval: Duration,
    /// Head polling while events keep coming (writers do not notify then).
    pub busy_poll_interval: Duration,
    /// Reload of the group's definitions (also on every `highwater_control` notification).
    pub refresh_interval: Duration,
    pub heartbeat_interval: Duration,
    /// Refresh of this dispatcher's liveness row, by which the group shares partitions; a
    /// dispatcher silent for 5 intervals is gone and its partitions move to the others.
    pub membership_interval: Duration,
    /// How long a consumer whose types none of the new events have may leave its cursor behind
    /// the head (the lazy cursor: no pass per head move for it); zero: it moves on every move.
    pub lazy_cursor_interval: Duration,
    /// How long SIGTERM waits for passes in flight before abandoning them.
    pub shutdown_grace: Duration,
    /// Whether the passes due together go through one group pass (dispatch/group.rs); false:
    /// every shard runs its own (kept to compare the two in the benchmark).
    pub group_pass: bool,
    /// Where `/metrics`, `/healthz`, `/readyz` and the SSE streams are served; `None`: nowhere.
    pub listen: Option<SocketAddr>,
    /// Refresh of the lag, status and fence-age gauges.
    pub metrics_interval: Duration,
    /// Bearer tokens SSE clients must present.
    pub sse_tokens: sse::Tokens,
    /// Bearer tokens `POST /v1/consumers/{name}/redrive` requires (none: the endpoint answers 401).
    pub ops_tokens: sse::Tokens,
    /// Which hosts webhook sinks may reach.
    pub webhook_targets: Arc<sink::TargetPolicy>,
    pub startup: Startup,
}

/// What happens before the first pass, while `/healthz` already answers and `/readyz` says why
/// it is not ready yet.
#[derive(Clone, Debug, Default)]
pub struct Startup {
    /// For messages only (never printed with its password).
    pub database_url: String,
    /// How long to retry an unreachable database; zero: the pool is known to be connected.
    pub connect_timeout: Duration,
    /// Definitions to apply before starting (`dispatch --consumers`).
    pub consumers: Vec<definitions::Definition>,
}

impl DispatchConfig {
    pub fn new(group: &str, instance_id: &str) -> Self {
        DispatchConfig {
            group: group.to_owned(),
            instance_id: instance_id.to_owned(),
            poll_interval: Duration::from_millis(100),
            idle_poll_interval: Duration::from_secs(1),
            busy_poll_interval: Duration::from_millis(5),
            lazy_cursor_interval: Duration::from_secs(10),
            refresh_interval: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(10),
            membership_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
            group_pass: true,
            listen: None,
            metrics_interval: Duration::from_secs(5),
            sse_tokens: sse::Tokens::default(),
            ops_tokens: sse::Tokens::default(),
            webhook_targets: Arc::default(),
            startup: Startup::default(),
        }
    }
}

impl std::fmt::Debug for sse::Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens(<redacted>)")
    }
}

/// A consumer's workers: one per shard this process may deliver (one, or one per partition).
struct Running {
    spec: highwater_crds::ConsumerSpec,
    shards: Vec<String>,
    stop: CancellationToken,
    handles: Vec<JoinHandle<()>>,
}

/// What every reconcile and every worker shares.
struct Env {
    pool: PgPool,
    cfg: DispatchConfig,
    head_rx: watch::Receiver<wakeup::Head>,
    /// The types of the events of the head's recent moves, for the lazy cursor.
    touched: Arc<touched::Touched>,
    nudge_tx: watch::Sender<u64>,
    /// Halted (dead, disabled) shards look again at every refresh, in case they were changed
    /// without a notification (by hand in SQL, say).
    refresh_tx: watch::Sender<u64>,
    /// The `(consumer, shard)` pairs with redrive requests pending, read at every reload (so that
    /// a lost notification delays a redrive by one refresh interval at most).
    redrive_tx: watch::Sender<Arc<Redrives>>,
    members_tx: watch::Sender<Arc<membership::Members>>,
    /// Whether the group has a partitioned consumer: the liveness refresh runs fast only then.
    partitioned_tx: watch::Sender<bool>,
    metrics: Arc<Metrics>,
    hub: Arc<sse::Hub>,
    /// Where due passes go together; `None` with `group_pass` off.
    group: Option<group::Group>,
}

/// Runs until `shutdown` is cancelled, then waits up to `shutdown_grace` for passes in flight.
/// A pass abandoned at the deadline loses nothing: its cursor had not moved.
pub async fn run(pool: PgPool, cfg: DispatchConfig, shutdown: CancellationToken) -> Result<()> {
    crate::instance::validate(&cfg.instance_id)?;
    let (head_tx, head_rx) = watch::channel(wakeup::Head::default());
    let signals = Arc::new(wakeup::Signals {
        events: Arc::new(tokio::sync::Notify::new()),
        control: watch::channel(0).0,
        listening: watch::channel(false).0,
    });
    let bg = CancellationToken::new();
    let metrics = Arc::new(Metrics::new());
    let env = Env {
        group: cfg.group_pass.then(|| group::Group::start(pool.clone(), metrics.clone(), bg.clone())),
        pool: pool.clone(),
        head_rx,
        touched: Arc::default(),
        nudge_tx: watch::channel(0u64).0,
        refresh_tx: watch::channel(0u64).0,
        redrive_tx: watch::channel(Arc::default()).0,
        members_tx: watch::channel(Arc::new(membership::Members::alone(&cfg.instance_id))).0,
        partitioned_tx: watch::channel(false).0,
        metrics,
        hub: Arc::new(sse::Hub::default()),
        cfg,
    };
    let cfg = &env.cfg;
    let ready = Arc::new(AtomicBool::new(false));

    // Serve health (not ready yet) from the start, so a probe sees the process come up.
    if let Some(addr) = cfg.listen {
        let listener = http::bind(addr).await?;
        tracing::info!(address = %listener.local_addr().map_err(Error::io("listener address"))?, "serving /metrics, /healthz, /readyz, /v1/consumers/{{name}}/events");
        let health = http::Health { pool: pool.clone(), ready: ready.clone() };
        let sse_state = sse::SseState { hub: env.hub.clone(), tokens: cfg.sse_tokens.clone(), pool: pool.clone() };
        let ops = crate::redrive_http::OpsState { tokens: cfg.ops_tokens.clone(), pool: pool.clone() };
        tokio::spawn(http::serve(listener, env.metrics.clone(), health, sse_state, ops, bg.clone()));
    }

    let mut running: HashMap<String, Running> = HashMap::new();
    if !start(&env, &mut running, &shutdown).await? {
        return Ok(());
    }
    ready.store(true, std::sync::atomic::Ordering::Relaxed);
    env.metrics.ready.set(1);
    tracing::info!(group = %cfg.group, instance = %cfg.instance_id, consumers = running.len(), "dispatcher started");

    let control_rx = signals.control.subscribe();
    tokio::spawn(wakeup::listen(pool.clone(), signals.clone(), bg.clone()));
    let pace = wakeup::Pace { fast: cfg.poll_interval, idle: cfg.idle_poll_interval, busy: cfg.busy_poll_interval };
    let head = wakeup::HeadOut { tx: head_tx, touched: env.touched.clone() };
    tokio::spawn(wakeup::poll_head(pool.clone(), cfg.instance_id.clone(), signals.clone(), head, pace, bg.clone()));
    tokio::spawn(partitions::run(pool.clone(), bg.clone()));
    tokio::spawn(membership::run(
        pool.clone(),
        cfg.group.clone(),
        cfg.instance_id.clone(),
        cfg.membership_interval,
        env.partitioned_tx.subscribe(),
        env.members_tx.clone(),
        bg.clone(),
    ));
    tokio::spawn(observe::run(
        pool.clone(),
        env.metrics.clone(),
        cfg.group.clone(),
        cfg.instance_id.clone(),
        cfg.metrics_interval,
        bg.clone(),
    ));
    serve(&env, &mut running, control_rx, &shutdown).await;

    tracing::info!("shutting down: finishing passes in flight");
    ready.store(false, std::sync::atomic::Ordering::Relaxed);
    env.metrics.ready.set(0);
    drain(running, cfg.shutdown_grace).await;
    bg.cancel();
    if let Err(e) = highwater_store::sleepers::forget(&pool, &cfg.instance_id).await {
        tracing::warn!(error = %e, "could not remove this dispatcher's sleep mark; writers notify until its lease runs out");
    }
    if let Err(e) = membership::leave(&pool, &cfg.instance_id).await {
        tracing::warn!(error = %e, "could not remove this dispatcher from the live list; the others take its partitions once it ages out");
    }
    Ok(())
}

/// Everything before the first pass: the database reachable and migrated, the `--consumers`
/// definitions applied, every shard registered. A database that restarts (or drops connections)
/// meanwhile is waited for again, until `connect_timeout` has passed since the start. Returns
/// false when shut down first.
async fn start(env: &Env, running: &mut HashMap<String, Running>, shutdown: &CancellationToken) -> Result<bool> {
    let st = &env.cfg.startup;
    let deadline = tokio::time::Instant::now() + st.connect_timeout;
    loop {
        let attempt = async {
            if !st.connect_timeout.is_zero() {
                wait_ready_database(&env.pool, st).await?;
            }
            if !st.consumers.is_empty() {
                definitions::apply(&env.pool, &st.consumers).await?;
            }
            // Join the group's live list before the first pass, so partitions are shared from the
            // start rather than all taken by whoever starts first.
            let ttl = env.cfg.membership_interval * 5;
            let members = membership::refresh(&env.pool, &env.cfg.group, &env.cfg.instance_id, ttl).await?;
            env.members_tx.send_replace(Arc::new(members));
            // Every shard is registered before the first pass (and before the wake-up tasks start).
            reconcile(env, running, true).await
        };
        let r = tokio::select! {
            r = attempt => r,
            _ = shutdown.cancelled() => return Ok(false),
        };
        match r {
            Err(e) if e.is_connection_loss() && tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "database connection lost while starting; waiting for it again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            r => return r.map(|()| true),
        }
    }
}

/// Until shutdown: reloads on control notifications and every refresh interval, and keeps this
/// instance's shards' heartbeat.
async fn serve(
    env: &Env,
    running: &mut HashMap<String, Running>,
    mut control_rx: watch::Receiver<u64>,
    shutdown: &CancellationToken,
) {
    let cfg = &env.cfg;
    let mut refresh = tokio::time::interval(cfg.refresh_interval);
    let mut heartbeat = tokio::time::interval(cfg.heartbeat_interval);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = control_rx.changed() => {
                if !highwater_store::migrate::window::still_inside(&env.pool).await {
                    return outside_window();
                }
                if let Err(e) = reconcile(env, running, false).await {
                    tracing::warn!(error = %e, "reloading consumer definitions failed");
                }
                env.nudge_tx.send_modify(|g| *g += 1);
                look_for_redrives(env, running).await;
            }
            _ = refresh.tick() => {
                if !highwater_store::migrate::window::still_inside(&env.pool).await {
                    return outside_window();
                }
                if let Err(e) = reconcile(env, running, false).await {
                    tracing::warn!(error = %e, "reloading consumer definitions failed");
                }
                env.refresh_tx.send_modify(|g| *g += 1);
                look_for_redrives(env, running).await;
            }
            _ = heartbeat.tick() => {
                if let Err(e) = shards::heartbeat(&env.pool, &cfg.instance_id).await {
                    tracing::warn!(error = %e, "heartbeat failed");
                }
            }
        }
    }
}

/// Shards (consumer, instance) with redrive requests pending.
pub type Redrives = HashSet<(String, String)>;

/// One statement for the running consumers: which of their shards have redrive requests pending;
/// the workers of those shards look for the ones due.
async fn look_for_redrives(env: &Env, running: &HashMap<String, Running>) {
    let consumers: Vec<&str> = running.keys().map(String::as_str).collect();
    if consumers.is_empty() {
        return;
    }
    let pending = match highwater_store::ops::redrive::shards_with_requests(&env.pool, &consumers).await {
        Ok(mut pending) => match highwater_store::ops::replay::shards_with_requests(&env.pool, &consumers).await {
            Ok(replays) => {
                pending.extend(replays);
                Ok(pending)
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match pending {
        Ok(pending) => {
            let pending: Redrives = pending.into_iter().collect();
            // Unchanged and empty: nothing to wake a worker for.
            env.redrive_tx.send_if_modified(|p| {
                let wake = !pending.is_empty() || **p != pending;
                *p = Arc::new(pending);
                wake
            });
        }
        Err(e) => tracing::warn!(error = %e, "looking for redrive requests failed"),
    }
}

/// The schema moved past this binary's window (a newer release migrated with a breaking step):
/// the dispatcher stops like on SIGTERM and exits 0, so that Kubernetes starts the new image.
fn outside_window() {
    tracing::warn!(
        release = highwater_store::migrate::window::RELEASE,
        schema_version = highwater_store::migrate::window::SCHEMA_VERSION,
        "the schema no longer accepts this binary (a newer release migrated it); finishing passes in flight and \
         exiting 0 so that the new image takes over"
    );
}

/// Stops every worker and waits up to `grace` for passes in flight.
async fn drain(running: HashMap<String, Running>, grace: Duration) {
    for r in running.values() {
        r.stop.cancel();
    }
    let all = futures::future::join_all(running.into_values().flat_map(|r| r.handles));
    if tokio::time::timeout(grace, all).await.is_err() {
        tracing::warn!(grace = ?grace, "passes still running at the deadline were abandoned; their events will be delivered again");
    }
}

/// Waits for the database to answer and carry the current schema (a migration Job may still be
/// running), up to `connect_timeout`.
async fn wait_ready_database(pool: &PgPool, st: &Startup) -> Result<()> {
    let deadline = tokio::time::Instant::now() + st.connect_timeout;
    highwater_store::db::wait_reachable(pool, &st.database_url, st.connect_timeout).await?;
    let mut delay = Duration::from_millis(200);
    loop {
        match highwater_store::db::check_migrated(pool, &st.database_url).await {
            Err(e @ Error::NotMigrated { .. }) if tokio::time::Instant::now() + delay < deadline => {
                tracing::warn!(error = %e, retry_in = ?delay, "waiting for the schema");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            r => return r,
        }
    }
}

/// Brings the running workers in line with the group's definitions.
async fn reconcile(env: &Env, running: &mut HashMap<String, Running>, startup: bool) -> Result<()> {
    let (pool, cfg) = (&env.pool, &env.cfg);
    let defs = definitions::load_group(pool, &cfg.group).await?;
    // One statement per reload, not one per consumer: an idle dispatcher's queries must not grow
    // with the number of consumers.
    let wanted_shards: Vec<(&str, &str)> = defs.iter().map(|d| (d.name.as_str(), shard_instance(cfg, d))).collect();
    if !wanted_shards.is_empty() {
        shards::register_all(&mut *pool.acquire().await?, &wanted_shards, None).await?;
    }
    if startup {
        shards::refuse_cursors_ahead(pool, &cfg.group, &cfg.instance_id).await?;
    }
    let mut shard_ids = shared_shard_ids(env, &defs).await?;
    env.partitioned_tx.send_if_modified(|p| {
        let now = shard_ids.values().any(|ids| ids.len() > 1) || defs.iter().any(|d| d.spec.partitions > 1);
        std::mem::replace(p, now) != now
    });
    let wanted: HashMap<&str, &definitions::Definition> = defs.iter().map(|d| (d.name.as_str(), d)).collect();
    let mut gone = Vec::new();
    running.retain(|name, r| {
        let keep = wanted.get(name.as_str()).is_some_and(|d| d.spec == r.spec)
            && shard_ids.get(name.as_str()).is_none_or(|ids| *ids == r.shards);
        if !keep {
            // The workers finish their pass; the advisory lock keeps a successor off a shard
            // until then.
            r.stop.cancel();
            if !wanted.contains_key(name.as_str()) {
                gone.push(name.clone());
            }
        }
        keep
    });
    for name in gone {
        env.hub.remove(&name).await;
    }
    for d in defs {
        if running.contains_key(&d.name) {
            continue;
        }
        let ids = shard_ids.remove(d.name.as_str()).unwrap_or_else(|| vec![shard_instance(cfg, &d).to_owned()]);
        // One consumer that cannot run must not stop the others: its cursor waits, nothing lost.
        let sink = match consumer_sink(env, &d).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(consumer = %d.name, error = %e, "cannot run consumer; its events wait");
                let note = format!("cannot run on {}: {e}", cfg.instance_id);
                if let Err(e) = shards::note_error(pool, &d.name, shard_instance(cfg, &d), &note).await {
                    tracing::warn!(consumer = %d.name, error = %e, "cannot record the error on the shard");
                }
                continue;
            }
        };
        // Every shard's context first: nothing is spawned for a consumer that cannot run whole.
        let ctxs = ids.iter().map(|id| shard_ctx(env, &d, id, sink.clone())).collect::<Result<Vec<_>>>()?;
        let stop = CancellationToken::new();
        let mut handles = Vec::with_capacity(ids.len());
        for ctx in ctxs {
            handles.push(tokio::spawn(worker::run(
                Arc::new(ctx),
                env.head_rx.clone(),
                worker::Wakeups {
                    nudge: env.nudge_tx.subscribe(),
                    refresh: env.refresh_tx.subscribe(),
                    redrive: env.redrive_tx.subscribe(),
                    members: env.members_tx.subscribe(),
                    touched: env.touched.clone(),
                },
                stop.clone(),
                worker::Pacing { poll: cfg.poll_interval, lazy: cfg.lazy_cursor_interval },
                env.group.clone(),
            )));
        }
        running.insert(d.name.clone(), Running { spec: d.spec, shards: ids, stop, handles });
    }
    Ok(())
}

/// The shard ids of the group's Shared consumers (one, or one per partition), after moving any
/// whose partition count changed towards its new split.
async fn shared_shard_ids(env: &Env, defs: &[definitions::Definition]) -> Result<HashMap<String, Vec<String>>> {
    let shared: Vec<&str> =
        defs.iter().filter(|d| d.spec.delivery == Delivery::Shared).map(|d| d.name.as_str()).collect();
    let mut ids: HashMap<String, Vec<String>> = HashMap::new();
    for (consumer, instance) in shards::shared_shards(&env.pool, &shared).await? {
        ids.entry(consumer).or_default().push(instance);
    }
    for d in defs.iter().filter(|d| d.spec.delivery == Delivery::Shared) {
        let split = ids.get(&d.name).map_or(0, Vec::len) as u32;
        if split != 0 && split != d.spec.partitions {
            // A change applied while this dispatcher was away, or whose barrier every shard has
            // reached already: idempotent, serialised by the consumer's row.
            let r = shards::repartition(&mut *env.pool.acquire().await?, &d.name, false).await?;
            if r == shards::Repartition::Switched {
                let fresh = shards::shared_shards(&env.pool, &[d.name.as_str()]).await?;
                ids.insert(d.name.clone(), fresh.into_iter().map(|(_, i)| i).collect());
            }
        }
    }
    Ok(ids)
}

fn shard_instance<'a>(cfg: &'a DispatchConfig, d: &definitions::Definition) -> &'a str {
    match d.spec.delivery {
        Delivery::Shared => SHARED_INSTANCE,
        Delivery::PerInstance => cfg.instance_id.as_str(),
    }
}

/// The consumer's sink, shared by its partitions' workers.
async fn consumer_sink(env: &Env, d: &definitions::Definition) -> Result<sink::Sink> {
    let sink = match &d.spec.sink.sse {
        Some(s) => {
            // A whole batch is handed over at once: a smaller buffer would drop every client.
            let buffer = s.buffer.map_or(sse::DEFAULT_BUFFER, |b| b as usize).max(d.spec.batch_size as usize);
            env.hub
                .sink(&d.name, &d.spec.event_types, d.spec.event_versions.as_ref().and_then(|v| v.want()), buffer)
                .await
        }
        None => sink::build(&d.spec, &env.cfg.webhook_targets)?,
    };
    Ok(sink::measured(sink, env.metrics.clone(), &d.name))
}

fn shard_ctx(env: &Env, d: &definitions::Definition, instance: &str, sink: sink::Sink) -> Result<pass::ShardCtx> {
    let parse = |s: &str| humantime::parse_duration(s).map_err(|e| Error::config(format!("backoff {s:?}: {e}")));
    Ok(pass::ShardCtx {
        pool: env.pool.clone(),
        consumer: d.name.clone(),
        instance_id: instance.to_owned(),
        partition: parse_partition_instance(instance),
        backoff_initial: parse(&d.spec.backoff.initial)?,
        backoff_max: parse(&d.spec.backoff.max)?,
        spec: d.spec.clone(),
        sink,
        metrics: env.metrics.clone(),
        acked: Default::default(),
    })
}
