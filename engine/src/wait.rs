//! Waiting until a consumer has applied a token (read-your-writes), for many waiters at the cost
//! of one: a process has one hub per database; waiters register `(consumer, instance, token)`
//! and sleep; the hub wakes on `highwater_applied` notifications (a cursor moved or a shard
//! appeared) and on a slow poll (notifications are hints: a reconnect loses them, and the fence
//! can pass a token without any cursor moving), then reads the applied bound of every consumer
//! that has waiters in ONE statement and releases each waiter whose token is below its bound.
//! Notifications that arrive while that statement runs are coalesced into the next one, so
//! thousands of waiters cost at most one statement per wake-up, not one per waiter.
use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use highwater_store::pg::PgPool;
use tokio::{sync::oneshot, task::JoinHandle};

use highwater_store::{
    Error, Result, Xid8,
    applied::{self, Token},
    notify::Listener,
};

/// The channel `highwater.notify_applied()` sends on (payload: the consumer's name).
pub const APPLIED_CHANNEL: &str = "highwater_applied";
/// The longest wait accepted: an HTTP long poll longer than this is better split by the client.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Re-reads the bounds this often without a notification (lost notifications, a fence that
/// passes a token of a type the consumer does not select while no cursor moves).
const POLL: Duration = Duration::from_millis(500);

/// How a wait ended (a refusal is an `Err`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    Applied,
    /// Not applied within the timeout; why, as the shards that matter stand now.
    TimedOut {
        pending: String,
    },
}

impl Waited {
    pub fn is_applied(&self) -> bool {
        matches!(self, Waited::Applied)
    }
}

/// Why a wait was refused, for callers that map it (HTTP status codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBecause {
    UnknownConsumer,
    BadRequest,
}

/// Classifies an error a wait returned: refusals of the input are `Some`.
pub fn refused_because(e: &Error) -> Option<RefusedBecause> {
    match e {
        Error::Refused(r) if r.unknown_consumer.is_some() => Some(RefusedBecause::UnknownConsumer),
        Error::Refused(_) | Error::Config(_) => Some(RefusedBecause::BadRequest),
        _ => None,
    }
}

/// Refuses a timeout above [`MAX_TIMEOUT`].
pub fn check_timeout(timeout: Duration) -> Result<()> {
    if timeout > MAX_TIMEOUT {
        return Err(Error::config(format!(
            "timeout {} is out of range: at most {}",
            humantime::format_duration(timeout),
            humantime::format_duration(MAX_TIMEOUT)
        ))
        .with_fix("wait again after a timeout instead of one longer wait (e.g. --timeout 30s)"));
    }
    Ok(())
}

/// Parses a timeout such as `5s` or `250ms` and checks its range.
pub fn parse_timeout(text: &str) -> Result<Duration> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        Error::config(format!("timeout {text:?} is not a duration ({e})")).with_fix("pass e.g. 5s, 250ms or 1m")
    })?;
    check_timeout(d)?;
    Ok(d)
}

type Key = (String, Option<String>);

struct Waiter {
    seq: u64,
    token: Xid8,
    done: oneshot::Sender<Result<()>>,
}

/// The last bound read for a key: `below` (None: no such consumer), the next transaction id then,
/// and whether the consumer is Shared.
#[derive(Clone, Copy)]
struct Cached {
    below: Option<Xid8>,
    next: Xid8,
    shared: bool,
}

#[derive(Default)]
struct Entry {
    waiters: Vec<Waiter>,
    /// Read the bound at the next round.
    dirty: bool,
    cache: Option<Cached>,
    /// A notification for the consumer arrived since `cache` was read (or none can be trusted:
    /// the listener is down).
    stale: bool,
}

impl Entry {
    /// What the cache says of a waiter; `None`: not decided yet.
    /// A token at or above the cached next transaction id is refused only when `judge_ahead`
    /// (the bound was read after the waiter arrived); otherwise it stays undecided.
    fn decide(
        c: &Cached,
        consumer: &str,
        instance: Option<&str>,
        token: Xid8,
        judge_ahead: bool,
    ) -> Option<Result<()>> {
        match c.below {
            None => Some(Err(unknown_consumer(consumer))),
            Some(_) if c.shared && instance.is_some() => Some(Err(instance_of_shared(consumer))),
            Some(_) if token >= c.next => judge_ahead.then(|| Err(token_ahead(token, c.next))),
            Some(below) if token < below => Some(Ok(())),
            Some(_) => None,
        }
    }
}

struct Inner {
    pool: PgPool,
    keys: Mutex<HashMap<Key, Entry>>,
    wake: tokio::sync::Notify,
    seq: AtomicU64,
    /// The LISTEN connection is up: notifications can be trusted to mark caches stale.
    listening: AtomicBool,
    queries: AtomicU64,
    notifications: AtomicU64,
}

