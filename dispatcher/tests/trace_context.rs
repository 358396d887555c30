//! The writer's W3C trace context stored with the event (issue 48, part 1): `highwater.append`
//! takes it from `SET LOCAL highwater.traceparent`/`highwater.tracestate` or from the metadata's
//! own keys, checks it, and never fails an append for a malformed one; a SQL sink's statement
//! reads it back from the same settings, so what a projection appends stays in the trace.
mod common;

use std::{process::Command, time::Duration};

use common::*;
use serde_json::{Value, json};

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Appends in one transaction after `settings` (SET LOCAL statements) and returns the metadata.
async fn append_with(db: &TestDb, settings: &str, metadata: Value) -> Value {
    let mut tx = db.pool.begin().await.unwrap();
    if !settings.is_empty() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(settings.to_owned())).execute(&mut *tx).await.unwrap();
    }
    let id: i64 = sqlx::query_scalar("SELECT highwater.append('order', 'o-1', 'OrderPlaced', '{}', $1)")
        .bind(metadata)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    sqlx::query_scalar("SELECT metadata FROM highwater.events WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_setting_and_the_metadata_carry_the_writers_trace() {
    let db = shared(&["OrderPlaced"]).await;
    let meta = append_with(
        &db,
        &format!("SET LOCAL highwater.traceparent = '{TP}'; SET LOCAL highwater.tracestate = 'congo=t61rcWkgMzE'"),
        json!({}),
    )
    .await;
    assert_eq!(meta["traceparent"], TP, "{meta}");
    assert_eq!(meta["tracestate"], "congo=t61rcWkgMzE", "{meta}");
    assert!(meta["correlation_id"].is_string(), "the other defaults still apply: {meta}");

    // The setting is transaction-local: the next transaction's event has no trace.
    let meta = append_with(&db, "", json!({})).await;
    assert!(meta.get("traceparent").is_none() && meta.get("tracestate").is_none(), "{meta}");

    // The metadata's own key is the explicit argument and wins over the setting; the setting's
    // tracestate does not attach to another writer's traceparent.
    let explicit = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let meta = append_with(
        &db,
        &format!("SET LOCAL highwater.traceparent = '{TP}'; SET LOCAL highwater.tracestate = 'a=b'"),
        json!({"traceparent": explicit}),
    )
    .await;
    assert_eq!(meta["traceparent"], explicit, "{meta}");
    assert!(meta.get("tracestate").is_none(), "{meta}");

    // A later version may add fields after the flags; version 00 may not.
    let future = format!("01-{}-extra", &TP[3..]);
    let meta = append_with(&db, "", json!({ "traceparent": future })).await;
    assert_eq!(meta["traceparent"], future.as_str(), "{meta}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_trace_is_left_out_and_the_event_appended() {
    let db = shared(&["OrderPlaced"]).await;
    let malformed = [
        "garbage",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // forbidden version
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", // version 00 with more
    ];
    for bad in malformed {
        let meta = append_with(
            &db,
            &format!("SET LOCAL highwater.traceparent = '{bad}'; SET LOCAL highwater.tracestate = 'a=b'"),
            json!({"k": 1}),
        )
        .await;
        assert_eq!(meta.get("traceparent"), None, "{bad}: {meta}");
        assert_eq!(meta.get("tracestate"), None, "{bad}: {meta}");
        assert_eq!(meta["k"], 1, "{bad}: the rest of the metadata is kept: {meta}");
        // The explicit key is checked alike and removed.
        let meta = append_with(&db, "", json!({"traceparent": bad, "tracestate": "a=b"})).await;
        assert_eq!(meta.get("traceparent"), None, "{bad}: {meta}");
        assert_eq!(meta.get("tracestate"), None, "{bad}: {meta}");
    }
    let meta = append_with(&db, "", json!({"traceparent": 42})).await;
    assert_eq!(meta.get("traceparent"), None, "a number is not a traceparent: {meta}");

    // A bad tracestate goes alone: the traceparent stays.
    let long = "k=".to_owned() + &"v".repeat(600);
    let meta = append_with(&db, "", json!({"traceparent": TP, "tracestate": long})).await;
    assert_eq!(meta["traceparent"], TP, "{meta}");
    assert_eq!(meta.get("tracestate"), None, "{meta}");

    // What the writer sees: a NOTICE naming the value and the expected form (psql prints it).
    let out = Command::new("psql")
        .args([&db.url, "-v", "ON_ERROR_STOP=1", "-Atc"])
        .arg("BEGIN; SET LOCAL highwater.traceparent = 'garbage'; SELECT highwater.append('order', 'o-2', 'OrderPlaced', '{}'); COMMIT;")
        .output()
        .expect("run psql");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "NOTICE:  highwater: traceparent 'garbage' is not W3C Trace Context; the event is appended without it"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("HINT:  expected 00-<32 lowercase hex trace id>"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sql_sink_reads_the_trace_and_its_appends_keep_it() {
    let db = shared(&["NoteAdded", "NoteIndexed"]).await;
    sqlx::raw_sql("CREATE TABLE seen (event_id bigint PRIMARY KEY, traceparent text, tracestate text)")
        .execute(&db.pool)
        .await
        .unwrap();
    let statement = "WITH s AS (INSERT INTO seen VALUES ($2, current_setting('highwater.traceparent', true), \
                     current_setting('highwater.tracestate', true)) RETURNING event_id) \
                     SELECT highwater.append('note', $4, 'NoteIndexed', '{}') FROM s";
    apply(
        &db.pool,
        &consumer(
            "notes",
            &format!("delivery: Shared\nmaxAttempts: 1\neventTypes: [NoteAdded]\nsink:\n  sql:\n    statement: \"{statement}\""),
        ),
    )
    .await;

    // One transaction: a traced event between two untraced ones, so the setting must be cleared
    // after it rather than leak to the next.
    let mut tx = db.pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for (stream, meta) in
        [("a", json!({})), ("b", json!({"traceparent": TP, "tracestate": "congo=1"})), ("c", json!({}))]
    {
        let id: i64 = sqlx::query_scalar("SELECT highwater.append('note', $1, 'NoteAdded', '{}', $2)")
            .bind(stream)
            .bind(meta)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        ids.push(id);
    }
    tx.commit().await.unwrap();

    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "t0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM seen", 3, Duration::from_secs(30)).await;
    let seen: Vec<(i64, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT event_id, traceparent, tracestate FROM seen ORDER BY event_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let unset = |s: &Option<String>| s.as_deref().unwrap_or_default().is_empty();
    assert!(unset(&seen[0].1) && unset(&seen[0].2), "{seen:?}");
    assert_eq!((seen[1].1.as_deref(), seen[1].2.as_deref()), (Some(TP), Some("congo=1")), "{seen:?}");
    assert!(unset(&seen[2].1) && unset(&seen[2].2), "cleared after the traced event: {seen:?}");

    // The handler's own appends inherit the trace of their cause, as they inherit its correlation.
    let derived: Vec<(String, Value)> = sqlx::query_as(
        "SELECT stream_id, metadata FROM highwater.events WHERE event_type = 'NoteIndexed' ORDER BY stream_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(derived.len(), 3, "{derived:?}");
    assert_eq!(derived[0].1.get("traceparent"), None, "{derived:?}");
    assert_eq!(derived[1].1["traceparent"], TP, "{derived:?}");
    assert_eq!(derived[1].1["tracestate"], "congo=1", "{derived:?}");
    assert_eq!(derived[2].1.get("traceparent"), None, "{derived:?}");
}

/// A shell's `OTEL_*` meant for other tools (gRPC, which the dispatcher refuses at start) costs a
/// CLI command its spans, with a warning naming why, never the command itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_warns_about_otel_settings_it_cannot_use_and_runs() {
    let db = shared(&["OrderPlaced"]).await;
    let out = Command::new(bin())
        .args(["consumer", "list"])
        .env("DATABASE_URL", &db.url)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "consumer list failed:\n{stderr}");
    assert!(
        stderr.contains("traces: not exported by this command") && stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL"),
        "{stderr}"
    );
}
