//! A stream's versions are delivered in version order even when the transaction appending
//! version 2 took its transaction id before the one that appended version 1: writer A writes
//! first (taking the smaller id), writer B then appends version 1 and commits, and A appends
//! version 2 on top of it. Ordered by raw transaction ids, version 2 would come first.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, Xid8, append};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_are_delivered_in_order_whichever_transaction_took_its_id_first() {
    let db = setup(&["Step"]).await;
    sqlx::raw_sql("CREATE TABLE seen (n bigserial PRIMARY KEY, event_id bigint, version bigint)")
        .execute(&db.pool)
        .await
        .unwrap();
    apply(
        &db.pool,
        &consumer(
            "steps",
            "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO seen (event_id, version) VALUES ($2, $8)'}}",
        ),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());

    let step = |version: i64| {
        let mut e = NewEvent::new("job", "7", "Step", json!({"version": version + 1}));
        e.expected_version = Some(version);
        e
    };
    let mut early = db.pool.begin().await.unwrap();
    let early_xid: Xid8 = sqlx::query_scalar("SELECT pg_current_xact_id()").fetch_one(&mut *early).await.unwrap();
    let mut late = db.pool.begin().await.unwrap();
    let late_xid: Xid8 = sqlx::query_scalar("SELECT pg_current_xact_id()").fetch_one(&mut *late).await.unwrap();
    assert!(early_xid < late_xid);
    let v1 = append(&mut late, &step(0)).await.unwrap();
    late.commit().await.unwrap();
    let v2 = append(&mut early, &step(1)).await.unwrap();
    // Another stream's event in the early transaction keeps its own transaction id.
    let other = append(&mut early, &NewEvent::new("job", "8", "Step", json!({}))).await.unwrap();
    early.commit().await.unwrap();

    wait_count(&db.pool, "SELECT count(*) FROM seen", 3, Duration::from_secs(30)).await;
    let order: Vec<(i64, Option<i64>)> =
        sqlx::query_as("SELECT event_id, version FROM seen ORDER BY n").fetch_all(&db.pool).await.unwrap();
    assert_eq!(order, vec![(other, None), (v1, Some(1)), (v2, Some(2))], "version 1 before version 2");
    let txs: Vec<(i64, Xid8)> =
        sqlx::query_as("SELECT id, tx_id FROM highwater.events ORDER BY id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(
        txs,
        vec![(v1, late_xid), (v2, late_xid), (other, early_xid)],
        "version 2 is ordered after its predecessor's transaction; the unversioned event keeps its own"
    );
}
