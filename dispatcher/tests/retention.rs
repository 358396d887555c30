//! `events prune`: deletes old events in batches, never one a non-disabled shard still needs; the
//! SHARE lock and shard pre-registration that make that check sound.
mod common;

use std::time::Duration;

use common::*;
use highwater::{Error, NewEvent, append, ops, retention, shards};
use serde_json::json;
use sqlx::PgPool;

/// Appends `n` events of `stream_type`, each in its own transaction, created `days_ago`.
async fn old_events(pool: &PgPool, stream_type: &str, n: usize, days_ago: i32) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..n {
        let mut tx = pool.begin().await.unwrap();
        let id = append(&mut tx, &NewEvent::new(stream_type, &i.to_string(), "Tick", json!({}))).await.unwrap();
        sqlx::query("UPDATE highwater.events SET created_at = now() - make_interval(days => $2) WHERE id = $1")
            .bind(id)
            .bind(days_ago)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        ids.push(id);
    }
    ids
}

fn opts(types: &[&str]) -> retention::PruneOptions {
    retention::PruneOptions {
        older_than_days: 30,
        stream_types: Some(types.iter().map(|t| t.to_string()).collect()),
        batch_size: 10_000,
        dry_run: false,
    }
}

fn refused<T: std::fmt::Debug>(r: highwater::Result<T>) -> String {
    match r {
        Err(Error::Refused(m)) => m.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn count(pool: &PgPool) -> i64 {
    scalar_i64(pool, "SELECT count(*) FROM highwater.events").await
}

/// Sessions waiting for a lock on `consumer_shards`.
const WAITING: &str = "SELECT count(*) FROM pg_locks
                        WHERE relation = 'highwater.consumer_shards'::regclass AND NOT granted";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_refuses_naming_the_blocking_shard_and_succeeds_after_disable() {
    let db = setup(&["Tick"]).await;
    apply(&db.pool, &consumer("audit", "delivery: Shared\nsink: {sql: {statement: 'SELECT 1'}}")).await;
    let ids = old_events(&db.pool, "order", 5, 40).await;

    let m = refused(retention::prune(&db.pool, &opts(&["order"])).await);
    assert!(m.contains("refusing to prune: 1 shard(s)"), "{m}");
    assert!(m.contains("audit/__shared__: cursor 0/0 (event 0), status idle, heartbeat "), "{m}");
    assert!(m.contains("s ago"), "the heartbeat age: {m}");
    for fix in ["consumer skip", "consumer disable", "consumer gc"] {
        assert!(m.contains(fix), "{m}");
    }
    let dry = refused(retention::prune(&db.pool, &retention::PruneOptions { dry_run: true, ..opts(&["order"]) }).await);
    assert_eq!(dry, m, "a dry run refuses the same way");
    assert_eq!(count(&db.pool).await, 5, "nothing deleted");

    // A dead shard blocks too; a disabled one does not.
    sqlx::query("UPDATE highwater.consumer_shards SET status = 'dead'").execute(&db.pool).await.unwrap();
    assert!(refused(retention::prune(&db.pool, &opts(&["order"])).await).contains("status dead"));
    ops::disable(&db.pool, "audit", None, &ops::Audit::by("test")).await.unwrap();
    let r = retention::prune(&db.pool, &opts(&["order"])).await.unwrap();
    assert_eq!(
        r.per_type,
        [retention::TypeCount { stream_type: "order".into(), count: 5, oldest_id: ids[0], newest_id: ids[4] }]
    );
    assert_eq!(count(&db.pool).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_succeeds_once_the_consumer_caught_up() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE seen (event_id bigint)").execute(&db.pool).await.unwrap();
    apply(&db.pool, &consumer("audit", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO seen VALUES ($2)'}}"))
        .await;
    old_events(&db.pool, "order", 4, 40).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "p0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM seen", 4, Duration::from_secs(20)).await;
    assert_eq!(d.terminate(Duration::from_secs(15)), Some(0));
    // Behind only on recent events, which are not candidates: no blocker.
    let recent = old_events(&db.pool, "order", 2, 0).await;

    let r = retention::prune(&db.pool, &opts(&["order"])).await.unwrap();
    assert_eq!((r.total(), r.batches), (4, 1));
    let left: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM highwater.events ORDER BY id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(left, recent);
    let _d = Dispatcher::start(&db.url, "p0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM seen", 6, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_in_batches_and_honours_stream_types_and_age() {
    let db = setup(&["Tick"]).await;
    let orders = old_events(&db.pool, "order", 10, 40).await;
    let payments = old_events(&db.pool, "payment", 3, 40).await;
    let recent = old_events(&db.pool, "order", 2, 10).await;
    let small = |dry_run| retention::PruneOptions { batch_size: 3, dry_run, ..opts(&["order"]) };

    let dry = retention::prune(&db.pool, &small(true)).await.unwrap();
    assert_eq!((dry.total(), dry.per_type.len()), (10, 1));
    assert!(dry.to_string().starts_with("would delete 10 events created before "), "{dry}");
    assert_eq!(count(&db.pool).await, 15, "a dry run deletes nothing");

    let r = retention::prune(&db.pool, &small(false)).await.unwrap();
    assert_eq!(r.batches, 4, "10 events in batches of 3");
    assert_eq!(
        r.per_type,
        [retention::TypeCount { stream_type: "order".into(), count: 10, oldest_id: orders[0], newest_id: orders[9] }]
    );
    let text = r.to_string();
    assert!(text.contains("deleted 10 events created before ") && text.contains(" in 4 batches"), "{text}");
    assert!(text.contains(&format!("\n  order: 10 events, ids {}..{}", orders[0], orders[9])), "{text}");

    // Nothing left of those types and ages; other stream types and recent events untouched.
    let r = retention::prune(&db.pool, &opts(&["order"])).await.unwrap();
    assert_eq!((r.total(), r.batches), (0, 0));
    assert!(r.to_string().starts_with("nothing to prune"), "{r}");
    let r = retention::prune(&db.pool, &retention::PruneOptions { stream_types: None, ..opts(&[]) }).await.unwrap();
    assert_eq!(r.per_type.iter().map(|t| (t.stream_type.as_str(), t.count)).collect::<Vec<_>>(), [("payment", 3)]);
    assert_eq!(r.per_type[0].newest_id, payments[2]);
    let left: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM highwater.events ORDER BY id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(left, recent);

    let m = refused(retention::prune(&db.pool, &opts(&[])).await);
    assert!(m.contains("--stream-type") && m.contains("--all-stream-types"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_in_the_middle_blocks_the_whole_prune() {
    let db = setup(&["Tick"]).await;
    apply(&db.pool, &consumer("audit", "delivery: Shared\nsink: {sql: {statement: 'SELECT 1'}}")).await;
    let ids = old_events(&db.pool, "order", 10, 40).await;
    ops::rewind_skipping(&db.pool, "audit", None, ops::RewindTo::Event(ids[5]), &ops::Audit::by("test")).await.unwrap();
    let m = refused(retention::prune(&db.pool, &retention::PruneOptions { batch_size: 2, ..opts(&["order"]) }).await);
    assert!(m.contains(&format!("event {}", ids[9])) && m.contains("audit/__shared__"), "{m}");
    assert_eq!(
        count(&db.pool).await,
        10,
        "refused before the first batch, although the shard had processed the oldest events"
    );
}

/// A per-instance consumer `late` that starts from the earliest event, none of its shards
/// registered yet, and three `order` events created 40 days ago.
async fn late_consumer_and_three_old_events() -> TestDb {
    let db = setup(&["Tick"]).await;
    apply(
        &db.pool,
        &consumer("late", "delivery: PerInstance\nstartFrom: earliest\nsink: {sql: {statement: 'SELECT 1'}}"),
    )
    .await;
    old_events(&db.pool, "order", 3, 40).await;
    db
}

/// Invariant 2, one way: a shard registered while a prune's transaction is open waits for it
/// to commit, so it can never be created between the prune's check and its delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_waits_for_a_prune_in_progress() {
    let db = late_consumer_and_three_old_events().await;
    let criteria = retention::Criteria {
        cutoff: chrono::Utc::now() - chrono::Duration::days(30),
        stream_types: Some(vec!["order".into()]),
    };
    let mut prune = db.pool.begin().await.unwrap();
    let b = retention::prune_batch(&mut prune, &criteria, 100, None).await.unwrap();
    assert_eq!(b.deleted[0].count, 3, "no shard yet: the batch deletes");

    let pool = db.pool.clone();
    let register = tokio::spawn(async move {
        let mut tx = pool.begin().await.unwrap();
        let created = shards::register(&mut tx, "late", "pod-1", None).await.unwrap();
        tx.commit().await.unwrap();
        created
    });
    wait_count(&db.pool, WAITING, 1, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!register.is_finished(), "the registration waits on the prune's SHARE lock");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumer_shards").await, 0);

    prune.commit().await.unwrap();
    assert!(tokio::time::timeout(Duration::from_secs(10), register).await.unwrap().unwrap());
    // Registered after the prune: it starts from what is left, and nothing it needs is gone.
    assert_eq!(count(&db.pool).await, 0);
}

/// Invariant 2, the other way: a prune that starts while a registration is uncommitted waits
/// for it, then sees the shard and refuses. Without the lock the prune would not see the
/// uncommitted shard and would delete the events it is about to need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_refuses_a_shard_registered_just_before_it() {
    let db = late_consumer_and_three_old_events().await;
    let mut register = db.pool.begin().await.unwrap();
    assert!(shards::register(&mut register, "late", "pod-1", None).await.unwrap());

    let pool = db.pool.clone();
    let prune = tokio::spawn(async move { retention::prune(&pool, &opts(&["order"])).await });
    wait_count(&db.pool, WAITING, 1, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!prune.is_finished(), "the prune waits for the registering transaction");

    register.commit().await.unwrap();
    let m = refused(tokio::time::timeout(Duration::from_secs(10), prune).await.unwrap().unwrap());
    assert!(m.contains("late/pod-1: cursor 0/0"), "{m}");
    assert_eq!(count(&db.pool).await, 3, "nothing deleted");
}

/// Invariant 1: a dispatcher registers its shards before its first pass, so while that pass is
/// delivering (no cursor has moved yet) the prune sees the shard and refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_refuses_while_a_starting_dispatcher_delivers() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE seen (event_id bigint)").execute(&db.pool).await.unwrap();
    apply(
        &db.pool,
        &consumer(
            "late",
            "delivery: PerInstance\nstartFrom: earliest\nbatchSize: 1\nsink: {sql: {statement: 'INSERT INTO seen SELECT $2 FROM pg_sleep(1)'}}",
        ),
    )
    .await;
    let ids = old_events(&db.pool, "order", 3, 40).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "pod-1", logs.path());
    wait_count(
        &db.pool,
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%highwater.sql_sink_apply%' AND state = 'active' AND pid <> pg_backend_pid()",
        1,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(scalar_i64(&db.pool, "SELECT cursor_id FROM highwater.consumer_shards").await, 0, "first pass");

    let m = refused(retention::prune(&db.pool, &opts(&["order"])).await);
    assert!(m.contains("late/pod-1: cursor 0/0"), "{m}");
    wait_count(&db.pool, "SELECT count(*) FROM seen", 3, Duration::from_secs(20)).await;
    let seen: Vec<i64> = sqlx::query_scalar("SELECT event_id FROM seen ORDER BY 1").fetch_all(&db.pool).await.unwrap();
    assert_eq!(seen, ids, "every event delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_prune_requires_stream_types_and_reports() {
    let db = setup(&["Tick"]).await;
    let ids = old_events(&db.pool, "order", 3, 40).await;
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin()).args(args).env("DATABASE_URL", &db.url).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _, err) = run(&["events", "prune", "--older-than", "30"]);
    assert_eq!(code, 1);
    assert!(err.contains("--stream-type") && err.contains("--all-stream-types"), "{err}");
    let (code, _, err) =
        run(&["events", "prune", "--older-than", "30", "--stream-type", "order", "--all-stream-types"]);
    assert_eq!(code, 2, "both is a usage error: {err}");
    let (code, out, err) = run(&["events", "prune", "--older-than", "30", "--stream-type", "order", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("would delete 3 events"), "{out}");
    let (code, out, err) =
        run(&["events", "prune", "--older-than", "30", "--stream-type", "order", "payment", "--batch-size", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("deleted 3 events created before ") && out.contains(" in 2 batches"), "{out}");
    assert!(out.contains(&format!("order: 3 events, ids {}..{}", ids[0], ids[2])), "{out}");
    assert_eq!(count(&db.pool).await, 0);

    apply(&db.pool, &consumer("audit", "delivery: Shared\nsink: {sql: {statement: 'SELECT 1'}}")).await;
    old_events(&db.pool, "order", 1, 40).await;
    let (code, _, err) = run(&["events", "prune", "--older-than", "30", "--all-stream-types"]);
    assert_eq!(code, 1);
    assert!(err.contains("audit/__shared__") && err.contains("consumer disable"), "{err}");
}

/// The contrast for the pre-registration invariant (like the naive reader in delivery.rs): a
/// shard registered lazily, after a prune that did not see it, has lost the events it was meant
/// to start from. `prune_refuses_while_a_starting_dispatcher_delivers` shows the same prune
/// refused when the dispatcher registers before its first pass, as it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pre_registration_a_racing_prune_would_lose_events() {
    let db = setup(&["Tick"]).await;
    apply(&db.pool, &consumer("late", "delivery: PerInstance\nstartFrom: earliest\nsink: {log: {}}")).await;
    let ids = old_events(&db.pool, "order", 3, 40).await;
    // No dispatcher has registered yet: nothing blocks the prune.
    retention::prune(&db.pool, &opts(&["order"])).await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    highwater::shards::register(&mut conn, "late", "pod-1", None).await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.events WHERE id = ANY($1)")
        .bind(&ids)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "a shard registered after the prune starts where its events no longer are");
}
