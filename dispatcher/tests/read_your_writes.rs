//! Read-your-writes (docs/read-your-writes.md): the token a write returns, and waiting until a
//! consumer has applied it, never early, through Rust, SQL, the CLI and HTTP.
mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use common::*;
use highwater::{NewEvent, Token, Waited, Xid8, append_position, shards, wait_applied, wait_applied_on};
use serde_json::json;
use sqlx::PgPool;

const PROJECTION: &str = "CREATE TABLE seen (event_id bigint PRIMARY KEY, writer int, n int)";

fn projection_consumer(name: &str, extra: &str) -> String {
    consumer(
        name,
        &format!(
            "delivery: Shared\nbatchSize: 500\n{extra}sink:\n  sql:\n    statement: \"INSERT INTO seen VALUES ($2, ($1->>'w')::int, ($1->>'n')::int)\""
        ),
    )
}

async fn seen(pool: &PgPool, id: i64) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM seen WHERE event_id = $1)").bind(id).fetch_one(pool).await.unwrap()
}

/// Appends one event in its own transaction and returns its id and the transaction's token.
async fn write(pool: &PgPool, w: i64, n: i64) -> (i64, Token) {
    let mut tx = pool.begin().await.unwrap();
    let a =
        append_position(&mut tx, &NewEvent::new("w", &w.to_string(), "Wrote", json!({"w": w, "n": n}))).await.unwrap();
    let token = highwater::token(&mut tx).await.unwrap();
    assert_eq!(token, a.token, "the token after the last append is the one it returned");
    tx.commit().await.unwrap();
    (a.position.id, token)
}

/// A versioned event whose tx_id stream order raised above its transaction's own id: the token
/// (SQL `highwater.token()`, Rust `append_position`) covers the raised tx_id, where the bare
/// transaction id would not; a savepoint rolled back takes its raise with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_covers_a_raised_stream_order_tx_id() {
    let db = setup(&["Wrote"]).await;
    // A takes its transaction id first...
    let mut a = db.pool.begin().await.unwrap();
    let own: Xid8 = sqlx::query_scalar("SELECT pg_current_xact_id()").fetch_one(&mut *a).await.unwrap();
    // ... B appends version 1 with a larger id and commits ...
    let mut b = db.pool.begin().await.unwrap();
    let mut v1 = NewEvent::new("s", "1", "Wrote", json!({}));
    v1.expected_version = Some(0);
    let b_pos = append_position(&mut b, &v1).await.unwrap();
    b.commit().await.unwrap();
    assert!(b_pos.position.tx > own.0);
    // ... then A appends version 2: its tx_id is raised to B's.
    let mut v2 = NewEvent::new("s", "1", "Wrote", json!({}));
    v2.expected_version = Some(1);
    let a_pos = append_position(&mut a, &v2).await.unwrap();
    assert_eq!(a_pos.position.tx, b_pos.position.tx, "stream order raised the tx_id");
    assert_eq!(a_pos.token.xid8().0, b_pos.position.tx, "the token covers the raised tx_id");
    assert!(a_pos.token.xid8() > own, "the bare transaction id would not cover it");
    let sql_token: Xid8 = sqlx::query_scalar("SELECT highwater.token()").fetch_one(&mut *a).await.unwrap();
    assert_eq!(sql_token, a_pos.token.xid8());
    a.rollback().await.unwrap();

    // A raise inside a savepoint that is rolled back is forgotten with its row.
    let mut c = db.pool.begin().await.unwrap();
    let own: Xid8 = sqlx::query_scalar("SELECT pg_current_xact_id()").fetch_one(&mut *c).await.unwrap();
    let mut d = db.pool.begin().await.unwrap();
    let mut v2 = NewEvent::new("s", "1", "Wrote", json!({}));
    v2.expected_version = Some(1);
    append_position(&mut d, &v2).await.unwrap();
    d.commit().await.unwrap();
    sqlx::query("SAVEPOINT sp").execute(&mut *c).await.unwrap();
    let mut v3 = NewEvent::new("s", "1", "Wrote", json!({}));
    v3.expected_version = Some(2);
    let raised = append_position(&mut c, &v3).await.unwrap();
    assert!(raised.token.xid8() > own);
    sqlx::query("ROLLBACK TO SAVEPOINT sp").execute(&mut *c).await.unwrap();
    let t: Xid8 = sqlx::query_scalar("SELECT highwater.token()").fetch_one(&mut *c).await.unwrap();
    assert_eq!(t, own, "after the rollback only the transaction's own id remains");
    c.rollback().await.unwrap();

    // Without a write, the token covers everything committed so far and assigns no id.
    let mut e = db.pool.begin().await.unwrap();
    let t: Xid8 = sqlx::query_scalar("SELECT highwater.token()").fetch_one(&mut *e).await.unwrap();
    let assigned: Option<Xid8> =
        sqlx::query_scalar("SELECT pg_current_xact_id_if_assigned()").fetch_one(&mut *e).await.unwrap();
    assert_eq!(assigned, None);
    assert!(t.0 >= raised.position.tx.max(b_pos.position.tx));
    e.rollback().await.unwrap();
}

