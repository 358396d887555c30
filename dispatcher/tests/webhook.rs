//! The webhook sink against a real HTTP receiver on 127.0.0.1 and real dispatcher processes:
//! Standard Webhooks headers and signature (checked with an independent HMAC), traceparent,
//! failures (5xx, timeout, connection refused) retried until the receiver recovers or the shard
//! goes dead, batch mode, and the same `webhook-id` on redelivery after a SIGKILL.
mod common;

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    routing::post,
};
use base64::{Engine, engine::general_purpose::STANDARD};
use common::*;
use highwater::{NewEvent, append};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::PgPool;

/// What the receiver answers to the requests that arrive while it is set.
#[derive(Clone)]
enum Behaviour {
    Ok,
    Fail(u16, String),
    Sleep(Duration),
    /// Keeps the request open (the dispatcher is killed meanwhile).
    Hold,
}

#[derive(Clone, Debug)]
struct Received {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    at: Instant,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or_else(|| panic!("no {name} header in {self:?}"))
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

#[derive(Default)]
struct Inbox {
    received: Mutex<Vec<Received>>,
    behaviour: Mutex<Option<Behaviour>>,
}

struct Receiver {
    addr: SocketAddr,
    inbox: Arc<Inbox>,
}

impl Receiver {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let inbox = Arc::new(Inbox::default());
        let app = Router::new().route("/hook/{name}", post(record)).with_state(inbox.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { addr, inbox }
    }

    fn url(&self, name: &str) -> String {
        format!("http://{}/hook/{name}", self.addr)
    }

    fn set(&self, b: Behaviour) {
        *self.inbox.behaviour.lock().unwrap() = Some(b);
    }

    fn received(&self, name: &str) -> Vec<Received> {
        let path = format!("/hook/{name}");
        self.inbox.received.lock().unwrap().iter().filter(|r| r.path == path).cloned().collect()
    }

    async fn wait_requests(&self, name: &str, n: usize, timeout: Duration) -> Vec<Received> {
        eventually(&format!("{n} requests to /hook/{name}"), timeout, || async move { self.received(name).len() >= n })
            .await;
        self.received(name)
    }
}

async fn record(State(inbox): State<Arc<Inbox>>, uri: Uri, headers: HeaderMap, body: Bytes) -> (StatusCode, String) {
    let headers = headers.iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap().to_owned())).collect();
    inbox.received.lock().unwrap().push(Received {
        path: uri.path().to_owned(),
        headers,
        body: body.to_vec(),
        at: Instant::now(),
    });
    let behaviour = inbox.behaviour.lock().unwrap().clone().unwrap_or(Behaviour::Ok);
    match behaviour {
        Behaviour::Ok => (StatusCode::OK, "ok".into()),
        Behaviour::Fail(code, body) => (StatusCode::from_u16(code).unwrap(), body),
        Behaviour::Sleep(d) => {
            tokio::time::sleep(d).await;
            (StatusCode::OK, "late".into())
        }
        Behaviour::Hold => {
            tokio::time::sleep(Duration::from_secs(300)).await;
            (StatusCode::OK, "held".into())
        }
    }
}

/// The receiver's side of Standard Webhooks, written from the spec and not from the sink's code.
fn verify(r: &Received, secret: &str) {
    let key = match secret.strip_prefix("whsec_") {
        Some(b64) => STANDARD.decode(b64).unwrap(),
        None => secret.as_bytes().to_vec(),
    };
    let signed = format!("{}.{}.", r.header("webhook-id"), r.header("webhook-timestamp"));
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(signed.as_bytes());
    mac.update(&r.body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    let sigs: Vec<&str> = r.header("webhook-signature").split(' ').collect();
    assert!(sigs.contains(&expected.as_str()), "signature {sigs:?} does not verify (expected {expected})");
    let ts: u64 = r.header("webhook-timestamp").parse().unwrap();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    assert!(ts.abs_diff(now) < 120, "webhook-timestamp {ts} is unix seconds near {now}");
}

fn random_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("whsec_{}", STANDARD.encode(bytes))
}

