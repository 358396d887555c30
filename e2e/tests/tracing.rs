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

use std::time::Duration;

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
    let mut tx = pool.begin().await.unwrap();
    if traced {
        sqlx::query("SELECT set_config('highwater.traceparent', $1, true)")
            .bind(format!("00-{TRACE_ID}-{WRITER_SPAN}-01"))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    let id = highwater::append(&mut tx, &NewEvent::new(STREAM_TYPE, "o-1", EVENT_TYPE, json!({"n": 1}))).await.unwrap();
    tx.commit().await.unwrap();
    id
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
