//! The expected-version check stays exact on the partitioned events table: a stream's head lives
//! in `highwater.stream_versions`, one row per stream, and concurrent appenders of one stream
//! serialise on it as they did on the unique index of the unpartitioned table.
mod common;

use std::{sync::Arc, time::Duration};

use common::*;
use highwater::{Error, NewEvent, append};
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::Barrier;

fn at(expected: i64) -> NewEvent {
    let mut e = NewEvent::new("account", "1", "Deposited", json!({}));
    e.expected_version = Some(expected);
    e
}

async fn head(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM highwater.stream_versions WHERE stream_id = '1'")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Eight writers append to one stream at once, each reading the head and appending on top of it:
/// every success got a distinct version, the versions are 1..=n without a gap, and the losers were
/// told with a version conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appenders_get_each_version_exactly_once() {
    let db = setup(&["Deposited"]).await;
    let writers = 8;
    let barrier = Arc::new(Barrier::new(writers));
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let (pool, barrier) = (db.pool.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let (mut won, mut lost) = (Vec::new(), 0);
            barrier.wait().await;
            for _ in 0..30 {
                let mut tx = pool.begin().await.unwrap();
                let current = head(&pool).await;
                match append(&mut tx, &at(current)).await {
                    Ok(_) => {
                        tx.commit().await.unwrap();
                        won.push(current + 1);
                    }
                    Err(Error::VersionConflict { .. }) => lost += 1,
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
            (won, lost)
        }));
    }
    let (mut won, mut lost) = (Vec::new(), 0);
    for t in tasks {
        let (w, l) = t.await.unwrap();
        won.extend(w);
        lost += l;
    }
    won.sort_unstable();
    let n = won.len() as i64;
    assert_eq!(won, (1..=n).collect::<Vec<_>>(), "each version won by exactly one writer");
    let stored: Vec<i64> = sqlx::query_scalar("SELECT stream_version FROM highwater.events ORDER BY stream_version")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, won, "the stored versions are those, once each");
    assert_eq!(head(&db.pool).await, n);
    assert_eq!(n + lost, writers as i64 * 30);
    assert!(lost > 0, "the writers did race (8 writers, 2 cores)");
}

/// Two writers append version 1: the second waits for the first's transaction; if the first
/// commits the second is refused, if it rolls back the second gets version 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_writer_waits_for_the_first_and_is_refused_only_if_it_commits() {
    let db = setup(&["Deposited"]).await;
    for commit_first in [true, false] {
        sqlx::raw_sql("DELETE FROM highwater.events; DELETE FROM highwater.stream_versions")
            .execute(&db.pool)
            .await
            .unwrap();
        let mut first = db.pool.begin().await.unwrap();
        append(&mut first, &at(0)).await.unwrap();

        let pool = db.pool.clone();
        let second = tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            let r = append(&mut tx, &at(0)).await;
            if r.is_ok() {
                tx.commit().await.unwrap();
            }
            r
        });
        wait_count(
            &db.pool,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted",
            1,
            Duration::from_secs(10),
        )
        .await;
        assert!(!second.is_finished(), "the second writer waits on the stream's head");
        if commit_first {
            first.commit().await.unwrap();
            let r = second.await.unwrap();
            assert!(
                matches!(&r, Err(Error::VersionConflict { message, .. }) if message.contains("already has version 1")),
                "{r:?}"
            );
        } else {
            first.rollback().await.unwrap();
            second.await.unwrap().unwrap();
        }
        assert_eq!(head(&db.pool).await, 1);
        assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await, 1);
    }
}

/// A stale expected version is refused with the stream's actual version, before anything is
/// written; the head survives a prune of the stream's events (versions never restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_expected_version_names_the_current_one_even_after_a_prune() {
    let db = setup(&["Deposited"]).await;
    for v in 0..3 {
        let mut tx = db.pool.begin().await.unwrap();
        append(&mut tx, &at(v)).await.unwrap();
        tx.commit().await.unwrap();
    }
    sqlx::raw_sql("DELETE FROM highwater.events").execute(&db.pool).await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let r = append(&mut tx, &at(0)).await;
    assert!(
        matches!(&r, Err(Error::VersionConflict { message, .. }) if message.contains("is at version 3, expected 0")),
        "{r:?}"
    );
    drop(tx);
    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &at(3)).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(head(&db.pool).await, 4);
}
