//! One trace from the writer to the dispatcher (issue 48) against a real trace backend: Jaeger
//! v1.75's all-in-one built from its Go module (`highwater_e2e::jaeger`), a real PostgreSQL and a
//! real `highwater dispatch` exporting over OTLP/HTTP. Asserted from Jaeger's own query API: the
//! dispatcher's `process` span is a child of the writer's span, in the writer's trace; an event
//! appended without trace context gets a trace of its own; with the backend unreachable, delivery
//! goes on and the lost spans are counted.
//!
//! Needs `highwater` built in the target directory and Go (`e2e/trace-backend/build.sh` builds
//! Jaeger once into the e2e cache; `.ci/run` runs it as a stage before the tests).
mod relay;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use highwater::{NewEvent, embedded::free_port};
use highwater_e2e::jaeger::{Jaeger, parent, tag};
use relay::*;
use serde_json::{Value, json};
use sqlx::PgPool;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const WRITER_SPAN: &str = "00f067aa0ba902b7";
const SERVICE: &str = "highwater-e2e";

/// Appends one event, inside the writer's trace when `traced` (`SET LOCAL`, as an application
/// does in its transaction).
async fn append(pool: &PgPool, traced: bool) -> i64 {
    append_in(pool, traced.then(|| format!("00-{TRACE_ID}-{WRITER_SPAN}-01")).as_deref()).await
}

/// Appends one event with `traceparent` set for its transaction, if any.
async fn append_in(pool: &PgPool, traceparent: Option<&str>) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    if let Some(tp) = traceparent {
        sqlx::query("SELECT set_config('highwater.traceparent', $1, true)").bind(tp).execute(&mut *tx).await.unwrap();
    }
    let id = highwater::append(&mut tx, &NewEvent::new(STREAM_TYPE, "o-1", EVENT_TYPE, json!({"n": 1}))).await.unwrap();
    tx.commit().await.unwrap();
    id
}

/// The parent span id a `traceparent` names.
fn span_of(traceparent: &str) -> &str {
    traceparent.get(36..52).unwrap_or("")
}

