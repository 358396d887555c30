//! Keeps the event partitions ahead of the transaction ids. The dispatcher is their one owner: it
//! is the component that always runs wherever events are written and delivered (the operator is
//! optional, the retention job runs once a day), and every dispatcher calls the same idempotent
//! function, which serialises its callers, so a fleet of any size creates each partition once.
//! Should every dispatcher stop, inserts still succeed: they land in the tail partition (every
//! transaction id above the highest range), which the next creation turns into a range.
use std::time::Duration;

use highwater_store::pg::PgPool;
use tokio_util::sync::CancellationToken;

use highwater_store::partitions;

/// Partitions are `ahead` widths (default 2 × 10,000,000 transaction ids) above the next one:
/// a minute between checks leaves hours of margin at thousands of transactions per second.
const EVERY: Duration = Duration::from_secs(60);

pub async fn run(pool: PgPool, stop: CancellationToken) {
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match partitions::create_ahead(&pool).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(created = n, "created event partitions ahead of the transaction ids"),
            Err(e) => {
                tracing::warn!(error = %e, "creating event partitions ahead failed; inserts go to the tail partition meanwhile")
            }
        }
    }
}
