//! The faults, each on its own clock so that they overlap as they would in production: SIGKILL of
//! a random dispatcher, a restart of PostgreSQL, and a bad network between dispatchers and the
//! database (cut, half-open, slow).
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use highwater::embedded::EmbeddedPostgres;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::fleet::Fleet;
use crate::proxy::{Mode, Proxy};

#[derive(Default)]
pub struct FaultCounters {
    pub kills: AtomicU64,
    pub pg_restarts: AtomicU64,
    pub cuts: AtomicU64,
    pub half_opens: AtomicU64,
    pub slow_links: AtomicU64,
}

impl FaultCounters {
    pub fn network_faults(&self) -> u64 {
        self.cuts.load(Ordering::Relaxed)
            + self.half_opens.load(Ordering::Relaxed)
            + self.slow_links.load(Ordering::Relaxed)
    }
}

/// `every`, give or take half of it.
pub(super) fn jitter(every: Duration) -> Duration {
    every.mul_f64(rand::random_range(0.5..1.5))
}

/// Sleeps `d` unless stopped first; returns whether to go on.
pub(super) async fn pause(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

pub async fn kill_dispatchers(
    fleet: Arc<Mutex<Fleet>>,
    every: Duration,
    counters: Arc<FaultCounters>,
    stop: CancellationToken,
) {
    while pause(jitter(every), &stop).await {
        let mut f = fleet.lock().await;
        match f.kill_one() {
            Ok(victim) => {
                counters.kills.fetch_add(1, Ordering::Relaxed);
                eprintln!("chaos: SIGKILL {victim}");
            }
            Err(e) => eprintln!("chaos: could not replace a killed dispatcher: {e:#}"),
        }
        for tail in f.replace_exited().unwrap_or_default() {
            eprintln!("chaos: a dispatcher exited on its own and was replaced: {tail}");
        }
    }
}

pub async fn restart_postgres(
    pg: Arc<Mutex<EmbeddedPostgres>>,
    every: Duration,
    counters: Arc<FaultCounters>,
    stop: CancellationToken,
) {
    while pause(jitter(every), &stop).await {
        let mut pg = pg.lock().await;
        eprintln!("chaos: restarting PostgreSQL");
        // Fast shutdown: open transactions (writers', dispatchers') are rolled back.
        match pg.restart().await {
            Ok(()) => {
                counters.pg_restarts.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                eprintln!("chaos: PostgreSQL did not come back: {e}");
                return;
            }
        }
    }
}

pub async fn break_network(
    proxy: Arc<Proxy>,
    every: Duration,
    lasting: Duration,
    counters: Arc<FaultCounters>,
    stop: CancellationToken,
) {
    let modes = [Mode::Cut, Mode::HalfOpen, Mode::Slow(Duration::from_millis(100))];
    let mut n = 0;
    while pause(jitter(every), &stop).await {
        let mode = modes[n % modes.len()];
        n += 1;
        let counter = match mode {
            Mode::Cut => &counters.cuts,
            Mode::HalfOpen => &counters.half_opens,
            _ => &counters.slow_links,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        eprintln!("chaos: network {mode:?}");
        proxy.set_mode(mode);
        pause(jitter(lasting), &stop).await;
        proxy.set_mode(Mode::Pass);
    }
    proxy.set_mode(Mode::Pass);
}
