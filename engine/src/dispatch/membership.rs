//! Which dispatchers of a group are alive, and so which partitions are this one's to deliver.
//!
//! Every dispatcher refreshes its row in `highwater.dispatchers` each `interval` and reads the
//! group's live rows in the same statement. Partition `i` of consumer `c` belongs to the live
//! dispatcher at `(i + offset(c)) mod k` of the sorted list: each takes `⌊N/k⌋` or `⌈N/k⌉`
//! partitions, the offset spreads the remainder across consumers, and every dispatcher computes
//! the same answer from the same list. A dispatcher that stops deletes its row (its partitions
//! move at once); one that is killed stops refreshing and drops out after `ttl`. The claim (an
//! advisory lock) stays the guard: two dispatchers that briefly disagree about the list never
//! deliver one partition at the same time.
use std::{sync::Arc, time::Duration};

use highwater_store::pg::PgPool;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use highwater_store::{Result, dispatchers};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    /// The live dispatchers of the group, sorted; always contains `me`.
    pub live: Vec<String>,
    pub me: String,
}

impl Members {
    pub fn alone(me: &str) -> Self {
        Members { live: vec![me.to_owned()], me: me.to_owned() }
    }

    /// Whether partition `index` of `consumer` is this dispatcher's.
    pub fn owns(&self, consumer: &str, index: u32) -> bool {
        self.owner(consumer, index) == self.me
    }

    pub fn owner(&self, consumer: &str, index: u32) -> &str {
        let k = self.live.len().max(1);
        let slot = (index as usize + offset(consumer)) % k;
        self.live.get(slot).map_or(self.me.as_str(), String::as_str)
    }
}

/// A stable spread of consumers over the list (FNV-1a of the name): the same in every process.
fn offset(consumer: &str) -> usize {
    let h = consumer.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    (h % 1_000_003) as usize
}

/// Refreshes this dispatcher's row and reads the group's live list.
pub async fn refresh(pool: &PgPool, group: &str, me: &str, ttl: Duration) -> Result<Members> {
    let live = dispatchers::refresh(pool, group, me, ttl).await?;
    Ok(Members { live, me: me.to_owned() })
}

/// Removes this dispatcher's row, so the others take its partitions now rather than after `ttl`.
pub async fn leave(pool: &PgPool, me: &str) -> Result<()> {
    dispatchers::leave(pool, me).await
}

/// Until `stop`: refreshes every `interval` while the group has a partitioned consumer
/// (`needed`), every `10 × interval` otherwise (nobody reads the list then, and an idle
/// dispatcher's statements stay few), and publishes changes of the list. A consumer becoming
/// partitioned triggers a refresh at once.
pub async fn run(
    pool: PgPool,
    group: String,
    me: String,
    interval: Duration,
    mut needed: watch::Receiver<bool>,
    tx: watch::Sender<Arc<Members>>,
    stop: CancellationToken,
) {
    let ttl = interval * 5;
    loop {
        let every = if *needed.borrow_and_update() { interval } else { interval * 10 };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
            r = needed.changed() => if r.is_err() { return },
        }
        match refresh(&pool, &group, &me, ttl).await {
            Ok(m) => {
                tx.send_if_modified(|cur| {
                    if **cur == m {
                        return false;
                    }
                    tracing::info!(live = ?m.live, "dispatchers of the group changed; partitions are shared anew");
                    *cur = Arc::new(m);
                    true
                });
            }
            // Keep the last list: a dispatcher that cannot reach the database delivers nothing
            // anyway, and its row ages out for the others.
            Err(e) => tracing::warn!(error = %e, "refreshing the dispatcher's liveness failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(live: &[&str], me: &str) -> Members {
        Members { live: live.iter().map(|s| s.to_string()).collect(), me: me.to_owned() }
    }

    #[test]
    fn every_partition_has_exactly_one_owner_and_shares_are_fair() {
        let live = ["d-a", "d-b", "d-c"];
        for consumer in ["orders", "billing", "x"] {
            let mut per = [0; 3];
            for i in 0..8 {
                let owners: Vec<usize> = (0..3).filter(|m| members(&live, live[*m]).owns(consumer, i)).collect();
                assert_eq!(owners.len(), 1, "partition {i} of {consumer}: {owners:?}");
                per[owners[0]] += 1;
            }
            assert!(per.iter().all(|n| (2..=3).contains(n)), "{consumer}: {per:?}");
        }
    }

    #[test]
    fn alone_owns_everything() {
        let m = Members::alone("d-a");
        assert!((0..16).all(|i| m.owns("orders", i)));
    }
}
