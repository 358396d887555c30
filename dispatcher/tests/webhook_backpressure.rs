//! Backpressure the receiver asks for (issue 49), against a real HTTP receiver on 127.0.0.1 and
//! real dispatcher processes: `429`/`503` with `Retry-After` (seconds, HTTP date) pause the
//! consumer for the time asked without counting an attempt (`maxAttempts: 1`, so a counted
//! attempt would kill the shard), a storm of `429`s ends with every event delivered once and in
//! order, `410 Gone` disables the consumer with the receiver's answer as the reason, and a redrive
//! waits out the receiver's pause as live delivery does (no attempt counted, still pending).
mod common;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header::RETRY_AFTER},
    response::{IntoResponse, Response},
    routing::post,
};
use common::*;
use highwater::{NewEvent, append};
use serde_json::{Value, json};
use sqlx::PgPool;

/// One request as it arrived, and what it was answered.
#[derive(Clone, Debug)]
struct Request {
    webhook_id: String,
    event_id: i64,
    at: Instant,
    wall: SystemTime,
    status: u16,
}

/// Answers request number `n` (from 0): a status and an optional `Retry-After`.
type Script = dyn Fn(usize) -> (u16, Option<String>) + Send + Sync;

struct Inbox {
    requests: Mutex<Vec<Request>>,
    script: Box<Script>,
}

struct Receiver {
    addr: SocketAddr,
    inbox: Arc<Inbox>,
}