/// One process's waiters on one database. Cheap to clone.
#[derive(Clone)]
pub struct WaitHub {
    inner: Arc<Inner>,
    tasks: Arc<[JoinHandle<()>; 2]>,
}

impl WaitHub {
    /// Starts the hub's listener and its bound reader on the current runtime.
    pub fn start(pool: PgPool) -> WaitHub {
        let inner = Arc::new(Inner {
            pool,
            keys: Mutex::default(),
            wake: tokio::sync::Notify::new(),
            seq: AtomicU64::new(0),
            listening: AtomicBool::new(false),
            queries: AtomicU64::new(0),
            notifications: AtomicU64::new(0),
        });
        let listen = tokio::spawn(listen(inner.clone()));
        let read = tokio::spawn(read_bounds(inner.clone()));
        WaitHub { inner, tasks: Arc::new([listen, read]) }
    }

    fn alive(&self) -> bool {
        self.tasks.iter().all(|t| !t.is_finished())
    }

    /// Statements the hub has run to read bounds (for measurements: statements per wake-up).
    pub fn queries(&self) -> u64 {
        self.inner.queries.load(Ordering::Relaxed)
    }

    /// `highwater_applied` notifications received.
    pub fn notifications(&self) -> u64 {
        self.inner.notifications.load(Ordering::Relaxed)
    }

    /// Waits until `consumer` has applied `token` (on `instance`, or every instance of a
    /// PerInstance consumer when `None`), at most `timeout` (0: look once).
    ///
    /// A new waiter costs no statement when the hub's last bound for the key is still current
    /// (no notification since it was read, listener up): it is released at once if that bound
    /// covers its token, and otherwise waits for the next notification, which a cursor that
    /// covers it later must send (or for the poll, every 500 ms, which also refuses a token from
    /// the future).
    pub async fn wait(
        &self,
        consumer: &str,
        instance: Option<&str>,
        token: Token,
        timeout: Duration,
    ) -> Result<Waited> {
        check_timeout(timeout)?;
        if timeout.is_zero() {
            // One look, with the same refusals.
            return if applied::applied(&self.inner.pool, consumer, token, instance).await? {
                Ok(Waited::Applied)
            } else {
                Ok(Waited::TimedOut { pending: applied::explain_pending(&self.inner.pool, consumer, instance).await? })
            };
        }
        let (done, rx) = oneshot::channel();
        let wake = {
            let mut keys = self.inner.keys.lock().expect("hub lock");
            let e = keys.entry((consumer.to_owned(), instance.map(str::to_owned))).or_default();
            let current = e.cache.filter(|_| !e.stale && self.inner.listening.load(Ordering::SeqCst));
            match current.and_then(|c| Entry::decide(&c, consumer, instance, token.xid8(), false)) {
                Some(r) => return r.map(|()| Waited::Applied),
                None => {
                    let seq = self.inner.seq.fetch_add(1, Ordering::SeqCst);
                    e.waiters.push(Waiter { seq, token: token.xid8(), done });
                    if current.is_none() {
                        e.dirty = true;
                    }
                    current.is_none()
                }
            }
        };
        if wake {
            self.inner.wake.notify_one();
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r.map(|()| Waited::Applied),
            Ok(Err(_)) => Err(Error::Internal("the wait hub stopped".into())),
            Err(_) => {
                Ok(Waited::TimedOut { pending: applied::explain_pending(&self.inner.pool, consumer, instance).await? })
            }
        }
    }
}

/// Forwards `highwater_applied` notifications as stale and dirty marks; after a (re)connect marks
/// every key, since notifications were lost meanwhile.
async fn listen(inner: Arc<Inner>) {
    let mut delay = Duration::from_millis(100);
    loop {
        let mut listener = match Listener::connect(&inner.pool).await {
            Ok(mut l) => match l.listen(&[APPLIED_CHANNEL]).await {
                Ok(()) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "LISTEN {APPLIED_CHANNEL} failed; waiters poll meanwhile");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                    continue;
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "LISTEN connection for waiters failed; waiters poll meanwhile");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        delay = Duration::from_millis(100);
        inner.listening.store(true, Ordering::SeqCst);
        mark(&inner, None);
        // `None` or an error: the connection is gone.
        while let Ok(Some(n)) = listener.recv().await {
            inner.notifications.fetch_add(1, Ordering::Relaxed);
            mark(&inner, Some(&n.payload));
        }
        inner.listening.store(false, Ordering::SeqCst);
        mark(&inner, None);
    }
}

/// Marks the keys of `consumer` (all keys when `None`) stale, and those with waiters dirty, and
/// wakes the reader.
fn mark(inner: &Inner, consumer: Option<&str>) {
    let mut any = false;
    for ((c, _), e) in inner.keys.lock().expect("hub lock").iter_mut() {
        if consumer.is_none_or(|name| name == c) {
            e.stale = true;
            if !e.waiters.is_empty() {
                e.dirty = true;
                any = true;
            }
        }
    }
    if any {
        inner.wake.notify_one();
    }
}

