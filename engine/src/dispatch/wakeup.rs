//! Wake-ups: one LISTEN connection and one cheap head query per dispatcher, whatever the number
//! of consumers. NOTIFY is only a hint (a reconnect loses notifications), so the head is also
//! polled: fast while the listener is down or committed events wait above the fence, slowly
//! otherwise.
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use highwater_store::pg::PgPool;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use highwater_store::{Position, Result, Xid8, head, notify::Listener, sleepers};

pub use highwater_store::notify::{CONTROL_CHANNEL, EVENTS_CHANNEL};

/// The newest event below the fence, and whether committed events wait above it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Head {
    pub position: Option<Position>,
    pub pending_above_fence: bool,
}

pub async fn read_head(pool: &PgPool) -> Result<Head> {
    Ok(read(pool).await?.head)
}

/// The head read (the store's `head::HEAD_QUERY`). Here too for tests that look at its plan.
pub use highwater_store::head::HEAD_QUERY;

/// A head read and the snapshot it was read in.
struct Read {
    head: Head,
    /// The snapshot's xmin: every transaction below it has ended.
    fence: Xid8,
    /// The snapshot's xmax: every transaction that had started by then is below it.
    xmax: Xid8,
}

async fn read(pool: &PgPool) -> Result<Read> {
    let h = head::read(pool).await?;
    Ok(Read {
        head: Head { position: h.position, pending_above_fence: h.pending_above_fence },
        fence: h.fence,
        xmax: h.xmax,
    })
}

pub struct Signals {
    pub events: Arc<Notify>,
    pub control: watch::Sender<u64>,
    pub listening: watch::Sender<bool>,
}

/// Forwards notifications until `stop`; reconnects (and wakes everyone, since notifications were
/// lost meanwhile) when the connection drops.
pub async fn listen(pool: PgPool, signals: Arc<Signals>, stop: CancellationToken) {
    let mut delay = Duration::from_millis(100);
    while !stop.is_cancelled() {
        let mut listener = match connect(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "LISTEN connection failed; polling meanwhile");
                tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(delay) => {} }
                delay = (delay * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        delay = Duration::from_millis(100);
        signals.listening.send_replace(true);
        signals.events.notify_one();
        signals.control.send_modify(|g| *g += 1);
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => return,
                n = listener.recv() => n,
            };
            match next {
                Ok(Some(n)) if n.channel == CONTROL_CHANNEL => signals.control.send_modify(|g| *g += 1),
                Ok(Some(_)) => signals.events.notify_one(),
                Ok(None) | Err(_) => break,
            }
        }
        signals.listening.send_replace(false);
        tracing::warn!("LISTEN connection lost; reconnecting, polling meanwhile");
    }
}

async fn connect(pool: &PgPool) -> Result<Listener> {
    let mut l = Listener::connect(pool).await?;
    l.listen(&[EVENTS_CHANNEL, CONTROL_CHANNEL]).await?;
    Ok(l)
}

/// How the head poller paces itself.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// While LISTEN is down or committed events wait above the fence.
    pub fast: Duration,
    /// While asleep: the safety net under notifications.
    pub idle: Duration,
    /// While awake: events keep coming and writers do not notify.
    pub busy: Duration,
}

/// Awake this long without the head moving, the poller goes to sleep.
const QUIET: Duration = Duration::from_millis(100);
/// Asleep, this many head moves within `QUIET` wake the poller: from about 100 notified commits
/// a second on, polling every few milliseconds costs fewer reads than a read per notification,
/// and spares the writers the commit lock.
const WAKE_MOVES: u32 = 10;
/// How long a sleep mark holds; renewed at a third of it.
const LEASE: Duration = Duration::from_secs(60);

/// Where the poller is in the sleep protocol (see `20261202000010_notify_sleepers.sql`).
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Reading the head every `busy`; writers do not notify on this dispatcher's account.
    Awake { moved: Instant },
    /// Marked asleep at `since`; reading on until the fence passes `target`, the xmax of the
    /// first snapshot after the mark, so a writer that read "awake" before the mark committed
    /// is seen.
    Settling { since: Instant, target: Option<Xid8> },
    /// Marked asleep: notifications wake the poller, `idle` is the net. `moves` counts the
    /// reads that found the head moved since `window`.
    Asleep { renew: Instant, window: Instant, moves: u32 },
}

/// Where the head poller publishes: the head, and the types of each move's events.
pub struct HeadOut {
    pub tx: watch::Sender<Head>,
    pub touched: Arc<super::touched::Touched>,
}