/// Concurrent writers each commit, wait with their token, then read their own row from the SQL
/// projection: 0 stale reads over 10,000 writes, a share of them versioned appends on hot
/// streams (stream order raises their tx_ids). The waits share one hub: statements per write
/// reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_your_writes_under_load_has_no_stale_read() {
    let db = setup(&["Wrote"]).await;
    sqlx::raw_sql(PROJECTION).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection_consumer("seen", "")).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "ryw-0", logs.path());

    const WRITERS: i64 = 40;
    const PER_WRITER: i64 = 250;
    let stale = Arc::new(AtomicU64::new(0));
    let raised = Arc::new(AtomicU64::new(0));
    let hub = highwater::wait::hub(&db.pool);
    let (q0, n0) = (hub.queries(), hub.notifications());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (pool, stale, raised) = (db.pool.clone(), stale.clone(), raised.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..PER_WRITER {
                let (id, token) =
                    if n % 5 == 0 { hot_write(&pool, w, n, &raised).await } else { write(&pool, w, n).await };
                let r = wait_applied(&pool, "seen", token, Duration::from_secs(30)).await.unwrap();
                assert_eq!(r, Waited::Applied, "writer {w} write {n}");
                if !seen(&pool, id).await {
                    stale.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let writes = (WRITERS * PER_WRITER) as u64;
    let (queries, notes) = (hub.queries() - q0, hub.notifications() - n0);
    println!(
        "{writes} writes in {:?}: {} stale reads; {} versioned writes with a raised tx_id; \
         hub statements {queries} ({:.3} per write), notifications {notes}",
        started.elapsed(),
        stale.load(Ordering::Relaxed),
        raised.load(Ordering::Relaxed),
        queries as f64 / writes as f64
    );
    assert_eq!(stale.load(Ordering::Relaxed), 0, "stale reads");
    // At most one statement per notification (a cursor advance), plus the 500 ms poll and the
    // first look: never one per waiter.
    let polls = started.elapsed().as_millis() as u64 / 500 + 1;
    assert!(queries <= notes + polls + 2, "{queries} statements > {notes} notifications + {polls} polls");
}

/// A versioned append on one of 4 hot streams, with the transaction id taken first (business rows
/// written before the event): stream order raises the tx_id whenever another writer appended
/// the previous version meanwhile. Retries on a version conflict.
async fn hot_write(pool: &PgPool, w: i64, n: i64, raised: &AtomicU64) -> (i64, Token) {
    loop {
        let mut tx = pool.begin().await.unwrap();
        let own: Xid8 = sqlx::query_scalar("SELECT pg_current_xact_id()").fetch_one(&mut *tx).await.unwrap();
        let stream = (n / 5 % 4).to_string();
        let v: Option<i64> = sqlx::query_scalar(
            "SELECT max(stream_version) FROM highwater.events WHERE stream_type = 'hot' AND stream_id = $1",
        )
        .bind(&stream)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        let mut ev = NewEvent::new("hot", &stream, "Wrote", json!({"w": w, "n": n}));
        ev.expected_version = Some(v.unwrap_or(0));
        match append_position(&mut tx, &ev).await {
            Ok(a) => {
                if a.position.tx > own.0 {
                    raised.fetch_add(1, Ordering::Relaxed);
                }
                tx.commit().await.unwrap();
                return (a.position.id, a.token);
            }
            Err(highwater::Error::VersionConflict { .. }) => {
                tx.rollback().await.unwrap();
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// The same through `GET /v1/consumers/NAME/applied`: 2,000 writes by concurrent writers, each
/// read after a 200 finds its row; wrong bearer tokens get 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_your_writes_through_http_has_no_stale_read() {
    let db = setup(&["Wrote"]).await;
    sqlx::raw_sql(PROJECTION).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection_consumer("seen", "")).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(&db.url, "ryw-h", logs.path(), &[("HIGHWATER_SSE_TOKENS", "tok")]);
    let base = format!("http://127.0.0.1:{}/v1/consumers/seen/applied", d.http_port);
    let client = reqwest::Client::new();
    eventually("the dispatcher to serve HTTP", Duration::from_secs(30), || {
        let (client, url) = (client.clone(), format!("http://127.0.0.1:{}/readyz", d.http_port));
        async move { client.get(url).send().await.is_ok_and(|r| r.status().is_success()) }
    })
    .await;
    let unauth = client.get(format!("{base}?after=5")).send().await.unwrap();
    assert_eq!(unauth.status(), 401);

    let stale = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..20 {
        let (pool, stale, client, base) = (db.pool.clone(), stale.clone(), client.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..100 {
                let (id, token) = write(&pool, w, n).await;
                let r =
                    client.get(format!("{base}?after={token}&timeout=30s")).bearer_auth("tok").send().await.unwrap();
                assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
                if !seen(&pool, id).await {
                    stale.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(stale.load(Ordering::Relaxed), 0, "stale reads through HTTP");
}

/// Never early: a transaction with a smaller id left open across the wait holds it (its event,
/// committed later, is covered by the token), until it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_holds_while_a_smaller_transaction_is_open() {
    let db = setup(&["Wrote"]).await;
    sqlx::raw_sql(PROJECTION).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection_consumer("seen", "")).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "ryw-o", logs.path());

    let mut early = db.pool.begin().await.unwrap();
    let early_xid: Xid8 = sqlx::query_scalar("SELECT pg_current_xact_id()").fetch_one(&mut *early).await.unwrap();
    let (late_id, token) = write(&db.pool, 1, 1).await;
    assert!(token.xid8() > early_xid);
    let r = wait_applied(&db.pool, "seen", token, Duration::from_millis(1500)).await.unwrap();
    assert!(matches!(r, Waited::TimedOut { .. }), "{r:?}");
    let sql: bool = sqlx::query_scalar("SELECT highwater.applied('seen', $1)")
        .bind(token.xid8())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!sql, "SQL agrees");
    assert!(!seen(&db.pool, late_id).await, "the fence held delivery back too");

    // The open transaction appends (its event is covered by the token: smaller id) and commits.
    let early_ev =
        append_position(&mut early, &NewEvent::new("w", "0", "Wrote", json!({"w": 0, "n": 0}))).await.unwrap();
    let waiter = tokio::spawn({
        let pool = db.pool.clone();
        async move { wait_applied(&pool, "seen", token, Duration::from_secs(20)).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "still open: still waiting");
    early.commit().await.unwrap();
    assert_eq!(waiter.await.unwrap(), Waited::Applied);
    assert!(seen(&db.pool, late_id).await && seen(&db.pool, early_ev.position.id).await);
}

/// Never early: a consumer without a shard yet, then with a shard just registered (cursor before
/// every event) but no dispatcher, is not applied; it is once a dispatcher delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_holds_for_a_consumer_not_started_or_just_registered() {
    let db = setup(&["Wrote"]).await;
    sqlx::raw_sql(PROJECTION).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection_consumer("seen", "")).await;
    // `consumer apply` registers the shared shard; without it (as before any registration):
    sqlx::query("DELETE FROM highwater.consumer_shards").execute(&db.pool).await.unwrap();
    let (id, token) = write(&db.pool, 1, 1).await;
    let r = wait_applied(&db.pool, "seen", token, Duration::from_millis(800)).await.unwrap();
    let Waited::TimedOut { pending } = r else { panic!("no shard yet, yet applied") };
    assert!(pending.contains("no shard yet"), "{pending}");

    let mut conn = db.pool.acquire().await.unwrap();
    shards::register(&mut conn, "seen", "__shared__", None).await.unwrap();
    drop(conn);
    let r = wait_applied(&db.pool, "seen", token, Duration::from_millis(800)).await.unwrap();
    assert!(matches!(r, Waited::TimedOut { .. }), "just registered, nothing delivered: {r:?}");

    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "ryw-r", logs.path());
    assert_eq!(wait_applied(&db.pool, "seen", token, Duration::from_secs(30)).await.unwrap(), Waited::Applied);
    assert!(seen(&db.pool, id).await);
}

/// A consumer filtered to other types has nothing to wait for: applied at once, even with no
/// dispatcher running (its shard registered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_at_once_for_a_consumer_of_other_types() {
    let db = setup(&["Wrote", "Other"]).await;
    sqlx::raw_sql(PROJECTION).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection_consumer("others", "eventTypes: [Other]\n")).await;
    let mut conn = db.pool.acquire().await.unwrap();
    shards::register(&mut conn, "others", "__shared__", None).await.unwrap();
    drop(conn);
    let (_, token) = write(&db.pool, 1, 1).await;
    let started = Instant::now();
    assert_eq!(wait_applied(&db.pool, "others", token, Duration::from_secs(5)).await.unwrap(), Waited::Applied);
    assert!(started.elapsed() < Duration::from_secs(1), "at once: {:?}", started.elapsed());

    // An event of its type is waited for, though.
    let mut tx = db.pool.begin().await.unwrap();
    let a = append_position(&mut tx, &NewEvent::new("o", "1", "Other", json!({"w": 0, "n": 0}))).await.unwrap();
    tx.commit().await.unwrap();
    let r = wait_applied(&db.pool, "others", a.token, Duration::from_millis(600)).await.unwrap();
    assert!(matches!(r, Waited::TimedOut { .. }), "{r:?}");
}

/// PerInstance: one named instance, or all of them (one instance without a process holds "all").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_instance_waits_for_one_named_instance_or_all() {
    let db = setup(&["Wrote"]).await;
    apply(&db.pool, &consumer("logs", "delivery: PerInstance\nstartFrom: earliest\nsink: {log: {target: stderr}}"))
        .await;
    let mut conn = db.pool.acquire().await.unwrap();
    shards::register(&mut conn, "logs", "pod-a", None).await.unwrap();
    shards::register(&mut conn, "logs", "pod-b", None).await.unwrap();
    drop(conn);
    let (_, token) = write(&db.pool, 1, 1).await;
    let logs = tempfile::tempdir().unwrap();
    let _a = Dispatcher::start(&db.url, "pod-a", logs.path());
    let r = wait_applied_on(&db.pool, "logs", Some("pod-a"), token, Duration::from_secs(30)).await.unwrap();
    assert_eq!(r, Waited::Applied);
    let r = wait_applied_on(&db.pool, "logs", None, token, Duration::from_millis(800)).await.unwrap();
    let Waited::TimedOut { pending } = r else { panic!("pod-b delivered nothing, yet all applied") };
    assert!(pending.contains("pod-b"), "{pending}");
    let r = wait_applied_on(&db.pool, "logs", Some("pod-c"), token, Duration::from_millis(300)).await.unwrap();
    assert!(matches!(r, Waited::TimedOut { .. }), "an instance without a shard is never applied");
    let _b = Dispatcher::start(&db.url, "pod-b", logs.path());
    assert_eq!(wait_applied(&db.pool, "logs", token, Duration::from_secs(30)).await.unwrap(), Waited::Applied);
}

