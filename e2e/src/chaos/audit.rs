//! The auditor: what was committed against what each consumer received, and whether any cursor
//! ever moved backwards.
use std::{
    collections::{BTreeSet, HashMap},
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result};
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
        let rows: Vec<(String, String, String, i64)> =
            sqlx::query_as("SELECT consumer, instance_id, cursor_tx::text, cursor_id FROM highwater.consumer_shards")
                .fetch_all(pool)
                .await?;
        let mut s = self.inner.lock().expect("cursor watch lock");
        s.samples += 1;
        for (consumer, instance, tx, id) in rows {
            let now = (tx.parse::<u64>()?, id);
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