async fn read_bounds(inner: Arc<Inner>) {
    // An interval, not a sleep re-armed per round: notifications for some consumers must not
    // starve the poll of the others.
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = inner.wake.notified() => {}
            _ = poll.tick() => mark(&inner, None),
        }
        // Waiters registered from here on may be newer than the statement's snapshot.
        let cut = inner.seq.load(Ordering::SeqCst);
        let keys: Vec<Key> = {
            let mut map = inner.keys.lock().expect("hub lock");
            map.retain(|_, e| {
                e.waiters.retain(|w| !w.done.is_closed());
                !e.waiters.is_empty() || e.cache.is_some_and(|c| c.below.is_some())
            });
            map.iter_mut()
                .filter_map(|(k, e)| {
                    let due = std::mem::take(&mut e.dirty);
                    if due {
                        // Cleared before the statement: a notification during it marks it again.
                        e.stale = false;
                    }
                    due.then(|| k.clone())
                })
                .collect()
        };
        if keys.is_empty() {
            continue;
        }
        inner.queries.fetch_add(1, Ordering::Relaxed);
        let (bounds, next) = match applied::bounds(&inner.pool, &keys).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "reading applied bounds failed; retrying");
                {
                    let mut map = inner.keys.lock().expect("hub lock");
                    for k in &keys {
                        if let Some(e) = map.get_mut(k) {
                            e.dirty = true;
                            e.stale = true;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                inner.wake.notify_one();
                continue;
            }
        };
        let mut map = inner.keys.lock().expect("hub lock");
        for b in bounds {
            let Some(e) = map.get_mut(&(b.consumer.clone(), b.instance.clone())) else { continue };
            let c = Cached { below: b.below, next, shared: b.shared };
            e.cache = Some(c);
            let waiters = std::mem::take(&mut e.waiters);
            for w in waiters {
                // A waiter newer than the statement may only be released by it (a bound that
                // covered its token then covers it now), never refused: its token may be newer
                // than the snapshot's next transaction id.
                let outcome = Entry::decide(&c, &b.consumer, b.instance.as_deref(), w.token, w.seq < cut)
                    .filter(|r| w.seq < cut || r.is_ok());
                match outcome {
                    Some(r) => {
                        let _ = w.done.send(r);
                    }
                    None => e.waiters.push(w),
                }
            }
        }
    }
}

fn unknown_consumer(name: &str) -> Error {
    Error::no_consumer(name)
}

fn instance_of_shared(name: &str) -> Error {
    Error::refused(format!("consumer {name:?} is Shared: it has one shard, not one per instance"))
        .with_fix("leave the instance out")
}

fn token_ahead(token: Xid8, next: Xid8) -> Error {
    Error::refused(format!("token {token} is ahead of this database's next transaction id {next}")).with_fix(
        "a token is valid only in the database that issued it; after a restore from a logical dump \
         transaction ids restart: take a new token (highwater.token()) after writing",
    )
}

/// The process's hubs, one per database (host, port, database, user) and runtime.
fn hubs() -> &'static Mutex<HashMap<String, WaitHub>> {
    static HUBS: OnceLock<Mutex<HashMap<String, WaitHub>>> = OnceLock::new();
    HUBS.get_or_init(Mutex::default)
}

/// The process's hub for `pool`'s database, started on first use (and again if the runtime that
/// ran it has ended).
pub fn hub(pool: &PgPool) -> WaitHub {
    let o = pool.connect_options();
    let key =
        format!("{}:{}/{}@{}", o.get_host(), o.get_port(), o.get_database().unwrap_or_default(), o.get_username());
    let mut map = hubs().lock().expect("hubs lock");
    match map.get(&key) {
        Some(h) if h.alive() => h.clone(),
        _ => {
            let h = WaitHub::start(pool.clone());
            map.insert(key, h.clone());
            h
        }
    }
}

/// Waits until `consumer` has applied every event it selects of the transactions `token` covers
/// (for a SQL sink: committed in its tables), at most `timeout` (at most 5 minutes; 0 looks once).
/// Shares the process's hub: any number of concurrent waits cost one statement per wake-up.
pub async fn wait_applied(pool: &PgPool, consumer: &str, token: Token, timeout: Duration) -> Result<Waited> {
    wait_applied_on(pool, consumer, None, token, timeout).await
}

/// [`wait_applied`] for one instance of a PerInstance consumer (`None`: every instance).
pub async fn wait_applied_on(
    pool: &PgPool,
    consumer: &str,
    instance: Option<&str>,
    token: Token,
    timeout: Duration,
) -> Result<Waited> {
    hub(pool).wait(consumer, instance, token, timeout).await
}