/// Publishes the head whenever it may have moved, and keeps this dispatcher's sleep mark: awake
/// (polling every `busy`) while the head keeps moving, asleep (notified by writers) once it has
/// been still for `QUIET`.
pub async fn poll_head(
    pool: PgPool,
    instance: String,
    signals: Arc<Signals>,
    out: HeadOut,
    pace: Pace,
    stop: CancellationToken,
) {
    let listening = signals.listening.subscribe();
    let mut mode = Mode::Awake { moved: Instant::now() };
    loop {
        let (moved, pending, snapshot) = match read(&pool).await {
            Ok(r) => {
                // The move's types are recorded before the new head is published, so that a
                // worker woken by it finds them.
                let from = out.tx.borrow().position;
                if from != r.head.position {
                    out.touched.record(&pool, from, r.head.position).await;
                }
                (
                    out.tx.send_if_modified(|cur| std::mem::replace(cur, r.head) != r.head),
                    r.head.pending_above_fence,
                    Some((r.fence, r.xmax)),
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the event head failed");
                (false, true, None)
            }
        };
        let listening = *listening.borrow();
        mode = next(&pool, &instance, mode, moved, snapshot, listening).await;
        let wait = match mode {
            Mode::Awake { moved } if !listening && moved.elapsed() >= QUIET => pace.fast,
            Mode::Awake { .. } => pace.busy,
            // Backing off (each wait as long as the settling so far): most settle at once, and a
            // long transaction holding the fence is not polled every few milliseconds.
            Mode::Settling { since, .. } => since.elapsed().max(pace.busy).min(pace.fast.max(pace.busy)),
            // Never past the renewal: with a long --idle-poll-interval the lease would lapse and
            // writers stop notifying a dispatcher that still sleeps.
            Mode::Asleep { renew, .. } => {
                let base = if pending || !listening { pace.fast } else { pace.idle };
                base.min(renew.saturating_duration_since(Instant::now()))
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
            _ = signals.events.notified() => {}
        }
    }
}

/// One step of the protocol after a head read. A mark that fails to write leaves the mode as it
/// was: awake stays awake (polling), asleep stays asleep (writers keep notifying).
async fn next(
    pool: &PgPool,
    me: &str,
    mode: Mode,
    moved: bool,
    snapshot: Option<(Xid8, Xid8)>,
    listening: bool,
) -> Mode {
    let now = Instant::now();
    match mode {
        Mode::Awake { moved: last } => {
            let last = if moved { now } else { last };
            if !listening || now - last < QUIET {
                return Mode::Awake { moved: last };
            }
            match sleepers::sleep(pool, me, LEASE).await {
                Ok(()) => Mode::Settling { since: now, target: None },
                Err(e) => {
                    tracing::warn!(error = %e, "could not mark this dispatcher asleep; polling on");
                    Mode::Awake { moved: last }
                }
            }
        }
        Mode::Settling { since, target } => match snapshot {
            // The first read after the mark committed names the transactions to wait for.
            Some((fence, xmax)) => {
                let target = target.unwrap_or(xmax);
                if fence >= target {
                    Mode::Asleep { renew: since + LEASE / 3, window: now, moves: 0 }
                } else {
                    Mode::Settling { since, target: Some(target) }
                }
            }
            None => Mode::Settling { since, target },
        },
        Mode::Asleep { renew, window, moves } => {
            let (window, moves) = match (moved, now - window < QUIET) {
                (false, _) => (window, moves),
                (true, true) => (window, moves + 1),
                (true, false) => (now, 1),
            };
            if moves >= WAKE_MOVES {
                match sleepers::wake(pool, me).await {
                    Ok(()) => return Mode::Awake { moved: now },
                    Err(e) => {
                        tracing::warn!(error = %e, "could not mark this dispatcher awake; writers keep notifying")
                    }
                }
            }
            if now >= renew {
                // Settled again: the lease may have run out meanwhile (a slow renewal), and a
                // writer that saw it expired did not notify.
                return match sleepers::sleep(pool, me, LEASE).await {
                    Ok(()) => Mode::Settling { since: now, target: None },
                    Err(e) => {
                        tracing::warn!(error = %e, "could not renew this dispatcher's sleep mark; polling meanwhile");
                        Mode::Awake { moved: now }
                    }
                };
            }
            Mode::Asleep { renew, window, moves }
        }
    }
}
