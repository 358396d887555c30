//! Application writers as the seeds write: a business row and one to three events through
//! `highwater.append` in one transaction, with a short think time before the commit. Every
//! failed transaction is kept with its error; every append's duration is recorded, so that a
//! migration's effect on the application is measured, not guessed.
use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub const EVENT_TYPE: &str = "OrderPlaced";

#[derive(Default, Debug)]
pub struct Record {
    pub committed: u64,
    /// (when, error) of each transaction that did not commit.
    pub failures: Vec<(Instant, String)>,
    /// (when it started, how long) of every append call.
    pub appends: Vec<(Instant, Duration)>,
}

impl Record {
    /// The longest append that started within `[from, to)`.
    pub fn longest_append(&self, from: Instant, to: Instant) -> Duration {
        self.appends.iter().filter(|(at, _)| *at >= from && *at < to).map(|(_, d)| *d).max().unwrap_or_default()
    }
}

/// Creates the business table the writers fill.
pub async fn prepare(pool: &PgPool) -> sqlx::Result<()> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, writer int NOT NULL, n bigint NOT NULL)",
    )
    .execute(pool)
    .await?;
    Ok(())
}

pub fn start(pool: PgPool, writers: usize, stop: CancellationToken, record: Arc<Mutex<Record>>) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for w in 0..writers {
        let (pool, stop, record) = (pool.clone(), stop.clone(), record.clone());
        set.spawn(async move {
            let mut n = 0i64;
            while !stop.is_cancelled() {
                n += 1;
                let started = Instant::now();
                let mut appends = Vec::new();
                match one(&pool, w, n, &mut appends).await {
                    Ok(()) => {
                        let mut r = record.lock().unwrap();
                        r.committed += 1;
                        r.appends.extend(appends);
                    }
                    Err(e) => {
                        let mut r = record.lock().unwrap();
                        r.failures.push((started, e.to_string()));
                        r.appends.extend(appends);
                    }
                }
            }
        });
    }
    set
}

async fn one(pool: &PgPool, writer: usize, n: i64, appends: &mut Vec<(Instant, Duration)>) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO orders (writer, n) VALUES ($1, $2)").bind(writer as i32).bind(n).execute(&mut *tx).await?;
    for i in 0..rand::random_range(1..=3u32) {
        let at = Instant::now();
        // The seven-argument signature every release has had: an application built against the
        // first release keeps calling it.
        sqlx::query("SELECT highwater.append($1, $2, $3, $4, NULL, NULL, NULL)")
            .bind("order")
            .bind(format!("w{writer}-{}", rand::random_range(0..50u32)))
            .bind(EVENT_TYPE)
            .bind(serde_json::json!({"writer": writer, "n": n, "i": i}))
            .execute(&mut *tx)
            .await?;
        appends.push((at, at.elapsed()));
    }
    tokio::time::sleep(Duration::from_millis(rand::random_range(0..15))).await;
    tx.commit().await
}