impl Receiver {
    async fn start(script: impl Fn(usize) -> (u16, Option<String>) + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let inbox = Arc::new(Inbox { requests: Mutex::default(), script: Box::new(script) });
        let app = Router::new().route("/hook", post(answer)).with_state(inbox.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { addr, inbox }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn requests(&self) -> Vec<Request> {
        self.inbox.requests.lock().unwrap().clone()
    }

    /// The event ids the receiver accepted (answered 2xx), in arrival order.
    fn accepted(&self) -> Vec<i64> {
        self.requests().iter().filter(|r| r.status < 300).map(|r| r.event_id).collect()
    }
}

async fn answer(State(inbox): State<Arc<Inbox>>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap();
    let mut requests = inbox.requests.lock().unwrap();
    let (status, retry_after) = (inbox.script)(requests.len());
    requests.push(Request {
        webhook_id: headers["webhook-id"].to_str().unwrap().to_owned(),
        event_id: body["event"]["id"].as_i64().unwrap(),
        at: Instant::now(),
        wall: SystemTime::now(),
        status,
    });
    let mut resp = (StatusCode::from_u16(status).unwrap(), "slow down").into_response();
    if let Some(v) = retry_after {
        resp.headers_mut().insert(RETRY_AFTER, HeaderValue::from_str(&v).unwrap());
    }
    resp
}

async fn append_events(pool: &PgPool, streams: usize, per_stream: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    for n in 0..per_stream {
        for s in 0..streams {
            let ev = NewEvent::new("order", &format!("o-{s}"), "OrderPlaced", json!({"n": n}));
            let mut tx = pool.begin().await.unwrap();
            ids.push(append(&mut tx, &ev).await.unwrap());
            tx.commit().await.unwrap();
        }
    }
    ids
}

#[derive(Debug)]
struct ShardRow {
    status: String,
    attempts: i32,
    last_error: Option<String>,
    delivered: i64,
}

async fn shard(pool: &PgPool, consumer: &str) -> ShardRow {
    let (status, attempts, last_error, delivered) = sqlx::query_as(
        "SELECT status, attempts, last_error, delivered_count FROM highwater.consumer_shards WHERE consumer = $1",
    )
    .bind(consumer)
    .fetch_one(pool)
    .await
    .unwrap();
    ShardRow { status, attempts, last_error, delivered }
}

async fn wait_shard(pool: &PgPool, consumer: &str, what: &str, f: impl Fn(&ShardRow) -> bool) -> ShardRow {
    let f = &f;
    eventually(what, Duration::from_secs(60), || async move { f(&shard(pool, consumer).await) }).await;
    shard(pool, consumer).await
}

fn cli(url: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

async fn metrics(d: &Dispatcher) -> String {
    reqwest::get(format!("http://127.0.0.1:{}/metrics", d.http_port)).await.unwrap().text().await.unwrap()
}

fn hook(url: &str) -> String {
    // maxAttempts: 1 — a pause that counted an attempt would kill the shard at once.
    format!(
        "delivery: Shared\nmaxAttempts: 1\nbackoff: {{initial: 100ms, max: 1s}}\nsink: {{webhook: {{url: '{url}'}}}}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_pauses_for_the_time_asked_without_counting_an_attempt() {
    let db = shared(&["OrderPlaced"]).await;
    // Request 0: 429 with Retry-After in seconds; request 1: 503 with an HTTP date 3 s ahead;
    // then accepted.
    let rx = Receiver::start(|n| match n {
        0 => (429, Some("2".into())),
        1 => (503, Some(httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3)))),
        _ => (200, None),
    })
    .await;
    apply(&db.pool, &consumer("paced", &hook(&rx.url()))).await;
    let ids = append_events(&db.pool, 1, 2).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "p0", logs.path());

    eventually("the first 429", Duration::from_secs(30), || async { !rx.requests().is_empty() }).await;
    // While paused: processing, no attempt counted, the receiver's answer kept, and
    // `consumer status` says until when.
    let s = wait_shard(&db.pool, "paced", "the pause to be recorded", |s| s.last_error.is_some()).await;
    assert_eq!((s.status.as_str(), s.attempts), ("processing", 0), "{s:?}");
    assert!(s.last_error.as_deref().unwrap().contains("HTTP 429 Too Many Requests"), "{s:?}");
    assert!(s.last_error.as_deref().unwrap().contains("pause for 2s"), "{s:?}");
    let status = cli(&db.url, &["consumer", "status", "paced"]);
    assert!(status.contains("paced: throttled until ") && status.contains("by the receiver"), "{status}");

    wait_shard(&db.pool, "paced", "both events delivered", |s| s.delivered == 2).await;
    let r = rx.requests();
    assert_eq!(r.len(), 4, "429, 503, then each event once: {r:?}");
    assert_eq!([r[0].event_id, r[1].event_id, r[2].event_id, r[3].event_id], [ids[0], ids[0], ids[0], ids[1]]);
    assert!(r[1].at - r[0].at >= Duration::from_millis(1990), "not before the 2 s asked: {:?}", r[1].at - r[0].at);
    // The HTTP date has whole seconds: the retry comes no earlier than that instant.
    let asked = httpdate::parse_http_date(&httpdate::fmt_http_date(r[1].wall + Duration::from_secs(3))).unwrap();
    assert!(r[2].wall >= asked, "not before the date asked: {:?} < {asked:?}", r[2].wall);
    assert!(r.iter().all(|q| q.webhook_id.starts_with("paced:")));
    let s = shard(&db.pool, "paced").await;
    assert_eq!((s.status.as_str(), s.attempts, s.last_error), ("idle", 0, None));
    let m = metrics(&d).await;
    assert!(m.contains("highwater_receiver_pauses_total{consumer=\"paced\"} 2"), "{m}");
    assert!(m.contains("highwater_throttled_seconds_total{consumer=\"paced\",cause=\"receiver\"}"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_429s_ends_with_every_event_delivered_once_in_order() {
    let db = shared(&["OrderPlaced"]).await;
    // Every third request of the first 18 is refused with Retry-After: 1.
    let rx = Receiver::start(|n| if n < 18 && n % 3 == 1 { (429, Some("1".into())) } else { (200, None) }).await;
    apply(&db.pool, &consumer("storm", &hook(&rx.url()))).await;
    let ids = append_events(&db.pool, 3, 8).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());

    let s = wait_shard(&db.pool, "storm", "every event delivered", |s| s.delivered == ids.len() as i64).await;
    assert_eq!((s.status.as_str(), s.attempts), ("idle", 0));
    assert_eq!(rx.accepted(), ids, "each event accepted once, in order");
    let refused = rx.requests().iter().filter(|r| r.status == 429).count();
    assert_eq!(refused, 6, "the storm happened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_disables_the_consumer_with_the_reason() {
    let db = shared(&["OrderPlaced"]).await;
    let gone = Arc::new(Mutex::new(true));
    let g = gone.clone();
    // The first event is accepted; the second is answered 410 until the endpoint comes back.
    let rx = Receiver::start(move |n| if n >= 1 && *g.lock().unwrap() { (410, None) } else { (200, None) }).await;
    apply(&db.pool, &consumer("gone", &hook(&rx.url()).replace("maxAttempts: 1", "maxAttempts: 5"))).await;
    let ids = append_events(&db.pool, 1, 3).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "p0", logs.path());

    let s = wait_shard(&db.pool, "gone", "the consumer disabled", |s| s.status == "disabled").await;
    assert_eq!(s.delivered, 1, "the event before the 410 counts as delivered");
    let err = s.last_error.unwrap();
    assert!(err.contains("HTTP 410 Gone") && err.contains("consumer is disabled"), "{err}");
    // Disabled: nothing more is sent, no retry.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(rx.requests().len(), 2, "one 410, no retries: {:?}", rx.requests());
    let status = cli(&db.url, &["consumer", "status", "gone"]);
    assert!(status.contains("disabled") && status.contains("HTTP 410 Gone"), "{status}");
    assert!(metrics(&d).await.contains("highwater_receiver_gone_total{consumer=\"gone\"} 1"));

    // The endpoint is back; an operator enables the consumer: the rest is delivered, in order.
    *gone.lock().unwrap() = false;
    cli(&db.url, &["consumer", "enable", "gone"]);
    wait_shard(&db.pool, "gone", "the rest delivered", |s| s.delivered == 3).await;
    assert_eq!(rx.accepted(), ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_waits_out_the_receivers_pause_without_counting_an_attempt() {
    let db = shared(&["OrderPlaced"]).await;
    // Request 0 (the first event): 500, parked as a dead letter (maxAttempts 1, errorMode skip);
    // request 1 (the second): accepted; then the redrive: 429 Retry-After 2, then accepted.
    let rx = Receiver::start(|n| match n {
        0 => (500, None),
        2 => (429, Some("2".into())),
        _ => (200, None),
    })
    .await;
    apply(&db.pool, &consumer("redriven", &format!("{}\nerrorMode: skip", hook(&rx.url())))).await;
    let ids = append_events(&db.pool, 2, 1).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "p0", logs.path());
    wait_shard(&db.pool, "redriven", "the second event delivered", |s| s.delivered == 1).await;
    let dead_letter = || async {
        sqlx::query_as::<_, (i32, String, bool)>(
            "SELECT attempts, error, redriven_at IS NOT NULL AND redrive_at IS NULL FROM highwater.dead_letters \
             WHERE event_id = $1",
        )
        .bind(ids[0])
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let (attempts, error, _) = dead_letter().await;
    assert_eq!(attempts, 1);

    // The CLI waits for the redrive's end: in the background while the pause is looked at.
    let url = db.url.clone();
    let redrive = tokio::task::spawn_blocking(move || {
        cli(&url, &["consumer", "redrive", "redriven", "--all", "--reason", "receiver fixed"])
    });
    eventually("the redrive's 429", Duration::from_secs(30), || async { rx.requests().len() >= 3 }).await;
    // Paused: the dead letter keeps its attempts and error, not redriven yet; the consumer is
    // throttled by the receiver, as for live delivery.
    assert_eq!(dead_letter().await, (1, error.clone(), false), "no attempt counted for a pause");
    let status = cli(&db.url, &["consumer", "status", "redriven"]);
    assert!(status.contains("redriven: throttled until ") && status.contains("by the receiver"), "{status}");

    let said = redrive.await.unwrap();
    assert!(said.contains("1 redriven"), "{said}");
    assert_eq!(dead_letter().await, (1, error, true));
    let r = rx.requests();
    assert_eq!(r.len(), 4, "500, 200, then the redrive's 429 and 200: {r:?}");
    assert_eq!([r[2].event_id, r[3].event_id], [ids[0], ids[0]]);
    assert_eq!((r[2].status, r[3].status), (429, 200));
    assert!(r[3].at - r[2].at >= Duration::from_millis(1990), "not before the 2 s asked: {:?}", r[3].at - r[2].at);
    assert!(metrics(&d).await.contains("highwater_receiver_pauses_total{consumer=\"redriven\"} 1"));
}
