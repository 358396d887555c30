//! Errors no event caused (a consumer this dispatcher cannot run, a pass that fails before any
//! event is blamed) are written to the shard's `last_error`, which `consumer status` and the
//! EventConsumer's status show, and which makes the operator report the consumer `Degraded`.
//! Such an error must go away once the shard works again, even when no event comes to be
//! delivered: otherwise a consumer that was broken once looks broken until its next event.
mod common;

use std::time::Duration;

use common::*;
use sqlx::PgPool;

async fn shard(pool: &PgPool) -> (String, i64, i64, Option<String>) {
    sqlx::query_as(
        "SELECT status::text, cursor_id, delivered_count, last_error FROM highwater.consumer_shards WHERE consumer = 'hook'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_could_not_run_is_cleared_by_its_first_pass_without_an_event() {
    let db = setup(&["Item"]).await;
    apply(
        &db.pool,
        &consumer("hook", "delivery: Shared\nsink: {webhook: {url: 'http://127.0.0.1:9/hook', timeout: 2s}}"),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    // This dispatcher refuses loopback targets: it cannot build the sink and says so on the shard.
    let refusing =
        Dispatcher::start_with_env(&db.url, "d0", logs.path(), &[("HIGHWATER_WEBHOOK_BLOCK_PRIVATE", "true")]);
    let pool = db.pool.clone();
    eventually("the error on the shard", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move { shard(&pool).await.3.is_some_and(|e| e.starts_with("cannot run on d0")) }
    })
    .await;
    let (status, cursor, delivered, _) = shard(&pool).await;
    assert_eq!((status.as_str(), cursor, delivered), ("idle", 0, 0));
    refusing.sigkill();

    // One that may reach loopback runs it; nothing was ever appended, so nothing is delivered.
    let _d = Dispatcher::start(&db.url, "d1", logs.path());
    eventually("the error cleared by a pass that found nothing", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move { shard(&pool).await.3.is_none() }
    })
    .await;
    let (status, cursor, delivered, _) = shard(&pool).await;
    assert_eq!((status.as_str(), cursor, delivered), ("idle", 0, 0), "cleared by a pass, not by a delivery");
}
