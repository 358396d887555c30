//! The group pass (issue 46): the SQL-sink consumers of a dispatcher whose passes are due together
//! are claimed, read and applied once, in one transaction, and its external-sink consumers are
//! delivered from the same read, their cursors moved together. Each consumer still gets exactly
//! its events, in order, once; one consumer's failure is its attempt alone; a consumer far behind
//! catches up on its own reads; and SIGKILLs during a drain lose and repeat nothing.
mod common;

use std::{collections::HashMap, time::Duration};

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;
use sqlx::PgPool;

const TYPES: usize = 12;

fn type_name(t: usize) -> String {
    format!("T{t}")
}

/// Consumer `c{k}` selects two types (`T{k % 12}` and `T{(k + 5) % 12}`), so types overlap
/// between consumers; `all` selects every type. Each writes its events to `proj` under its own
/// name, `seq` recording the order of application.
fn consumers(n: usize, batch: u32, extra: &str) -> String {
    let statement = "INSERT INTO proj (consumer, event_id) VALUES (current_setting('highwater.consumer'), $2)";
    let mut docs: String = (0..n)
        .map(|k| {
            consumer(
                &format!("c{k}"),
                &format!(
                    "delivery: Shared\nbatchSize: {batch}\neventTypes: [{}, {}]\n{extra}sink:\n  sql:\n    statement: \"{statement}\"",
                    type_name(k % TYPES),
                    type_name((k + 5) % TYPES)
                ),
            )
        })
        .collect();
    docs.push_str(&consumer(
        "all",
        &format!("delivery: Shared\nbatchSize: {batch}\n{extra}sink:\n  sql:\n    statement: \"{statement}\""),
    ));
    docs
}

async fn setup_group() -> TestDb {
    let types: Vec<String> = (0..TYPES).map(type_name).collect();
    let types: Vec<&str> = types.iter().map(String::as_str).collect();
    let db = shared(&types).await;
    sqlx::raw_sql(
        "CREATE TABLE proj (consumer text NOT NULL, event_id bigint NOT NULL, seq bigserial,
                            PRIMARY KEY (consumer, event_id))",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    db
}

/// Appends `count` events over the types in transactions of `per_tx` events; returns
/// `(id, type)` in append order (which is `(tx_id, id)` order: one writer).
async fn append_events(pool: &PgPool, count: usize, per_tx: usize, salt: usize) -> Vec<(i64, String)> {
    let mut out = Vec::with_capacity(count);
    let mut i = 0;
    while i < count {
        let mut tx = pool.begin().await.unwrap();
        for _ in 0..per_tx.min(count - i) {
            let t = type_name((i * 7 + salt) % TYPES);
            let e = NewEvent::new("s", &format!("s{}", i % 17), &t, json!({"i": i}));
            out.push((append(&mut tx, &e).await.unwrap(), t));
            i += 1;
        }
        tx.commit().await.unwrap();
    }
    out
}

/// What each consumer must have received, in order.
fn expected(n: usize, events: &[(i64, String)]) -> HashMap<String, Vec<i64>> {
    let mut want: HashMap<String, Vec<i64>> = HashMap::new();
    for k in 0..n {
        let types = [type_name(k % TYPES), type_name((k + 5) % TYPES)];
        want.insert(format!("c{k}"), events.iter().filter(|(_, t)| types.contains(t)).map(|(id, _)| *id).collect());
    }
    want.insert("all".into(), events.iter().map(|(id, _)| *id).collect());
    want
}

/// Each consumer's applied events in the order they were applied.
async fn applied(pool: &PgPool) -> HashMap<String, Vec<i64>> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT consumer, event_id FROM proj ORDER BY seq").fetch_all(pool).await.unwrap();
    let mut got: HashMap<String, Vec<i64>> = HashMap::new();
    for (c, id) in rows {
        got.entry(c).or_default().push(id);
    }
    got
}

async fn wait_applied(pool: &PgPool, total: i64) {
    let pool = pool.clone();
    eventually("every consumer's events to be applied", Duration::from_secs(120), || {
        let pool = pool.clone();
        async move { scalar_i64(&pool, "SELECT count(*) FROM proj").await >= total }
    })
    .await;
}

/// A value of the dispatcher's `/metrics` (0 when the series is absent).
async fn metric(port: u16, series: &str) -> f64 {
    let body = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0.0)
}

