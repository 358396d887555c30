//! The dispatcher's HTTP server: /metrics parsed by a Prometheus text parser and matched against
//! what was delivered, /healthz and /readyz, and SSE streams with auth, resume and slow clients.
mod common;

use std::{collections::BTreeSet, time::Duration};

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FAST_METRICS: &[(&str, &str)] = &[("HIGHWATER_METRICS_INTERVAL", "200ms")];

async fn scrape(port: u16) -> prometheus_parse::Scrape {
    let body = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("valid exposition text")
}

fn value(s: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples.iter().find(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v))).map(|x| {
        match &x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(h) => h.iter().map(|b| b.count).fold(0.0, f64::max),
            prometheus_parse::Value::Summary(_) => f64::NAN,
        }
    })
}

async fn append_n(pool: &sqlx::PgPool, n: usize, event_type: &str, payload: serde_json::Value) -> Vec<i64> {
    let mut tx = pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            append(&mut tx, &NewEvent::new("s", &format!("{}", i % 5), event_type, payload.clone())).await.unwrap(),
        );
    }
    tx.commit().await.unwrap();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_match_what_was_delivered() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE seen (id bigint)").execute(&db.pool).await.unwrap();
    let yaml = [
        consumer("ok", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO seen VALUES ($2)'}}"),
        consumer("paused", "delivery: Shared\nsuspend: true\nsink: {log: {target: stderr}}"),
        consumer("broken", "delivery: Shared\nmaxAttempts: 2\nbackoff: {initial: 50ms, max: 100ms}\nsink: {sql: {statement: 'SELECT 1/0'}}"),
    ]
    .concat();
    apply(&db.pool, &yaml).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(&db.url, "m0", logs.path(), FAST_METRICS);
    let port = d.http_port;
    wait_registered(&db.pool, "ok", 1).await;
    // Not before the server is up; then both probes answer.
    let client = reqwest::Client::new();
    let mut ready = false;
    for _ in 0..100 {
        if let Ok(r) = client.get(format!("http://127.0.0.1:{port}/readyz")).send().await {
            ready = r.status() == 200;
            if ready {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "/readyz turned 200");
    assert_eq!(client.get(format!("http://127.0.0.1:{port}/healthz")).send().await.unwrap().status(), 200);

    append_n(&db.pool, 25, "Tick", json!({})).await;
    wait_count(&db.pool, "SELECT count(*) FROM seen", 25, Duration::from_secs(20)).await;
    wait_count(
        &db.pool,
        "SELECT count(*) FROM highwater.consumer_shards WHERE status = 'dead'",
        1,
        Duration::from_secs(20),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;

    let s = scrape(port).await;
    let ok = [("consumer", "ok"), ("instance_id", "__shared__")];
    assert_eq!(value(&s, "highwater_events_processed_total", &ok), Some(25.0));
    // Counters exist at 0 before their first increment, so rate() sees that increment.
    assert_eq!(value(&s, "highwater_events_failed_total", &ok), Some(0.0));
    assert_eq!(value(&s, "highwater_consumer_lag_events", &ok), Some(0.0));
    assert_eq!(value(&s, "highwater_consumer_lag_seconds", &ok), Some(0.0));
    assert_eq!(value(&s, "highwater_delivery_latency_seconds_count", &ok), Some(25.0));
    assert!(value(&s, "highwater_handler_duration_seconds_count", &ok).unwrap() >= 1.0);
    let paused = [("consumer", "paused"), ("instance_id", "__shared__")];
    assert_eq!(value(&s, "highwater_consumer_lag_events", &paused), Some(25.0), "a suspended consumer's lag grows");
    assert!(value(&s, "highwater_consumer_lag_seconds", &paused).unwrap() > 0.0);
    assert_eq!(value(&s, "highwater_shard_status", &[paused[0], ("status", "disabled")]), Some(1.0));
    assert_eq!(value(&s, "highwater_shard_status", &[paused[0], ("status", "idle")]), Some(0.0));
    assert_eq!(value(&s, "highwater_events_processed_total", &paused), Some(0.0));
    let broken = [("consumer", "broken"), ("instance_id", "__shared__")];
    assert_eq!(value(&s, "highwater_events_failed_total", &broken), Some(2.0), "one per attempt");
    assert_eq!(value(&s, "highwater_shard_status", &[broken[0], ("status", "dead")]), Some(1.0));
    assert_eq!(value(&s, "highwater_shard_attempts", &broken), Some(2.0));
    assert_eq!(value(&s, "highwater_ready", &[]), Some(1.0));
    assert!(value(&s, "highwater_fence_age_seconds", &[]).is_some());

    // A transaction holding an xid shows up as fence age.
    let mut long = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()").execute(&mut *long).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let s = scrape(port).await;
    assert!(value(&s, "highwater_fence_age_seconds", &[]).unwrap() >= 1.0, "the open transaction is visible");
    long.rollback().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_groups_dispatchers_report_a_per_instance_shard_whose_instance_stopped() {
    let db = setup(&["Tick"]).await;
    apply(&db.pool, &consumer("local", "delivery: PerInstance\nsink: {log: {target: stderr}}")).await;
    let logs = tempfile::tempdir().unwrap();
    let gone = Dispatcher::start_with_env(&db.url, "gone", logs.path(), FAST_METRICS);
    let d = Dispatcher::start_with_env(&db.url, "m0", logs.path(), FAST_METRICS);
    wait_registered(&db.pool, "local", 2).await;
    let stale = |instance: &'static str| [("consumer", "local"), ("instance_id", instance)];
    tokio::time::sleep(Duration::from_millis(600)).await;
    let s = scrape(d.http_port).await;
    assert_eq!(value(&s, "highwater_stale_shard_heartbeat_age_seconds", &stale("gone")), None, "both beat");
    drop(gone);
    // It stopped: its last heartbeat five minutes ago rather than waiting for one to age.
    sqlx::query(
        "UPDATE highwater.consumer_shards SET heartbeat_at = now() - interval '5 minutes' WHERE instance_id = 'gone'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let port = d.http_port;
    eventually("m0 to report gone's shard", Duration::from_secs(10), || async move {
        let s = scrape(port).await;
        value(&s, "highwater_stale_shard_heartbeat_age_seconds", &stale("gone")).is_some_and(|age| age >= 300.0)
    })
    .await;
    let s = scrape(d.http_port).await;
    assert_eq!(value(&s, "highwater_stale_shard_heartbeat_age_seconds", &stale("m0")), None, "m0 itself beats");
    // Once the shard is deleted (what the operator or `consumer gc` does), its series goes.
    sqlx::query("DELETE FROM highwater.consumer_shards WHERE instance_id = 'gone'").execute(&db.pool).await.unwrap();
    eventually("the series to go with the shard", Duration::from_secs(10), || async move {
        value(&scrape(port).await, "highwater_stale_shard_heartbeat_age_seconds", &stale("gone")).is_none()
    })
    .await;
}

async fn connect(port: u16, token: Option<&str>, last: Option<i64>, tenant: Option<&str>) -> reqwest::Response {
    let mut url = format!("http://127.0.0.1:{port}/v1/consumers/live/events");
    if let Some(t) = tenant {
        url.push_str(&format!("?tenant={t}"));
    }
    let mut req = reqwest::Client::new().get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(l) = last {
        req = req.header("Last-Event-ID", l.to_string());
    }
    req.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_streams_every_event_on_every_instance_and_resumes() {
    let db = setup(&["Tick"]).await;
    apply(&db.pool, &consumer("live", "delivery: PerInstance\nsink: {sse: {buffer: 64}}")).await;
    let logs = tempfile::tempdir().unwrap();
    let env = [("HIGHWATER_SSE_TOKENS", "t0k3n-a,t0k3n-b")];
    let d0 = Dispatcher::start_with_env(&db.url, "sse-0", logs.path(), &env);
    let d1 = Dispatcher::start_with_env(&db.url, "sse-1", logs.path(), &env);
    wait_registered(&db.pool, "live", 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Authentication first.
    assert_eq!(connect(d0.http_port, None, None, None).await.status(), 401);
    assert_eq!(connect(d0.http_port, Some("wrong"), None, None).await.status(), 401);

    let mut c0 = connect(d0.http_port, Some("t0k3n-a"), None, None).await;
    let mut c1 = connect(d1.http_port, Some("t0k3n-b"), None, None).await;
    assert_eq!(c0.status(), 200);
    let ids = append_n(&db.pool, 30, "Tick", json!({"n": 1})).await;
    let got0 = read_sse(&mut c0, 30, Duration::from_secs(20)).await;
    let got1 = read_sse(&mut c1, 30, Duration::from_secs(20)).await;
    assert_eq!(got0.iter().map(|e| e.0).collect::<Vec<_>>(), ids, "instance 0's client got every event in order");
    assert_eq!(got1.iter().map(|e| e.0).collect::<Vec<_>>(), ids, "instance 1's client got every event in order");
    assert_eq!(got0[0].1["event_type"], "Tick");
    drop(c0);

    // Events appended while the client is away arrive on reconnect with Last-Event-ID.
    let last_seen = ids[9];
    let more = append_n(&db.pool, 20, "Tick", json!({"n": 2})).await;
    let mut again = connect(d0.http_port, Some("t0k3n-a"), Some(last_seen), None).await;
    let resumed = read_sse(&mut again, 40, Duration::from_secs(20)).await;
    let expected: Vec<i64> = ids[10..].iter().chain(more.iter()).copied().collect();
    assert_eq!(resumed.iter().map(|e| e.0).collect::<Vec<_>>(), expected, "nothing lost, nothing twice");
    // Live events still follow the replay.
    let live = append_n(&db.pool, 3, "Tick", json!({"n": 3})).await;
    let after = read_sse(&mut again, 3, Duration::from_secs(20)).await;
    assert_eq!(after.iter().map(|e| e.0).collect::<Vec<_>>(), live);

    let bad = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/v1/consumers/live/events", d0.http_port))
        .bearer_auth("t0k3n-a")
        .header("Last-Event-ID", "12abc")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    drop((d0, d1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_tenant_filter_and_stalled_clients() {
    let db = setup(&["Tick"]).await;
    apply(&db.pool, &consumer("live", "delivery: PerInstance\nsink: {sse: {buffer: 8}}")).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(&db.url, "sse-s", logs.path(), &[("HIGHWATER_SSE_TOKENS", "tok")]);
    wait_registered(&db.pool, "live", 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A client of one tenant sees only that tenant's events.
    let mut acme = connect(d.http_port, Some("tok"), None, Some("acme")).await;
    assert_eq!(acme.status(), 200, "{:?}", acme.headers());
    let mut tx = db.pool.begin().await.unwrap();
    let mut acme_ids = BTreeSet::new();
    for i in 0..10 {
        let mut ev = NewEvent::new("s", "1", "Tick", json!({}));
        ev.tenant_id = Some(if i % 2 == 0 { "acme".into() } else { "globex".into() });
        let id = append(&mut tx, &ev).await.unwrap();
        if i % 2 == 0 {
            acme_ids.insert(id);
        }
    }
    tx.commit().await.unwrap();
    let got = read_sse(&mut acme, 5, Duration::from_secs(20)).await;
    assert_eq!(got.iter().map(|e| e.0).collect::<BTreeSet<_>>(), acme_ids);
    assert!(got.iter().all(|e| e.1["tenant_id"] == "acme"));
    drop(acme);

    // A client that stops reading: delivery goes on; when it reads again it finds itself cut off.
    let mut stalled = tokio::net::TcpStream::connect(("127.0.0.1", d.http_port)).await.unwrap();
    stalled
        .write_all(b"GET /v1/consumers/live/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let big = "x".repeat(4000);
    let mut last = 0;
    for _ in 0..10 {
        last = *append_n(&db.pool, 300, "Tick", json!({"pad": big})).await.last().unwrap();
    }
    let pool = db.pool.clone();
    eventually("delivery to reach the last event despite the stalled client", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            let c: i64 = sqlx::query_scalar("SELECT cursor_id FROM highwater.consumer_shards WHERE consumer = 'live'")
                .fetch_one(&pool)
                .await
                .unwrap();
            c == last
        }
    })
    .await;
    let mut received = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let closed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match stalled.read(&mut chunk).await {
                Ok(0) | Err(_) => return true,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
            // The response ended (chunked terminator); the connection itself may stay open.
            if received.ends_with(b"\r\n0\r\n\r\n") {
                return true;
            }
        }
    })
    .await
    .unwrap_or(false);
    let frames =
        String::from_utf8_lossy(&received).matches("\nid:").count() + usize::from(received.starts_with(b"id:"));
    assert!(closed, "the server ended the stalled client's stream");
    assert!(frames < 3000, "the stalled client was cut off ({frames} of 3000 events)");
}
