//! Steady load: concurrent writers, each appending a few events in its own transaction through
//! highwater's append API and holding the transaction open a moment before committing, so that
//! transactions commit out of transaction-id order. Writers reach the database directly, not
//! through the proxy: the network faults are between dispatchers and the database.
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use highwater::{NewEvent, append};
use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub const EVENT_TYPE: &str = "ChaosTick";

#[derive(Default)]
pub struct LoadCounters {
    /// Commits acknowledged by the server.
    pub committed_tx: AtomicU64,
    /// Transactions that failed (server restarting): some may still have committed, which is why
    /// the auditor takes the committed set from the events table, not from these counters.
    pub failed_tx: AtomicU64,
}

pub fn start(pool: PgPool, writers: usize, stop: CancellationToken, counters: Arc<LoadCounters>) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for w in 0..writers {
        let (pool, stop, counters) = (pool.clone(), stop.clone(), counters.clone());
        set.spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                n += 1;
                match write_one(&pool, w, n).await {
                    Ok(()) => counters.committed_tx.fetch_add(1, Ordering::Relaxed),
                    Err(_) => {
                        counters.failed_tx.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        0
                    }
                };
            }
        });
    }
    set
}

async fn write_one(pool: &PgPool, writer: usize, n: u64) -> highwater::Result<()> {
    let mut tx = pool.begin().await?;
    for i in 0..rand::random_range(1..=4u32) {
        let stream = format!("w{writer}-{}", rand::random_range(0..20u32));
        append(&mut tx, &NewEvent::new("chaos", &stream, EVENT_TYPE, serde_json::json!({"w": writer, "n": n, "i": i})))
            .await?;
    }
    // A delayed commit: transactions with higher ids commit before this one.
    tokio::time::sleep(Duration::from_millis(rand::random_range(0..40))).await;
    tx.commit().await?;
    Ok(())
}

/// Holds one transaction with an event open for `hold`, starting after `after`; returns how long
/// it was held and whether it committed.
pub async fn hold_transaction(pool: PgPool, after: Duration, hold: Duration) -> (Duration, bool) {
    tokio::time::sleep(after).await;
    let start = std::time::Instant::now();
    let outcome = async {
        let mut tx = pool.begin().await?;
        append(&mut tx, &NewEvent::new("chaos", "long", EVENT_TYPE, serde_json::json!({"long": true}))).await?;
        eprintln!("chaos: holding a transaction open for {hold:?}");
        tokio::time::sleep(hold).await;
        tx.commit().await?;
        Ok::<(), highwater::Error>(())
    }
    .await;
    (start.elapsed(), outcome.is_ok())
}