fn assert_each_got_exactly_its_events(want: &HashMap<String, Vec<i64>>, got: &HashMap<String, Vec<i64>>) {
    for (c, ids) in want {
        let empty = Vec::new();
        let had = got.get(c).unwrap_or(&empty);
        assert_eq!(had.len(), ids.len(), "{c}: {} events applied, {} expected", had.len(), ids.len());
        assert!(had == ids, "{c}: events applied out of order or not its own");
    }
}

/// 40 consumers of overlapping types and one of every type, events appended one, three and 500
/// per transaction while the dispatcher runs: every consumer gets exactly its events in order,
/// and the passes went through the group (several shards per group pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_consumers_share_passes_and_each_gets_exactly_its_events_in_order() {
    let n = 40;
    let db = setup_group().await;
    apply(&db.pool, &consumers(n, 100, "")).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    d.serving().await;
    let mut events = append_events(&db.pool, 600, 1, 0).await;
    events.extend(append_events(&db.pool, 900, 3, 1).await);
    events.extend(append_events(&db.pool, 1500, 500, 2).await);
    let want = expected(n, &events);
    let total: i64 = want.values().map(|v| v.len() as i64).sum();
    wait_applied(&db.pool, total).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_each_got_exactly_its_events(&want, &applied(&db.pool).await);

    let delivered = metric(d.http_port, "highwater_group_pass_shards_total{outcome=\"delivered\",sink=\"sql\"}").await;
    let passes = metric(d.http_port, "highwater_group_passes_total").await;
    assert!(delivered > 0.0, "batches were delivered through the group");
    assert!(
        delivered >= 4.0 * passes,
        "a group pass serves many shards at once: {delivered} deliveries in {passes} group passes"
    );
    // Every cursor reaches the head (a consumer with none of the last events' types within the
    // lazy cursor's interval).
    let pool = db.pool.clone();
    eventually("every cursor at the head", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move {
            scalar_i64(
                &pool,
                "SELECT count(*) FROM highwater.consumer_shards s
                  WHERE (s.cursor_tx, s.cursor_id)
                        < (SELECT tx_id, id FROM highwater.events ORDER BY tx_id DESC, id DESC LIMIT 1)",
            )
            .await
                == 0
        }
    })
    .await;
    let counted = scalar_i64(&db.pool, "SELECT sum(delivered_count)::bigint FROM highwater.consumer_shards").await;
    assert_eq!(counted, total, "each shard counts what it delivered");
    d.terminate(Duration::from_secs(20));
}

/// One consumer of the group divides by zero on one event: it alone counts attempts and halts on
/// that event, with exactly the events before it applied; the others deliver everything and never
/// count an attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_consumer_s_failure_is_its_attempt_alone() {
    let db = setup_group().await;
    let ok = "INSERT INTO proj (consumer, event_id) VALUES (current_setting('highwater.consumer'), $2)";
    let bad =
        "INSERT INTO proj (consumer, event_id) VALUES (current_setting('highwater.consumer'), $2 / (($1->>'n')::int))";
    let spec = |statement: &str| {
        format!(
            "delivery: Shared\nbatchSize: 50\nmaxAttempts: 3\nbackoff: {{initial: 50ms, max: 100ms}}\neventTypes: [T0]\nsink:\n  sql:\n    statement: \"{statement}\""
        )
    };
    let mut docs: String = (0..8).map(|k| consumer(&format!("good{k}"), &spec(ok))).collect();
    docs.push_str(&consumer("bad", &spec(bad)));
    apply(&db.pool, &docs).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    d.serving().await;
    let mut ids = Vec::new();
    for i in 0..120 {
        let n = if i == 70 { 0 } else { 1 };
        let mut tx = db.pool.begin().await.unwrap();
        ids.push(append(&mut tx, &NewEvent::new("s", &format!("s{}", i % 5), "T0", json!({"n": n}))).await.unwrap());
        tx.commit().await.unwrap();
    }
    let pool = db.pool.clone();
    eventually("bad to be dead", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            scalar_i64(
                &pool,
                "SELECT count(*) FROM highwater.consumer_shards WHERE consumer = 'bad' AND status = 'dead'",
            )
            .await
                == 1
        }
    })
    .await;
    wait_applied(&db.pool, 8 * 120 + 70).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = applied(&db.pool).await;
    for k in 0..8 {
        assert_eq!(got[&format!("good{k}")], ids, "good{k} got every event in order");
    }
    assert_eq!(got["bad"], ids[..70].to_vec(), "bad applied exactly the events before the poison one");
    let (attempts, failing, cursor_id): (i32, Option<i64>, i64) = sqlx::query_as(
        "SELECT attempts, failing_event_id, cursor_id FROM highwater.consumer_shards WHERE consumer = 'bad'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((attempts, failing, cursor_id), (3, Some(ids[70]), ids[69]), "bad halted on the poison event");
    let others: i64 = scalar_i64(
        &db.pool,
        "SELECT count(*) FROM highwater.consumer_shards
          WHERE consumer LIKE 'good%' AND (attempts <> 0 OR last_error IS NOT NULL OR status <> 'idle')",
    )
    .await;
    assert_eq!(others, 0, "no other consumer counted an attempt");
    assert!(metric(d.http_port, "highwater_group_pass_shards_total{outcome=\"failed\",sink=\"sql\"}").await >= 1.0);
    // Every failed attempt counts as a sink error, the group's as the shard's own pass's.
    let errors = metric(d.http_port, "highwater_sink_errors_total{consumer=\"bad\",sink=\"sql\"}").await;
    assert_eq!(errors, 3.0, "bad's three failed attempts are sink errors");
    d.terminate(Duration::from_secs(20));
}