async fn append_one(pool: &PgPool, payload: Value, correlation_id: Option<&str>) -> i64 {
    let mut ev = NewEvent::new("order", "42", "OrderPlaced", payload);
    ev.metadata = correlation_id.map(|c| json!({"correlation_id": c}));
    let mut tx = pool.begin().await.unwrap();
    let id = append(&mut tx, &ev).await.unwrap();
    tx.commit().await.unwrap();
    id
}

/// The writer's trace context (issue 48): an order service's span, set for its transaction.
const WRITER_TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// One event appended inside the writer's trace, as an application does it: `SET LOCAL`.
async fn append_traced(pool: &PgPool, payload: Value) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SET LOCAL highwater.traceparent = '{WRITER_TP}'; SET LOCAL highwater.tracestate = 'congo=t61rcWkgMzE'"
    )))
    .execute(&mut *tx)
    .await
    .unwrap();
    let id = append(&mut tx, &NewEvent::new("order", "42", "OrderPlaced", payload)).await.unwrap();
    tx.commit().await.unwrap();
    id
}

#[derive(Debug)]
struct ShardRow {
    status: String,
    attempts: i32,
    last_error: Option<String>,
    failing_event_id: Option<i64>,
    delivered: i64,
}

async fn shard(pool: &PgPool, consumer: &str) -> ShardRow {
    let (status, attempts, last_error, failing_event_id, delivered) = sqlx::query_as(
        "SELECT status, attempts, last_error, failing_event_id, delivered_count
           FROM highwater.consumer_shards WHERE consumer = $1",
    )
    .bind(consumer)
    .fetch_one(pool)
    .await
    .unwrap();
    ShardRow { status, attempts, last_error, failing_event_id, delivered }
}

async fn wait_shard(pool: &PgPool, consumer: &str, what: &str, f: impl Fn(&ShardRow) -> bool) -> ShardRow {
    let f = &f;
    eventually(what, Duration::from_secs(60), || async move { f(&shard(pool, consumer).await) }).await;
    shard(pool, consumer).await
}

