//! The blue-green recipe of docs/read-your-writes.md, run as written while clients keep doing
//! write → wait → read through the view: v2 builds its table while v1 serves; once v2 caught up
//! (`wait_applied` with a token taken then), clients wait for both; the view swaps to v2 in one
//! statement; clients wait for v2 only; v1 is deleted. No read in between is stale.
mod common;

use std::{
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use common::*;
use highwater::{NewEvent, Waited, append_position, definitions, wait_applied};
use serde_json::json;

fn version(name: &str, table: &str) -> String {
    consumer(
        name,
        &format!(
            "delivery: Shared\nsink:\n  sql:\n    statement: \"INSERT INTO {table} VALUES ($2, ($1->>'n')::int)\""
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blue_green_switch_has_no_stale_read() {
    let db = setup(&["Wrote"]).await;
    sqlx::raw_sql(
        "CREATE TABLE seen_v1 (event_id bigint PRIMARY KEY, n int);
         CREATE TABLE seen_v2 (event_id bigint PRIMARY KEY, n int);
         CREATE VIEW seen AS SELECT event_id, n FROM seen_v1;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    apply(&db.pool, &version("seen-v1", "seen_v1")).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "bg-0", logs.path());

    // Which consumers a client waits for before reading the view, with the setting's generation;
    // `done[w]` is the generation of the last write → wait → read client w completed.
    let wait_for: Arc<RwLock<(u64, Vec<&'static str>)>> = Arc::new(RwLock::new((0, vec!["seen-v1"])));
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..8).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, stale) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = Vec::new();
    for w in 0..8usize {
        let (pool, wait_for, stop, reads, stale, done) =
            (db.pool.clone(), wait_for.clone(), stop.clone(), reads.clone(), stale.clone(), done.clone());
        clients.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let mut tx = pool.begin().await.unwrap();
                let a = append_position(&mut tx, &NewEvent::new("w", &w.to_string(), "Wrote", json!({"n": n})))
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                let (generation, targets) = wait_for.read().unwrap().clone();
                for c in targets {
                    let r = wait_applied(&pool, c, a.token, Duration::from_secs(30)).await.unwrap();
                    assert_eq!(r, Waited::Applied, "{c}");
                }
                let found: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM seen WHERE event_id = $1)")
                    .bind(a.position.id)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                reads.fetch_add(1, Ordering::Relaxed);
                if !found {
                    stale.fetch_add(1, Ordering::Relaxed);
                }
                done[w].store(generation, Ordering::SeqCst);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 1. v2 builds its table from the first event while v1 serves.
    apply(&db.pool, &version("seen-v2", "seen_v2")).await;
    // 2. v2 has caught up with everything committed when the token was taken.
    let mut conn = db.pool.acquire().await.unwrap();
    let now = highwater::token(&mut conn).await.unwrap();
    drop(conn);
    assert_eq!(wait_applied(&db.pool, "seen-v2", now, Duration::from_secs(60)).await.unwrap(), Waited::Applied);
    // 3. Clients wait for both, so a read through either table is fresh; once every client runs
    //    with that setting (each completed a round with it) ...
    let rolled_out = |generation: u64| {
        let done = done.clone();
        async move {
            eventually("every client to run with the new setting", Duration::from_secs(30), || {
                let done = done.clone();
                async move { done.iter().all(|d| d.load(Ordering::SeqCst) >= generation) }
            })
            .await
        }
    };
    *wait_for.write().unwrap() = (1, vec!["seen-v1", "seen-v2"]);
    rolled_out(1).await;
    // 4. ... the switch: one statement.
    sqlx::query("CREATE OR REPLACE VIEW seen AS SELECT event_id, n FROM seen_v2").execute(&db.pool).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // 5. Clients wait for v2 only; once they all do, v1 goes.
    *wait_for.write().unwrap() = (2, vec!["seen-v2"]);
    rolled_out(2).await;
    definitions::delete(&db.pool, "seen-v1").await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;

    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let v2: i64 = sqlx::query_scalar("SELECT count(*) FROM seen_v2").fetch_one(&db.pool).await.unwrap();
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.events").fetch_one(&db.pool).await.unwrap();
    println!(
        "{} reads, {} stale; v2 holds {v2} of {events} events",
        reads.load(Ordering::Relaxed),
        stale.load(Ordering::Relaxed)
    );
    assert!(reads.load(Ordering::Relaxed) > 100, "clients kept reading across the switch");
    assert_eq!(stale.load(Ordering::Relaxed), 0, "stale reads");
    assert_eq!(v2, events, "v2 built every event");
}
