//! What the overview adds to `consumer status`: `doctor`'s findings (run on the console's pool at
//! most once a minute, in the background after the first run: the LISTEN check alone can take
//! 2 s) and, from the status rows the console has read, each shard's delivery rate and its lag
//! over the last hour. Both samples live in the
//! console's memory: they start when the console starts, and fill while pages are being read
//! (the overview's live refresh reads every 5 s).
use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use highwater_store::{
    doctor::{self, Finding},
    ops::ShardStatus,
    pg::PgPool,
};

const DOCTOR_EVERY: Duration = Duration::from_secs(60);
/// A transaction holding the fence back longer than this is a finding (`doctor`'s default).
const LONG_TRANSACTION: Duration = Duration::from_secs(60);
const KEEP: Duration = Duration::from_secs(3600);
/// At most one sample per shard this often (a page read twice at once adds one).
const SAMPLE_EVERY: Duration = Duration::from_secs(4);
/// The delivery rate is over the samples of this last window.
const RATE_OVER: Duration = Duration::from_secs(60);

#[derive(Default)]
pub(crate) struct Health {
    doctor: tokio::sync::Mutex<Option<(Instant, Vec<Finding>)>>,
    refreshing: AtomicBool,
    samples: Mutex<HashMap<(String, String), VecDeque<Sample>>>,
}

#[derive(Clone, Copy)]
pub(crate) struct Sample {
    pub at: Instant,
    pub lag: i64,
    pub delivered: i64,
}

impl Health {
    /// The findings. The first call runs the checks; later ones answer at once with the last
    /// findings, and start a new run in the background when those are a minute old, so that no
    /// page waits for doctor's checks but the very first.
    pub async fn findings(self: &Arc<Self>, pool: &PgPool) -> Vec<Finding> {
        let mut cached = self.doctor.lock().await;
        match &*cached {
            Some((at, f)) => {
                let f = f.clone();
                if at.elapsed() >= DOCTOR_EVERY && !self.refreshing.swap(true, Ordering::SeqCst) {
                    let (me, pool) = (Arc::clone(self), pool.clone());
                    tokio::spawn(async move {
                        let fresh = doctor::on_pool(&pool, LONG_TRANSACTION).await;
                        *me.doctor.lock().await = Some((Instant::now(), fresh));
                        me.refreshing.store(false, Ordering::SeqCst);
                    });
                }
                f
            }
            None => {
                let f = doctor::on_pool(pool, LONG_TRANSACTION).await;
                *cached = Some((Instant::now(), f.clone()));
                f
            }
        }
    }

    /// Records the rows just read.
    pub fn record(&self, rows: &[ShardStatus]) {
        let now = Instant::now();
        let mut all = self.samples.lock().expect("samples lock");
        for r in rows {
            let s = all.entry((r.consumer.clone(), r.instance_id.clone())).or_default();
            while s.front().is_some_and(|x| now.duration_since(x.at) > KEEP) {
                s.pop_front();
            }
            if s.back().is_none_or(|x| now.duration_since(x.at) >= SAMPLE_EVERY) {
                s.push_back(Sample { at: now, lag: r.lag_events, delivered: r.delivered_count });
            }
        }
    }

    /// Events delivered per second over the last minute of samples; `None` before two samples.
    pub fn rate(&self, consumer: &str, instance: &str) -> Option<f64> {
        let all = self.samples.lock().expect("samples lock");
        let s = all.get(&(consumer.to_owned(), instance.to_owned()))?;
        let last = s.back()?;
        let first = s.iter().find(|x| last.at.duration_since(x.at) <= RATE_OVER)?;
        let secs = last.at.duration_since(first.at).as_secs_f64();
        (secs > 0.0).then(|| (last.delivered - first.delivered).max(0) as f64 / secs)
    }

    /// The lag samples of the last hour, oldest first, as (seconds ago, events).
    pub fn lag_history(&self, consumer: &str, instance: &str) -> Vec<(f64, i64)> {
        let all = self.samples.lock().expect("samples lock");
        let now = Instant::now();
        all.get(&(consumer.to_owned(), instance.to_owned()))
            .map(|s| s.iter().map(|x| (now.duration_since(x.at).as_secs_f64(), x.lag)).collect())
            .unwrap_or_default()
    }
}