fn event_id(span: &Value) -> Option<i64> {
    tag(span, "highwater.event.id").and_then(Value::as_i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_span_joins_the_writers_trace() {
    let jaeger = Jaeger::start().await.expect("start jaeger");
    let db = db().await;
    apply(&db, "audit", "delivery: Shared\nsink: {log: {}}\n").await;
    let logs = tempfile::tempdir().unwrap();
    let endpoint = jaeger.otlp_endpoint();
    let d = dispatcher(
        &db.url,
        logs.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", SERVICE),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let traced = append(&db.pool, true).await;
    let plain = append(&db.pool, false).await;
    wait_caught_up(&db.pool, "audit", plain, Duration::from_secs(30)).await;

    // The writer's trace holds the dispatcher's span for the traced event, under the writer's span.
    let span = highwater_e2e::wait_for("the process span in the writer's trace", Duration::from_secs(30), || async {
        let spans = jaeger.trace(TRACE_ID).await?;
        anyhow::Ok(spans.into_iter().find(|s| s["operationName"] == "process audit"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", jaeger.log_tail(20)));
    assert_eq!(span["traceID"], TRACE_ID, "{span}");
    assert_eq!(parent(&span), Some(WRITER_SPAN), "a child of the writer's span: {span}");
    assert_eq!(event_id(&span), Some(traced), "{span}");
    assert_eq!(tag(&span, "span.kind"), Some(&json!("consumer")), "{span}");
    assert_eq!(tag(&span, "messaging.system"), Some(&json!("highwater")), "{span}");
    assert_eq!(tag(&span, "messaging.consumer.group.name"), Some(&json!("audit")), "{span}");
    assert_eq!(tag(&span, "highwater.outcome"), Some(&json!("delivered")), "{span}");
    assert_eq!(tag(&span, "highwater.attempt"), Some(&json!(1)), "{span}");
    assert_eq!(tag(&span, "highwater.event.type"), Some(&json!(EVENT_TYPE)), "{span}");
    assert!(tag(&span, "highwater.waited_seconds").and_then(Value::as_f64).is_some(), "{span}");

    // The event without trace context: a trace of its own, its span the root.
    let own = highwater_e2e::wait_for("the untraced event's span", Duration::from_secs(30), || async {
        let spans = jaeger.spans(SERVICE, "process audit").await?;
        anyhow::Ok(spans.into_iter().find(|s| event_id(s) == Some(plain)))
    })
    .await
    .unwrap();
    assert_ne!(own["traceID"], TRACE_ID, "{own}");
    assert_eq!(parent(&own), None, "a root span: {own}");

    // The delivery-latency histogram carries the traced event's trace id as an exemplar
    // (OpenMetrics), and no other: the untraced event's own trace is not the writer's.
    let resp = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/metrics", d.port))
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .unwrap();
    let kind = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let body = resp.text().await.unwrap();
    let exemplars: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("highwater_delivery_latency_seconds_bucket{") && l.contains(" # {"))
        .collect();
    assert!(!exemplars.is_empty(), "no exemplar on the latency histogram:\n{body}");
    for l in &exemplars {
        let (_, exemplar) = l.split_once(" # ").unwrap();
        assert!(exemplar.starts_with(&format!("{{trace_id=\"{TRACE_ID}\"}} ")), "{l}");
    }

    // What the backend took is counted, and nothing was dropped.
    assert!(d.metric("highwater_trace_spans_exported_total", &[]).await.unwrap_or(0.0) >= 2.0);
    assert_eq!(d.metric("highwater_trace_spans_dropped_total", &[]).await, Some(0.0));
    eprintln!("jaeger UI: {} (log tail:\n{})", jaeger.query_url(), jaeger.log_tail(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_backend_down_delivery_goes_on_and_lost_spans_are_counted() {
    let db = db().await;
    apply(&db, "audit", "delivery: Shared\nsink: {log: {}}\n").await;
    let logs = tempfile::tempdir().unwrap();
    // A free port: nothing listens there, every export is refused.
    let down = format!("http://127.0.0.1:{}", free_port().unwrap());
    let d = dispatcher(
        &db.url,
        logs.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &down),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
        ],
    );
    let mut last = 0;
    for _ in 0..20 {
        last = append(&db.pool, true).await;
    }
    wait_caught_up(&db.pool, "audit", last, Duration::from_secs(30)).await;
    highwater_e2e::eventually("the 20 spans counted as dropped", Duration::from_secs(30), || async {
        d.metric("highwater_trace_spans_dropped_total", &[]).await.unwrap_or(0.0) >= 20.0
    })
    .await;
    assert_eq!(d.metric("highwater_trace_spans_ended_total", &[]).await, Some(20.0));
    assert_eq!(d.metric("highwater_trace_spans_exported_total", &[]).await, Some(0.0));
    assert_eq!(shard(&db.pool, "audit").await.status, "idle", "no failed attempt for the spans");
}

/// A webhook receiver on a free loopback port: records each request's `traceparent` and answers
/// 500 while `failing` is set.
struct Receiver {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
    failing: Arc<AtomicBool>,
}

impl Receiver {
    async fn start() -> Receiver {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let failing = Arc::new(AtomicBool::new(false));
        let (s, f) = (seen.clone(), failing.clone());
        let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
            let (s, f) = (s.clone(), f.clone());
            async move {
                let tp = headers.get("traceparent").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                s.lock().unwrap().push(tp);
                if f.load(Ordering::SeqCst) {
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    axum::http::StatusCode::NO_CONTENT
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, seen, failing }
    }

    /// The traceparents of the requests so far whose trace is `trace_id`.
    fn requests(&self, trace_id: &str) -> Vec<String> {
        self.seen.lock().unwrap().iter().filter(|tp| tp.contains(trace_id)).cloned().collect()
    }
}

/// A started Jaeger, a database with `spec` applied as consumer `hook`, and a dispatcher exporting
/// to Jaeger.
async fn traced_hook(jaeger: &Jaeger, spec: &str, logs: &std::path::Path) -> (Db, Dispatcher) {
    let db = db().await;
    apply(&db, "hook", spec).await;
    let endpoint = jaeger.otlp_endpoint();
    let d = dispatcher(
        &db.url,
        logs,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", SERVICE),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    (db, d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_writer_gets_no_span_and_keeps_its_flags() {
    const UNSAMPLED: &str = "11111111111111111111111111111111";
    const SAMPLED: &str = "22222222222222222222222222222222";
    let jaeger = Jaeger::start().await.expect("start jaeger");
    let rx = Receiver::start().await;
    let logs = tempfile::tempdir().unwrap();
    let spec = format!("delivery: Shared\nsink: {{webhook: {{url: '{}'}}}}\n", rx.url);
    let (db, d) = traced_hook(&jaeger, &spec, logs.path()).await;
    let unsampled_tp = format!("00-{UNSAMPLED}-{WRITER_SPAN}-00");
    let sampled_tp = format!("00-{SAMPLED}-{WRITER_SPAN}-01");
    append_in(&db.pool, Some(&unsampled_tp)).await;
    let last = append_in(&db.pool, Some(&sampled_tp)).await;
    wait_caught_up(&db.pool, "hook", last, Duration::from_secs(30)).await;

    // The receiver gets the writer's trace and flags (it decides the same), with the
    // dispatcher's span as its parent instead of the writer's.
    let unsampled_rx = rx.requests(UNSAMPLED);
    assert_eq!(unsampled_rx.len(), 1, "{unsampled_rx:?}");
    assert!(unsampled_rx[0].ends_with("-00") && span_of(&unsampled_rx[0]) != WRITER_SPAN, "{unsampled_rx:?}");
    let sampled_rx = rx.requests(SAMPLED);
    assert_eq!(sampled_rx.len(), 1, "{sampled_rx:?}");
    assert!(sampled_rx[0].starts_with(&format!("00-{SAMPLED}-")) && sampled_rx[0].ends_with("-01"), "{sampled_rx:?}");

    // The sampled event's span reaches Jaeger (the later of the two: the exporter has run)...
    let span = highwater_e2e::wait_for("the sampled event's span", Duration::from_secs(30), || async {
        let spans = jaeger.trace(SAMPLED).await?;
        anyhow::Ok(spans.into_iter().find(|s| s["operationName"] == "process hook"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", jaeger.log_tail(20)));
    assert_eq!(parent(&span), Some(WRITER_SPAN), "{span}");
    assert_eq!(span["spanID"], span_of(&sampled_rx[0]), "the receiver's parent is the process span: {span}");
    // ...and the unsampled one's does not exist: not exported, not even ended as sampled.
    highwater_e2e::eventually("the sampled span counted as exported", Duration::from_secs(10), || async {
        d.metric("highwater_trace_spans_exported_total", &[]).await == Some(1.0)
    })
    .await;
    assert_eq!(jaeger.trace(UNSAMPLED).await.unwrap(), Vec::<Value>::new(), "{unsampled_tp} was not sampled");
    assert_eq!(d.metric("highwater_trace_spans_ended_total", &[]).await, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redriven_delivery_is_a_new_span_in_the_events_trace() {
    const REDRIVEN: &str = "33333333333333333333333333333333";
    let jaeger = Jaeger::start().await.expect("start jaeger");
    let rx = Receiver::start().await;
    rx.failing.store(true, Ordering::SeqCst);
    let logs = tempfile::tempdir().unwrap();
    let spec = format!("delivery: Shared\nmaxAttempts: 1\nerrorMode: skip\nsink: {{webhook: {{url: '{}'}}}}\n", rx.url);
    let (db, _d) = traced_hook(&jaeger, &spec, logs.path()).await;
    let tp = format!("00-{REDRIVEN}-{WRITER_SPAN}-01");
    let id = append_in(&db.pool, Some(&tp)).await;
    // Parked: the shard moved past it after its one failed attempt.
    wait_caught_up(&db.pool, "hook", id, Duration::from_secs(30)).await;
    assert_eq!(rx.requests(REDRIVEN).len(), 1);

    // Fixed; the operator redrives it (the CLI waits for the delivery).
    rx.failing.store(false, Ordering::SeqCst);
    let out = tokio::process::Command::new(highwater_e2e::chaos::fleet::highwater_bin().unwrap())
        .args([
            "consumer",
            "redrive",
            "hook",
            "--event",
            &id.to_string(),
            "--reason",
            "receiver fixed",
            "--wait",
            "30s",
        ])
        .env("DATABASE_URL", &db.url)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_endpoint())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "redrive: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Each request carries the writer's trace, sampled, under the span of its own delivery.
    let requests = rx.requests(REDRIVEN);
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(requests.iter().all(|r| r.starts_with(&format!("00-{REDRIVEN}-")) && r.ends_with("-01")), "{requests:?}");

    // Two process spans in the writer's trace, both children of the writer's span: the failed
    // attempt and the redriven delivery.
    let spans = highwater_e2e::wait_for("both deliveries' spans", Duration::from_secs(30), || async {
        let spans: Vec<Value> =
            jaeger.trace(REDRIVEN).await?.into_iter().filter(|s| s["operationName"] == "process hook").collect();
        anyhow::Ok((spans.len() >= 2).then_some(spans))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", jaeger.log_tail(20)));
    let mut outcomes: Vec<&str> =
        spans.iter().map(|s| tag(s, "highwater.outcome").and_then(Value::as_str).unwrap_or("?")).collect();
    outcomes.sort();
    assert_eq!(outcomes, ["delivered", "failed"], "{spans:?}");
    for s in &spans {
        assert_eq!(parent(s), Some(WRITER_SPAN), "{s}");
        assert_eq!(event_id(s), Some(id), "{s}");
    }
    assert_ne!(spans[0]["spanID"], spans[1]["spanID"]);
    let mut sent: Vec<&str> = requests.iter().map(|r| span_of(r)).collect();
    let mut made: Vec<&str> = spans.iter().map(|s| s["spanID"].as_str().unwrap_or("")).collect();
    sent.sort();
    made.sort();
    assert_eq!(sent, made, "each request's parent is its delivery's process span");

    // The redrive itself is a span of the CLI (a root: an operation is in no event's trace), with
    // who asked, why, what and what came of it; so is a retention run.
    let run = highwater_e2e::wait_for("the redrive run's span", Duration::from_secs(30), || async {
        anyhow::Ok(jaeger.spans("highwater-cli", "highwater redrive").await?.into_iter().next())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", jaeger.log_tail(20)));
    assert_eq!(parent(&run), None, "{run}");
    assert_eq!(tag(&run, "highwater.operation"), Some(&json!("redrive")), "{run}");
    assert_eq!(tag(&run, "highwater.operation.reason"), Some(&json!("receiver fixed")), "{run}");
    let request = tag(&run, "highwater.operation.request").and_then(Value::as_str).unwrap_or("");
    assert!(request.contains("hook") && request.contains(&id.to_string()), "{run}");
    let outcome = tag(&run, "highwater.operation.outcome").and_then(Value::as_str).unwrap_or("");
    assert!(outcome.contains(&id.to_string()), "the plan names the redriven event: {run}");
    let out = tokio::process::Command::new(highwater_e2e::chaos::fleet::highwater_bin().unwrap())
        .args(["events", "prune", "--older-than", "30", "--all-stream-types", "--dry-run"])
        .env("DATABASE_URL", &db.url)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_endpoint())
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "prune: {}", String::from_utf8_lossy(&out.stderr));
    let run = highwater_e2e::wait_for("the retention run's span", Duration::from_secs(30), || async {
        anyhow::Ok(jaeger.spans("highwater-cli", "highwater retention").await?.into_iter().next())
    })
    .await
    .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    let outcome = tag(&run, "highwater.operation.outcome").and_then(Value::as_str).unwrap_or("");
    assert_eq!(outcome.trim(), printed.trim(), "the span holds what the run printed: {run}");
}

/// A Kafka record carries the trace on to whoever reads it: a real broker, a consumer with a
/// Kafka sink, and a real Kafka consumer reading the record. Its `traceparent` header is in the
/// writer's trace with the dispatcher's `process` span (in Jaeger, a child of the writer's span)
/// as its parent, so a Kafka consumer's span continues the trace from the header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_record_carries_the_process_span_to_its_consumer() {
    use highwater_e2e::brokers::kafka::{Kafka, KafkaOptions};
    use rdkafka::{
        ClientConfig, Message,
        consumer::{Consumer, StreamConsumer},
        message::Headers,
    };
    const KAFKA_TRACE: &str = "44444444444444444444444444444444";
    let jaeger = Jaeger::start().await.expect("start jaeger");
    let kafka =
        Kafka::start(KafkaOptions { auto_create_topics: true, ..KafkaOptions::default() }).await.expect("kafka");
    let bootstrap = kafka.bootstrap();
    let db = db().await;
    let spec = format!(
        "delivery: Shared\nsink:\n  kafka:\n    brokers: [\"{bootstrap}\"]\n    topic: orders\n    timeout: 10s\n"
    );
    apply(&db, "relay", &spec).await;
    let logs = tempfile::tempdir().unwrap();
    let endpoint = jaeger.otlp_endpoint();
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", SERVICE),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let _d = dispatcher(&db.url, logs.path(), &otel);
    let id = append_in(&db.pool, Some(&format!("00-{KAFKA_TRACE}-{WRITER_SPAN}-01"))).await;
    wait_caught_up(&db.pool, "relay", id, Duration::from_secs(60)).await;

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "trace-reader")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&["orders"]).expect("subscribe");
    let record = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
        .await
        .expect("a record within 60 s")
        .expect("read the record");
    let header = |name: &str| {
        record.headers().and_then(|h| {
            h.iter().find(|h| h.key == name).and_then(|h| h.value).map(|v| String::from_utf8_lossy(v).into_owned())
        })
    };
    assert_eq!(header("highwater-event-id"), Some(id.to_string()));
    let tp = header("traceparent").expect("a traceparent header");
    assert!(tp.starts_with(&format!("00-{KAFKA_TRACE}-")) && tp.ends_with("-01"), "{tp}");

    let span = highwater_e2e::wait_for("the Kafka delivery's span", Duration::from_secs(30), || async {
        let spans = jaeger.trace(KAFKA_TRACE).await?;
        anyhow::Ok(spans.into_iter().find(|s| s["operationName"] == "process relay"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", jaeger.log_tail(20)));
    assert_eq!(parent(&span), Some(WRITER_SPAN), "{span}");
    assert_eq!(tag(&span, "highwater.sink"), Some(&json!("kafka")), "{span}");
    assert_eq!(span["spanID"], span_of(&tp), "the record's parent is the process span: {span}");
}

/// The console's actions are operations with spans of their own: the real `highwater console`
/// exporting to Jaeger as service `highwater-console`, a disable asked by `console:alice`
/// through a trusted proxy, and its span in Jaeger with who asked, why, what and what came of
/// it — the same span the CLI's and the HTTP API's runs of the operation have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_action_is_a_span_with_the_console_user() {
    let jaeger = Jaeger::start().await.expect("start jaeger");
    let logs = tempfile::tempdir().unwrap();
    let (db, _d) = traced_hook(&jaeger, "delivery: Shared\nsink: {log: {target: stderr}}", logs.path()).await;
    let last = append(&db.pool, false).await;
    wait_caught_up(&db.pool, "hook", last, Duration::from_secs(30)).await;

    let port = free_port().unwrap();
    let _console = tokio::process::Command::new(highwater_e2e::chaos::fleet::highwater_bin().unwrap())
        .args(["console", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--trusted-user-header", "X-Forwarded-User", "--trusted-proxy", "127.0.0.0/8"])
        .env("DATABASE_URL", &db.url)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_endpoint())
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-forwarded-user", "alice".parse().unwrap());
    let c = reqwest::Client::builder().default_headers(headers).build().unwrap();
    let page = highwater_e2e::wait_for("the console", Duration::from_secs(30), || async {
        anyhow::Ok(c.get(format!("{base}/consumers/hook")).send().await.ok())
    })
    .await
    .unwrap();
    let cookie = page.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let html = page.text().await.unwrap();
    let at = html.find("name=\"csrf\" value=\"").expect("a CSRF field") + "name=\"csrf\" value=\"".len();
    let csrf = &html[at..at + 64];
    let r = c
        .post(format!("{base}/consumers/hook/act"))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&do=disable&reason=maintenance+window"))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("disabled"), "{body}");

    let span = highwater_e2e::wait_for("the console's span", Duration::from_secs(30), || async {
        anyhow::Ok(jaeger.spans("highwater-console", "highwater shard_change").await?.into_iter().next())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", jaeger.log_tail(20)));
    assert_eq!(parent(&span), None, "an operation is a root: {span}");
    assert_eq!(tag(&span, "highwater.operation.by"), Some(&json!("console:alice")), "{span}");
    assert_eq!(tag(&span, "highwater.operation.reason"), Some(&json!("maintenance window")), "{span}");
    let request = tag(&span, "highwater.operation.request").and_then(Value::as_str).unwrap_or("");
    assert!(request.contains("hook") && request.contains("Disable"), "{span}");
    let outcome = tag(&span, "highwater.operation.outcome").and_then(Value::as_str).unwrap_or("");
    assert!(outcome.contains("disabled"), "what came of it: {span}");
}