/// A consumer added with `startFrom: earliest` after 12,000 events is far behind the group at
/// the head, further than one read of a group pass reaches (10,000 events): the pass serves it
/// with one read and the others, ahead of it, with a second, so nobody waits for it to catch up
/// and it gets every event of its type, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_far_behind_does_not_hold_the_group_back() {
    let n = 6;
    let db = setup_group().await;
    apply(&db.pool, &consumers(n, 100, "")).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    d.serving().await;
    let mut events = append_events(&db.pool, 12_000, 500, 0).await;
    let first = expected(n, &events).values().map(|v| v.len() as i64).sum();
    wait_applied(&db.pool, first).await;
    let late = "INSERT INTO proj (consumer, event_id) VALUES ('late', $2)";
    apply(
        &db.pool,
        &consumer(
            "late",
            &format!("delivery: Shared\nstartFrom: earliest\nbatchSize: 100\neventTypes: [T3]\nsink:\n  sql:\n    statement: \"{late}\""),
        ),
    )
    .await;
    for round in 0..5 {
        events.extend(append_events(&db.pool, 40, 1, round).await);
    }
    let mut want = expected(n, &events);
    want.insert("late".into(), events.iter().filter(|(_, t)| t == "T3").map(|(id, _)| *id).collect());
    let total: i64 = want.values().map(|v| v.len() as i64).sum();
    wait_applied(&db.pool, total).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_each_got_exactly_its_events(&want, &applied(&db.pool).await);
    let (reads, passes) = (
        metric(d.http_port, "highwater_group_pass_reads_total").await,
        metric(d.http_port, "highwater_group_passes_total").await,
    );
    assert!(reads > passes, "a pass read twice: the laggard's read and the others' ({reads} reads, {passes} passes)");
    d.terminate(Duration::from_secs(20));
}

/// SIGKILL the dispatcher four times while 30 consumers drain 6,000 events appended 500 per
/// transaction through group passes: after a last dispatcher finishes, every consumer has each of
/// its events exactly once (the projection's primary key would refuse a second application, and
/// the count and order show nothing is missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkills_during_group_passes_lose_and_repeat_nothing() {
    let n = 30;
    let db = setup_group().await;
    apply(&db.pool, &consumers(n, 50, "")).await;
    let events = append_events(&db.pool, 6000, 500, 0).await;
    let want = expected(n, &events);
    let total: i64 = want.values().map(|v| v.len() as i64).sum();
    let logs = tempfile::tempdir().unwrap();
    for round in 0..4 {
        let d = Dispatcher::start(&db.url, &format!("d{round}"), logs.path());
        let before = scalar_i64(&db.pool, "SELECT count(*) FROM proj").await;
        let pool = db.pool.clone();
        // Killed once it has applied something of this round, mid-drain.
        eventually("progress before the kill", Duration::from_secs(60), || {
            let pool = pool.clone();
            async move { scalar_i64(&pool, "SELECT count(*) FROM proj").await > before }
        })
        .await;
        d.sigkill();
    }
    let applied_before_last = scalar_i64(&db.pool, "SELECT count(*) FROM proj").await;
    assert!(applied_before_last < total, "the kills landed mid-drain ({applied_before_last} of {total})");
    let d = Dispatcher::start(&db.url, "last", logs.path());
    wait_applied(&db.pool, total).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_each_got_exactly_its_events(&want, &applied(&db.pool).await);
    d.terminate(Duration::from_secs(20));
}

