//! Refreshes the gauges that need the database: lag, status and attempts of this dispatcher's
//! shards, and the age of the transaction holding the fence back.
use std::{collections::HashSet, sync::Arc, time::Duration};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{Result, metrics::Metrics, ops};

pub async fn run(
    pool: PgPool,
    metrics: Arc<Metrics>,
    group: String,
    instance: String,
    every: Duration,
    stop: CancellationToken,
) {
    let mut known: HashSet<(String, String)> = HashSet::new();
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = collect(&pool, &metrics, &group, &instance, &mut known).await {
            tracing::warn!(error = %e, "collecting lag metrics failed");
        }
    }
}

async fn collect(
    pool: &PgPool,
    m: &Metrics,
    group: &str,
    instance: &str,
    known: &mut HashSet<(String, String)>,
) -> Result<()> {
    let rows = ops::status_where(pool, ops::Filter { consumer: None, dispatcher: Some((group, instance)) }).await?;
    let mut now = HashSet::new();
    for r in &rows {
        let l = crate::metrics::ShardLabels::new(&r.consumer, &r.instance_id);
        m.lag_events.get_or_create(&l).set(r.lag_events);
        m.lag_seconds.get_or_create(&l).set(r.lag_seconds.unwrap_or(0.0).max(0.0));
        m.attempts.get_or_create(&l).set(i64::from(r.attempts));
        m.set_status(&r.consumer, &r.instance_id, &r.status);
        // The counters start at 0 before the first delivery or failure: a series that first
        // appears at 1 shows no increase to rate() and increase(), and the failure would be lost
        // to the failure-ratio alert and panels.
        let _ = m.processed.get_or_create(&l);
        let _ = m.failed.get_or_create(&l);
        now.insert((r.consumer.clone(), r.instance_id.clone()));
    }
    for (c, i) in known.difference(&now) {
        m.forget(c, i);
    }
    *known = now;
    m.fence_age.set(fence_age(pool).await?);
    Ok(())
}

/// Seconds since the oldest transaction holding a transaction id started (prepared
/// transactions included); 0 when none does. Other roles' sessions are visible only with
/// `pg_read_all_stats`, so grant it to the dispatcher's role.
pub async fn fence_age(pool: &PgPool) -> Result<f64> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(extract(epoch FROM now() - least(
                   (SELECT min(xact_start) FROM pg_stat_activity WHERE backend_xid IS NOT NULL),
                   (SELECT min(prepared) FROM pg_prepared_xacts))), 0)::float8",
    )
    .fetch_one(pool)
    .await?)
}