/// The CLI: exit 0 when applied, 2 on timeout, 1 on bad input, with the problem and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_wait_exit_codes() {
    let db = setup(&["Wrote"]).await;
    sqlx::raw_sql(PROJECTION).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection_consumer("seen", "")).await;
    let (_, token) = write(&db.pool, 1, 1).await;
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin())
            .args(["consumer", "wait"])
            .args(args)
            .env("DATABASE_URL", &db.url)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let t = token.to_string();
    let (code, err) = run(&["seen", "--after", &t, "--timeout", "300ms"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("timed out") && err.contains("__shared__: idle at 0/0"), "{err}");
    let (code, err) = run(&["seen", "--after", "12ab", "--timeout", "1s"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is not a highwater token") && err.contains("fix:"), "{err}");
    let (code, err) = run(&["seen", "--after", &t, "--timeout", "10m"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("out of range") && err.contains("fix:"), "{err}");
    let (code, err) = run(&["nope", "--after", &t, "--timeout", "1s"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no consumer named") && err.contains("fix:"), "{err}");

    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "ryw-c", logs.path());
    let (code, err) = run(&["seen", "--after", &t, "--timeout", "30s"]);
    assert_eq!(code, Some(0), "{err}");
}

/// Bad input, each refused with the problem and the fix, nothing changed: an unknown consumer, a
/// malformed token, a token from the future (as after a restore from a dump), a timeout out of
/// range, an instance for a Shared consumer; in Rust, SQL and HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing() {
    let db = setup(&["Wrote"]).await;
    sqlx::raw_sql(PROJECTION).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection_consumer("seen", "")).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(&db.url, "ryw-b", logs.path(), &[("HIGHWATER_SSE_TOKENS", "tok")]);
    let (_, token) = write(&db.pool, 1, 1).await;
    assert_eq!(wait_applied(&db.pool, "seen", token, Duration::from_secs(30)).await.unwrap(), Waited::Applied);
    let before: Vec<(String, String, Xid8, i64, String)> = sqlx::query_as(
        "SELECT consumer, instance_id, cursor_tx, cursor_id, status FROM highwater.consumer_shards ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();

    let future = Token(Xid8(token.xid8().0 + 1_000_000));
    let refusals = [
        wait_applied(&db.pool, "nope", token, Duration::from_secs(1)).await.unwrap_err().to_string(),
        wait_applied(&db.pool, "seen", future, Duration::from_secs(1)).await.unwrap_err().to_string(),
        wait_applied(&db.pool, "seen", token, Duration::from_secs(301)).await.unwrap_err().to_string(),
        wait_applied_on(&db.pool, "seen", Some("x"), token, Duration::from_secs(1)).await.unwrap_err().to_string(),
        "-3".parse::<Token>().unwrap_err().to_string(),
    ];
    for (r, what) in
        refusals.iter().zip(["no consumer named", "is ahead of", "out of range", "is Shared", "not a highwater token"])
    {
        assert!(r.contains(what) && r.contains("fix:"), "{what}: {r}");
    }
    let sql = sqlx::query_scalar::<_, bool>("SELECT highwater.applied('seen', $1)")
        .bind(future.xid8())
        .fetch_one(&db.pool)
        .await
        .unwrap_err();
    assert!(sql.to_string().contains("ahead of"), "{sql}");
    let sql =
        sqlx::query_scalar::<_, bool>("SELECT highwater.applied('nope', '5')").fetch_one(&db.pool).await.unwrap_err();
    assert!(sql.to_string().contains("no consumer named"), "{sql}");

    let client = reqwest::Client::new();
    d.serving().await;
    let base = format!("http://127.0.0.1:{}/v1/consumers", d.http_port);
    for (path, status, what) in [
        (format!("nope/applied?after={token}"), 404, "no consumer named"),
        ("seen/applied?after=abc".to_owned(), 400, "not a highwater token"),
        ("seen/applied".to_owned(), 400, "`after` is missing"),
        (format!("seen/applied?after={future}"), 400, "ahead of"),
        (format!("seen/applied?after={token}&timeout=1h"), 400, "out of range"),
        (format!("seen/applied?after={token}&timeout=soon"), 400, "not a duration"),
    ] {
        let r = client.get(format!("{base}/{path}")).bearer_auth("tok").send().await.unwrap();
        assert_eq!(r.status(), status, "{path}");
        let body = r.text().await.unwrap();
        assert!(body.contains(what) && body.contains("fix:"), "{path}: {body}");
    }
    let r =
        client.get(format!("{base}/seen/applied?after={token}&timeout=2s")).bearer_auth("tok").send().await.unwrap();
    assert_eq!(r.status(), 200);

    let after: Vec<(String, String, Xid8, i64, String)> = sqlx::query_as(
        "SELECT consumer, instance_id, cursor_tx, cursor_id, status FROM highwater.consumer_shards ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(before, after, "nothing changed");
}

/// An HTTP wait times out with 408 and says why, while the consumer is disabled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_wait_times_out_with_408() {
    let db = setup(&["Wrote"]).await;
    sqlx::raw_sql(PROJECTION).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection_consumer("seen", "suspend: true\n")).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(&db.url, "ryw-t", logs.path(), &[("HIGHWATER_SSE_TOKENS", "tok")]);
    wait_registered(&db.pool, "seen", 1).await;
    let (_, token) = write(&db.pool, 1, 1).await;
    d.serving().await;
    let url = format!("http://127.0.0.1:{}/v1/consumers/seen/applied?after={token}&timeout=500ms", d.http_port);
    let started = Instant::now();
    let r = reqwest::Client::new().get(url).bearer_auth("tok").send().await.unwrap();
    assert_eq!(r.status(), 408);
    assert!(started.elapsed() >= Duration::from_millis(500));
    let body = r.text().await.unwrap();
    assert!(body.contains("disabled"), "{body}");
}
