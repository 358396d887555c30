//! Partitioned Shared consumers (`partitions: N`): real dispatcher processes share the
//! partitions, keep each stream's order across SIGKILLs, take over a killed dispatcher's
//! partitions within seconds, and survive changes of N under load with nothing lost and nothing
//! applied twice. Bad partition counts are refused with nothing changed.
mod common;

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;
use sqlx::PgPool;

const APPLIED: &str = "CREATE TABLE applied (
    n bigserial PRIMARY KEY, event_id bigint NOT NULL, stream_id text NOT NULL, seq bigint NOT NULL)";

/// The SQL projection every test uses: one row per application, in application order (`n`).
fn projection(name: &str, partitions: u32, batch: u32) -> String {
    consumer(
        name,
        &format!(
            "delivery: Shared\npartitions: {partitions}\nbatchSize: {batch}\nsink: {{sql: {{statement: \
             \"INSERT INTO applied (event_id, stream_id, seq) SELECT $2, $4, ($1->>'seq')::bigint FROM pg_sleep(0.0005)\"}}}}"
        ),
    )
}

/// Appends `per_stream` events to each of `streams` streams from `writers` concurrent tasks, each
/// stream written by one task in `seq` order, one transaction per event.
async fn write(pool: &PgPool, writers: usize, streams: usize, per_stream: i64, tag: &str) -> i64 {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let pool = pool.clone();
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            for seq in 1..=per_stream {
                for s in (w..streams).step_by(writers) {
                    let mut tx = pool.begin().await.unwrap();
                    append(&mut tx, &NewEvent::new("order", &format!("{tag}-{s}"), "Tick", json!({"seq": seq})))
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (streams as i64) * per_stream
}

/// Every event applied once, and each stream's events applied in their order.
async fn assert_exactly_once_in_order(pool: &PgPool, total: i64) {
    let events = scalar_i64(pool, "SELECT count(*) FROM highwater.events").await;
    assert_eq!(events, total, "events written");
    let distinct = scalar_i64(pool, "SELECT count(DISTINCT event_id) FROM applied").await;
    let dups = scalar_i64(pool, "SELECT count(*) - count(DISTINCT event_id) FROM applied").await;
    assert_eq!(distinct, total, "every event applied");
    assert_eq!(dups, 0, "no event applied twice");
    let out_of_order = scalar_i64(
        pool,
        "SELECT count(*) FROM (
            SELECT seq, lag(seq) OVER (PARTITION BY stream_id ORDER BY n) AS prev FROM applied) x
          WHERE prev IS NOT NULL AND seq <> prev + 1",
    )
    .await;
    assert_eq!(out_of_order, 0, "each stream's events applied in order, none skipped");
}

async fn wait_applied(pool: &PgPool, total: i64, within: Duration) {
    let pool = pool.clone();
    eventually("every event applied", within, || {
        let pool = pool.clone();
        async move { scalar_i64(&pool, "SELECT count(DISTINCT event_id) FROM applied").await >= total }
    })
    .await;
}

/// `highwater_consumer_partitions_owned{consumer}` of one dispatcher, from its /metrics.
async fn owned(d: &Dispatcher, consumer: &str) -> Option<i64> {
    let body = reqwest::get(format!("http://127.0.0.1:{}/metrics", d.http_port)).await.ok()?.text().await.ok()?;
    let prefix = format!("highwater_consumer_partitions_owned{{consumer=\"{consumer}\"}} ");
    body.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}

async fn shard_ids(pool: &PgPool, consumer: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT instance_id FROM highwater.consumer_shards WHERE consumer = $1 ORDER BY instance_id")
        .bind(consumer)
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitions_are_shared_and_keep_stream_order_across_sigkills() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql(APPLIED).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection("proj", 8, 20)).await;
    assert_eq!(shard_ids(&db.pool, "proj").await.len(), 8, "one shard per partition, created on apply");

    let logs = tempfile::tempdir().unwrap();
    let mut procs: Vec<Dispatcher> =
        (0..3).map(|i| Dispatcher::start(&db.url, &format!("d{i}"), logs.path())).collect();
    // Fair shares: 8 partitions over 3 live dispatchers is 3 + 3 + 2.
    let started = Instant::now();
    loop {
        let mut shares = Vec::new();
        for p in &procs {
            shares.push(owned(p, "proj").await.unwrap_or(0));
        }
        shares.sort();
        if shares == [2, 3, 3] {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "shares never settled: {shares:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let writer = {
        let pool = db.pool.clone();
        tokio::spawn(async move { write(&pool, 4, 40, 30, "s").await })
    };
    let mut kills = 0;
    while !writer.is_finished() || kills < 4 {
        tokio::time::sleep(Duration::from_millis(rand::random_range(300..700))).await;
        let victim = rand::random_range(0..procs.len());
        procs.remove(victim).sigkill();
        kills += 1;
        procs.push(Dispatcher::start(&db.url, &format!("d-{kills}"), logs.path()));
        if kills >= 12 {
            break;
        }
    }
    let total = writer.await.unwrap();
    wait_applied(&db.pool, total, Duration::from_secs(120)).await;
    assert_exactly_once_in_order(&db.pool, total).await;
    println!("{total} events over 8 partitions, 3 dispatchers, {kills} SIGKILLs: 0 lost, 0 duplicates, order kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_dispatchers_partitions_are_taken_over_within_seconds() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql(APPLIED).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection("proj", 4, 50)).await;
    let logs = tempfile::tempdir().unwrap();
    let a = Dispatcher::start(&db.url, "d-a", logs.path());
    let b = Dispatcher::start(&db.url, "d-b", logs.path());
    let started = Instant::now();
    while !(owned(&a, "proj").await == Some(2) && owned(&b, "proj").await == Some(2)) {
        assert!(started.elapsed() < Duration::from_secs(30), "2 + 2 shares never settled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first = write(&db.pool, 2, 16, 2, "before").await;
    wait_applied(&db.pool, first, Duration::from_secs(30)).await;

    b.sigkill();
    let killed = Instant::now();
    // Events for every partition: half of them are the dead dispatcher's.
    let more = write(&db.pool, 2, 16, 2, "after").await;
    wait_applied(&db.pool, first + more, Duration::from_secs(30)).await;
    let took = killed.elapsed();
    assert_eq!(owned(&a, "proj").await, Some(4), "the survivor owns every partition");
    assert!(took < Duration::from_secs(10), "taken over in {took:?}; the liveness row ages out after 5 s");
    assert_exactly_once_in_order(&db.pool, first + more).await;
    println!("a SIGKILLed dispatcher's 2 partitions delivered by the other {took:?} after the kill");

    // A clean stop hands its partitions over at once (its row is deleted): no 5 s wait.
    let c = Dispatcher::start(&db.url, "d-c", logs.path());
    let started = Instant::now();
    while owned(&c, "proj").await != Some(2) {
        assert!(started.elapsed() < Duration::from_secs(30), "the new dispatcher never got its share");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(c.terminate(Duration::from_secs(15)), Some(0));
    let stopped = Instant::now();
    while owned(&a, "proj").await != Some(4) {
        assert!(stopped.elapsed() < Duration::from_secs(4), "a clean stop's partitions moved only after the ttl");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changing_partitions_under_load_loses_nothing_and_applies_once() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql(APPLIED).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection("proj", 1, 25)).await;
    let logs = tempfile::tempdir().unwrap();
    let mut procs: Vec<Dispatcher> =
        (0..2).map(|i| Dispatcher::start(&db.url, &format!("d{i}"), logs.path())).collect();
    let writer = {
        let pool = db.pool.clone();
        tokio::spawn(async move { write(&pool, 4, 24, 40, "s").await })
    };
    let mut changes = Vec::new();
    let mut extra = 0;
    for (step, n) in [4u32, 7, 2, 5, 1, 3].into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(600)).await;
        if step == 1 {
            // A change that must wait at its barrier: partition 0 of 4 disabled behind the others.
            let pool = db.pool.clone();
            eventually("the split of 4 in force", Duration::from_secs(30), || {
                let pool = pool.clone();
                async move { shard_ids(&pool, "proj").await.len() == 4 }
            })
            .await;
            highwater::ops::disable(&db.pool, "proj", Some("__shared__/p0of4"), &highwater::ops::Audit::by("test"))
                .await
                .unwrap();
            // Events after the disabled partition's cursor, whether or not the writers still run.
            extra += write(&db.pool, 1, 8, 1, "extra").await;
            eventually("another partition ahead of the disabled one", Duration::from_secs(30), || {
                let pool = pool.clone();
                async move {
                    scalar_i64(
                        &pool,
                        "SELECT count(*) FROM highwater.consumer_shards o, highwater.consumer_shards d
                          WHERE d.consumer = 'proj' AND d.instance_id = '__shared__/p0of4' AND o.consumer = 'proj'
                            AND (o.cursor_tx, o.cursor_id) > (d.cursor_tx, d.cursor_id)",
                    )
                    .await
                        > 0
                }
            })
            .await;
        }
        apply(&db.pool, &projection("proj", n, 25)).await;
        changes.push(n);
        if step == 1 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let rows = highwater::ops::status(&db.pool, Some("proj")).await.unwrap();
            assert_eq!(rows.len(), 4, "still the old split: {rows:?}");
            assert!(rows.iter().all(|r| r.barrier_event_id.is_some()), "{rows:?}");
            let table = highwater::render::render_table(&rows);
            assert!(table.contains("__shared__/p0of4: partitions changing to 7: delivers up to event"), "{table}");
            assert!(table.contains("(at the barrier)"), "the other partitions wait at the barrier: {table}");
            highwater::ops::enable(&db.pool, "proj", Some("__shared__/p0of4"), &highwater::ops::Audit::by("test"))
                .await
                .unwrap();
        }
        if step == 2 {
            // A dispatcher killed while a change waits at its barrier.
            procs.remove(0).sigkill();
            procs.push(Dispatcher::start(&db.url, "d-new", logs.path()));
        }
    }
    let total = writer.await.unwrap() + extra;
    wait_applied(&db.pool, total, Duration::from_secs(120)).await;
    let pool = db.pool.clone();
    eventually("the last split (3 partitions) in force", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move { shard_ids(&pool, "proj").await == ["__shared__/p0of3", "__shared__/p1of3", "__shared__/p2of3"] }
    })
    .await;
    assert_exactly_once_in_order(&db.pool, total).await;
    let barriers =
        scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumer_shards WHERE barrier_tx IS NOT NULL").await;
    assert_eq!(barriers, 0, "no barrier left once the split is in force");
    println!("{total} events through partition counts 1 → {changes:?} under load: 0 lost, 0 duplicates, order kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_partition_counts_are_refused_and_nothing_changes() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql(APPLIED).execute(&db.pool).await.unwrap();
    let refused = |yaml: String| {
        let pool = db.pool.clone();
        async move {
            match highwater::definitions::parse(&yaml, "test") {
                Err(e) => e.to_string(),
                Ok(defs) => highwater::definitions::apply(&pool, &defs).await.expect_err("refused").to_string(),
            }
        }
    };
    for (n, expect) in [(0u32, "is out of range: write a whole number from 1 to 256"), (257, "from 1 to 256")] {
        let e = refused(projection("proj", n, 10)).await;
        assert!(e.contains("partitions") && e.contains(expect), "{n}: {e}");
    }
    let e = refused(consumer("sse", "delivery: PerInstance\npartitions: 4\nsink: {log: {}}")).await;
    assert!(e.contains("partitions: 4 needs delivery: Shared"), "{e}");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumers").await, 0, "nothing applied");

    // One partition goes dead on a poison event; lowering the count is then refused.
    let poison = consumer(
        "proj",
        "delivery: Shared\npartitions: 4\nmaxAttempts: 1\nsink: {sql: {statement: \
         \"INSERT INTO applied (event_id, stream_id, seq) SELECT $2, $4, 1 / (($1->>'seq')::int - 13)\"}}",
    );
    apply(&db.pool, &poison).await;
    let total = write(&db.pool, 2, 8, 14, "s").await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    wait_count(
        &db.pool,
        "SELECT count(*) FROM highwater.consumer_shards WHERE consumer = 'proj' AND status = 'dead'",
        1,
        Duration::from_secs(60),
    )
    .await;
    // Stopped, so that only the refused apply could change the shards below.
    assert_eq!(d.terminate(Duration::from_secs(15)), Some(0));
    let before: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT instance_id, status, cursor_id FROM highwater.consumer_shards WHERE consumer = 'proj' ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let lowered = poison.replace("partitions: 4", "partitions: 2");
    let e = refused(lowered).await;
    assert!(
        e.contains("partitions cannot change from 4 to 2 while a partition is dead")
            && e.contains("__shared__/p")
            && e.contains("consumer restart proj --instance"),
        "{e}"
    );
    let after: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT instance_id, status, cursor_id FROM highwater.consumer_shards WHERE consumer = 'proj' ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(before, after, "no shard changed");
    let (partitions, spec_n): (i32, Option<i64>) =
        sqlx::query_as("SELECT partitions, (spec->>'partitions')::bigint FROM highwater.consumers WHERE name = 'proj'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((partitions, spec_n), (4, Some(4)), "the stored definition is unchanged");
    let barriers =
        scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumer_shards WHERE barrier_tx IS NOT NULL").await;
    assert_eq!(barriers, 0, "no barrier set");
    assert!(total > 0);

    // A dispatcher instance id that names a partition is refused.
    let out = std::process::Command::new(bin())
        .args(["dispatch", "--instance-id", "__shared__/p0of4", "--listen", "off"])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is reserved"), "{err}");
}

/// Partition of a stream: the SQL function, and the same streams always in the same shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_always_maps_to_one_partition() {
    let db = setup(&["Tick"]).await;
    let rows: Vec<(String, i32, i32)> = sqlx::query_as(
        "SELECT s, highwater.stream_partition('order', s, 8), highwater.stream_partition('order', s, 8)
           FROM (SELECT 'o-' || g AS s FROM generate_series(1, 2000) g) x",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut per: HashMap<i32, usize> = HashMap::new();
    for (s, a, b) in &rows {
        assert_eq!(a, b, "{s}");
        assert!((0..8).contains(a), "{s}: {a}");
        *per.entry(*a).or_default() += 1;
    }
    assert_eq!(per.len(), 8, "every partition used");
    assert!(per.values().all(|n| (150..=350).contains(n)), "spread evenly: {per:?}");
    // The unit separator keeps (type, id) pairs apart that a plain concatenation would merge.
    let (x, y): (i64, i64) = sqlx::query_as(
        "SELECT hashtextextended('a' || E'\\x1f' || 'b/c', 0), hashtextextended('a/b' || E'\\x1f' || 'c', 0)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_ne!(x, y);
}

/// `consumer status` counts each partition's own events (the lags add up to the backlog, not N
/// times it), and read-your-writes waits for every partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_read_your_writes_count_each_partitions_own_events() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql(APPLIED).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection("proj", 4, 10)).await;
    let total = write(&db.pool, 2, 12, 5, "s").await;
    let token = highwater::token(&mut db.pool.acquire().await.unwrap()).await.unwrap();
    let rows = highwater::ops::status(&db.pool, Some("proj")).await.unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r.instance_id.as_str()).collect();
    assert_eq!(ids, ["__shared__/p0of4", "__shared__/p1of4", "__shared__/p2of4", "__shared__/p3of4"]);
    assert_eq!(rows.iter().map(|r| r.lag_events).sum::<i64>(), total, "{rows:?}");
    assert!(rows.iter().all(|r| r.lag_events > 0), "12 streams reach every partition: {rows:?}");
    let table = highwater::render::render_table(&rows);
    assert!(table.contains("__shared__/p3of4"), "{table}");
    assert!(!highwater::applied::applied(&db.pool, "proj", token, None).await.unwrap(), "nothing delivered yet");

    // Ops address one partition with --instance, or every partition without it.
    let e = highwater::ops::disable(&db.pool, "proj", Some("d0"), &highwater::ops::Audit::by("test"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("partitioned") && e.contains("no instance \"d0\""), "{e}");
    let t = highwater::ops::disable(&db.pool, "proj", Some("__shared__/p1of4"), &highwater::ops::Audit::by("test"))
        .await
        .unwrap();
    assert_eq!(t.len(), 1);

    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "d0", logs.path());
    let pool = db.pool.clone();
    wait_count(
        &db.pool,
        "SELECT count(*) FROM highwater.consumer_shards WHERE consumer = 'proj' AND status = 'idle'
            AND cursor_id = (SELECT max(id) FROM highwater.events)",
        3,
        Duration::from_secs(30),
    )
    .await;
    assert!(
        !highwater::applied::applied(&db.pool, "proj", token, None).await.unwrap(),
        "a disabled partition holds the token back"
    );
    assert_eq!(
        highwater::ops::enable(&db.pool, "proj", None, &highwater::ops::Audit::by("test")).await.unwrap().len(),
        1,
        "only the disabled one"
    );
    eventually("the token applied on every partition", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move { highwater::applied::applied(&pool, "proj", token, None).await.unwrap() }
    })
    .await;
    assert_eq!(scalar_i64(&db.pool, "SELECT count(DISTINCT event_id) FROM applied").await, total);
    let rows = highwater::ops::status(&db.pool, Some("proj")).await.unwrap();
    assert_eq!(rows.iter().map(|r| r.lag_events).sum::<i64>(), 0);
}
