//! Refreshes the gauges that need the database: lag, status and attempts of this dispatcher's
//! shards, the heartbeat age of its group's per-instance shards that stopped beating, and the age
//! of the transaction holding the fence back (named in the log while it holds events back).
use std::{collections::HashSet, sync::Arc, time::Duration};

use highwater_store::pg::PgPool;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use highwater_store::{Result, observe::stale_shards, ops};

pub use highwater_store::observe::fence_age;

pub async fn run(
    pool: PgPool,
    metrics: Arc<Metrics>,
    group: String,
    instance: String,
    every: Duration,
    stop: CancellationToken,
) {
    let mut known = Known::default();
    let mut held = super::held::HeldLog::default();
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = collect(&pool, &metrics, &group, &instance, &mut known, &mut held).await {
            tracing::warn!(error = %e, "collecting lag metrics failed");
        }
    }
}

/// The series this process exported last time, to drop those that no longer apply.
#[derive(Default)]
struct Known {
    shards: HashSet<(String, String)>,
    stale: HashSet<(String, String)>,
}

async fn collect(
    pool: &PgPool,
    m: &Metrics,
    group: &str,
    instance: &str,
    known: &mut Known,
    held: &mut super::held::HeldLog,
) -> Result<()> {
    let rows = ops::status_where(pool, ops::Filter { consumer: None, dispatcher: Some((group, instance)) }).await?;
    held.observe(&rows);
    let mut now = HashSet::new();
    for r in &rows {
        let l = crate::metrics::ShardLabels::new(&r.consumer, &r.instance_id);
        m.lag_events.get_or_create(&l).set(r.lag_events);
        m.lag_seconds.get_or_create(&l).set(r.lag_seconds.unwrap_or(0.0).max(0.0));
        m.attempts.get_or_create(&l).set(i64::from(r.attempts));
        m.set_status(&r.consumer, &r.instance_id, r.status);
        match r.rebuild.as_ref().filter(|p| !p.complete) {
            Some(p) => {
                m.rebuild_done.get_or_create(&l).set(p.done);
                m.rebuild_total.get_or_create(&l).set(p.total);
            }
            None => {
                m.rebuild_done.remove(&l);
                m.rebuild_total.remove(&l);
            }
        }
        // The counters start at 0 before the first delivery or failure: a series that first
        // appears at 1 shows no increase to rate() and increase(), and the failure would be lost
        // to the failure-ratio alert and panels.
        let _ = m.processed.get_or_create(&l);
        let _ = m.failed.get_or_create(&l);
        let _ = m.passes_failed.get_or_create(&l);
        let _ = m.passes_skipped.get_or_create(&l);
        now.insert((r.consumer.clone(), r.instance_id.clone()));
    }
    for (c, i) in known.shards.difference(&now) {
        m.forget(c, i);
    }
    known.shards = now;
    // Only the group's per-instance shards that stopped beating are exported, so the series
    // count stays at the size of the problem, not instances × consumers.
    let mut stale = HashSet::new();
    for (consumer, instance_id, age) in stale_shards(pool, group).await? {
        m.heartbeat_age.get_or_create(&crate::metrics::ShardLabels::new(&consumer, &instance_id)).set(age);
        stale.insert((consumer, instance_id));
    }
    for (c, i) in known.stale.difference(&stale) {
        m.heartbeat_age.remove(&crate::metrics::ShardLabels::new(c, i));
    }
    known.stale = stale;
    m.fence_age.set(fence_age(pool).await?);
    Ok(())
}