fn span_id(webhook_id: &str) -> String {
    hex::encode(&Sha256::digest(webhook_id.as_bytes())[..8])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_each_event_signed_with_standard_webhook_headers() {
    let db = shared(&["OrderPlaced"]).await;
    let rx = Receiver::start().await;
    let logs = tempfile::tempdir().unwrap();
    let secret = random_secret();
    let secret_file = logs.path().join("raw-secret");
    std::fs::write(&secret_file, "  raw-file-secret\n").unwrap();
    let yaml = [
        consumer(
            "orders-hook",
            &format!(
                "delivery: Shared\nsink:\n  webhook:\n    url: {}\n    secret: {{env: HOOK_SECRET}}\n    \
                 headers: {{authorization: 'Bearer t0ken', x-team: billing}}",
                rx.url("orders")
            ),
        ),
        consumer(
            "raw-hook",
            &format!(
                "delivery: Shared\nsink: {{webhook: {{url: '{}', secret: {{file: '{}'}}}}}}",
                rx.url("raw"),
                secret_file.display()
            ),
        ),
        consumer(
            "unset-hook",
            &format!(
                "delivery: Shared\nsink: {{webhook: {{url: '{}', secret: {{env: HOOK_SECRET_UNSET}}}}}}",
                rx.url("unset")
            ),
        ),
    ]
    .concat();
    apply(&db.pool, &yaml).await;
    let uuid_cid = "6f1c2a3b-9d4e-4f00-8a1b-0123456789ab";
    let ids = [
        append_one(&db.pool, json!({"n": 1}), Some(uuid_cid)).await,
        append_one(&db.pool, json!({"n": 2}), Some("order-42")).await,
        append_one(&db.pool, json!({"n": 3}), None).await,
        append_traced(&db.pool, json!({"n": 4})).await,
    ];
    let _d = Dispatcher::start_with_env(&db.url, "p0", logs.path(), &[("HOOK_SECRET", &secret)]);

    let got = rx.wait_requests("orders", 4, Duration::from_secs(60)).await;
    assert_eq!(got.len(), 4, "one request per event, no duplicates: {got:?}");
    for (r, id) in got.iter().zip(ids) {
        let key = format!("orders-hook:{id}");
        assert_eq!(r.header("webhook-id"), key);
        assert_eq!(r.header("content-type"), "application/json");
        assert_eq!(r.header("authorization"), "Bearer t0ken");
        assert_eq!(r.header("x-team"), "billing");
        verify(r, &secret);
        let body = r.json();
        assert_eq!(body["consumer"], "orders-hook");
        assert_eq!(body["instance_id"], "__shared__");
        assert_eq!(body["idempotency_key"], key.as_str());
        assert_eq!(body["event"]["id"], id);
        assert_eq!(body["event"]["event_type"], "OrderPlaced");
        if id == ids[3] {
            // The writer's trace goes on as it was set, its tracestate with it.
            assert_eq!(r.header("traceparent"), WRITER_TP);
            assert_eq!(r.header("tracestate"), "congo=t61rcWkgMzE");
            assert_eq!(body["event"]["metadata"]["traceparent"], WRITER_TP);
            continue;
        }
        assert_eq!(r.headers.get("tracestate"), None, "a made-up context has no tracestate: {r:?}");
        // Without it, the traceparent carries the correlation id: as is when it is a UUID,
        // hashed otherwise.
        let cid = body["event"]["metadata"]["correlation_id"].as_str().unwrap().to_owned();
        let trace_id = match uuid::Uuid::parse_str(&cid) {
            Ok(u) => u.simple().to_string(),
            Err(_) => hex::encode(&Sha256::digest(cid.as_bytes())[..16]),
        };
        assert_eq!(r.header("traceparent"), format!("00-{trace_id}-{}-01", span_id(&key)));
    }
    assert_eq!(
        got[0].header("traceparent"),
        format!("00-6f1c2a3b9d4e4f008a1b0123456789ab-{}-01", span_id(&format!("orders-hook:{}", ids[0])))
    );
    assert_eq!(got[1].json()["event"]["metadata"]["correlation_id"], "order-42");
    assert_eq!(got[1].json()["event"]["payload"], json!({"n": 2}));

    // A secret without the whsec_ prefix is used as raw bytes, trimmed when read from a file.
    let raw = rx.wait_requests("raw", 4, Duration::from_secs(30)).await;
    for r in &raw {
        verify(r, "raw-file-secret");
    }
    wait_shard(&db.pool, "orders-hook", "orders-hook to count 4", |s| s.delivered == 4).await;
    wait_shard(&db.pool, "raw-hook", "raw-hook to count 4", |s| s.delivered == 4).await;

    // A missing secret stops that consumer only, and the error names the variable.
    let log_path = &logs.path().join("p0.log");
    eventually("the unset secret to be reported", Duration::from_secs(10), || async move {
        std::fs::read_to_string(log_path).unwrap().contains("environment variable HOOK_SECRET_UNSET is not set")
    })
    .await;
    assert!(rx.received("unset").is_empty());
    assert_eq!(shard(&db.pool, "unset-hook").await.delivered, 0);

    let log = std::fs::read_to_string(log_path).unwrap();
    let b64 = secret.trim_start_matches("whsec_");
    assert!(!log.contains(b64) && !log.contains("raw-file-secret"), "a secret reached the dispatcher's log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_with_backoff_until_the_receiver_recovers() {
    let db = shared(&["OrderPlaced"]).await;
    let rx = Receiver::start().await;
    rx.set(Behaviour::Fail(503, format!("maintenance: back soon {}", "x".repeat(600))));
    apply(
        &db.pool,
        &consumer(
            "flaky",
            &format!(
                "delivery: Shared\nbackoff: {{initial: 200ms, max: 2s}}\nsink: {{webhook: {{url: '{}'}}}}",
                rx.url("flaky")
            ),
        ),
    )
    .await;
    let id = append_one(&db.pool, json!({}), None).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());

    let s = wait_shard(&db.pool, "flaky", "three failed attempts", |s| s.attempts >= 3).await;
    assert_eq!(s.status, "processing");
    assert_eq!(s.failing_event_id, Some(id));
    let err = s.last_error.unwrap();
    assert!(err.contains("HTTP 503 Service Unavailable: maintenance: back soon xxx"), "{err}");
    assert!(err.len() < 300 && !err.contains(&"x".repeat(200)), "the body is cut to a short excerpt: {err}");
    let tries = rx.received("flaky");
    let gaps: Vec<Duration> = tries.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(gaps[0] >= Duration::from_millis(150), "retried after the backoff, not at once: {gaps:?}");
    // The first retry waits exactly `initial`, the second between `initial` and `2 · initial`.
    assert!(gaps[1] >= Duration::from_millis(150), "no retry comes before `initial`: {gaps:?}");

    rx.set(Behaviour::Ok);
    let s = wait_shard(&db.pool, "flaky", "delivery after recovery", |s| s.delivered == 1).await;
    assert_eq!((s.status.as_str(), s.attempts), ("idle", 0));
    let all = rx.received("flaky");
    assert!(all.iter().all(|r| r.header("webhook-id") == format!("flaky:{id}")), "every attempt has the same id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_a_failed_attempt() {
    let db = shared(&["OrderPlaced"]).await;
    let rx = Receiver::start().await;
    rx.set(Behaviour::Sleep(Duration::from_secs(5)));
    apply(
        &db.pool,
        &consumer(
            "slow",
            &format!(
                "delivery: Shared\nmaxAttempts: 2\nbackoff: {{initial: 100ms, max: 1s}}\nsink: {{webhook: {{url: '{}', timeout: 300ms}}}}",
                rx.url("slow")
            ),
        ),
    )
    .await;
    let id = append_one(&db.pool, json!({}), None).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());

    let s = wait_shard(&db.pool, "slow", "the shard to go dead", |s| s.status == "dead").await;
    assert_eq!((s.attempts, s.failing_event_id, s.delivered), (2, Some(id), 0));
    let err = s.last_error.unwrap();
    assert!(err.contains("timed out after 300ms"), "{err}");
    assert_eq!(rx.received("slow").len(), 2, "one request per attempt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_a_failed_attempt_and_max_attempts_make_the_shard_dead() {
    let db = shared(&["OrderPlaced"]).await;
    // A loopback port with no listener.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    apply(
        &db.pool,
        &consumer(
            "nobody",
            &format!(
                "delivery: Shared\nmaxAttempts: 3\nbackoff: {{initial: 100ms, max: 1s}}\nsink: {{webhook: {{url: 'http://127.0.0.1:{port}/hook'}}}}"
            ),
        ),
    )
    .await;
    let first = append_one(&db.pool, json!({}), None).await;
    append_one(&db.pool, json!({}), None).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());

    let s = wait_shard(&db.pool, "nobody", "a failed attempt", |s| s.attempts >= 1).await;
    assert!(s.last_error.as_deref().unwrap().contains("connection refused"), "{s:?}");
    let s = wait_shard(&db.pool, "nobody", "the shard to go dead", |s| s.status == "dead").await;
    assert_eq!((s.attempts, s.failing_event_id, s.delivered), (3, Some(first), 0));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(shard(&db.pool, "nobody").await.attempts, 3, "a dead shard is not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_mode_posts_each_batch_as_one_json_array() {
    let db = shared(&["OrderPlaced"]).await;
    let rx = Receiver::start().await;
    let secret = random_secret();
    apply(
        &db.pool,
        &consumer(
            "bulk",
            &format!(
                "delivery: Shared\nbatchSize: 10\nbackoff: {{initial: 100ms, max: 1s}}\nsink: {{webhook: {{url: '{}', batch: true, secret: {{env: BULK_SECRET}}}}}}",
                rx.url("bulk")
            ),
        ),
    )
    .await;
    // One transaction: the first pass reads all four.
    let mut tx = db.pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for n in 0..4 {
        let mut ev = NewEvent::new("order", "7", "OrderPlaced", json!({"n": n}));
        ev.metadata = Some(json!({"correlation_id": format!("batch-{n}")}));
        ids.push(append(&mut tx, &ev).await.unwrap());
    }
    tx.commit().await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start_with_env(&db.url, "p0", logs.path(), &[("BULK_SECRET", &secret)]);

    let got = rx.wait_requests("bulk", 1, Duration::from_secs(60)).await;
    let r = &got[0];
    let webhook_id = format!("bulk:{}-{}", ids[0], ids[3]);
    assert_eq!(r.header("webhook-id"), webhook_id);
    verify(r, &secret);
    let body = r.json();
    let items = body.as_array().expect("a JSON array");
    let got_ids: Vec<i64> = items.iter().map(|i| i["event"]["id"].as_i64().unwrap()).collect();
    assert_eq!(got_ids, ids);
    assert_eq!(items[2]["idempotency_key"], format!("bulk:{}", ids[2]));
    let first_trace = hex::encode(&Sha256::digest(b"batch-0")[..16]);
    assert_eq!(r.header("traceparent"), format!("00-{first_trace}-{}-01", span_id(&webhook_id)));
    wait_shard(&db.pool, "bulk", "the batch to count", |s| s.delivered == 4).await;

    // A failure fails the whole batch: the cursor stays before its first event.
    rx.set(Behaviour::Fail(500, "nope".into()));
    let mut tx = db.pool.begin().await.unwrap();
    let more = [
        append(&mut tx, &NewEvent::new("order", "7", "OrderPlaced", json!({"n": 4}))).await.unwrap(),
        append(&mut tx, &NewEvent::new("order", "7", "OrderPlaced", json!({"n": 5}))).await.unwrap(),
    ];
    tx.commit().await.unwrap();
    let s = wait_shard(&db.pool, "bulk", "the batch to fail", |s| s.attempts >= 1).await;
    assert_eq!((s.failing_event_id, s.delivered), (Some(more[0]), 4));
    assert!(s.last_error.unwrap().contains("HTTP 500 Internal Server Error: nope"));
    rx.set(Behaviour::Ok);
    wait_shard(&db.pool, "bulk", "the second batch to count", |s| s.delivered == 6).await;
    let last = rx.received("bulk").pop().unwrap();
    assert_eq!(last.header("webhook-id"), format!("bulk:{}-{}", more[0], more[1]));
    assert_eq!(last.json().as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivery_after_sigkill_carries_the_same_webhook_id() {
    let db = shared(&["OrderPlaced"]).await;
    let rx = Receiver::start().await;
    rx.set(Behaviour::Hold);
    apply(
        &db.pool,
        &consumer("held", &format!("delivery: Shared\nsink: {{webhook: {{url: '{}', timeout: 60s}}}}", rx.url("held"))),
    )
    .await;
    let id = append_one(&db.pool, json!({"important": true}), None).await;
    let logs = tempfile::tempdir().unwrap();
    let first = Dispatcher::start(&db.url, "p1", logs.path());
    let got = rx.wait_requests("held", 1, Duration::from_secs(60)).await;
    // The request is in flight: kill the process before it can move the cursor.
    first.sigkill();
    assert_eq!(shard(&db.pool, "held").await.delivered, 0);

    rx.set(Behaviour::Ok);
    let _second = Dispatcher::start(&db.url, "p2", logs.path());
    let again = rx.wait_requests("held", 2, Duration::from_secs(60)).await;
    wait_shard(&db.pool, "held", "the redelivery to count", |s| s.delivered == 1).await;
    assert_eq!(got[0].header("webhook-id"), format!("held:{id}"));
    assert_eq!(again[1].header("webhook-id"), got[0].header("webhook-id"), "the receiver can deduplicate on it");
    assert_eq!(again[1].body, got[0].body, "the same body, byte for byte");
}

/// Under `--webhook-block-private` a loopback receiver is refused, whether the URL names it by
/// address (refused when the sink is built: the consumer waits, no attempt is spent) or by name
/// (refused at connect time, after the lookup: each try is a failed attempt). Nothing reaches the
/// receiver and nothing is lost: once the dispatcher allows the range, every event is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_targets_are_refused_under_block_private_until_allowed() {
    let db = shared(&["OrderPlaced"]).await;
    let rx = Receiver::start().await;
    let port = rx.addr.port();
    let spec = |url: String| {
        format!(
            "delivery: Shared\nmaxAttempts: 1000\nbackoff: {{initial: 50ms, max: 200ms}}\nsink: {{webhook: {{url: '{url}'}}}}"
        )
    };
    apply(
        &db.pool,
        &[
            consumer("by-address", &spec(rx.url("address"))),
            consumer("by-name", &spec(format!("http://localhost:{port}/hook/name"))),
        ]
        .concat(),
    )
    .await;
    for _ in 0..3 {
        append_one(&db.pool, json!({}), None).await;
    }
    let logs = tempfile::tempdir().unwrap();
    let blocked =
        Dispatcher::start_with_env(&db.url, "p0", logs.path(), &[("HIGHWATER_WEBHOOK_BLOCK_PRIVATE", "true")]);

    let s = wait_shard(&db.pool, "by-address", "the refusal on the shard", |s| s.last_error.is_some()).await;
    let e = s.last_error.clone().unwrap();
    assert!(e.contains("127.0.0.1") && e.contains("--webhook-block-private") && e.contains("fix:"), "{s:?}");
    assert_eq!((s.attempts, s.delivered, s.status.as_str()), (0, 0, "idle"), "no attempt spent: {s:?}");
    let s = wait_shard(&db.pool, "by-name", "a refused attempt", |s| s.attempts >= 2).await;
    let e = s.last_error.clone().unwrap();
    assert!(e.contains("webhook target localhost") && e.contains("--webhook-allow"), "{s:?}");
    assert_eq!(s.delivered, 0);
    assert!(rx.received("address").is_empty() && rx.received("name").is_empty(), "a request got through");
    assert_eq!(blocked.terminate(Duration::from_secs(15)), Some(0));

    let _allowed = Dispatcher::start_with_env(
        &db.url,
        "p0",
        logs.path(),
        // A proxy would resolve names out of the policy's sight: under a policy it is bypassed (this
        // one would refuse every request).
        &[
            ("HIGHWATER_WEBHOOK_BLOCK_PRIVATE", "true"),
            ("HIGHWATER_WEBHOOK_ALLOW", "127.0.0.0/8,::1"),
            ("HTTP_PROXY", "http://127.0.0.1:9"),
            ("http_proxy", "http://127.0.0.1:9"),
        ],
    );
    rx.wait_requests("address", 3, Duration::from_secs(30)).await;
    rx.wait_requests("name", 3, Duration::from_secs(30)).await;
    for c in ["by-address", "by-name"] {
        let s = wait_shard(&db.pool, c, "every event delivered", |s| s.delivered == 3).await;
        assert_eq!((s.attempts, s.last_error), (0, None), "{c}");
    }
}

/// An allow list admits the hosts it names and nothing else, before any request is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_list_refuses_every_other_host() {
    let db = shared(&["OrderPlaced"]).await;
    let rx = Receiver::start().await;
    apply(
        &db.pool,
        &consumer("elsewhere", &format!("delivery: Shared\nsink: {{webhook: {{url: '{}'}}}}", rx.url("x"))),
    )
    .await;
    append_one(&db.pool, json!({}), None).await;
    let logs = tempfile::tempdir().unwrap();
    let _d =
        Dispatcher::start_with_env(&db.url, "p0", logs.path(), &[("HIGHWATER_WEBHOOK_ALLOW", "hooks.example.com")]);
    let s = wait_shard(&db.pool, "elsewhere", "the refusal on the shard", |s| s.last_error.is_some()).await;
    assert!(s.last_error.as_deref().unwrap().contains("not in this dispatcher's --webhook-allow list"), "{s:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rx.received("x").is_empty());
    assert_eq!(shard(&db.pool, "elsewhere").await.delivered, 0);
}
