//! The auditor: what was committed against what each consumer received, and whether any cursor
//! ever moved backwards.
use std::{
    collections::{BTreeSet, HashMap},
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result};
use highwater::Xid8;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// What one consumer received compared with the committed events.
#[derive(Clone, Debug, Default)]
pub struct Delivery {
    pub consumer: String,
    /// Committed events this consumer never received.
    pub lost: usize,
    /// Deliveries beyond the first of an event.
    pub duplicates: usize,
    /// Deliveries of an event that is not committed (must be 0).
    pub phantom: usize,
    /// Lines of an external sink that are not whole JSON (a write torn by a kill).
    pub torn: usize,
    /// Where a PerInstance sink's gaps are, per instance.
    pub gaps: Vec<String>,
}

impl Delivery {
    fn compare(consumer: &str, committed: &BTreeSet<i64>, received: &[i64]) -> Delivery {
        let mut seen = BTreeSet::new();
        let mut d = Delivery { consumer: consumer.to_owned(), ..Default::default() };
        for id in received {
            if !committed.contains(id) {
                d.phantom += 1;
            } else if !seen.insert(*id) {
                d.duplicates += 1;
            }
        }
        d.lost = committed.len() - seen.len();
        d
    }
}

pub async fn committed(pool: &PgPool) -> Result<BTreeSet<i64>> {
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM highwater.events").fetch_all(pool).await?;
    Ok(ids.into_iter().collect())
}

/// The shared SQL sink's table, one row per application.
pub async fn sql_sink(pool: &PgPool, consumer: &str, table: &str, committed: &BTreeSet<i64>) -> Result<Delivery> {
    let ids: Vec<i64> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT event_id FROM {table}"))).fetch_all(pool).await?;
    Ok(Delivery::compare(consumer, committed, &ids))
}

/// A log sink's file: one JSON line per delivery.
pub fn log_sink(consumer: &str, file: &Path, committed: &BTreeSet<i64>) -> Result<Delivery> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut ids = Vec::new();
    let mut torn = 0;
    for line in text.lines() {
        match serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| v["event"]["id"].as_i64()) {
            Some(id) => ids.push(id),
            None => torn += 1,
        }
    }
    Ok(Delivery { torn, ..Delivery::compare(consumer, committed, &ids) })
}

/// A PerInstance SQL sink's table `(instance_id, event_id)`. Each process starts from the head
/// when it registers and a killed one stops for good, so each instance must hold, exactly once,
/// every committed event between the first and the last it received (no gap), and the instances
/// still running at the end every event up to the last committed one.
pub async fn per_instance(pool: &PgPool, consumer: &str, table: &str, running: &[String]) -> Result<Delivery> {
    let events: Vec<(Xid8, i64)> =
        sqlx::query_as("SELECT tx_id, id FROM highwater.events ORDER BY tx_id, id").fetch_all(pool).await?;
    let order: Vec<(u64, i64)> = events.into_iter().map(|(tx, id)| (tx.0, id)).collect();
    let rank: HashMap<i64, usize> = order.iter().enumerate().map(|(i, (_, id))| (*id, i)).collect();
    let rows: Vec<(String, i64)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT instance_id, event_id FROM {table}")))
            .fetch_all(pool)
            .await?;
    let mut by_instance: HashMap<String, Vec<i64>> = HashMap::new();
    for (instance, id) in rows {
        by_instance.entry(instance).or_default().push(id);
    }
    let mut d = Delivery { consumer: consumer.to_owned(), ..Default::default() };
    for (instance, ids) in by_instance {
        let mut seen = BTreeSet::new();
        for id in &ids {
            match rank.get(id) {
                None => d.phantom += 1,
                Some(r) if !seen.insert(*r) => d.duplicates += 1,
                Some(_) => {}
            }
        }
        let (Some(first), Some(last)) = (seen.first().copied(), seen.last().copied()) else { continue };
        let last = if running.contains(&instance) { order.len() - 1 } else { last };
        let missing = (first..=last).filter(|r| !seen.contains(r)).count();
        if missing > 0 {
            let first_missing = (first..=last).find(|r| !seen.contains(r)).map(|r| order[r]);
            d.gaps.push(format!(
                "{instance}: {missing} missing between {:?} and {:?}, the first {first_missing:?}",
                order[first], order[last]
            ));
        }
        d.lost += missing;
    }
    Ok(d)
}

/// Samples every cursor row while the chaos runs and records each move backwards.
#[derive(Clone, Default)]
pub struct CursorWatch {
    inner: Arc<Mutex<WatchState>>,
}

#[derive(Default)]
struct WatchState {
    last: HashMap<(String, String), (u64, i64)>,
    samples: u64,
    regressions: Vec<String>,
}

impl CursorWatch {
    pub fn spawn(&self, pool: PgPool, every: Duration, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                // The database restarting makes a sample fail: skip it.
                let _ = me.sample(&pool).await;
                tokio::time::sleep(every).await;
            }
        })
    }

    pub async fn sample(&self, pool: &PgPool) -> Result<()> {
        let rows: Vec<(String, String, Xid8, i64)> =
            sqlx::query_as("SELECT consumer, instance_id, cursor_tx, cursor_id FROM highwater.consumer_shards")
                .fetch_all(pool)
                .await?;
        let mut s = self.inner.lock().expect("cursor watch lock");
        s.samples += 1;
        for (consumer, instance, tx, id) in rows {
            let now = (tx.0, id);
            if let Some(before) = s.last.insert((consumer.clone(), instance.clone()), now)
                && now < before
            {
                s.regressions.push(format!("{consumer}/{instance}: {before:?} -> {now:?}"));
            }
        }
        Ok(())
    }

    pub fn samples(&self) -> u64 {
        self.inner.lock().expect("cursor watch lock").samples
    }

    pub fn regressions(&self) -> Vec<String> {
        self.inner.lock().expect("cursor watch lock").regressions.clone()
    }
}