/// SQL and external consumers in one group: 12 log-sink consumers of overlapping types, 6 SQL
/// ones and a webhook whose receiver does not exist. The log files hold exactly each consumer's
/// events, in order, once; the passes went through the group, external members included; the
/// webhook alone counts its attempts, and dies on its first event, with nobody else affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_sinks_share_the_group_s_reads_and_fail_alone() {
    let db = setup_group().await;
    let out = tempfile::tempdir().unwrap();
    let n_sql = 6;
    let mut docs = consumers(n_sql, 100, "");
    let log_types = |k: usize| [type_name(k % TYPES), type_name((k + 3) % TYPES)];
    for k in 0..12 {
        let [a, b] = log_types(k);
        let target = out.path().join(format!("log{k}.jsonl"));
        docs.push_str(&consumer(
            &format!("log{k}"),
            &format!(
                "delivery: Shared\nbatchSize: 100\neventTypes: [{a}, {b}]\nsink: {{log: {{target: '{}'}}}}",
                target.display()
            ),
        ));
    }
    let port = highwater::embedded::free_port().unwrap();
    docs.push_str(&consumer(
        "hook",
        &format!(
            "delivery: Shared\nmaxAttempts: 2\nbackoff: {{initial: 50ms, max: 100ms}}\neventTypes: [T0]\nsink: {{webhook: {{url: 'http://127.0.0.1:{port}/in', timeout: 2s}}}}"
        ),
    ));
    apply(&db.pool, &docs).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    d.serving().await;
    let mut events = append_events(&db.pool, 600, 1, 0).await;
    events.extend(append_events(&db.pool, 600, 3, 1).await);
    events.extend(append_events(&db.pool, 1000, 500, 2).await);

    let want = expected(n_sql, &events);
    wait_applied(&db.pool, want.values().map(|v| v.len() as i64).sum()).await;
    let read = |k: usize| -> Vec<i64> {
        std::fs::read_to_string(out.path().join(format!("log{k}.jsonl")))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"]["id"].as_i64().unwrap())
            .collect()
    };
    let log_want: Vec<Vec<i64>> =
        (0..12).map(|k| events.iter().filter(|(_, t)| log_types(k).contains(t)).map(|(id, _)| *id).collect()).collect();
    eventually("every log consumer's events", Duration::from_secs(120), || async {
        (0..12).all(|k| read(k).len() >= log_want[k].len())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (k, ids) in log_want.iter().enumerate() {
        assert!(read(k) == *ids, "log{k}: exactly its {} events, in order, once", ids.len());
    }
    assert_each_got_exactly_its_events(&want, &applied(&db.pool).await);

    let first_t0 = events.iter().find(|(_, t)| t == "T0").unwrap().0;
    let pool = db.pool.clone();
    eventually("hook to be dead", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            scalar_i64(
                &pool,
                "SELECT count(*) FROM highwater.consumer_shards WHERE consumer = 'hook' AND status = 'dead'",
            )
            .await
                == 1
        }
    })
    .await;
    let (attempts, failing, cursor_id): (i32, Option<i64>, i64) = sqlx::query_as(
        "SELECT attempts, failing_event_id, cursor_id FROM highwater.consumer_shards WHERE consumer = 'hook'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((attempts, failing, cursor_id), (2, Some(first_t0), 0), "hook halted on its first event");
    let others = scalar_i64(
        &db.pool,
        "SELECT count(*) FROM highwater.consumer_shards WHERE consumer <> 'hook' AND (attempts <> 0 OR status <> 'idle')",
    )
    .await;
    assert_eq!(others, 0, "no other consumer counted an attempt");
    // The log consumers' batches went through the group: at least one per consumer (each has a
    // few hundred events: several batches), beside the SQL consumers' in the same passes.
    let logged = metric(d.http_port, "highwater_group_pass_shards_total{outcome=\"delivered\",sink=\"log\"}").await;
    assert!(logged >= 12.0, "external members delivered through the group: {logged}");
    let passes = metric(d.http_port, "highwater_group_passes_total").await;
    let sql = metric(d.http_port, "highwater_group_pass_shards_total{outcome=\"delivered\",sink=\"sql\"}").await;
    assert!(logged + sql >= 4.0 * passes, "a pass serves many of them: {logged} + {sql} in {passes} passes");
    let errors = metric(d.http_port, "highwater_sink_errors_total{consumer=\"hook\",sink=\"webhook\"}").await;
    assert_eq!(errors, 2.0, "the webhook's two failed attempts are sink errors");
    d.terminate(Duration::from_secs(20));
}
