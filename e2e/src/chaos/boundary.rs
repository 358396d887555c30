//! The transaction-id boundary the run crosses. The cluster starts a little below it
//! (`pg_resetwal`, [`highwater::embedded::EmbeddedOptions::next_xid`]); a quarter into the run,
//! ids are used up to a distance that the measured rate covers in another fifth of the run, so
//! the crossing happens near the middle on a fast or a slow machine, while every fault and
//! operation goes on.
use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use highwater::Xid8;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug, Default)]
pub struct Crossing {
    pub boundary: u64,
    /// The next transaction id when the run started and when it ended.
    pub start_xid: u64,
    pub end_xid: u64,
    /// How far into the run the next transaction id reached the boundary.
    pub crossed_after: Option<Duration>,
    /// Ids used up by the harness to come near the boundary.
    pub burned: u64,
    /// Committed events (pruned or not) below and at or above the boundary.
    pub events_below: usize,
    pub events_above: usize,
}

impl Crossing {
    pub fn crossed(&self) -> bool {
        self.crossed_after.is_some() && self.events_below > 0 && self.events_above > 0
    }
}

pub async fn next_xid(pool: &PgPool) -> sqlx::Result<u64> {
    let x: Xid8 = sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())").fetch_one(pool).await?;
    Ok(x.0)
}

/// Uses ids until the next is at least `target`: one server-side loop with a commit each
/// (asynchronous commits: nothing is written that must survive).
async fn burn_to(pool: &PgPool, target: u64) -> sqlx::Result<u64> {
    let next = next_xid(pool).await?;
    if next >= target {
        return Ok(0);
    }
    let n = target - next;
    let mut conn = pool.acquire().await?;
    // One statement per call: a DO block may commit only outside a transaction block, and a
    // multi-statement string runs as one.
    sqlx::raw_sql("SET synchronous_commit = off").execute(&mut *conn).await?;
    let r = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$ BEGIN FOR i IN 1..{n} LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"
    )))
    .execute(&mut *conn)
    .await;
    sqlx::raw_sql("RESET synchronous_commit").execute(&mut *conn).await?;
    r?;
    Ok(n)
}

/// Watches the counter until `stop`; comes near the boundary a quarter into `duration`.
pub fn watch(
    pool: PgPool,
    boundary: u64,
    duration: Duration,
    state: Arc<Mutex<Crossing>>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut approached = false;
        while !stop.is_cancelled() {
            if let Ok(next) = next_xid(&pool).await {
                let start_xid = {
                    let mut s = state.lock().expect("crossing lock");
                    s.end_xid = next;
                    if next >= boundary && s.crossed_after.is_none() {
                        s.crossed_after = Some(started.elapsed());
                        eprintln!("chaos: transaction ids crossed {boundary} after {:.1?}", started.elapsed());
                    }
                    s.start_xid
                };
                if !approached && started.elapsed() >= duration / 4 {
                    approached = true;
                    let rate = (next - start_xid) as f64 / started.elapsed().as_secs_f64();
                    let margin = (rate * (duration / 5).as_secs_f64()) as u64;
                    let target = boundary.saturating_sub(margin.max(200));
                    if next < target {
                        match burn_to(&pool, target).await {
                            Ok(n) => {
                                eprintln!("chaos: used up {n} transaction ids, now {margin} below {boundary}");
                                state.lock().expect("crossing lock").burned += n;
                            }
                            Err(e) => {
                                eprintln!("chaos: could not use up transaction ids ({e}); trying again");
                                approached = false;
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}
